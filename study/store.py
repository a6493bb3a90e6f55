"""The Parquet store: one file per trial (and per trial's epochs), hive-partitioned by study.

    <root>/trials/study=<name>/<trial_key>.parquet   one row per finished trial
    <root>/epochs/study=<name>/<trial_key>.parquet   one row per epoch

`root` is a local path or a pyarrow filesystem URI (s3://bucket/prefix, gs://...). Files are written
under a dot-prefixed temporary name and renamed, so readers (which skip dot files) never see half a
file. The `study` column comes from the partition directory, so
`pd.read_parquet(f"{root}/trials")` returns every study's trials with a `study` column.
"""

import json
import os
import uuid
import warnings
from datetime import datetime
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from trainers.errors import HpstudyError
from trainers.schema import EPOCH_SCHEMA, FINISHED, TRIAL_SCHEMA, check_keys

TABLES = {"trials": TRIAL_SCHEMA, "epochs": EPOCH_SCHEMA}


class StoreError(HpstudyError):
    """A store path or study that cannot be used (e.g. no rows of the study)."""


def open_root(root: str) -> Tuple[pafs.FileSystem, str]:
    """(filesystem, base path) for a local path or a pyarrow filesystem URI."""
    if "://" in root:
        fs, path = pafs.FileSystem.from_uri(root)
        return fs, path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(root)


def partition_dir(root: str, table: str, study: str) -> Tuple[pafs.FileSystem, str]:
    """(filesystem, folder) of one study's partition of a table."""
    fs, base = open_root(root)
    return fs, f"{base}/{table}/study={study}"


def _to_table(rows: Sequence[Dict], schema: pa.Schema, what: str) -> pa.Table:
    """Rows as an Arrow table of `schema`; SchemaError names an unknown or missing key."""
    for row in rows:
        check_keys(row, schema.names, what)
    columns = {name: [row[name] for row in rows] for name in schema.names}
    if "finished_at" in columns:
        columns["finished_at"] = [datetime.fromisoformat(v) if isinstance(v, str) else v
                                  for v in columns["finished_at"]]
    return pa.table(columns, schema=schema)


def _write_atomic(fs: pafs.FileSystem, directory: str, name: str, table: pa.Table) -> str:
    """Write `table` to directory/name via a dot-prefixed temporary file and a rename."""
    fs.create_dir(directory, recursive=True)
    final = f"{directory}/{name}"
    tmp = f"{directory}/.{name}.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as out:
        pq.write_table(table, out)
    fs.move(tmp, final)
    return final


def write_trial(root: str, study: str, row: Dict, epoch_rows: Iterable[Dict] = ()) -> str:
    """Store one finished trial (and its epochs); rewriting the same trial_key replaces it."""
    key = row["trial_key"]
    epoch_rows = [dict(e, trial_key=key, model=row["model"], optimizer=row["optimizer"])
                  for e in epoch_rows]
    if epoch_rows:
        fs, directory = partition_dir(root, "epochs", study)
        _write_atomic(fs, directory, f"{key}.parquet", _to_table(epoch_rows, EPOCH_SCHEMA, "epoch row"))
    # the trial file goes last: its presence is what marks the trial as stored
    fs, directory = partition_dir(root, "trials", study)
    return _write_atomic(fs, directory, f"{key}.parquet", _to_table([row], TRIAL_SCHEMA, "trial row"))


def _list_files(fs: pafs.FileSystem, path: str) -> List[str]:
    selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
    return sorted(info.path for info in fs.get_file_info(selector)
                  if info.type == pafs.FileType.File and info.path.endswith(".parquet")
                  and not os.path.basename(info.path).startswith((".", "_")))


def _study_of(path: str) -> str:
    for part in path.split("/"):
        if part.startswith("study="):
            return part[len("study="):]
    return ""


def _read_files(fs: pafs.FileSystem, files: List[str], schema: pa.Schema) -> pd.DataFrame:
    """Read files one by one, skipping (with a warning naming it) any that is corrupt."""
    tables = []
    for path in files:
        try:
            table = pq.read_table(path, filesystem=fs, schema=schema)
        except (pa.ArrowException, OSError) as exc:
            warnings.warn(f"hpstudy store: skipping unreadable file {path}: {exc}")
            continue
        tables.append(table.append_column("study", pa.array([_study_of(path)] * len(table), pa.string())))
    if not tables:
        return _empty(schema)
    return pa.concat_tables(tables).to_pandas()


