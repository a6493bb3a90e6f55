"""The one-trial config: a plain dict checked into a typed, validated dataclass.

No torch at import: reading a study spec builds these configs; `TrialConfig.check_model` (and
`model_input_error`) import torch when called."""

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from hpstudy.trainers.data_spec import MAX_SEED, SHA256, DataSpec, finite_in, raise_first_bad, whole_in
from hpstudy.trainers.errors import ConfigError, shown
from hpstudy.trainers.init_file import CHECKPOINT_KINDS
from hpstudy.trainers.zoo import get_spec, installed_timm_version, is_timm

MAX_EPOCHS = 100_000
MAX_BATCH = 1_048_576
DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
AUTO_AUGMENT = re.compile(r"(original|originalr|v0|v0r|3a|rand|augmix)(-[A-Za-z0-9.]+)*")
DEVICE_AUTO_AUGMENT = "original"  # the one policy the device pipelines run (hpstudy.trainers.augment.DeviceAutoAugment)
OPTIMIZERS = ("adamw", "sgd")  # built by hpstudy.trainers.optim.build_optimizer


def device_can_augment(policy: Optional[str]) -> bool:
    """Whether the device pipelines (hpstudy.trainers.prepared, hpstudy.trainers.device_decode) can run the
    AutoAugment `policy` (None: off): AutoAugment's ImageNet policy (timm's `original`) only."""
    return policy is None or policy == DEVICE_AUTO_AUGMENT


def scaled_lr(lr: float, batch_size: int, reference_batch_size: int) -> float:
    """Linear scaling rule: lr is given for the reference batch and scaled to the actual batch."""
    return lr * batch_size / reference_batch_size


