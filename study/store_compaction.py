"""Compaction: merging a study's files stored since the last compaction into one file per table,
one row per trial_key, and moving unreadable files to the quarantine."""

import time
import uuid
import warnings
from collections import Counter
from datetime import datetime, timezone
from typing import Dict, List, Optional, Tuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from hpstudy.study.store import TABLES, _first_line, _write_atomic, _write_table, open_root, partition_dir, store_io
from hpstudy.study.store_read import _list_files, _read_file
from hpstudy.trainers.schema import FINISHED

MERGED_PREFIX = "compact-"  # <partition>/compact-<id>.parquet: rows merged by one compaction
QUARANTINE = "quarantine"  # <root>/quarantine/<table>/study=<name>/: files compaction could not read


def compact(root: str, study: str) -> Dict[str, Dict[str, int]]:
    """Merge the rows of a study's finished (ok/diverged) trials stored since the last compaction
    into a new merged file per table (`compact-<id>.parquet`), one row per trial_key (ok/diverged
    beat failed, then the newest wins); rows of unfinished trials stay in (or move to) their own
    `<trial_key>.parquet`, which a rerun replaces, so pandas sees one row per trial_key. Merged files
    of earlier compactions are left as they are unless they share a trial_key with another file (what
    a compaction killed part way leaves), so a compaction's time and memory are those of the trials
    stored since the last one, not the study's. Unreadable files move to <root>/quarantine/ with a
    note. A file is deleted only after the rows it holds are written elsewhere. Returns counts per
    table."""
    fs, base = open_root(root)
    counts, finished = {}, set()
    for table in TABLES:
        _, directory = partition_dir(root, table, study)
        _remove_stale_temporaries(fs, directory)
        frame, settled, quarantined = _read_for_compaction(fs, base, directory, table)
        kept = _newest_per_key(frame, table)
        if table == "trials":  # merged files hold finished trials only
            finished = set(kept.loc[kept["status"].isin(FINISHED), "trial_key"]) | set().union(*settled.values())
        merged = kept[kept["trial_key"].isin(finished)]
        counts[table] = dict(
            _rewrite_partition(fs, directory, TABLES[table], frame, merged, kept.drop(merged.index)),
            merged_files_kept=len(settled),
            quarantined=quarantined,
        )
    return counts


STALE_TEMPORARY_S = 3600


def _remove_stale_temporaries(fs: pafs.FileSystem, directory: str) -> None:
    """Delete the temporary files (see _write_atomic) of writes killed over an hour ago: no reader
    lists them, and a younger one may be a write still going on."""
    selector = pafs.FileSelector(directory, allow_not_found=True)
    with store_io(f"list {directory}"):
        infos = fs.get_file_info(selector)
    cutoff = (time.time() - STALE_TEMPORARY_S) * 1e9
    for info in infos:
        if info.base_name.startswith(".") and ".tmp-" in info.base_name and (info.mtime_ns or 0) < cutoff:
            with store_io(f"delete {info.path}"):
                fs.delete_file(info.path)


def _read_for_compaction(
    fs: pafs.FileSystem, base: str, directory: str, table: str
) -> Tuple[pd.DataFrame, Dict[str, set], int]:
    """The rows to compact in a partition of `table`, with their `_source` file and `_order` (files
    oldest first): every file stored since the last compaction, and each merged file that shares a
    trial_key with another file. Also the trial_keys of each merged file left as it is, and the
    number of unreadable (or incomplete) files moved to the quarantine."""
    with store_io(f"list {directory}"):
        infos = sorted(fs.get_file_info(_list_files(fs, directory)), key=lambda i: (i.mtime_ns or 0, i.path))
    order = {info.path: n for n, info in enumerate(infos)}
    sourced = TABLES[table].append(pa.field("_source", pa.string())).append(pa.field("_order", pa.int64()))
    tables, quarantined = [sourced.empty_table()], 0

    def read(path: str, columns: Optional[List[str]] = None) -> Optional[pa.Table]:
        nonlocal quarantined
        try:
            with store_io(f"read {path}"):
                return _read_file(fs, path, table, columns)
        except pa.ArrowException as exc:  # not an I/O fault (store_io turned those into StoreFault)
            _quarantine(fs, base, path, exc)
            quarantined += 1
            return None

    merged_before = {}  # merged file -> its trial_keys (one column read)
    for info in infos:
        if _is_merged(info.path):
            keys = read(info.path, ["trial_key"])
            if keys is not None:
                merged_before[info.path] = set(pc.unique(keys.column("trial_key")).to_pylist())
    seen = Counter(key for keys in merged_before.values() for key in keys)
    for info in infos:
        if _is_merged(info.path):
            continue
        rows = read(info.path)
        if rows is not None:
            seen.update(set(rows.column("trial_key").to_pylist()))
            tables.append(_sourced(rows, info.path, order[info.path]))
    settled = {}
    for path, keys in merged_before.items():
        if any(seen[key] > 1 for key in keys):
            rows = read(path)
            if rows is not None:
                tables.append(_sourced(rows, path, order[path]))
        else:
            settled[path] = keys
    # one conversion to pandas for the whole batch: per file it was most of the time
    return pa.concat_tables(tables).to_pandas(), settled, quarantined


