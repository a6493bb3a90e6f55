"""The Parquet store: one file per trial (and per trial's epochs), hive-partitioned by study.

    <root>/trials/study=<name>/<trial_key>.parquet   one row per finished trial
    <root>/epochs/study=<name>/<trial_key>.parquet   one row per epoch
    <root>/reports/<name>/                           the study's report (index.html, figures, tables)

`root` is a local path or a pyarrow filesystem URI (s3://bucket/prefix, gs://...). Files are written
under a dot-prefixed temporary name and renamed, so readers (which skip dot files) never see half a
file. The `study` column comes from the partition directory, so
`pd.read_parquet(f"{root}/trials")` returns every study's trials with a `study` column.
"""

import contextlib
import json
import os
import re
import stat
import time
import uuid
import warnings
from collections import Counter
from datetime import datetime, timezone
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hpstudy.trainers.errors import HpstudyError, shown
from hpstudy.trainers.schema import EPOCH_SCHEMA, FINISHED, TRIAL_SCHEMA, check_keys

TABLES = {"trials": TRIAL_SCHEMA, "epochs": EPOCH_SCHEMA}
# The columns every stored row has a value in: a file without one of them (not written by hpstudy)
# is skipped by the readers, naming it and the column, and moved to the quarantine by `compact`.
REQUIRED = {"trials": ("trial_key", "model", "optimizer", "epochs", "lr", "wd", "status", "finished_at"),
            "epochs": ("trial_key", "model", "optimizer", "epoch")}
MERGED_PREFIX = "compact-"         # <partition>/compact-<id>.parquet: rows merged by one compaction
QUARANTINE = "quarantine"          # <root>/quarantine/<table>/study=<name>/: files compaction could not read
REPORTS = "reports"                # <root>/reports/<name>/: the study's report, as long-lived as its rows
MAX_SPEC_RECORD_BYTES = 64 << 20     # a record of 100,000 trial keys is ~3 MB
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
STUDY_NAME_RULE = "1 to 128 letters, digits, '-', '_' or '.', starting with a letter or digit"


class StoreError(HpstudyError):
    """A store path or study that cannot be used (e.g. no rows of the study)."""


class IncompleteFile(pa.ArrowInvalid):
    """A store file that lacks a column every row needs (see REQUIRED): read as unreadable."""


class StoreFault(StoreError):
    """The store cannot be written or reached (unwritable, full, unreachable): an infrastructure
    fault, not a mistake in the input; what was stored before it stays stored."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def store_io(what: str) -> Iterator[None]:
    """Turn an I/O error of the block (disk full, read-only, unreachable) into a StoreFault that
    says what could not be done."""
    try:
        yield
    except OSError as exc:
        raise StoreFault(f"store: cannot {what} ({_first_line(exc)})") from exc


def check_study_name(study: str) -> str:
    """The study name, or StoreError if it cannot name a partition folder (e.g. '..' or 'a/b')."""
    if not isinstance(study, str) or not STUDY_NAME.fullmatch(study):
        raise StoreError(f"--study: bad value {shown(study)}; allowed: {STUDY_NAME_RULE}")
    return study


def open_root(root: str) -> Tuple[pafs.FileSystem, str]:
    """(filesystem, base path) for a local path or a pyarrow filesystem URI."""
    if "://" in root:
        try:
            with store_io(f"open {root}"):
                fs, path = pafs.FileSystem.from_uri(root)
        except pa.ArrowInvalid as exc:
            raise StoreError(f"--store: bad value {shown(root)}; allowed: a local path or a filesystem URI "
                             f"such as s3://bucket/prefix ({_first_line(exc)})")
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(root)


def partition_dir(root: str, table: str, study: str) -> Tuple[pafs.FileSystem, str]:
    """(filesystem, folder) of one study's partition of a table."""
    fs, base = open_root(root)
    return fs, f"{base}/{table}/study={check_study_name(study)}"


