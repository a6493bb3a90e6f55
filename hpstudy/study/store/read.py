"""Reading the store: a table's rows (one study's or all), one row per trial_key (per epoch), read
as dataset scans of GROUP_FILES files and, when a file is corrupt or incomplete, file by file, skipping
(and naming) the bad ones; the rows of the spec recorded for a study; and the one error for a store or
study that is not there (require_store, require_study), naming the nearest that is."""

import dataclasses
import json
import os
import urllib.parse
import warnings
from difflib import get_close_matches
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from hpstudy.study.store.layout import (
    REQUIRED,
    TABLES,
    Location,
    StoreError,
    StoreLike,
    _first_line,
    check_study_name,
    store_io,
)
from hpstudy.study.store.spec_record import load_spec_record
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import shown
from hpstudy.trainers.schema import FINISHED


class IncompleteFile(pa.ArrowInvalid):
    """A store file that lacks a column every row needs (see REQUIRED): read as unreadable."""


def _list_files(fs: pafs.FileSystem, path: str) -> List[str]:
    """The store's Parquet files under `path`, sorted, without dot files (temporaries) and '_' files."""
    selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
    return sorted(
        info.path
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File
        and info.path.endswith(".parquet")
        and not os.path.basename(info.path).startswith((".", "_"))
    )


def _study_of(path: str, table_dir: str) -> str:
    """The study of a file under `table_dir` (<root>/<table>): its partition folder, right below
    `table_dir` (a `study=` further up, in the store's own path, is not it)."""
    partition = path[len(table_dir) + 1 :].split("/", 1)[0]
    return partition[len("study=") :] if partition.startswith("study=") else ""


# Files read per dataset scan: a pyarrow dataset keeps the Parquet metadata of every file it has
# scanned until it is dropped (~75 KB for a one-row trial file of 31 columns: 7.5 GB for 100,000), and
# a table holds one chunk per file; reading a partition this many files at a time, each group merged
# into one chunk, keeps memory proportional to the rows read (docs/performance.md).
GROUP_FILES = 1000
# pyarrow 20 and newer can also scan without keeping that metadata at all (less memory, and no time to free it)
SCAN_ONCE = {"cache_metadata": False} if int(pa.__version__.split(".")[0]) >= 20 else {}


def _read_groups(
    fs: pafs.FileSystem, table_dir: str, files: List[str], table: str, columns: Optional[List[str]]
) -> pa.Table:
    """`files` (under `table_dir`) read GROUP_FILES at a time (_read_group), as one table."""
    groups = [
        _read_group(fs, table_dir, files[i : i + GROUP_FILES], table, columns)
        for i in range(0, len(files), GROUP_FILES)
    ]
    return pa.concat_tables(groups) if groups else _empty_table(table, columns)


def _skip(path: str, exc: Exception) -> None:
    """What the readers do with a file they cannot read: skip it, with a warning naming it."""
    warnings.warn(f"hpstudy store: skipping unreadable file {path}: {_first_line(exc)}")


def _read_group(
    fs: pafs.FileSystem,
    table_dir: str,
    files: List[str],
    table: str,
    columns: Optional[List[str]],
    with_file: bool = False,
    unreadable: Callable[[str, Exception], None] = _skip,
) -> pa.Table:
    """Some of a table's files read as one dataset scan, or file by file if one is corrupt or may lack
    a column of REQUIRED (the scan reads a missing column as nulls; _read_files checks each file's
    own columns); a file whose last row the scan did not reach is read again on its own (_unfinished).
    One chunk, in the order of `files`: only `columns` (and the study), and FILE for epochs or `with_file`.
    A file that cannot be read goes to `unreadable(path, error)` (_read_files)."""
    schema = _schema(table)
    names = [*(schema.names if columns is None else columns), *([FILE] if with_file or table == "epochs" else [])]
    scanned = list(dict.fromkeys([*names, *REQUIRED[table], FILE]))
    try:
        dataset = pads.dataset(
            files,
            schema=schema,
            format="parquet",
            filesystem=fs,
            partitioning=PARTITIONING,
            partition_base_dir=table_dir,
        )
        arrow = dataset.to_table(columns=[*scanned, LAST], **SCAN_ONCE)
        if any(arrow[c].null_count for c in REQUIRED[table]):
            arrow = _read_files(fs, table_dir, files, table, unreadable)
        else:
            unfinished = _unfinished(arrow, files)
            if unfinished:
                finished = arrow.filter(pc.invert(pc.is_in(arrow[FILE], value_set=pa.array(unfinished, pa.string()))))
                again = _read_files(fs, table_dir, unfinished, table, unreadable)
                arrow = _in_file_order(pa.concat_tables([finished.select(scanned), again.select(scanned)]), files)
    except (pa.ArrowException, OSError):
        arrow = _read_files(fs, table_dir, files, table, unreadable)
    return arrow.select(names).combine_chunks()