def _is_merged(path: str) -> bool:
    """Whether a store file is a merged file written by a compaction."""
    return path.rsplit("/", 1)[-1].startswith(MERGED_PREFIX)


def _sourced(rows: pa.Table, path: str, order: int) -> pa.Table:
    """Rows with the file they come from and its age rank (see _read_for_compaction)."""
    n = len(rows)
    return rows.append_column("_source", pa.array([path] * n, pa.string())).append_column(
        "_order", pa.array([order] * n, pa.int64())
    )


def _quarantine(fs: pafs.FileSystem, base: str, path: str, exc: Exception) -> None:
    """Move an unreadable file to <base>/quarantine/<its path under base>, with a .note.txt beside it."""
    target = f"{base}/{QUARANTINE}/{path[len(base) + 1 :]}"
    directory, name = target.rsplit("/", 1)
    note = (
        f"{path}: unreadable, moved here by hpstudy compact on "
        f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}: {_first_line(exc)}\n"
    )
    _write_atomic(fs, directory, f"{name}.note.txt", lambda out: out.write(note.encode()))
    with store_io(f"move {path} to {target}"):
        fs.move(path, target)
    warnings.warn(f"hpstudy store: unreadable file {path} moved to {target} ({_first_line(exc)})")


def _newest_per_key(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """Trials: one row per trial_key, ok/diverged before failed, then the latest finished_at (then
    the newest file). Epochs: each trial_key's rows from its newest file, one per epoch."""
    if table == "trials":
        ranked = frame.assign(_finished=frame["status"].isin(FINISHED))
        order = ranked.sort_values(["_finished", "finished_at", "_order"], kind="stable", na_position="first")
        return order.drop_duplicates("trial_key", keep="last").drop(columns="_finished")
    newest = frame["_order"] == frame.groupby("trial_key")["_order"].transform("max")
    return frame[newest].drop_duplicates(["trial_key", "epoch"], keep="last")


def _rewrite_partition(
    fs: pafs.FileSystem,
    directory: str,
    schema: pa.Schema,
    frame: pd.DataFrame,
    merged: pd.DataFrame,
    unfinished: pd.DataFrame,
) -> Dict[str, int]:
    """Write `merged` as one compact file and each unfinished trial's rows as its own file (unless
    that file already holds exactly them), then delete the files whose rows now live elsewhere."""
    as_table = lambda rows: pa.Table.from_pandas(rows[schema.names], schema=schema, preserve_index=False)
    rows_per_file = frame["_source"].value_counts()
    keep, written = set(), set()
    for key, rows in unfinished.groupby("trial_key"):
        own = f"{directory}/{key}.parquet"
        if set(rows["_source"]) == {own} and rows_per_file[own] == len(rows):
            keep.add(own)
        else:
            written.add(_write_table(fs, directory, f"{key}.parquet", as_table(rows)))
    sources = set(merged["_source"])
    if len(sources) == 1 and _is_merged(next(iter(sources))) and rows_per_file[next(iter(sources))] == len(merged):
        keep |= sources  # already one merged file holding exactly these rows
    elif len(merged):
        written.add(_write_table(fs, directory, f"{MERGED_PREFIX}{uuid.uuid4().hex[:12]}.parquet", as_table(merged)))
    merged_away = set(frame["_source"]) - keep - written
    for path in sorted(merged_away):
        with store_io(f"delete {path}"):
            fs.delete_file(path)
    return {
        "files": frame["_source"].nunique(),
        "merged_rows": len(merged),
        "unfinished": unfinished["trial_key"].nunique(),
        "dropped_rows": len(frame) - len(merged) - len(unfinished),
        "deleted_files": len(merged_away),
    }