def _to_table(rows: Sequence[Dict], schema: pa.Schema, what: str) -> pa.Table:
    """Rows as an Arrow table of `schema`; SchemaError names an unknown or missing key."""
    for row in rows:
        check_keys(row, schema.names, what)
    columns = {name: [row[name] for row in rows] for name in schema.names}
    if "finished_at" in columns:
        columns["finished_at"] = [datetime.fromisoformat(v) if isinstance(v, str) else v
                                  for v in columns["finished_at"]]
    return pa.table(columns, schema=schema)


def _write_atomic(fs: pafs.FileSystem, directory: str, name: str, write: Callable) -> str:
    """Write directory/name with `write(stream)` into a dot-prefixed temporary file and a rename;
    if that fails, remove the temporary file and raise StoreFault."""
    final = f"{directory}/{name}"
    tmp = f"{directory}/.{name}.tmp-{uuid.uuid4().hex}"
    try:
        with store_io(f"write {final}"):
            fs.create_dir(directory, recursive=True)
            with fs.open_output_stream(tmp) as out:
                write(out)
            fs.move(tmp, final)
    except StoreFault:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise
    return final


def _write_table(fs: pafs.FileSystem, directory: str, name: str, table: pa.Table) -> str:
    """Write `table` as Parquet to directory/name, atomically (see _write_atomic)."""
    return _write_atomic(fs, directory, name, lambda out: pq.write_table(table, out))


def probe_store(root: str) -> None:
    """StoreFault unless a file can be written to the store and deleted again (run before any trial)."""
    fs, base = open_root(root)
    path = _write_atomic(fs, base, f".probe-{uuid.uuid4().hex}", lambda out: out.write(b"hpstudy"))
    with store_io(f"delete {path}"):
        fs.delete_file(path)


def write_trial(root: str, study: str, row: Dict, epoch_rows: Iterable[Dict] = ()) -> str:
    """Store one finished trial (and its epochs); rewriting the same trial_key replaces it."""
    key = row["trial_key"]
    epoch_rows = [dict(e, trial_key=key, model=row["model"], optimizer=row["optimizer"])
                  for e in epoch_rows]
    if epoch_rows:
        fs, directory = partition_dir(root, "epochs", study)
        _write_table(fs, directory, f"{key}.parquet", _to_table(epoch_rows, EPOCH_SCHEMA, "epoch row"))
    # the trial file goes last: its presence is what marks the trial as stored
    fs, directory = partition_dir(root, "trials", study)
    return _write_table(fs, directory, f"{key}.parquet", _to_table([row], TRIAL_SCHEMA, "trial row"))


def _list_files(fs: pafs.FileSystem, path: str) -> List[str]:
    selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
    return sorted(info.path for info in fs.get_file_info(selector)
                  if info.type == pafs.FileType.File and info.path.endswith(".parquet")
                  and not os.path.basename(info.path).startswith((".", "_")))


def _study_of(path: str, table_dir: str) -> str:
    """The study of a file under `table_dir` (<root>/<table>): its partition folder, right below
    `table_dir` (a `study=` further up, in the store's own path, is not it)."""
    partition = path[len(table_dir) + 1:].split("/", 1)[0]
    return partition[len("study="):] if partition.startswith("study=") else ""


def _read_files(fs: pafs.FileSystem, table_dir: str, files: List[str], table: str,
                columns: Optional[List[str]] = None) -> pd.DataFrame:
    """Read files (under `table_dir`) one by one, skipping (with a warning naming it) any that is
    corrupt or incomplete."""
    tables = []
    for path in files:
        try:
            arrow = _read_file(fs, path, table)
            arrow = arrow.select([c for c in columns if c != "study"]) if columns else arrow
        except (pa.ArrowException, OSError) as exc:
            warnings.warn(f"hpstudy store: skipping unreadable file {path}: {_first_line(exc)}")
            continue
        arrow = arrow.append_column("study", pa.array([_study_of(path, table_dir)] * len(arrow), pa.string()))
        tables.append(arrow.append_column(FILE, pa.array([path] * len(arrow), pa.string()))
                      if table == "epochs" else arrow)
    if not tables:
        empty = _empty(TABLES[table], columns)
        return empty.assign(**{FILE: pd.Series(dtype=object)}) if table == "epochs" else empty
    return pa.concat_tables(tables).to_pandas()


