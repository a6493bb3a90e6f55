"""What the store keeps beside a study's rows: the record of the spec that produced them
(<root>/specs/<name>.json) and the location of the study's report (<root>/reports/<name>/)."""

import json
import os
import stat
from typing import Dict, Iterable, Optional, Tuple

import pyarrow.fs as pafs

from hpstudy.study.spec import sampled_fields
from hpstudy.study.store.layout import (
    Location,
    StoreFault,
    StoreLike,
    _first_line,
    _write_atomic,
    check_study_name,
    store_io,
)

REPORTS = "reports"  # <root>/reports/<name>/: the study's report, as long-lived as its rows
MAX_SPEC_RECORD_BYTES = 64 << 20  # a record of 100,000 trial keys is ~3 MB


def write_spec_record(
    store: StoreLike, study: str, spec_source: Dict, n_trials: int, trial_keys: Optional[Iterable[str]] = None
) -> None:
    """Keep the spec that produced a study, its trial count, its trial keys and (for a spec with a `space:`) the
    fields it samples (`sampled`: field -> distribution, hpstudy.study.spec.sampled_fields) beside the tables:
    reports and `hpstudy status` cover the rows of this spec only."""
    store = Location.of(store)
    record = {"study": check_study_name(study), "n_trials": n_trials, "spec": spec_source}
    if "space" in spec_source:
        record["sampled"] = sampled_fields(spec_source["space"], spec_source.get("models"))
    if trial_keys is not None:
        record["trial_keys"] = sorted(trial_keys)
    text = json.dumps(record, sort_keys=True, indent=1).encode()
    _write_atomic(store.fs, f"{store.base}/specs", f"{study}.json", lambda out: out.write(text))


def load_spec_record(store: StoreLike, study: str) -> Optional[Dict]:
    """The spec record written by `write_spec_record`, or None; StoreFault naming the file when it cannot
    be read as one (truncated, damaged): a run of the study's spec rewrites it."""
    store = Location.of(store)
    fs, path = store.fs, f"{store.base}/specs/{check_study_name(study)}.json"
    with store_io(f"read {path}"):
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            return None
        data = None
        if (
            info.type == pafs.FileType.File
            and (info.size or 0) <= MAX_SPEC_RECORD_BYTES
            and not (isinstance(fs, pafs.LocalFileSystem) and not stat.S_ISREG(os.lstat(path).st_mode))
        ):
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
        sampled = record.get("sampled", {})
        if not (isinstance(sampled, dict) and all(isinstance(kind, str) for kind in sampled.values())):
            raise ValueError("its sampled fields are not a mapping of field -> distribution")
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise StoreFault(
            f"store: cannot read the spec record {path} ({_first_line(exc)}); "
            f"rerun the study (`hpstudy run --config <its spec>`) to rewrite it"
        ) from None
    return record


def report_location(store: StoreLike, study: str) -> Tuple[pafs.FileSystem, str, str, str]:
    """(filesystem, store base, folder, location) of a study's report in the store: <root>/reports/<study>/,
    or of a report over several studies, <root>/reports/<a>+<b>/ (`study` their names joined by '+', which no
    study name holds); the location is a path, or the store's URI without its query."""
    store = Location.of(store)
    fs, base = store.fs, store.base
    where = store.uri.split("?", 1)[0].rstrip("/") if "://" in store.uri else base
    name = "+".join(check_study_name(part) for part in study.split("+"))
    return fs, base, f"{base}/{REPORTS}/{name}", f"{where}/{REPORTS}/{name}"
