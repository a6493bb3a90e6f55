"""The Parquet store's layout and its writes: one file per trial (and per trial's epochs),
hive-partitioned by study, each written atomically.

    <root>/trials/study=<name>/<trial_key>.parquet   one row per finished trial
    <root>/epochs/study=<name>/<trial_key>.parquet   one row per epoch
    <root>/reports/<name>/                           the study's report (index.html, figures, tables)

`root` is a local path or a pyarrow filesystem URI (s3://bucket/prefix, gs://...). Files are written
under a dot-prefixed temporary name and renamed, so readers (which skip dot files) never see half a
file. The `study` column comes from the partition directory, so
`pd.read_parquet(f"{root}/trials")` returns every study's trials with a `study` column.

A store is opened once from its URI: `Location.open`, or `Store.open` (hpstudy.study.store.store: the same
with the store's operations as methods); every function of the package takes an open one or a URI
(opened then). Reading the store is hpstudy.study.store.read, merging its files
hpstudy.study.store.compaction, the spec record and the report folder hpstudy.study.store.spec_record,
the study's writer hpstudy.study.store.lease.
"""

import contextlib
import dataclasses
import os
import re
import uuid
from datetime import datetime
from typing import Callable, Dict, Iterable, Iterator, Sequence, Type, TypeVar, Union

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from hpstudy.trainers.errors import HpstudyError, shown
from hpstudy.trainers.schema import EPOCH_SCHEMA, TRIAL_SCHEMA, check_keys

TABLES = {"trials": TRIAL_SCHEMA, "epochs": EPOCH_SCHEMA}
# The columns every stored row has a value in: a file without one of them (not written by hpstudy)
# is skipped by the readers, naming it and the column, and moved to the quarantine by `compact`.
REQUIRED = {
    "trials": ("trial_key", "model", "optimizer", "epochs", "lr", "wd", "status", "finished_at"),
    "epochs": ("trial_key", "model", "optimizer", "epoch"),
}
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
STUDY_NAME_RULE = "1 to 128 letters, digits, '-', '_' or '.', starting with a letter or digit"


L = TypeVar("L", bound="Location")


class StoreError(HpstudyError):
    """A store path or study that cannot be used (e.g. no rows of the study)."""


class StoreFault(StoreError):
    """The store cannot be written or reached (unwritable, full, unreachable): an infrastructure
    fault, not a mistake in the input; what was stored before it stays stored."""


def _first_line(exc: BaseException) -> str:
    """The first line of an error's message (its type's name if it has none)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextlib.contextmanager
def store_io(what: str) -> Iterator[None]:
    """Turn an I/O error of the block (disk full, read-only, unreachable) into a StoreFault that
    says what could not be done."""
    try:
        yield
    except OSError as exc:
        raise StoreFault(f"store: cannot {what} ({_first_line(exc)})") from exc


def check_study_name(study: str, field: str = "--study") -> str:
    """The study name, or StoreError naming `field` if it cannot name a partition folder (e.g. '..' or 'a/b')."""
    if not isinstance(study, str) or not STUDY_NAME.fullmatch(study):
        raise StoreError(f"{field}: bad value {shown(study)}; allowed: {STUDY_NAME_RULE}")
    return study


@dataclasses.dataclass(frozen=True)
class Location:
    """A store opened once: the URI it was given as (what messages show), its pyarrow filesystem and its
    base path there."""

    uri: str
    fs: pafs.FileSystem
    base: str

    @classmethod
    def open(cls: Type[L], uri: str, field: str = "--store") -> L:
        """The store at a local path or a pyarrow filesystem URI; StoreError naming `field` for a URI pyarrow
        cannot open, or a path that is not UTF-8 text (Arrow's filesystems take no other)."""
        if not isinstance(uri, str):
            raise StoreError(f"{field}: bad value {shown(uri)}; allowed: a path or URI of UTF-8 text")
        try:
            uri.encode("utf-8")
        except UnicodeEncodeError:  # a command line's byte that is not UTF-8, read as a lone surrogate
            raise StoreError(f"{field}: bad value {shown(uri)}; allowed: a path or URI of UTF-8 text") from None
        if "://" in uri:
            try:
                with store_io(f"open {uri}"):
                    fs, path = pafs.FileSystem.from_uri(uri)
            except pa.ArrowInvalid as exc:
                raise StoreError(
                    f"{field}: bad value {shown(uri)}; allowed: a local path or a filesystem URI "
                    f"such as s3://bucket/prefix ({_first_line(exc)})"
                )
            return cls(uri, fs, path.rstrip("/"))
        return cls(uri, pafs.LocalFileSystem(), os.path.abspath(uri))

    @classmethod
    def of(cls: Type[L], store: "StoreLike", field: str = "--store") -> L:
        """`store` if it is open as this class, else the store its URI names (open, errors naming `field`)."""
        if isinstance(store, cls):
            return store
        return cls.open(store.uri if isinstance(store, Location) else store, field)

    def __str__(self) -> str:
        return self.uri

    def partition(self, table: str, study: str) -> str:
        """The folder of one study's partition of a table."""
        return f"{self.base}/{table}/study={check_study_name(study)}"


StoreLike = Union[Location, str]  # an open store, or the URI to open it from


def _to_table(rows: Sequence[Dict], schema: pa.Schema, what: str) -> pa.Table:
    """Rows as an Arrow table of `schema`; SchemaError names an unknown or missing key."""
    for row in rows:
        check_keys(row, schema.names, what)
    columns = {name: [row[name] for row in rows] for name in schema.names}
    if "finished_at" in columns:
        columns["finished_at"] = [
            datetime.fromisoformat(v) if isinstance(v, str) else v for v in columns["finished_at"]
        ]
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


def probe_store(store: StoreLike) -> None:
    """StoreFault unless a file can be written to the store and deleted again (run before any trial)."""
    store = Location.of(store)
    fs = store.fs
    path = _write_atomic(fs, store.base, f".probe-{uuid.uuid4().hex}", lambda out: out.write(b"hpstudy"))
    with store_io(f"delete {path}"):
        fs.delete_file(path)


def write_trial(store: StoreLike, study: str, row: Dict, epoch_rows: Iterable[Dict] = ()) -> str:
    """Store one finished trial (and its epochs); rewriting the same trial_key replaces it."""
    key = row["trial_key"]
    epoch_rows = [dict(e, trial_key=key, model=row["model"], optimizer=row["optimizer"]) for e in epoch_rows]
    store = Location.of(store)
    if epoch_rows:
        table = _to_table(epoch_rows, EPOCH_SCHEMA, "epoch row")
        _write_table(store.fs, store.partition("epochs", study), f"{key}.parquet", table)
    # the trial file goes last: its presence is what marks the trial as stored
    table = _to_table([row], TRIAL_SCHEMA, "trial row")
    return _write_table(store.fs, store.partition("trials", study), f"{key}.parquet", table)


def delete_study(store: StoreLike, study: str) -> None:
    """Delete a study's trial and epoch rows (its spec record stays until the next run writes it)."""
    store = Location.of(store)
    for table in TABLES:
        store.fs.delete_dir_contents(store.partition(table, study), missing_dir_ok=True)
