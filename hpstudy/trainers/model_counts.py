"""What building a model tells (its multiply-adds and parameters, activation bytes, whether it trains as
configured), counted once and read back from a JSON file, so planning a study builds no model counted before.

The file is `model_counts.json` in the user's cache folder ($HPSTUDY_CACHE_DIR, else $XDG_CACHE_HOME/hpstudy,
else ~/.cache/hpstudy). An entry's key names the quantity, the model, the arguments it was counted with, a digest
of the model's spec (hpstudy.trainers.zoo.ModelSpec) and the environment: torch's, timm's and hpstudy's versions
and a digest of hpstudy/trainers' source (a checkout changes code under one version). The file is replaced whole
(temp file + os.replace), so concurrent runs never leave a broken file (the last writer's entries win; a lost one
is counted again); one that cannot be read is ignored (a debug log) and rewritten; a folder that cannot be
written leaves every count still counted. Deleting the file counts again. Counting imports torch; reading does not.
"""

import dataclasses
import hashlib
import json
import logging
import os
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.json_file import replace_json
from hpstudy.trainers.zoo import get_spec

logger = logging.getLogger(__name__)

FILE = "model_counts.json"
FORMAT = 1  # the file's layout; a file of another layout is read as empty (and rewritten)
MAX_ENTRIES = 2000  # the newest kept: entries of other environments (an older torch, edited source) age out


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_problem(value: Any) -> bool:
    return value is None or isinstance(value, str)


# quantity -> whether a value read back is one (a file of wrong types is recounted, never used)
QUANTITIES: Dict[str, Callable[[Any], bool]] = {
    "macs": _is_count,  # multiply-adds of one forward pass on one image
    "params": _is_count,
    "activation_bytes": _is_count,  # per training image
    "timm_name": _is_problem,  # why timm does not know a timm: name (None: it does)
    "trains": _is_problem,  # why a trial config cannot train the model (None: it can)
}


def cache_folder() -> Path:
    """This user's cache folder: $HPSTUDY_CACHE_DIR, else $XDG_CACHE_HOME/hpstudy, else ~/.cache/hpstudy."""
    folder = os.environ.get("HPSTUDY_CACHE_DIR")
    if folder:
        return Path(folder)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpstudy"


def trial_config(values: Dict[str, Any], check_model: bool = True) -> TrialConfig:
    """TrialConfig.from_dict(values, check_model), the model's own checks (TrialConfig.check_model, which builds
    it) read back when made before: a ConfigError as the check raised it."""
    cfg = TrialConfig.from_dict(values, check_model=False)
    if check_model:
        data = cfg.dataset
        problem = cached(
            "trains",
            cfg.model,
            lambda: {"trains": _problem(cfg.check_model)},
            # the fields TrialConfig.check_model reads (n_train: a synthetic dataset's smallest batch)
            image_size=data.size,
            batch_size=cfg.batch_size,
            accum_steps=cfg.accum_steps,
            freeze=cfg.freeze,
            dataset=data.name,
            n_train=data.n_train,
        )
        if problem:
            raise ConfigError(problem)
    return cfg


def check_timm_name(model: str) -> None:
    """hpstudy.trainers.models.check_timm_name(model) (which imports torch and timm), its outcome read back when
    checked before: a ConfigError as it raised it."""

    def check() -> None:
        from hpstudy.trainers.models import check_timm_name

        check_timm_name(model)

    problem = cached("timm_name", model, lambda: {"timm_name": _problem(check)})
    if problem:
        raise ConfigError(problem)


def _problem(check: Callable[[], None]) -> Optional[str]:
    """The message of the ConfigError check() raises, None if it raises none."""
    try:
        check()
    except ConfigError as exc:
        return str(exc)
    return None


def cached(quantity: str, model: str, count: Callable[[], Dict[str, Any]], **args: Any) -> Any:
    """`quantity` of `model` built with `args`: read back when counted before in this environment, else counted:
    count() builds the model once and returns each quantity it counted ({quantity: value}), all of them stored."""
    path = cache_folder() / FILE
    key = _key(quantity, model, args)
    entries = _entries(path)
    if key in entries and QUANTITIES[quantity](entries[key]):
        return entries[key]
    counted = count()
    _store(path, {_key(name, model, args): value for name, value in counted.items()})
    return counted[quantity]


def _key(quantity: str, model: str, args: Dict[str, Any]) -> str:
    """An entry's key: the quantity, the model, its build arguments, its spec's digest and the environment."""
    if quantity not in QUANTITIES:
        raise ValueError(f"model counts: unknown quantity {quantity!r}; allowed: {', '.join(QUANTITIES)}")
    return json.dumps(
        {"quantity": quantity, "model": model, "args": args, "spec": _spec_digest(model), "env": _environment()},
        sort_keys=True,
    )


def _spec_digest(model: str) -> str:
    """A digest of the model's spec: its builder, size and build arguments."""
    fields = json.dumps(dataclasses.asdict(get_spec(model)), sort_keys=True, default=repr)
    return hashlib.sha256(fields.encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def _environment() -> Dict[str, str]:
    """torch's, timm's and hpstudy's versions and a digest of hpstudy/trainers' source (no package imported)."""
    source = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        source.update(path.name.encode() + b"\0" + path.read_bytes())
    versions = {package: _installed(package) for package in ("torch", "timm", "hpstudy")}
    return dict(versions, source=source.hexdigest()[:16])


def _installed(package: str) -> str:
    """The installed version of `package` from its metadata, or "" when it is not installed."""
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


def _entries(path: Path) -> Dict[str, Any]:
    """The file's entries (key -> value); none when it is missing, cannot be read or is not this layout."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested too deep to read
        logger.debug("model counts: ignored the cache %s (%s); it is rewritten after the next count", path, exc)
        return {}
    if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("entries"), dict)):
        logger.debug("model counts: ignored the cache %s (not layout %d); rewritten after the next count", path, FORMAT)
        return {}
    return data["entries"]


def _store(path: Path, new: Dict[str, Any]) -> None:
    """Add the `new` entries to the file (re-read now, so entries another run wrote meanwhile stay) by replacing
    it whole; a cache that cannot be written is a debug log (the next run counts again)."""
    entries = {key: value for key, value in _entries(path).items() if key not in new}
    entries.update(new)  # last: the newest entries are the ones MAX_ENTRIES keeps
    try:
        replace_json(str(path), {"format": FORMAT, "entries": dict(list(entries.items())[-MAX_ENTRIES:])}, indent=0)
    except OSError as exc:
        logger.debug("model counts: could not write the cache %s (%s); the next run counts again", path, exc)