LAST = "__last_in_fragment"  # pyarrow's flag on the rows of a file's last batch


def _unfinished(arrow: pa.Table, files: List[str]) -> List[str]:
    """The files of a scan whose last batch it did not return: pyarrow 18's dataset scan can end early without
    raising when one file fails (a corrupt file's error lost, and with it the rest of the scan: twice in about
    5,600 scans of 12 files, one truncated, on a loaded 2-core machine), mid-file too; a file without rows has none."""
    ended = set(pc.unique(pc.filter(arrow[FILE], arrow[LAST])).to_pylist())
    return [path for path in files if path not in ended]


def _in_file_order(arrow: pa.Table, files: List[str]) -> pa.Table:
    """`arrow`'s rows ordered by their file's place in `files`, each file's rows as they were (a stable sort)."""
    return arrow.take(pc.sort_indices(pc.index_in(arrow[FILE], value_set=pa.array(files, pa.string()))))


def _read_files(
    fs: pafs.FileSystem,
    table_dir: str,
    files: List[str],
    table: str,
    unreadable: Callable[[str, Exception], None] = _skip,
) -> pa.Table:
    """Read files (under `table_dir`) one by one, passing any that is corrupt or incomplete to
    `unreadable(path, error)`; every column, the study and the file."""
    tables = []
    for path in files:
        try:
            arrow = _read_file(fs, path, table)
        except (pa.ArrowException, OSError) as exc:
            unreadable(path, exc)
            continue
        arrow = arrow.append_column("study", pa.array([_study_of(path, table_dir)] * len(arrow), pa.string()))
        tables.append(arrow.append_column(FILE, pa.array([path] * len(arrow), pa.string())))
    return pa.concat_tables(tables) if tables else _empty_table(table, None, with_file=True)


def _read_file(fs: pafs.FileSystem, path: str, table: str, columns: Optional[List[str]] = None) -> pa.Table:
    """One Parquet file of the store as a table of `table`'s schema (only `columns`, if given);
    IncompleteFile if it lacks a column of REQUIRED (which a schema-aware read would fill with nulls)."""
    fragment = pads.ParquetFileFormat().make_fragment(path, filesystem=fs)
    missing = [c for c in REQUIRED[table] if c not in fragment.physical_schema.names]
    if missing:
        raise IncompleteFile(f"missing column {missing[0]!r} (every {table} row needs {', '.join(REQUIRED[table])})")
    return fragment.to_table(schema=TABLES[table], columns=columns)


def _schema(table: str) -> pa.Schema:
    """`table`'s schema and the `study` column (from the partition folder)."""
    return TABLES[table].append(pa.field("study", pa.string()))


def _empty_table(table: str, columns: Optional[List[str]], with_file: bool = False) -> pa.Table:
    """An empty table of `table`'s schema and the study (only `columns`, if given; and the file for
    epochs, or with `with_file`)."""
    empty = _schema(table).append(pa.field(FILE, pa.string())).empty_table()
    names = columns or _schema(table).names
    return empty.select([*names, FILE] if with_file or table == "epochs" else names)