@lru_cache(maxsize=None)
def model_input_error(model: str, image_size: int, batch: int) -> Optional[str]:
    """Why a model cannot train on a batch of `batch` images of `image_size` px, or None: one training-mode
    forward pass on the meta device (no memory, a fraction of a second). ConfigError for a name timm does not know."""
    import torch

    from hpstudy.trainers.models import build_model

    empty: List[str] = []

    def no_empty_output(module, inputs, output) -> None:
        # older torch's meta kernels shape a kernel larger than its input as an empty output, not an error
        if isinstance(output, torch.Tensor) and output.numel() == 0 and not empty:
            empty.append(f"{type(module).__name__} gives an empty output {tuple(output.shape)} at {image_size} px")

    try:
        with torch.device("meta"):
            net = build_model(model, num_classes=10, image_size=image_size)
            for module in net.modules():
                module.register_forward_hook(no_empty_output)
            net.train()(torch.zeros(batch, 3, image_size, image_size))
    except (RuntimeError, ValueError, AssertionError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return empty[0] if empty else None


DECODE_MODES = ("auto", "workers", "device")
COMPILE_MODES = ("off", "graph", "inductor")  # built by hpstudy.trainers.trial.Trainer
# Fields added after stores of version 0.1 existed, with their defaults: left out of the canonical
# JSON while at the default, so resuming an old study finds its trials under the same keys.
ADDED_SINCE_0_1 = {
    "accum_steps": 1,
    "grad_checkpointing": False,
    "decode": "auto",
    "init": None,
    "init_sha256": None,
    "freeze": 0,
    "family": None,
    "timm_version": None,
    "compile": "off",
}
DATASET_ADDED_SINCE_0_1 = {"digest": None}  # the same for fields of the nested `dataset`
# fields whose check reads their own value only: no other check, default or key rule (to_json) reads them, so a
# config that differs from a validated one in these alone is valid when they pass (sampling.expand_cell)
OWN_CHECKS: Dict[str, Tuple[Callable[[Any], bool], str]] = {
    "lr": (lambda value: finite_in(value, 0, open_low=True), "> 0 (a finite number)"),
    "wd": (lambda value: finite_in(value, 0), ">= 0 (a finite number)"),
    "seed": (lambda value: whole_in(value, 0, MAX_SEED), "an integer in [0, 2**63)"),
}


def own_checks(values: Dict[str, Any]) -> List[Tuple[str, Any, bool, str]]:
    """The (field, value, allowed?, what is allowed) checks of `values`' OWN_CHECKS fields, in that order."""
    return [
        (name, values[name], ok(values[name]), allowed) for name, (ok, allowed) in OWN_CHECKS.items() if name in values
    ]


def _doc(text: str, default: Any = dataclasses.MISSING, **kwargs) -> Any:
    """A dataclass field whose help text is kept in its metadata (the CLI reads it)."""
    return field(default=default, metadata={"doc": text}, **kwargs)


_FIELD_NAMES: Dict[type, Tuple[str, ...]] = {}
_REQUIRED: Dict[type, Tuple[str, ...]] = {}
_VALID_DATASETS: Set[DataSpec] = set()  # every trial of a study shares one (frozen, hashable) DataSpec


def _field_names(cls: type) -> Tuple[str, ...]:
    """A dataclass's field names, in order (dataclasses.fields, once per class)."""
    if cls not in _FIELD_NAMES:
        _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return _FIELD_NAMES[cls]


def _required(cls: type) -> Tuple[str, ...]:
    """A dataclass's fields without a default, in order."""
    if cls not in _REQUIRED:
        _REQUIRED[cls] = tuple(
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
    return _REQUIRED[cls]


def _validate_dataset(dataset: DataSpec) -> None:
    """DataSpec.validate, once per distinct dataset (expanding a spec validates one per trial)."""
    if dataset not in _VALID_DATASETS:
        dataset.validate()
        _VALID_DATASETS.add(dataset)


@dataclass(frozen=True)
class TrialConfig:
    """Everything that determines one training trial (model, data, optimizer, recipe, seed)."""

    model: str = _doc("registered model name (hpstudy.trainers.zoo), or timm:<a name in timm.list_models()>")
    optimizer: str = _doc("adamw or sgd")
    epochs: int = _doc("training epochs")
    lr: float = _doc("peak learning rate, given for reference_batch_size")
    wd: float = _doc("weight decay (not applied to 1-D parameters)")
    dataset: DataSpec = field(
        default_factory=lambda: DataSpec("digits"),
        metadata={"doc": "dataset name and options (hpstudy.trainers.data_spec.DataSpec)"},
    )
    seed: int = _doc("seed of the initial weights and the data order", 0)
    batch_size: int = _doc("training batch size", 128)
    reference_batch_size: Optional[int] = _doc(
        "lr is given for this batch and scaled linearly (none: batch_size, no scaling)", None
    )
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
    channels_last: Optional[bool] = _doc(
        "channels_last memory format (default: on for CUDA only; fused training runs without it and refuses true)", None
    )
    device: str = _doc("auto, cpu, cuda or cuda:N", "auto")
    dtype: str = _doc("float32, or float64 for exactness tests", "float32")
    num_workers: int = _doc("DataLoader workers (imagefolder)", 4)
    accum_steps: int = _doc(
        "split each batch into this many micro-batches and accumulate their "
        "gradients (same batch, lr and schedule; less memory)",
        1,
    )
    grad_checkpointing: bool = _doc(
        "recompute activations in the backward pass (timm's gradient checkpointing: less memory, ~30% more compute)",
        False,
    )
    decode: str = _doc(
        "where image-folder JPEGs are decoded: workers (CPU, PIL), device (batched "
        "torchvision.io.decode_jpeg) or auto (device on CUDA when it can run auto_augment)",
        "auto",
    )
    init: Optional[str] = _doc(
        "fine-tune from this local checkpoint, a torch state dict (.pt, .pth, .bin) or "
        "safetensors file (none: from scratch); the head is re-initialised when the "
        "class count differs",
        None,
    )
    init_sha256: Optional[str] = _doc(
        "sha256 of the init file, filled in when a study is planned so the trial "
        "key names the checkpoint's bytes; a trial refuses a file that differs",
        None,
    )
    freeze: int = _doc(
        "freeze this many leading parameter groups of timm's coarse grouping of the init model "
        "(1 = the stem, 2 = the stem and the first stage, or block of a ViT; BatchNorm "
        "statistics too; 0 = none)",
        0,
    )
    family: Optional[str] = _doc(
        "the family of a timm: model (a row's family column; none: a family of its own, named as the model); a "
        "registered model's family is the catalogue's",
        None,
    )
    timm_version: Optional[str] = _doc(
        "the timm version a timm: model is built with: the installed one, filled in when the config is made, so "
        "the trial key names it (timm can change a model between versions); a trial refuses another. None for a "
        "registered model",
        None,
    )
    compile: str = _doc(
        "the training step: off (eager), graph (captured as CUDA graphs: torch.compile mode reduce-overhead; CUDA "
        "only) or inductor (torch.compile, fullgraph)",
        "off",
    )

    def __post_init__(self) -> None:
        """Name the installed timm's version in a timm: model's config that does not name one."""
        if is_timm(self.model) and self.timm_version is None:
            object.__setattr__(self, "timm_version", installed_timm_version())  # frozen: set once, as it is made

    @classmethod
    def from_dict(cls, config: Dict[str, Any], check_model: bool = True) -> "TrialConfig":
        """Validate a plain dict: unknown keys and bad values raise ConfigError naming the field (the
        model's own checks, which build it on the meta device, only with `check_model`)."""
        fields = _field_names(cls)
        unknown = sorted(set(config) - set(fields))
        if unknown:
            raise ConfigError(f"trial config: unknown key(s) {unknown}; allowed: {sorted(fields)}")
        missing = [name for name in _required(cls) if name not in config]
        if missing:
            raise ConfigError(f"trial config: missing required field(s) {missing}")
        values = dict(config)
        values["dataset"] = DataSpec.from_config(values.get("dataset", "digits"))
        cfg = cls(**values)
        cfg.validate(check_model=check_model)
        return cfg

    def validate(self, check_model: bool = True) -> None:
        """Raise ConfigError (DataError for `dataset`) naming the first bad field: every field has
        its type, every number is finite and in range, and (`check_model`) the model can train on these
        batches (see `check_model`)."""
        if not isinstance(self.model, str):
            raise ConfigError(f"model: bad value {shown(self.model)}; allowed: a registered model name or timm:<name>")
        get_spec(self.model, family=self.family)
        self._check_timm_version()
        if not isinstance(self.dataset, DataSpec):
            raise ConfigError(f"dataset: bad value {shown(self.dataset)}; allowed: a DataSpec")
        _validate_dataset(self.dataset)
        optional = lambda value, ok: value is None or ok
        raise_first_bad(
            [
                ("optimizer", self.optimizer, self.optimizer in OPTIMIZERS, f"one of {OPTIMIZERS}"),
                ("epochs", self.epochs, whole_in(self.epochs, 1, MAX_EPOCHS), f"an integer in [1, {MAX_EPOCHS}]"),
                *own_checks({name: getattr(self, name) for name in OWN_CHECKS}),
                (
                    "batch_size",
                    self.batch_size,
                    whole_in(self.batch_size, 1, MAX_BATCH),
                    f"an integer in [1, {MAX_BATCH}]",
                ),
                (
                    "reference_batch_size",
                    self.reference_batch_size,
                    optional(self.reference_batch_size, whole_in(self.reference_batch_size, 1, MAX_BATCH)),
                    f"null (no lr scaling) or an integer in [1, {MAX_BATCH}]",
                ),
                ("warmup_epochs", self.warmup_epochs, finite_in(self.warmup_epochs, 0), ">= 0 (a finite number)"),
                ("min_lr_ratio", self.min_lr_ratio, finite_in(self.min_lr_ratio, 0, 1), "in [0, 1]"),
                (
                    "label_smoothing",
                    self.label_smoothing,
                    finite_in(self.label_smoothing, 0, 1, open_high=True),
                    "in [0, 1)",
                ),
                ("mixup", self.mixup, finite_in(self.mixup, 0), ">= 0 (a finite number; 0 = off)"),
                ("cutmix", self.cutmix, finite_in(self.cutmix, 0), ">= 0 (a finite number; 0 = off)"),
                (
                    "auto_augment",
                    self.auto_augment,
                    optional(
                        self.auto_augment,
                        isinstance(self.auto_augment, str) and AUTO_AUGMENT.fullmatch(self.auto_augment) is not None,
                    ),
                    "null (off) or a timm policy: original, originalr, v0, v0r, 3a, rand-..., augmix-...",
                ),
                (
                    "ema_decay",
                    self.ema_decay,
                    optional(self.ema_decay, finite_in(self.ema_decay, 0, 1, True, True)),
                    "null (off) or in (0, 1)",
                ),
                (
                    "grad_clip",
                    self.grad_clip,
                    optional(self.grad_clip, finite_in(self.grad_clip, 0, open_low=True)),
                    "null (off) or a finite max norm > 0",
                ),
                (
                    "divergence_loss",
                    self.divergence_loss,
                    finite_in(self.divergence_loss, 0, open_low=True),
                    "> 0 (a finite number)",
                ),
                ("amp", self.amp, optional(self.amp, isinstance(self.amp, bool)), "null (auto), true or false"),
                (
                    "channels_last",
                    self.channels_last,
                    optional(self.channels_last, isinstance(self.channels_last, bool)),
                    "null (auto), true or false",
                ),
                (
                    "device",
                    self.device,
                    isinstance(self.device, str) and DEVICE.fullmatch(self.device) is not None,
                    "auto, cpu, cuda or cuda:N",
                ),
                ("dtype", self.dtype, self.dtype in ("float32", "float64"), "float32 or float64"),
                (
                    "grad_checkpointing",
                    self.grad_checkpointing,
                    isinstance(self.grad_checkpointing, bool),
                    "true or false",
                ),
                ("num_workers", self.num_workers, whole_in(self.num_workers, 0, 1024), "an integer in [0, 1024]"),
            ],
            ConfigError,
        )
        if self.warmup_epochs >= self.epochs:
            raise ConfigError(
                f"warmup_epochs: bad value {shown(self.warmup_epochs)}; allowed: >= 0 and < epochs "
                f"({self.epochs}): a warmup as long as the training never reaches its peak lr"
            )
        if (self.mixup or self.cutmix) and self.batch_size % 2:
            raise ConfigError(f"batch_size: {self.batch_size} is odd; mixup/CutMix need an even batch")
        if self.decode not in DECODE_MODES:
            raise ConfigError(f"decode: bad value {shown(self.decode)}; allowed: {', '.join(DECODE_MODES)}")
        if not (whole_in(self.accum_steps, 1, self.batch_size) and self.batch_size % self.accum_steps == 0):
            raise ConfigError(
                f"accum_steps: bad value {shown(self.accum_steps)}; allowed: an integer >= 1 that "
                f"divides batch_size ({self.batch_size})"
            )
        self.check_compile(self.device)
        self._check_device_augment()
        self._check_init()
        if check_model:
            self.check_model()

    def _check_timm_version(self) -> None:
        """ConfigError naming `timm_version` unless it is the installed timm's (a timm: model) or None."""
        if is_timm(self.model) and self.timm_version != installed_timm_version():
            raise ConfigError(
                f"timm_version: bad value {shown(self.timm_version)} for model {self.model}; allowed: "
                f"{installed_timm_version()!r}, the installed timm (a timm model can change between versions: install "
                f"timm=={self.timm_version} to run this trial, or plan the study again: its trials get new keys)"
            )
        if not is_timm(self.model) and self.timm_version is not None:
            raise ConfigError(
                f"timm_version: bad value {shown(self.timm_version)} for model {self.model}; allowed: null (only "
                f"a timm: model's key names timm's version)"
            )

    def check_compile(self, device: str) -> None:
        """ConfigError naming `compile` unless it is one of COMPILE_MODES and, for graph, `device` may be CUDA
        (validate passes the config's device; the trainer the one `auto` resolved to)."""
        if self.compile not in COMPILE_MODES:
            raise ConfigError(f"compile: bad value {shown(self.compile)}; allowed: {', '.join(COMPILE_MODES)}")
        if self.compile == "graph" and not (device == "auto" or device.startswith("cuda")):
            raise ConfigError(
                f"compile: bad value 'graph' on device {device}; allowed: off or inductor (graph captures the "
                f"step as CUDA graphs: it needs a CUDA device)"
            )

    def _check_device_augment(self) -> None:
        """ConfigError naming `auto_augment` when the data are augmented on the device (dataset
        `prepared`, or an image folder with `decode: device`) and that pipeline cannot run the policy."""
        if self.dataset.name == "prepared":
            where, instead = "dataset prepared", "an image folder with decode: workers"
        elif self.dataset.name == "imagefolder" and self.decode == "device":
            where, instead = "decode: device", "decode: workers or auto"
        else:
            return
        if not device_can_augment(self.auto_augment):
            raise ConfigError(
                f"auto_augment: bad value {shown(self.auto_augment)} with {where}; allowed: null or "
                f"original (the device pipeline runs AutoAugment's ImageNet policy only; other timm "
                f"policies need {instead})"
            )

    def _check_init(self) -> None:
        """ConfigError naming `init`, `init_sha256` or `freeze` when one is malformed or out of range for
        the model (the head's group is never frozen; freezing needs a checkpoint to keep)."""
        if not (self.init is None or (isinstance(self.init, str) and self.init)):
            raise ConfigError(
                f"init: bad value {shown(self.init)}; allowed: null (from scratch) or the path of {CHECKPOINT_KINDS}"
            )
        if not (
            self.init_sha256 is None
            or (self.init is not None and isinstance(self.init_sha256, str) and SHA256.fullmatch(self.init_sha256))
        ):
            raise ConfigError(
                f"init_sha256: bad value {shown(self.init_sha256)}; allowed: null, or 64 lower-case hex "
                f"digits with init"
            )
        if not (whole_in(self.freeze, 0, 0) or (self.init and whole_in(self.freeze, 1, math.inf))):
            self._refuse_freeze("an integer >= 0" if self.init else "0 without init (nothing to keep)")

    def _refuse_freeze(self, allowed: str) -> None:
        raise ConfigError(
            f"freeze: bad value {shown(self.freeze)} for model {self.model}; allowed: {allowed} "
            f"(leading parameter groups: 1 = the stem; the head's group is never frozen)"
        )

    def check_model(self) -> None:
        """ConfigError if the model cannot train as configured: timm does not know its timm: name, it cannot
        take the dataset's image size, cannot train on the smallest micro-batch it will see (BatchNorm needs
        more than one value per channel), or has fewer parameter groups than `freeze` leaves trainable. Builds
        the model on the meta device (no memory, a fraction of a second; imports torch)."""
        from hpstudy.trainers.checkpoint import count_parameter_groups

        if self.freeze:
            groups = count_parameter_groups(self.model)
            if self.freeze > groups - 1:
                self._refuse_freeze(f"an integer in [0, {groups - 1}]")
        size = self.dataset.size
        reason = model_input_error(self.model, size, 2)
        if reason:
            raise ConfigError(
                f"dataset.image_size: bad value {size} for model {self.model}; "
                f"allowed: a size the model can take ({reason})"
            )
        batch = min(self.batch_size, self.dataset.n_train) if self.dataset.name == "synthetic" else self.batch_size
        chunk = -(-batch // self.accum_steps)  # hpstudy.trainers.trial splits a batch with Tensor.chunk
        if (batch % chunk or chunk) == 1 and model_input_error(self.model, size, 1):
            field_name, value, allowed = (
                ("batch_size", 1, ">= 2")
                if self.batch_size == 1
                else ("dataset.n_train", 1, ">= 2")
                if batch == 1
                else ("accum_steps", self.accum_steps, "fewer micro-batches")
            )
            raise ConfigError(
                f"{field_name}: bad value {value} for model {self.model}; allowed: {allowed} "
                f"(its BatchNorm layers cannot train on micro-batches of one image at {size} px)"
            )

    @property
    def peak_lr(self) -> float:
        """The lr actually used: `lr` scaled linearly from reference_batch_size to batch_size."""
        return scaled_lr(self.lr, self.batch_size, self.reference_batch_size or self.batch_size)

    def to_dict(self) -> Dict[str, Any]:
        """A plain, JSON-serialisable dict that `from_dict` turns back into this config: `dataclasses.asdict`,
        field by field (every field is a scalar but `dataset`; asdict's recursive deep copy cost ~0.7 ms a
        config, most of expanding a 100,000-trial spec)."""
        values = {name: getattr(self, name) for name in _field_names(type(self))}
        values["dataset"] = {name: getattr(self.dataset, name) for name in _field_names(type(self.dataset))}
        return values

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, fields added since 0.1 left out at their default, `family` too when it
        is the model's own): equal configs give equal strings, and a config of 0.1 keeps its string (and trial key)."""
        at_default = lambda added, k, v: k in added and v == added[k]
        values = {k: v for k, v in self.to_dict().items() if not at_default(ADDED_SINCE_0_1, k, v)}
        if "family" in values and values["family"] == get_spec(self.model).family:
            del values["family"]  # the model's own family, as if none were given: one key for one trial
        values["dataset"] = {
            k: v for k, v in values["dataset"].items() if not at_default(DATASET_ADDED_SINCE_0_1, k, v)
        }
        return json.dumps(values, sort_keys=True, separators=(",", ":"))

    @property
    def key(self) -> str:
        """The idempotency key: a hash of the canonical config (defaults filled, keys sorted)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:20]

    def row_fields(self) -> Dict[str, Any]:
        """The trial row's `config` columns (hpstudy.trainers.schema), known before training."""
        return {
            "model": self.model,
            "family": get_spec(self.model, family=self.family).family,
            "optimizer": self.optimizer,
            "epochs": self.epochs,
            "lr": self.lr,
            "wd": self.wd,
            "seed": self.seed,
            "dataset": self.dataset.name,
            "batch_size": self.batch_size,
            "init_sha256": self.init_sha256,
            "config_json": self.to_json(),
        }
