"""`fuse: auto`'s measurements, kept per machine: a probe (K members of a model fused against one alone, as a
study's trials would run) is measured once on a machine and its result read back by every later study, so the
verdict does not change with the machine's load from one run to the next and a run starts at once.

The file is `fusion.json` in the user's cache folder (`$HPSTUDY_CACHE_DIR`, else `$XDG_CACHE_HOME/hpstudy`,
else `~/.cache/hpstudy`), one entry per probe and machine (host, device name, torch version: `machine`); it is
replaced whole (temp file + rename), and a file that cannot be read is ignored with a warning and rewritten.
Deleting it measures again."""

import dataclasses
import json
import logging
import math
import os
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

from hpstudy.trainers.json_file import replace_json
from hpstudy.trainers.model_counts import cache_folder

logger = logging.getLogger(__name__)

FILE = "fusion.json"
FORMAT = 1  # the file's layout; a file of another layout is read as empty (and rewritten)


@dataclass(frozen=True)
class Probe:
    """What a fusion measurement times, besides the machine: the trials' model, optimizer, batch, image size,
    recipe device, dtype and compile mode, the K members, and each trial's CPUs (its torch threads) and GPU share."""

    model: str
    optimizer: str
    batch_size: int
    image_size: int
    k: int
    device: str
    dtype: str
    compile: str
    cpus: int
    gpu: float


def cache_path() -> str:
    """This user's cache file: in $HPSTUDY_CACHE_DIR, else $XDG_CACHE_HOME/hpstudy/, else ~/.cache/hpstudy/."""
    return os.path.join(cache_folder(), FILE)


def machine(probe: Probe) -> Dict[str, str]:
    """This process's host, the name of the device the probe's trials would train on here, and torch's version."""
    import torch

    from hpstudy.trainers.loop import resolve_device

    # a trial that holds no GPU sees none (hpstudy.study.trainable.use_assigned_gpus)
    device = resolve_device(probe.device) if probe.gpu else torch.device("cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"host": socket.gethostname(), "device_name": name, "torch": torch.__version__}


def cache_key(probe: Probe, where: Dict[str, str]) -> Dict[str, Any]:
    """An entry's key: the probe's fields and the machine's (`machine`)."""
    return {"probe": dataclasses.asdict(probe), "machine": dict(where)}


def _entries(path: str) -> List[Dict[str, Any]]:
    """The file's entries; none when it does not exist, and none, with a warning, when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        logger.warning("fuse auto: ignored the cache %s (%s); it is rewritten after the next measurement", path, exc)
        return []
    if not _well_formed(data):
        logger.warning(
            "fuse auto: ignored the cache %s (not hpstudy's format %d); it is rewritten after the next measurement",
            path,
            FORMAT,
        )
        return []
    return data["entries"]


def _well_formed(data: Any) -> bool:
    """Whether `data` is the file's layout: {format, entries: [{key: {...}, result: {speedup > 0, ...}, measured}]}."""
    if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("entries"), list)):
        return False
    for entry in data["entries"]:
        if not (isinstance(entry, dict) and all(isinstance(entry.get(part), dict) for part in ("key", "result"))):
            return False
        speedup = entry["result"].get("speedup")
        if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
            return False
    return True


def lookup(path: str, key: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The cached entry of `key` ({key, result, measured}), or None."""
    return next((entry for entry in _entries(path) if entry["key"] == key), None)


def new_entry(key: Dict[str, Any], result: Dict[str, float]) -> Dict[str, Any]:
    """An entry of `key` measured now: {key, result, measured (UTC, ISO 8601)}."""
    return {"key": key, "result": dict(result), "measured": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def store(path: str, key: Dict[str, Any], result: Dict[str, float]) -> Dict[str, Any]:
    """Record `result` under `key` (replacing an earlier entry of it) by replacing the file whole; returns the
    entry. A cache that cannot be written is a warning: the study goes on, and measures again next time."""
    entry = new_entry(key, result)
    entries = [e for e in _entries(path) if e["key"] != key] + [entry]
    try:
        replace_json(path, {"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
    except OSError as exc:
        logger.warning("fuse auto: could not write the cache %s (%s); the next study measures again", path, exc)
    return entry