def _empty(schema: pa.Schema, columns: Optional[List[str]] = None) -> pd.DataFrame:
    """An empty frame of `schema` and a `study` column (only `columns`, if given)."""
    frame = schema.append(pa.field("study", pa.string())).empty_table().to_pandas()
    return frame[columns] if columns else frame


# the columns that decide which of a trial's stored rows counts (see _load)
_IDENTITY = {"trials": ["trial_key", "finished_at"], "epochs": ["trial_key", "epoch"]}
# the study of a file is its partition folder, study=<name>, right below <root>/<table>
PARTITIONING = pads.partitioning(pa.schema([("study", pa.string())]), flavor="hive")


def _load(store: StoreLike, table: str, study: Optional[str], columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """A table's rows (of `study`, or all studies): one per trial_key, or per trial_key and epoch."""
    store = Location.of(store)
    fs, path = store.fs, f"{store.base}/{table}"
    if columns is not None:
        unknown = sorted(set(columns) - set(TABLES[table].names) - {"study"})
        if unknown:
            raise StoreError(f"columns: unknown {table} column {unknown[0]!r}")
        columns = list(dict.fromkeys([*columns, "study", *_IDENTITY[table]]))
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return _empty(TABLES[table], columns)
    files = _list_files(fs, path + (f"/study={study}" if study else ""))
    frame = to_frame(_read_groups(fs, path, files, table, columns))
    if table == "trials":
        frame = frame.sort_values("finished_at", kind="stable").drop_duplicates(["study", "trial_key"], keep="last")
    else:
        frame = _rows_of_newest_file(fs, frame).drop_duplicates(["study", "trial_key", "epoch"], keep="last")
    return frame.reset_index(drop=True)


FLOAT_EXACT = 2**53  # the largest integer magnitude below which float64 holds every integer


def to_frame(table: pa.Table) -> pd.DataFrame:
    """The table as pandas makes it (an integer column with a null is float64, the null NaN), except an
    integer column with a null and a value float64 would round (a seed of 2**53 + 1): nullable Int64."""
    frame = table.to_pandas()
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_integer(column.type) and column.null_count and len(column) > column.null_count:
            largest = pc.max(pc.abs(column)).as_py()
            if largest > FLOAT_EXACT:
                frame[name] = column.to_pandas(types_mapper={column.type: pd.Int64Dtype()}.get)
    return frame


FILE = "__filename"  # pyarrow's name for the file a dataset row was read from


def _rows_of_newest_file(fs: pafs.FileSystem, frame: pd.DataFrame) -> pd.DataFrame:
    """Each trial's epoch rows from the newest of the files that hold some (modification time, then
    path, as compaction orders them); without the FILE column. Only the files of trials with rows in
    more than one file are looked at (one request each on an object store)."""
    trial = [frame["study"], frame["trial_key"]]
    shared = frame[FILE].groupby(trial).transform("nunique") > 1
    if shared.any():
        files = sorted(frame.loc[shared, FILE].unique())
        with store_io("list the epoch files"):
            infos = fs.get_file_info(files)
        age = {info.path: rank for rank, info in enumerate(sorted(infos, key=lambda i: (i.mtime_ns or 0, i.path)))}
        order = frame[FILE].map(age)
        frame = frame[~shared | (order == order.groupby(trial).transform("max"))]
    return frame.drop(columns=FILE)


def load_trials(store: StoreLike, study: Optional[str] = None, columns: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """All stored trials (one row per trial_key per study), with a `study` column; only `columns`
    (and the key columns) when given, which reads only those from the files."""
    with store_io(f"read {store}"):
        return _load(store, "trials", None if study is None else check_study_name(study), columns)


def load_epochs(store: StoreLike, study: Optional[str] = None) -> pd.DataFrame:
    """All stored epoch rows, with a `study` column."""
    with store_io(f"read {store}"):
        return _load(store, "epochs", None if study is None else check_study_name(study))


def keys_among(keys: pd.Series, among: Iterable[str]) -> np.ndarray:
    """keys.isin(among) for trial keys, by pyarrow's hash lookup: pandas' isin on Arrow strings walks the values
    in Python (1.4 s of a 100,000-trial load_study)."""
    among = list(among)
    try:
        found = pc.is_in(pa.array(keys, pa.string()), value_set=pa.array(among, pa.string()))
    except (pa.ArrowException, UnicodeError):  # not all text Arrow can hold (a lone surrogate): looked up here
        wanted = set(among)
        return np.fromiter((key in wanted for key in keys.astype(object)), bool, len(keys))
    return found.to_numpy(zero_copy_only=False)


def split_by_spec(trials: pd.DataFrame, record: Optional[Dict]) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """(rows of the spec recorded for the study, rows of earlier versions of it); without recorded
    trial keys (no record, or one written before they were kept) every row counts as current."""
    if not record or "trial_keys" not in record:
        return trials, trials.iloc[:0]
    current = keys_among(trials["trial_key"], record["trial_keys"])
    return trials[current].reset_index(drop=True), trials[~current].reset_index(drop=True)


# a trial config's fields with their defaults (its canonical JSON leaves out fields added since 0.1 at theirs)
CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TrialConfig) if f.default is not dataclasses.MISSING}