def _read_file(fs: pafs.FileSystem, path: str, table: str, columns: Optional[List[str]] = None) -> pa.Table:
    """One Parquet file of the store as a table of `table`'s schema (only `columns`, if given);
    IncompleteFile if it lacks a column of REQUIRED (which a schema-aware read would fill with nulls)."""
    fragment = pads.ParquetFileFormat().make_fragment(path, filesystem=fs)
    missing = [c for c in REQUIRED[table] if c not in fragment.physical_schema.names]
    if missing:
        raise IncompleteFile(f"missing column {missing[0]!r} (every {table} row needs "
                             f"{', '.join(REQUIRED[table])})")
    return fragment.to_table(schema=TABLES[table], columns=columns)


def _empty(schema: pa.Schema, columns: Optional[List[str]] = None) -> pd.DataFrame:
    frame = schema.append(pa.field("study", pa.string())).empty_table().to_pandas()
    return frame[columns] if columns else frame


def _with_file(columns: List[str], table: str) -> List[str]:
    """`columns`, and for epochs the file each row comes from (which of a trial's files is newest)."""
    return [*columns, FILE] if table == "epochs" else columns


# the columns that decide which of a trial's stored rows counts (see _load)
_IDENTITY = {"trials": ["trial_key", "finished_at"], "epochs": ["trial_key", "epoch"]}


