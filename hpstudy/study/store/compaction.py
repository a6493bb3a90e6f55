"""Compaction: merging a study's files stored since the last compaction into one file per table,
one row per trial_key, and moving unreadable files to the quarantine. It reads in two passes, each a
dataset scan of GROUP_FILES files at a time (hpstudy.study.store.read): the columns that decide which
rows are kept, then the kept rows, streamed into the merged file; so it holds a group's rows and a
small record per trial and file, never all the rows it merges (docs/performance.md)."""

import time
import uuid
import warnings
from collections import Counter
from datetime import datetime, timezone
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Set, Tuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hpstudy.study.store import read as store_read
from hpstudy.study.store.layout import (
    TABLES,
    Location,
    StoreFault,
    StoreLike,
    _first_line,
    _write_atomic,
    _write_table,
    store_io,
)
from hpstudy.study.store.lease import Lease
from hpstudy.study.store.read import FILE, IncompleteFile, _list_files, _read_file, _read_group
from hpstudy.trainers.schema import FINISHED

MERGED_PREFIX = "compact-"  # <partition>/compact-<id>.parquet: rows merged by one compaction
QUARANTINE = "quarantine"  # <root>/quarantine/<table>/study=<name>/: files compaction could not read
ROW_GROUP_ROWS = 1 << 16  # kept rows gathered before the merged file gets a row group
# the columns that decide which of a trial's rows are kept: all the first pass reads
DECIDING = {"trials": ["trial_key", "status", "finished_at"], "epochs": ["trial_key", "epoch"]}