def _config(text: Any) -> Optional[Dict]:
    """A row's config_json read as a mapping (json.loads, never evaluated), or None."""
    try:
        config = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None
    return config if isinstance(config, dict) else None


def with_sampled_columns(trials: pd.DataFrame, fields: Iterable[str]) -> pd.DataFrame:
    """`trials` with a column for each of `fields` (trial-config fields a study samples) that is not a stored
    column, read from each row's config_json (null where a row has none that can be read)."""
    missing = [name for name in fields if name in CONFIG_DEFAULTS and name not in trials.columns]
    if not missing:
        return trials
    configs = [_config(text) for text in trials["config_json"]]
    return trials.assign(
        **{name: [None if c is None else c.get(name, CONFIG_DEFAULTS[name]) for c in configs] for name in missing}
    )


class Fields(NamedTuple):
    """How an error names the store and the study: as the caller's user wrote them."""

    store: str
    study: str


CLI = Fields("--store", "--study")  # the commands' flags (and the default, as check_study_name's and Store.open's)
API = Fields("store", "study")  # hpstudy.load(store, study), hpstudy.report(...): the arguments' names


def _close(name: str, names: Iterable[str], n: int = 1) -> List[str]:
    """The (at most `n`) of `names` closest to `name`, closest first (difflib's ratio, ignoring case)."""
    folded: Dict[str, str] = {}
    for candidate in sorted(names):
        folded.setdefault(candidate.casefold(), candidate)
    return [folded[match] for match in get_close_matches(name.casefold(), folded, n=n)]


def _beside(root: str, name: str) -> str:
    """The folder `name` next to `root`, written as `root` is (a relative path, an absolute one, a URI)."""
    if "://" in root:
        parts = urllib.parse.urlsplit(root)
        return urllib.parse.urlunsplit(parts._replace(path=f"{os.path.dirname(parts.path.rstrip('/'))}/{name}"))
    return os.path.join(os.path.dirname(root.rstrip(os.sep)), name)


def _is_store(fs: pafs.FileSystem, base: str) -> bool:
    """Whether `base` holds a trials/ or specs/ folder (a run writes its spec record before its first trial)."""
    return any(info.type == pafs.FileType.Directory for info in fs.get_file_info([f"{base}/trials", f"{base}/specs"]))


def _near_store(fs: pafs.FileSystem, base: str) -> Optional[str]:
    """The folder next to `base` whose name is closest to its name and that is a store, if any."""
    parent, name = os.path.split(base)
    if not parent or not name:
        return None
    try:  # only a hint: a parent that cannot be listed (a file, no permission) has none
        folders = fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True))
        names = [info.base_name for info in folders if info.type == pafs.FileType.Directory]
        for near in _close(name, names, n=5):  # the folder itself (not a store) may be one of them
            if _is_store(fs, f"{parent}/{near}"):
                return near
    except OSError:
        pass
    return None