def _empty(schema: pa.Schema) -> pd.DataFrame:
    return schema.append(pa.field("study", pa.string())).empty_table().to_pandas()


def _load(root: str, table: str, study: Optional[str]) -> pd.DataFrame:
    fs, base = open_root(root)
    path = f"{base}/{table}"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return _empty(TABLES[table])
    schema = TABLES[table].append(pa.field("study", pa.string()))
    partitioning = pads.partitioning(pa.schema([("study", pa.string())]), flavor="hive")
    try:
        dataset = pads.dataset(path, filesystem=fs, schema=schema, format="parquet",
                               partitioning=partitioning)
        frame = dataset.to_table(filter=(pads.field("study") == study) if study else None).to_pandas()
    except (pa.ArrowException, OSError):
        # a corrupt or truncated file: read file by file, skipping (and naming) the bad ones
        files = _list_files(fs, path + (f"/study={study}" if study else ""))
        frame = _read_files(fs, files, TABLES[table])
    if table == "trials":
        frame = frame.sort_values("finished_at", kind="stable").drop_duplicates(
            ["study", "trial_key"], keep="last")
    else:
        frame = frame.drop_duplicates(["study", "trial_key", "epoch"], keep="last")
    return frame.reset_index(drop=True)


def load_trials(root: str, study: Optional[str] = None) -> pd.DataFrame:
    """All stored trials (one row per trial_key per study), with a `study` column."""
    return _load(root, "trials", study)


def load_epochs(root: str, study: Optional[str] = None) -> pd.DataFrame:
    """All stored epoch rows, with a `study` column."""
    return _load(root, "epochs", study)


def load_study(root: str, study: str) -> Tuple[pd.DataFrame, pd.DataFrame, Optional[Dict]]:
    """(trials, epochs, spec record) of one study; StoreError if it has no trials."""
    trials = load_trials(root, study)
    if trials.empty:
        raise StoreError(f"--study: no trials of study {study!r} in store {root!r}")
    return trials, load_epochs(root, study), load_spec_record(root, study)


def stored_keys(root: str, study: str, statuses: Sequence[str] = FINISHED) -> set:
    """trial_keys already stored with one of `statuses` (resume skips these)."""
    trials = load_trials(root, study)
    return set(trials.loc[trials["status"].isin(statuses), "trial_key"])


def delete_study(root: str, study: str) -> None:
    """Delete a study's trial and epoch rows (its spec record stays until the next run writes it)."""
    for table in TABLES:
        fs, directory = partition_dir(root, table, study)
        fs.delete_dir_contents(directory, missing_dir_ok=True)


def compact(root: str, study: str) -> Dict[str, int]:
    """Merge a study's per-trial files into one file per table; readers see the same rows."""
    merged = {}
    for table, schema in TABLES.items():
        fs, directory = partition_dir(root, table, study)
        files = _list_files(fs, directory)
        if len(files) < 2:
            merged[table] = 0
            continue
        frame = _load(root, table, study).drop(columns="study")
        _write_atomic(fs, directory, f"compact-{uuid.uuid4().hex[:12]}.parquet",
                      pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
        for path in files:
            fs.delete_file(path)
        merged[table] = len(files)
    return merged


def write_spec_record(root: str, study: str, spec_source: Dict, n_trials: int) -> None:
    """Keep the spec that produced a study (and its trial count) beside the tables, for reports."""
    fs, base = open_root(root)
    directory = f"{base}/specs"
    fs.create_dir(directory, recursive=True)
    tmp = f"{directory}/.{study}.json.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as out:
        out.write(json.dumps({"study": study, "n_trials": n_trials, "spec": spec_source},
                             sort_keys=True, indent=1).encode())
    fs.move(tmp, f"{directory}/{study}.json")


def load_spec_record(root: str, study: str) -> Optional[Dict]:
    """The spec record written by `write_spec_record`, or None."""
    fs, base = open_root(root)
    path = f"{base}/specs/{study}.json"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read().decode())
