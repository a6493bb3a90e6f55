"""An `init` checkpoint file as a trial key names it: its sha256 (hashed once per path, size and mtime),
pinned into a study's recipe when the study is planned and checked by the trial that loads it. No torch:
reading a spec needs this, loading the checkpoint (hpstudy.trainers.checkpoint) does not happen then."""

import hashlib
import os
from functools import lru_cache
from typing import Any, Dict, Mapping, Optional

from hpstudy.trainers.errors import ConfigError, shown

CHECKPOINT_KINDS = "a local torch state dict (.pt, .pth, .bin) or safetensors file (.safetensors)"


def file_sha256(path: str) -> str:
    """The sha256 (hex) of a file's bytes, hashed once per (path, size, modification time)."""
    stat = os.stat(path)
    return _sha256(os.path.realpath(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=32)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pin_init(config: Mapping[str, Any], must_exist: bool) -> Dict[str, Any]:
    """`config` (a trial config or a study recipe) with `init_sha256` set from its `init` file, so its
    trial key names the checkpoint's bytes. A relative path is a ConfigError (trials run in other working
    directories, on other nodes); a missing file is a ConfigError when `must_exist`, else the config is
    returned unpinned; a given `init_sha256` that the file does not have is a ConfigError."""
    path = config.get("init")
    if not isinstance(path, str) or not path:
        return dict(config)  # no init, or a bad value that TrialConfig.validate names
    if not os.path.isabs(path):
        raise ConfigError(
            f"init: bad value {shown(path)} (a relative path: trials run in other working directories); "
            f"allowed: an absolute path every worker can read, of {CHECKPOINT_KINDS}"
        )
    if not os.path.isfile(path):
        if must_exist:
            raise ConfigError(f"init: {shown(path)} is not a file; allowed: {CHECKPOINT_KINDS}")
        return dict(config)
    sha = file_sha256(path)
    given = config.get("init_sha256")
    if given is not None and given != sha:
        raise ConfigError(
            f"init_sha256: bad value {shown(given)}; allowed: the sha256 of {shown(path)} ({sha}), "
            f"or null to take it from the file"
        )
    return dict(config, init_sha256=sha)


def verified_sha256(path: str, planned: Optional[str]) -> str:
    """The sha256 of the checkpoint a trial starts from; ConfigError if the file is missing or is not
    the one the trial was planned with (`planned`, its recorded sha256; None: not recorded)."""
    if not os.path.isfile(path):
        raise ConfigError(f"init: {shown(path)} is not a file; allowed: {CHECKPOINT_KINDS}")
    sha = file_sha256(path)
    if planned is not None and sha != planned:
        raise ConfigError(
            f"init: {shown(path)} has sha256 {sha}, not the {planned} this trial was planned with; "
            f"allowed: the same file (rerun the study to plan it with the new file's trial keys)"
        )
    return sha