def require_store(store: StoreLike, fields: Fields = CLI) -> None:
    """StoreError unless `store` is a store (holds a trials/ or specs/ folder): one line naming `fields.store`,
    the value and the nearest store beside it."""
    store = Location.of(store, fields.store)
    with store_io(f"read {store}"):
        if _is_store(store.fs, store.base):
            return
        near = _near_store(store.fs, store.base)
    raise StoreError(
        f"{fields.store}: no hpstudy store at {shown(store.uri)} (no trials/ or specs/ folder there)"
        + (f"; nearest store: {shown(_beside(store.uri, near))}" if near else "")
    )


def stored_studies(store: StoreLike) -> List[str]:
    """The studies of which the store holds trial files, sorted."""
    store = Location.of(store)
    with store_io(f"list the studies in {store}"):
        files = _list_files(store.fs, f"{store.base}/trials")
    return sorted({_study_of(path, f"{store.base}/trials") for path in files} - {""})


def require_study(store: StoreLike, study: str, fields: Fields = CLI) -> None:
    """StoreError unless `store` holds trial files of `study`: one line naming `fields.study`, the value,
    the studies stored and the nearest of them (require_store's error if `store` is no store)."""
    check_study_name(study, fields.study)
    store = Location.of(store, fields.store)
    require_store(store, fields)
    studies = stored_studies(store)
    if study in studies:
        return
    near = _close(study, studies)
    raise StoreError(
        f"{fields.study}: no trials of study {shown(study)} in store {shown(store.uri)}; studies stored: "
        + (shown(studies) if studies else "none")
        + (f"; nearest: {shown(near[0])}" if near else "")
    )


def require_rows(trials: pd.DataFrame, store: StoreLike, study: str, fields: Fields = CLI) -> pd.DataFrame:
    """`trials` (the rows read of `study`), or StoreError if there are none: require_study's if the store
    or the study is not there, else one saying that none of the study's files can be read."""
    if trials.empty:
        require_study(store, study, fields)
        raise StoreError(
            f"{fields.study}: no trial of study {shown(study)} in store {shown(str(store))} can be read "
            f"(the warnings name its files)"
        )
    return trials


def load_study(store: StoreLike, study: str, fields: Fields = CLI) -> Tuple[pd.DataFrame, pd.DataFrame, Optional[Dict]]:
    """(trials, epochs, spec record) of one study's current spec: rows whose trial_key the recorded
    spec does not produce (an earlier version of the spec) are left out, counted in the record's
    `earlier_spec_rows` and named in a warning; StoreError (naming `fields`) if there is no such store
    or study (require_study), or no readable trial of the study's recorded spec.
    Each recipe field the record says the spec samples (`sampled`) is a column of `trials`
    (with_sampled_columns)."""
    store = Location.of(store, fields.store)
    trials = require_rows(load_trials(store, check_study_name(study, fields.study)), store, study, fields)
    record = load_spec_record(store, study)
    trials, earlier = split_by_spec(trials, record)
    if trials.empty:
        raise StoreError(
            f"{fields.study}: none of the {len(earlier)} stored trials of study {study!r} in store "
            f"{store.uri!r} belongs to the spec recorded last for it (`hpstudy status` lists them)"
        )
    if record is not None and len(earlier):  # split_by_spec finds earlier rows only against a record
        record = dict(record, earlier_spec_rows=len(earlier))
        warnings.warn(
            f"hpstudy store: {len(earlier)} rows from an earlier spec of study {study!r} are "
            f"not in these figures (`hpstudy status --store {store} --study {study}` lists them)"
        )
    trials = with_sampled_columns(trials, (record or {}).get("sampled", {}))
    epochs = load_epochs(store, study)
    return trials, epochs[keys_among(epochs["trial_key"], trials["trial_key"])].reset_index(drop=True), record


def stored_keys(store: StoreLike, study: str, statuses: Sequence[str] = FINISHED) -> set:
    """trial_keys already stored with one of `statuses` (resume skips these)."""
    trials = load_trials(store, study, columns=["status"])
    return set(trials.loc[trials["status"].isin(statuses), "trial_key"])