def _load(root: str, table: str, study: Optional[str], columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    fs, base = open_root(root)
    path = f"{base}/{table}"
    if columns is not None:
        unknown = sorted(set(columns) - set(TABLES[table].names) - {"study"})
        if unknown:
            raise StoreError(f"columns: unknown {table} column {unknown[0]!r}")
        columns = list(dict.fromkeys([*columns, "study", *_IDENTITY[table]]))
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return _empty(TABLES[table], columns)
    arrow = _read_dataset(fs, path, table, study, columns)
    if arrow is not None:
        frame = arrow.to_pandas()
    else:
        # a corrupt, truncated or incomplete file: read file by file, skipping (and naming) the bad ones
        frame = _read_files(fs, path, _list_files(fs, path + (f"/study={study}" if study else "")), table, columns)
    if table == "trials":
        frame = frame.sort_values("finished_at", kind="stable").drop_duplicates(
            ["study", "trial_key"], keep="last")
    else:
        frame = _rows_of_newest_file(fs, frame).drop_duplicates(["study", "trial_key", "epoch"], keep="last")
    return frame.reset_index(drop=True)


FILE = "__filename"      # pyarrow's name for the file a dataset row was read from


def _rows_of_newest_file(fs: pafs.FileSystem, frame: pd.DataFrame) -> pd.DataFrame:
    """Each trial's epoch rows from the newest of the files that hold some (modification time, then
    path, as compaction orders them); without the FILE column."""
    files = sorted(frame[FILE].unique())
    if len(files) > 1:
        with store_io("list the epoch files"):
            infos = fs.get_file_info(files)
        age = {info.path: rank for rank, info in enumerate(sorted(infos, key=lambda i: (i.mtime_ns or 0, i.path)))}
        order = frame[FILE].map(age)
        frame = frame[order == order.groupby([frame["study"], frame["trial_key"]]).transform("max")]
    return frame.drop(columns=FILE)


def _read_dataset(fs: pafs.FileSystem, path: str, table: str, study: Optional[str],
                  columns: Optional[List[str]]) -> Optional[pa.Table]:
    """A table's files (one study's, or all) read as one dataset, or None if a file is corrupt or may
    lack a column of REQUIRED: the dataset reads a missing column as nulls, so a null there sends
    the caller to the file-by-file reader, which checks each file's own columns."""
    schema = TABLES[table].append(pa.field("study", pa.string()))
    partitioning = pads.partitioning(pa.schema([("study", pa.string())]), flavor="hive")
    read = list(dict.fromkeys([*(schema.names if columns is None else columns), *REQUIRED[table]]))
    try:
        dataset = pads.dataset(path, filesystem=fs, schema=schema, format="parquet", partitioning=partitioning)
        arrow = dataset.to_table(columns=_with_file(read, table), filter=(pads.field("study") == study) if study else None)
    except (pa.ArrowException, OSError):
        return None
    if any(arrow[c].null_count for c in REQUIRED[table]):
        return None
    return arrow.select(_with_file(columns or schema.names, table))


def load_trials(root: str, study: Optional[str] = None, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """All stored trials (one row per trial_key per study), with a `study` column; only `columns`
    (and the key columns) when given, which reads only those from the files."""
    with store_io(f"read {root}"):
        return _load(root, "trials", None if study is None else check_study_name(study), columns)


def load_epochs(root: str, study: Optional[str] = None) -> pd.DataFrame:
    """All stored epoch rows, with a `study` column."""
    with store_io(f"read {root}"):
        return _load(root, "epochs", None if study is None else check_study_name(study))


def split_by_spec(trials: pd.DataFrame, record: Optional[Dict]) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """(rows of the spec recorded for the study, rows of earlier versions of it); without recorded
    trial keys (no record, or one written before they were kept) every row counts as current."""
    if not record or "trial_keys" not in record:
        return trials, trials.iloc[:0]
    current = trials["trial_key"].isin(set(record["trial_keys"]))
    return trials[current].reset_index(drop=True), trials[~current].reset_index(drop=True)


def load_study(root: str, study: str) -> Tuple[pd.DataFrame, pd.DataFrame, Optional[Dict]]:
    """(trials, epochs, spec record) of one study's current spec: rows whose trial_key the recorded
    spec does not produce (an earlier version of the spec) are left out, counted in the record's
    `earlier_spec_rows` and named in a warning; StoreError if the study has no trials (of that spec)."""
    trials = load_trials(root, study)
    if trials.empty:
        raise StoreError(f"--study: no trials of study {study!r} in store {root!r}")
    record = load_spec_record(root, study)
    trials, earlier = split_by_spec(trials, record)
    if trials.empty:
        raise StoreError(f"--study: none of the {len(earlier)} stored trials of study {study!r} in store "
                         f"{root!r} belongs to the spec recorded last for it (`hpstudy status` lists them)")
    if len(earlier):
        record = dict(record, earlier_spec_rows=len(earlier))
        warnings.warn(f"hpstudy store: {len(earlier)} rows from an earlier spec of study {study!r} are "
                      f"not in these figures (`hpstudy status --store {root} --study {study}` lists them)")
    epochs = load_epochs(root, study)
    return trials, epochs[epochs["trial_key"].isin(set(trials["trial_key"]))].reset_index(drop=True), record


def stored_keys(root: str, study: str, statuses: Sequence[str] = FINISHED) -> set:
    """trial_keys already stored with one of `statuses` (resume skips these)."""
    trials = load_trials(root, study, columns=["status"])
    return set(trials.loc[trials["status"].isin(statuses), "trial_key"])


def delete_study(root: str, study: str) -> None:
    """Delete a study's trial and epoch rows (its spec record stays until the next run writes it)."""
    for table in TABLES:
        fs, directory = partition_dir(root, table, study)
        fs.delete_dir_contents(directory, missing_dir_ok=True)


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
        if table == "trials":   # merged files hold finished trials only
            finished = set(kept.loc[kept["status"].isin(FINISHED), "trial_key"]) | set().union(*settled.values())
        merged = kept[kept["trial_key"].isin(finished)]
        counts[table] = dict(_rewrite_partition(fs, directory, TABLES[table], frame, merged,
                                                kept.drop(merged.index)),
                             merged_files_kept=len(settled), quarantined=quarantined)
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


def _read_for_compaction(fs: pafs.FileSystem, base: str, directory: str,
                         table: str) -> Tuple[pd.DataFrame, Dict[str, set], int]:
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
        except pa.ArrowException as exc:      # not an I/O fault (store_io turned those into StoreFault)
            _quarantine(fs, base, path, exc)
            quarantined += 1
            return None

    merged_before = {}                        # merged file -> its trial_keys (one column read)
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
    return (rows.append_column("_source", pa.array([path] * n, pa.string()))
            .append_column("_order", pa.array([order] * n, pa.int64())))


def _quarantine(fs: pafs.FileSystem, base: str, path: str, exc: Exception) -> None:
    """Move an unreadable file to <base>/quarantine/<its path under base>, with a .note.txt beside it."""
    target = f"{base}/{QUARANTINE}/{path[len(base) + 1:]}"
    directory, name = target.rsplit("/", 1)
    note = (f"{path}: unreadable, moved here by hpstudy compact on "
            f"{datetime.now(timezone.utc).isoformat(timespec='seconds')}: {_first_line(exc)}\n")
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


def _rewrite_partition(fs: pafs.FileSystem, directory: str, schema: pa.Schema, frame: pd.DataFrame,
                       merged: pd.DataFrame, unfinished: pd.DataFrame) -> Dict[str, int]:
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
        keep |= sources                      # already one merged file holding exactly these rows
    elif len(merged):
        written.add(_write_table(fs, directory, f"{MERGED_PREFIX}{uuid.uuid4().hex[:12]}.parquet", as_table(merged)))
    merged_away = set(frame["_source"]) - keep - written
    for path in sorted(merged_away):
        with store_io(f"delete {path}"):
            fs.delete_file(path)
    return {"files": frame["_source"].nunique(), "merged_rows": len(merged),
            "unfinished": unfinished["trial_key"].nunique(), "dropped_rows": len(frame) - len(merged) - len(unfinished),
            "deleted_files": len(merged_away)}


def write_spec_record(root: str, study: str, spec_source: Dict, n_trials: int,
                      trial_keys: Optional[Sequence[str]] = None) -> None:
    """Keep the spec that produced a study, its trial count and its trial keys beside the tables:
    reports and `hpstudy status` cover the rows of this spec only."""
    fs, base = open_root(root)
    record = {"study": check_study_name(study), "n_trials": n_trials, "spec": spec_source}
    if trial_keys is not None:
        record["trial_keys"] = sorted(trial_keys)
    text = json.dumps(record, sort_keys=True, indent=1).encode()
    _write_atomic(fs, f"{base}/specs", f"{study}.json", lambda out: out.write(text))


def load_spec_record(root: str, study: str) -> Optional[Dict]:
    """The spec record written by `write_spec_record`, or None; StoreFault naming the file when it cannot
    be read as one (truncated, damaged): a run of the study's spec rewrites it."""
    fs, base = open_root(root)
    path = f"{base}/specs/{check_study_name(study)}.json"
    with store_io(f"read {path}"):
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        data = None
        if info.type == pafs.FileType.File and (info.size or 0) <= MAX_SPEC_RECORD_BYTES \
                and not (isinstance(fs, pafs.LocalFileSystem) and not stat.S_ISREG(os.lstat(path).st_mode)):
            with fs.open_input_stream(path) as f:
                data = f.read(MAX_SPEC_RECORD_BYTES + 1)
    try:
        if data is None or len(data) > MAX_SPEC_RECORD_BYTES:
            raise ValueError(f"not a regular file of at most {MAX_SPEC_RECORD_BYTES} bytes")
        record = json.loads(data.decode())
        if not (isinstance(record, dict) and isinstance(record.get("n_trials"), int) and "spec" in record):
            raise ValueError("not a spec record: no n_trials and spec")
        keys = record.get("trial_keys", [])
        if not (isinstance(keys, list) and all(isinstance(key, str) for key in keys)):
            raise ValueError("its trial_keys are not a list of keys")
    except (ValueError, RecursionError) as exc:        # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise StoreFault(f"store: cannot read the spec record {path} ({_first_line(exc)}); "
                         f"rerun the study (`hpstudy run --config <its spec>`) to rewrite it") from None
    return record


def report_location(root: str, study: str) -> Tuple[pafs.FileSystem, str, str, str]:
    """(filesystem, store base, folder, location) of a study's report in the store: <root>/reports/<study>/;
    the location is a path, or the store's URI without its query."""
    fs, base = open_root(root)
    where = root.split("?", 1)[0].rstrip("/") if "://" in root else base
    return fs, base, f"{base}/{REPORTS}/{check_study_name(study)}", f"{where}/{REPORTS}/{study}"
