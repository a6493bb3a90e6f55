"""What a live driver is training now, for `hpstudy status`: <root>/running/<study>.json, written by the driver's
progress callback (study/progress.py) when the trials running per cell change and deleted when the run ends.

It names its writer (host, pid); status trusts it only while that driver holds the study's lease
(study/store/lease.py), so a file a killed driver left behind counts nothing. No Ray is needed to read it."""

import contextlib
import json
import os
import socket
import time
from typing import Dict, Optional, Tuple

from hpstudy.study.store.layout import Location, StoreFault, StoreLike, store_io

RUNNING = "running"  # <root>/running/<study>.json
Cell = Tuple[str, str, int]  # (model, optimizer, epochs)


def _path(store: StoreLike, study: str):
    store = Location.of(store)
    return store.fs, f"{store.base}/{RUNNING}", f"{store.base}/{RUNNING}/{study}.json"


def write_running(store: StoreLike, study: str, running: Dict[Cell, int]) -> None:
    """Record the study's trials running now per cell, as this process's (a store fault is left to the
    trial writer to report: status then shows what it last read)."""
    fs, folder, path = _path(store, study)
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "written_at": time.time(),
        "running": [{"model": m, "optimizer": o, "epochs": e, "n": n} for (m, o, e), n in sorted(running.items())],
    }
    with contextlib.suppress(StoreFault), store_io(f"write {path}"):
        fs.create_dir(folder, recursive=True)
        with fs.open_output_stream(f"{path}.tmp") as out:
            out.write(json.dumps(record).encode())
        fs.move(f"{path}.tmp", path)


def clear_running(store: StoreLike, study: str) -> None:
    """Delete the record (the run ended); none there is fine."""
    fs, _, path = _path(store, study)
    with contextlib.suppress(StoreFault, FileNotFoundError), store_io(f"delete {path}"):
        fs.delete_file(path)


def read_running(store: StoreLike, study: str, host: str, pid: int) -> Dict[Cell, int]:
    """The running trials per cell that the driver `host`/`pid` recorded; none when it recorded nothing
    readable (a record of another process is another driver's, or a dead one's)."""
    record = _read(store, study)
    if not record or record.get("host") != host or record.get("pid") != pid:
        return {}
    with contextlib.suppress(KeyError, TypeError, ValueError):
        return {(r["model"], r["optimizer"], int(r["epochs"])): int(r["n"]) for r in record["running"]}
    return {}


def _read(store: StoreLike, study: str) -> Optional[Dict]:
    fs, _, path = _path(store, study)
    with contextlib.suppress(FileNotFoundError, ValueError, OSError):
        with fs.open_input_stream(path) as f:
            record = json.loads(f.read().decode())
        return record if isinstance(record, dict) else None
    return None