def compact(store: StoreLike, study: str, lease: Optional[Lease] = None) -> Dict[str, Dict[str, int]]:
    """Merge the rows of a study's finished (ok/diverged) trials stored since the last compaction
    into a new merged file per table (`compact-<id>.parquet`), one row per trial_key (ok/diverged
    beat failed, then the newest wins); rows of unfinished trials stay in (or move to) their own
    `<trial_key>.parquet`, which a rerun replaces, so pandas sees one row per trial_key. Merged files
    of earlier compactions are left as they are unless they share a trial_key with another file (what
    a compaction killed part way leaves), so a compaction's time is that of the trials stored since the
    last one, not the study's. Unreadable files move to <root>/quarantine/ with a note. A file is
    deleted only after the rows it holds are written elsewhere, and only while `lease` (the study's,
    held by the caller) is still held. Returns counts per table."""
    store = Location.of(store)
    fs, base = store.fs, store.base
    counts: Dict[str, Dict[str, int]] = {}
    finished: Set[str] = set()
    for table in TABLES:
        directory = store.partition(table, study)
        _remove_stale_temporaries(fs, directory)
        survey = _survey(fs, base, directory, table)
        plan = _plan(survey, directory, table, finished)
        if table == "trials":  # merged files hold finished trials only: their epochs are merged too
            finished = plan.finished
        written = _write(fs, base, directory, table, survey, plan)
        if lease is not None:
            lease.check()  # before the first file of the study is deleted
        merged_away = sorted(plan.sources - plan.keep - written)
        for path in merged_away:
            with store_io(f"delete {path}"):
                fs.delete_file(path)
        counts[table] = dict(
            files=len(plan.sources),
            merged_rows=plan.merged_rows,
            unfinished=plan.unfinished,
            dropped_rows=plan.dropped_rows,
            deleted_files=len(merged_away),
            merged_files_kept=plan.merged_files_kept,
            quarantined=survey.quarantined,
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


class Survey(NamedTuple):
    """What the first pass found in a partition: its files oldest first (modification time, then path:
    a file is its index here), the rows each readable one holds, one record per trial_key and file of
    the files to compact (`pairs`: for trials the file's row of the key that wins (_ranked), for epochs
    the key's distinct epochs in the file), the trial_keys of the merged files left as they are
    (`settled`), and how many files went to the quarantine."""

    paths: List[str]
    rows: Dict[int, int]
    pairs: pd.DataFrame
    settled: Dict[int, Set[str]]
    quarantined: int


def _survey(fs: pafs.FileSystem, base: str, directory: str, table: str) -> Survey:
    """The first pass: the files stored since the last compaction, GROUP_FILES at a time, only the
    DECIDING columns (and the columns every row needs); of merged files the trial_keys, one file at a
    time (they are few, and can be large), and the DECIDING columns of those that share a trial_key
    with another file. Unreadable files go to the quarantine."""
    with store_io(f"list {directory}"):
        infos = sorted(fs.get_file_info(_list_files(fs, directory)), key=lambda i: (i.mtime_ns or 0, i.path))
    paths = [info.path for info in infos]
    index = {path: n for n, path in enumerate(paths)}
    quarantined: List[str] = []

    def unreadable(path: str, exc: Exception) -> None:
        if not isinstance(exc, pa.ArrowException):  # an I/O fault, not a bad file
            raise StoreFault(f"store: cannot read {path} ({_first_line(exc)})") from exc
        _quarantine(fs, base, path, exc)
        quarantined.append(path)

    def deciding(files: List[str]) -> Iterator[pd.DataFrame]:
        for group in _groups(files):
            frame = _deciding(fs, base, directory, table, group, unreadable)
            yield frame.assign(file=frame.pop(FILE).map(index))

    rows: Dict[int, int] = {}
    merged: Dict[int, Set[str]] = {}
    for path in filter(_is_merged, paths):
        try:
            with store_io(f"read {path}"):
                keys = _read_file(fs, path, table, ["trial_key"]).column("trial_key")
        except pa.ArrowException as exc:
            unreadable(path, exc)
            continue
        rows[index[path]] = len(keys)
        merged[index[path]] = set(pc.unique(keys).to_pylist())
    pairs = []
    for frame in deciding([path for path in paths if not _is_merged(path)]):
        rows.update(frame["file"].value_counts().to_dict())
        pairs.append(_per_key_and_file(frame, table))
    stored = set().union(*(frame["trial_key"] for frame in pairs))
    in_merged = Counter(key for keys in merged.values() for key in keys)
    remerge = [n for n, keys in merged.items() if any(key in stored or in_merged[key] > 1 for key in keys)]
    pairs.extend(_per_key_and_file(frame, table) for frame in deciding([paths[n] for n in remerge]))
    settled = {n: keys for n, keys in merged.items() if n not in remerge}
    pairs_frame = pd.concat(pairs, ignore_index=True) if pairs else _EMPTY[table]
    return Survey(paths, rows, pairs_frame, settled, len(quarantined))


def _groups(files: List[str]) -> Iterator[List[str]]:
    """`files` GROUP_FILES at a time (store_read's, read when called)."""
    size = store_read.GROUP_FILES
    return (files[i : i + size] for i in range(0, len(files), size))


def _deciding(fs: pafs.FileSystem, base: str, directory: str, table: str, files: List[str], unreadable) -> pd.DataFrame:
    """The DECIDING columns and FILE of some files' rows; a file holding a row without a trial_key (not
    one hpstudy wrote: the row belongs to no trial) goes to `unreadable` too, as one lacking the column."""
    with store_io(f"read {directory}"):
        arrow = _read_group(fs, f"{base}/{table}", files, table, DECIDING[table], True, unreadable)
    frame = arrow.to_pandas()
    keyless = frame.loc[frame["trial_key"].isna(), FILE].unique()
    for path in keyless:
        unreadable(path, IncompleteFile(f"a row without a trial_key (every {table} row needs one)"))
    return frame[~frame[FILE].isin(keyless)].reset_index(drop=True) if len(keyless) else frame


def _per_key_and_file(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    """One record per trial_key and file of `frame` (the DECIDING columns and the file, rows in file
    order): for trials the row that wins among the file's rows of the key (_ranked), for epochs the
    number of distinct epochs."""
    if table == "trials":
        return _ranked(frame).drop_duplicates(["trial_key", "file"], keep="last")
    epochs = frame.groupby(["trial_key", "file"], sort=False)["epoch"].nunique(dropna=False)
    return epochs.rename("epochs").reset_index()


def _ranked(frame: pd.DataFrame) -> pd.DataFrame:
    """Trial rows (with `status` or `finished`) worst first: failed before ok/diverged, then by
    finished_at (none first), then by file age, then as they are: of a trial_key's rows the last wins."""
    if "finished" not in frame:
        frame = frame.assign(finished=frame.pop("status").isin(FINISHED))
    return frame.sort_values(["finished", "finished_at", "file"], kind="stable", na_position="first")


_EMPTY = {
    "trials": pd.DataFrame({"trial_key": [], "file": [], "finished": [], "finished_at": []}),
    "epochs": pd.DataFrame({"trial_key": [], "file": [], "epochs": []}),
}


class Plan(NamedTuple):
    """What a compaction of one table keeps, writes and deletes (see _plan)."""

    wanted: pd.DataFrame  # per trial_key to write: the file of its kept rows, whether they go to the merged file
    finished: Set[str]  # trial_keys of finished trials (of the trials' plan)
    sources: Set[str]  # files whose rows this compaction merges (or leaves where they are: `keep`)
    keep: Set[str]
    merged_rows: int
    unfinished: int
    dropped_rows: int
    merged_files_kept: int


def _plan(survey: Survey, directory: str, table: str, finished: Set[str]) -> Plan:
    """Which rows are kept (trials: one per trial_key, the last _ranked; epochs: each trial_key's rows
    from its newest file, one per epoch) and where they go: finished trials' (for epochs, those of
    `finished`) into one new merged file unless one already holds exactly them, each unfinished trial's
    into its own file unless that file already holds exactly them."""
    pairs, paths = survey.pairs, survey.paths
    if table == "trials":
        winners = _ranked(pairs).drop_duplicates("trial_key", keep="last").set_index("trial_key")
        finished = set().union(*survey.settled.values(), winners.index[winners["finished"].astype(bool)])
        kept = pd.Series(1, index=winners.index)
    else:
        winners = pairs.sort_values("file", kind="stable").drop_duplicates("trial_key", keep="last")
        winners = winners.set_index("trial_key")
        kept = winners["epochs"].astype(int)
    file = winners["file"].astype(int)
    merge = winners.index.isin(list(finished))
    own = {key: f"{directory}/{key}.parquet" for key in winners.index[~merge]}
    keep = {own[key] for key in own if paths[file[key]] == own[key] and survey.rows[file[key]] == kept[key]}
    merged_rows = int(kept[merge].sum())
    from_files = set(file[merge])
    if len(from_files) == 1 and _is_merged(paths[min(from_files)]) and survey.rows[min(from_files)] == merged_rows:
        keep.add(paths[min(from_files)])  # already one merged file holding exactly these rows
        merge[:] = False
    rewrite = [key for key in own if own[key] not in keep]
    wanted = pd.DataFrame({"file": file, "merge": merge})
    compacted = set(pairs["file"].astype(int))
    return Plan(
        wanted=wanted[wanted["merge"] | wanted.index.isin(rewrite)],
        finished=finished,
        sources={paths[n] for n in compacted},
        keep=keep,
        merged_rows=merged_rows,
        unfinished=len(own),
        dropped_rows=sum(survey.rows[n] for n in compacted) - int(kept.sum()),
        merged_files_kept=len(survey.settled),
    )


def _write(fs: pafs.FileSystem, base: str, directory: str, table: str, survey: Survey, plan: Plan) -> Set[str]:
    """The second pass: the kept rows of `plan.wanted` read from their files, streamed into a new merged
    file (those of finished trials), then each unfinished trial's into its own file, each written
    atomically; the files written."""
    aside: List[pa.Table] = []  # rows of unfinished trials, which go to their own files

    def into_merged() -> Iterator[pa.Table]:
        for merged, apart in _kept_rows(fs, base, directory, table, survey.paths, plan.wanted):
            aside.append(apart)
            yield merged

    written = set()
    if plan.wanted["merge"].any():
        name = f"{MERGED_PREFIX}{uuid.uuid4().hex[:12]}.parquet"
        written.add(_write_atomic(fs, directory, name, lambda out: _write_rows(out, TABLES[table], into_merged())))
    else:
        aside.extend(apart for _, apart in _kept_rows(fs, base, directory, table, survey.paths, plan.wanted))
    rows = pa.concat_tables([TABLES[table].empty_table(), *aside])
    keys = rows.column("trial_key").to_pandas()
    for key, positions in sorted(keys.groupby(keys).indices.items()):
        written.add(_write_table(fs, directory, f"{key}.parquet", rows.take(positions)))
    return written


def _kept_rows(
    fs: pafs.FileSystem, base: str, directory: str, table: str, paths: List[str], wanted: pd.DataFrame
) -> Iterator[Tuple[pa.Table, pa.Table]]:
    """The kept rows of the trial_keys in `wanted` (the file to take them from, whether they go to the
    merged file), every column, read from their files GROUP_FILES at a time: per group, (rows for the
    merged file, rows for their own file)."""
    index = {path: n for n, path in enumerate(paths)}
    for group in _groups([paths[n] for n in sorted(set(wanted["file"]))]):
        with store_io(f"read {directory}"):
            arrow = _read_group(fs, f"{base}/{table}", group, table, None, True, _changed)
        frame = arrow.select([*DECIDING[table], FILE]).to_pandas()
        frame = frame.assign(file=frame.pop(FILE).map(index))
        chosen = frame[frame["file"].to_numpy() == frame["trial_key"].map(wanted["file"]).to_numpy()]
        if table == "trials":  # one row of a trial_key's rows in the file: the last _ranked
            chosen = _ranked(chosen).drop_duplicates("trial_key", keep="last")
        else:
            chosen = chosen.drop_duplicates(["trial_key", "epoch"], keep="last")
        chosen = chosen.sort_index()
        rows = arrow.select(TABLES[table].names).take(pa.array(chosen.index.to_numpy()))
        merge = pa.array(chosen["trial_key"].map(wanted["merge"]).to_numpy(dtype=bool))
        yield rows.filter(merge), rows.filter(pc.invert(merge))


def _changed(path: str, exc: Exception) -> None:
    """A file the first pass read that the second cannot: stop before anything is deleted."""
    raise StoreFault(f"store: cannot read {path} ({_first_line(exc)}); nothing was deleted, compact again")


def _write_rows(out: pa.NativeFile, schema: pa.Schema, tables: Iterable[pa.Table]) -> None:
    """`tables` into `out` as one Parquet file, a row group every ROW_GROUP_ROWS rows or so."""
    with pq.ParquetWriter(out, schema) as writer:
        buffered: List[pa.Table] = []
        for rows in tables:
            buffered.append(rows)
            if sum(map(len, buffered)) >= ROW_GROUP_ROWS:
                writer.write_table(pa.concat_tables(buffered))
                buffered = []
        if buffered:
            writer.write_table(pa.concat_tables(buffered))


def _is_merged(path: str) -> bool:
    """Whether a store file is a merged file written by a compaction."""
    return path.rsplit("/", 1)[-1].startswith(MERGED_PREFIX)


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
