"""The one-trial config: a plain dict checked into a typed, validated dataclass."""

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from trainers.data import DataSpec
from trainers.errors import ConfigError
from trainers.optim import OPTIMIZERS, scaled_lr
from trainers.zoo import get_spec


def _doc(text: str, default: Any = dataclasses.MISSING, **kwargs) -> Any:
    """A dataclass field whose help text is kept in its metadata (the CLI reads it)."""
    return field(default=default, metadata={"doc": text}, **kwargs)


@dataclass(frozen=True)
class TrialConfig:
    """Everything that determines one training trial (model, data, optimizer, recipe, seed)."""

    model: str = _doc("registered model name (trainers.zoo)")
    optimizer: str = _doc("adamw or sgd")
    epochs: int = _doc("training epochs")
    lr: float = _doc("peak learning rate, given for reference_batch_size")
    wd: float = _doc("weight decay (not applied to 1-D parameters)")
    dataset: DataSpec = field(default_factory=lambda: DataSpec("digits"),
                              metadata={"doc": "dataset name and options (trainers.data.DataSpec)"})
    seed: int = _doc("seed of the initial weights and the data order", 0)
    batch_size: int = _doc("training batch size", 128)
    reference_batch_size: Optional[int] = _doc("lr is given for this batch and scaled linearly "
                                               "(none: batch_size, no scaling)", None)
    warmup_epochs: float = _doc("linear warmup from 0, in epochs (per step)", 0.0)
    min_lr_ratio: float = _doc("cosine floor as a fraction of the peak lr", 0.0)
    label_smoothing: float = _doc("label smoothing", 0.0)
    mixup: float = _doc("mixup alpha (0 = off)", 0.0)
    cutmix: float = _doc("CutMix alpha (0 = off)", 0.0)
    auto_augment: Optional[str] = _doc("AutoAugment policy, imagefolder only (e.g. original)", None)
    ema_decay: Optional[float] = _doc("EMA of weights with this decay (none = off)", None)
    grad_clip: Optional[float] = _doc("max gradient norm (none = off)", None)
    divergence_loss: float = _doc("a loss above this (or non-finite) ends the trial as diverged", 100.0)
    amp: Optional[bool] = _doc("bf16 autocast (default: on for CUDA only)", None)
    channels_last: Optional[bool] = _doc("channels_last memory format (default: on for CUDA only)", None)
    device: str = _doc("auto, cpu, cuda or cuda:N", "auto")
    dtype: str = _doc("float32, or float64 for exactness tests", "float32")
    num_workers: int = _doc("DataLoader workers (imagefolder)", 4)

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
        get_spec(self.model)
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

    @property
    def peak_lr(self) -> float:
        """The lr actually used: `lr` scaled linearly from reference_batch_size to batch_size."""
        return scaled_lr(self.lr, self.batch_size, self.reference_batch_size or self.batch_size)

    def to_dict(self) -> Dict[str, Any]:
        """A plain, JSON-serialisable dict that `from_dict` turns back into this config."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): equal configs give equal strings."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def key(self) -> str:
        """The idempotency key: a hash of the canonical config (defaults filled, keys sorted)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:20]

    def row_fields(self) -> Dict[str, Any]:
        """The trial row's `config` columns (trainers.schema), known before training."""
        return {"model": self.model, "family": get_spec(self.model).family,
                "optimizer": self.optimizer, "epochs": self.epochs, "lr": self.lr, "wd": self.wd,
                "seed": self.seed, "dataset": self.dataset.name, "batch_size": self.batch_size,
                "config_json": self.to_json()}
