"""The one-trial config: a plain dict checked into a typed, validated dataclass."""

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from trainers.data import DataSpec
from trainers.models import get_spec
from trainers.optim import OPTIMIZERS


class ConfigError(ValueError):
    """A trial config field has a bad value."""


@dataclass(frozen=True)
class TrialConfig:
    """Everything that determines one training trial (model, data, optimizer, recipe, seed)."""

    model: str
    optimizer: str
    epochs: int
    lr: float
    wd: float
    dataset: DataSpec = field(default_factory=lambda: DataSpec("digits"))
    seed: int = 0
    batch_size: int = 128
    reference_batch_size: Optional[int] = None   # lr is given for this batch; default: batch_size
    warmup_epochs: float = 0.0
    min_lr_ratio: float = 0.0                     # cosine floor as a fraction of the peak lr
    label_smoothing: float = 0.0
    mixup: float = 0.0                            # mixup alpha (0 = off)
    cutmix: float = 0.0                           # CutMix alpha (0 = off)
    auto_augment: Optional[str] = None            # imagefolder only, e.g. "original"
    ema_decay: Optional[float] = None             # EMA of weights (None = off)
    grad_clip: Optional[float] = None             # max grad norm (None = off)
    divergence_loss: float = 100.0                # a loss above this (or non-finite) diverges
    amp: Optional[bool] = None                    # bf16 autocast; None = on for CUDA only
    channels_last: Optional[bool] = None          # None = on for CUDA only
    device: str = "auto"                          # auto | cpu | cuda | cuda:N
    dtype: str = "float32"                        # float32 | float64 (exactness tests)
    num_workers: int = 4                          # DataLoader workers (imagefolder)

    @classmethod
    def from_dict(cls, config: Dict[str, Any]) -> "TrialConfig":
        """Validate a plain dict: unknown keys and bad values raise ConfigError naming the field."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(config) - fields)
        if unknown:
            raise ConfigError(f"trial config: unknown key(s) {unknown}; allowed: {sorted(fields)}")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.name not in config and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if missing:
            raise ConfigError(f"trial config: missing required field(s) {missing}")
        values = dict(config)
        values["dataset"] = DataSpec.from_config(values.get("dataset", "digits"))
        cfg = cls(**values)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        """Raise ConfigError for the first bad field."""
        try:
            get_spec(self.model)
        except KeyError as exc:
            raise ConfigError(f"model: {exc.args[0]}")
        checks = [
            ("optimizer", self.optimizer in OPTIMIZERS, f"one of {OPTIMIZERS}"),
            ("epochs", isinstance(self.epochs, int) and self.epochs >= 1, "an integer >= 1"),
            ("lr", self.lr > 0, "> 0"),
            ("wd", self.wd >= 0, ">= 0"),
            ("batch_size", isinstance(self.batch_size, int) and self.batch_size >= 1, "an integer >= 1"),
            ("warmup_epochs", 0 <= self.warmup_epochs, ">= 0"),
            ("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "in [0, 1]"),
            ("label_smoothing", 0 <= self.label_smoothing < 1, "in [0, 1)"),
            ("mixup", self.mixup >= 0, ">= 0"),
            ("cutmix", self.cutmix >= 0, ">= 0"),
            ("ema_decay", self.ema_decay is None or 0 < self.ema_decay < 1, "null or in (0, 1)"),
            ("dtype", self.dtype in ("float32", "float64"), "float32 or float64"),
            ("divergence_loss", self.divergence_loss > 0, "> 0"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ConfigError(f"{name}: bad value {getattr(self, name)!r}; allowed: {allowed}")
        if (self.mixup or self.cutmix) and self.batch_size % 2:
            raise ConfigError(f"batch_size: {self.batch_size} is odd; mixup/CutMix need an even batch")

    def to_dict(self) -> Dict[str, Any]:
        """A plain, JSON-serialisable dict that `from_dict` turns back into this config."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): equal configs give equal strings."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
