"""Study specs: YAML loaded into typed objects and validated before anything runs."""

import dataclasses
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Mapping, NoReturn, Optional, Sequence, Tuple

import yaml

from hpstudy.study.store.layout import STUDY_NAME, STUDY_NAME_RULE
from hpstudy.trainers.config import MAX_EPOCHS, OPTIMIZERS, TrialConfig
from hpstudy.trainers.data_spec import DATASETS, MAX_SEED, DataSpec, finite_in, pin_data, whole_in
from hpstudy.trainers.errors import MAX_SHOWN, ConfigError, DataError, HpstudyError, shown
from hpstudy.trainers.init_file import pin_init
from hpstudy.trainers.model_counts import check_timm_name, trial_config
from hpstudy.trainers.zoo import FAMILIES, TIMM_MODELS, ModelSpec, did_you_mean, get_spec, is_timm, list_models

SAMPLERS = ("random", "sobol", "grid")
MAX_TRIALS = 100_000  # per study: expansion, the plan and the store stay quick below this
MAX_RETRIES = 100
FUSE_MODES = ("off", "auto")
# Recipe keys are the TrialConfig fields that are not set per trial by the study.
# family: a timm: model's as the spec's models: gives it; timm_version: the installed timm's (TrialConfig fills it in)
PER_TRIAL_FIELDS = ("model", "optimizer", "epochs", "lr", "wd", "seed", "dataset", "family", "timm_version")
RECIPE_FIELDS = tuple(f.name for f in dataclasses.fields(TrialConfig) if f.name not in PER_TRIAL_FIELDS)


class SpecError(HpstudyError):
    """A study spec field has a bad value; the message names the field, the value and what is allowed."""


DISTRIBUTIONS = ("log_uniform", "uniform", "int", "choice")
# recipe fields no box samples, and why
NOT_SAMPLED = {
    "init": "a checkpoint is pinned by its bytes when the spec is read",
    "init_sha256": "a checkpoint is pinned by its bytes when the spec is read",
    "device": "a trial row's device column names where it trained",
}


def _value_type(annotation: Any) -> Any:
    """A TrialConfig field's type without Optional: int, float, str or bool."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation


# recipe field -> the distributions a box may sample it from: numbers any, integers int or choice, the rest choice
SAMPLED_KINDS = {
    f.name: {float: DISTRIBUTIONS, int: ("int", "choice")}.get(_value_type(f.type), ("choice",))
    for f in dataclasses.fields(TrialConfig)
    if f.name in RECIPE_FIELDS and f.name not in NOT_SAMPLED
}


@dataclass(frozen=True)
class Distribution:
    """How a box samples a recipe field: log_uniform, uniform or int on the closed [low, high] (`values`),
    or choice among `values` (a single value fixes the field)."""

    kind: str
    values: Tuple[Any, ...]

    @property
    def varies(self) -> bool:
        """Whether the field takes more than one value."""
        return len(set(map(repr, self.values))) > 1

    def raw(self) -> Dict[str, List[Any]]:
        """The distribution as a spec writes it: {kind: values}."""
        return {self.kind: list(self.values)}


@dataclass(frozen=True)
class Box:
    """A closed log-uniform box for lr and wd, and the recipe fields the box samples (name, Distribution),
    sorted by name."""

    lr: Tuple[float, float]
    wd: Tuple[float, float]
    recipe: Tuple[Tuple[str, Distribution], ...] = ()

    def axes(self) -> Tuple[Tuple[str, Distribution], ...]:
        """The coordinates of a sample, in order: lr and wd (even when fixed), then each recipe field that varies."""
        lr_wd = (("lr", Distribution("log_uniform", self.lr)), ("wd", Distribution("log_uniform", self.wd)))
        return lr_wd + tuple((name, dist) for name, dist in self.recipe if dist.varies)

    def fixed(self) -> Dict[str, Any]:
        """The recipe fields the box fixes (a single value), with their values."""
        return {name: dist.values[0] for name, dist in self.recipe if not dist.varies}


@dataclass(frozen=True)
class Resources:
    """Per-trial Ray resources (fractions allowed)."""

    cpu: float = 1.0
    gpu: float = 0.0


@dataclass(frozen=True)
class StudySpec:
    """A validated study: the cells models x optimizers x epochs, sampled boxes and resources."""

    name: str
    dataset: DataSpec
    models: Tuple[str, ...]
    optimizers: Tuple[str, ...]
    epochs: Tuple[int, ...]
    samples: int
    space: Mapping[str, Box]  # optimizer -> box
    family_space: Mapping[str, Mapping[str, Box]] = field(default_factory=dict)  # family -> opt -> box
    model_space: Mapping[str, Mapping[str, Box]] = field(default_factory=dict)  # model -> opt -> box
    recipe: Mapping[str, Any] = field(default_factory=dict)
    sampler: str = "random"
    paired: bool = True
    sampler_seed: int = 0
    seeds: Tuple[int, ...] = (0,)
    resources: Resources = Resources()
    max_retries: int = 2
    fuse: Any = "auto"
    source: Optional[Dict[str, Any]] = None  # the raw spec, kept for reports
    model_specs: Mapping[str, ModelSpec] = field(default_factory=dict)  # model -> ModelSpec, the spec's family/size

    def box(self, model: str, optimizer: str) -> Box:
        """The box that applies to a model and optimizer: lr and wd of the model's own, else its family's,
        else the optimizer's; each sampled recipe field likewise from the first of them that names it."""
        family = (self.model_specs.get(model) or get_spec(model)).family  # a timm: model's as the spec gives it
        boxes = [
            self.space.get(optimizer),
            self.family_space.get(family, {}).get(optimizer),
            self.model_space.get(model, {}).get(optimizer),
        ]
        named = [box for box in boxes if box is not None]
        recipe = dict(pair for box in named for pair in box.recipe)  # the most specific box's last
        return dataclasses.replace(named[-1], recipe=tuple(sorted(recipe.items())))


_KEYS = {f.name for f in dataclasses.fields(StudySpec)} - {"family_space", "model_space", "source", "model_specs"}


# How a message names a value's type ("an integer", not "a int").
TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "a mapping",
    type(None): "nothing (null)",
}


def _a(kind: type) -> str:
    """A type as a message names it: 'an integer', 'a list'."""
    return TYPE_NAMES.get(kind, f"a {kind.__name__}")


def _reject(field_name: str, value: Any, allowed: str, names: Sequence[str] = (), typed: Any = None) -> NoReturn:
    """Raise SpecError naming the field, the bad value (abbreviated) and what is allowed, ending in
    "did you mean ..." when the value (or `typed`, the part of it that was typed wrong) is a near miss
    of one of `names`, the valid keys or names (hpstudy.trainers.zoo.did_you_mean)."""
    hint = did_you_mean(value if typed is None else typed, names)
    raise SpecError(f"{field_name}: bad value {shown(value)}; allowed: {allowed}{hint}")


def _nonempty_list(raw: Mapping, key: str, allowed_values=None, kind=str) -> Tuple:
    """`key`: a non-empty list of `kind` (from `allowed_values` if given) without repeats, as a tuple."""
    value = raw.get(key)
    if not isinstance(value, list) or not value:
        _reject(
            key, value, "a non-empty list" + (f" of {', '.join(map(str, allowed_values))}" if allowed_values else "")
        )
    for index, item in enumerate(value):
        if not isinstance(item, kind) or isinstance(item, bool):
            _reject(f"{key}[{index}]", item, _a(kind))
        if allowed_values is not None and item not in allowed_values:
            _reject(key, item, ", ".join(map(str, allowed_values)), allowed_values)
    if len(set(value)) != len(value):
        _reject(key, value, "a list without repeats")
    return tuple(value)


RANGE_RULES = {
    "log_uniform": "[low, high] with 0 < low <= high",
    "uniform": "[low, high] with low <= high",
    "int": "[low, high], integers with low <= high",
}


def _range(where: str, value: Any, kind: str = "log_uniform") -> Tuple[Any, Any]:
    """The closed [low, high] of a log_uniform, uniform or int distribution (a single number fixes it)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value, value]
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        _reject(where, value, f"{RANGE_RULES[kind]} (a single number fixes the value)")
    if not all(finite_in(v) for v in value):
        _reject(where, value, "finite numbers (no .nan or .inf)")
    if kind == "int" and not all(isinstance(v, int) for v in value):
        _reject(where, value, "integers (the distribution is int)")
    low, high = value if kind == "int" else (float(value[0]), float(value[1]))
    if kind == "log_uniform" and low <= 0:
        _reject(where, value, "low > 0 (the box is log-uniform)")
    if low > high:
        _reject(where, value, "low <= high")
    return low, high


def _log_uniform(where: str, value: Any) -> Tuple[float, float]:
    """lr's or wd's box: [low, high], {log_uniform: [low, high]} or a single number."""
    if isinstance(value, dict):
        if set(value) != {"log_uniform"}:
            _reject(
                where, value, "[low, high], {log_uniform: [low, high]} or a single number (lr and wd are log-uniform)"
            )
        value = value["log_uniform"]
    return _range(where, value)


DISTRIBUTION_FORMS = {
    "log_uniform": "{log_uniform: [low, high]}",
    "uniform": "{uniform: [low, high]}",
    "int": "{int: [low, high]}",
    "choice": "{choice: [values]} or a single value (fixes it)",
}


def _distribution(where: str, name: str, value: Any) -> Distribution:
    """How a box samples the recipe field `name`: {kind: argument}, or a single value that fixes it."""
    allowed = SAMPLED_KINDS[name]
    forms = ", ".join(DISTRIBUTION_FORMS[kind] for kind in allowed)
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in DISTRIBUTIONS:
            _reject(where, value, forms, allowed, typed=next(iter(value)) if len(value) == 1 else None)
        ((kind, arg),) = value.items()
    elif isinstance(value, list):
        _reject(where, value, f"{forms} (a bare [low, high] is lr's and wd's form)")
    else:
        kind, arg = "choice", [value]
    if kind not in allowed:
        field_type = _a(_value_type(next(f.type for f in dataclasses.fields(TrialConfig) if f.name == name)))
        _reject(where, value, f"{forms} (the field takes {field_type})")
    if kind != "choice":
        return Distribution(kind, _range(where, arg, kind))
    if not isinstance(arg, list) or not arg or any(isinstance(v, (list, dict)) for v in arg):
        _reject(where, value, "{choice: [values]}: a non-empty list of numbers, strings, true/false or null")
    if len(set(map(repr, arg))) != len(arg):
        _reject(where, value, "a choice without repeats")
    return Distribution(kind, tuple(arg))


BOX_KEYS = ("lr", "wd", *SAMPLED_KINDS)  # the keys of a box of `space:`


def _box(where: str, value: Any) -> Box:
    """A box of `space:`: lr and wd, and the distributions of the recipe fields it samples."""
    if not isinstance(value, dict) or not {"lr", "wd"} <= set(value):
        missing = [key for key in ("lr", "wd") if key not in value] if isinstance(value, dict) else []
        typo = next((key for key in value if key not in BOX_KEYS), None) if missing else None
        allowed = "a mapping with exactly the keys lr and wd, and any recipe fields the box samples"
        _reject(where, value, allowed, missing, typo)
    recipe = {}
    for name in sorted(set(value) - {"lr", "wd"}, key=str):
        if name not in SAMPLED_KINDS:
            why = f" ({name} is not sampled: {NOT_SAMPLED[name]})" if name in NOT_SAMPLED else ""
            _reject(where, name, f"lr, wd and the recipe fields {', '.join(SAMPLED_KINDS)}{why}", BOX_KEYS)
        recipe[name] = _distribution(f"{where}.{name}", name, value[name])
    return Box(
        lr=_log_uniform(f"{where}.lr", value["lr"]),
        wd=_log_uniform(f"{where}.wd", value["wd"]),
        recipe=tuple(recipe.items()),
    )


def _named_boxes(
    space: Mapping[str, Box],
    family_space: Mapping[str, Mapping[str, Box]],
    model_space: Mapping[str, Mapping[str, Box]],
) -> List[Tuple[str, str, Optional[str], Box]]:
    """(where, optimizer, family or model or None, box) of every box of a spec's `space:`."""
    named: List[Tuple[str, str, Optional[str], Box]] = [(f"space.{opt}", opt, None, box) for opt, box in space.items()]
    for overrides in (family_space, model_space):
        for key, boxes in overrides.items():
            named += [(f"space.{key}.{opt}", opt, key, box) for opt, box in boxes.items()]
    return named


def _space(
    raw: Any, optimizers: Tuple[str, ...], model_specs: Optional[Mapping[str, ModelSpec]] = None
) -> Tuple[Dict[str, Box], Dict[str, Dict[str, Box]], Dict[str, Dict[str, Box]]]:
    """optimizer -> box, and per-family and per-model overrides (family or model -> optimizer -> box; the
    spec's timm: models and the families its models: gives them key overrides too).
    A name that is both a family and a model (vit_rel) keys the family, as before model keys existed.
    A recipe field has one distribution in every box that varies it (the analysis puts it on one axis)."""
    if not isinstance(raw, dict):
        _reject("space", raw, "a mapping of optimizer -> {lr, wd} (and family or model -> optimizer -> box)")
    families, models = _override_keys(model_specs or {})
    space: Dict[str, Box] = {}
    family_space: Dict[str, Dict[str, Box]] = {}
    model_space: Dict[str, Dict[str, Box]] = {}
    for key, value in raw.items():
        if key in OPTIMIZERS:
            space[key] = _box(f"space.{key}", value)
        elif key in families or key in models:
            overrides = family_space if key in families else model_space
            overrides[key] = _override(key, value)
        else:
            _reject(
                "space",
                key,
                f"optimizer names ({', '.join(OPTIMIZERS)}), family names "
                f"({', '.join(families)}) or model names ({', '.join(models)})",
                [*OPTIMIZERS, *families, *models],
            )
    _check_every_optimizer_boxed(raw, space, optimizers)
    _check_one_kind_per_field(space, family_space, model_space)
    return space, family_space, model_space


def _override_keys(model_specs: Mapping[str, ModelSpec]) -> Tuple[List[str], List[str]]:
    """The families and the models that may key an override in `space:`."""
    families = [*FAMILIES, *sorted({s.family for s in model_specs.values()} - set(FAMILIES))]
    models = [*list_models(), *(m for m in model_specs if is_timm(m))]
    return families, models


def _override(key: str, value: Any) -> Dict[str, Box]:
    """A family's or model's override in `space:`, optimizer -> box."""
    if not isinstance(value, dict):
        _reject(f"space.{key}", value, "a mapping of optimizer -> {lr, wd}")
    for opt in value:  # every optimizer name is checked before any box
        if opt not in OPTIMIZERS:
            _reject(f"space.{key}", opt, ", ".join(OPTIMIZERS), OPTIMIZERS)
    return {opt: _box(f"space.{key}.{opt}", box) for opt, box in value.items()}


def _check_every_optimizer_boxed(raw: Mapping, space: Mapping[str, Box], optimizers: Tuple[str, ...]) -> None:
    """SpecError naming the first listed optimizer that `space:` gives no box."""
    for opt in optimizers:
        if opt not in space:
            _reject("space", sorted(raw), f"a box for every listed optimizer; missing {opt!r}")


def _check_one_kind_per_field(
    space: Mapping[str, Box],
    family_space: Mapping[str, Mapping[str, Box]],
    model_space: Mapping[str, Mapping[str, Box]],
) -> None:
    """SpecError naming the first box that varies a recipe field with another distribution than an earlier box."""
    kinds: Dict[str, Tuple[str, str]] = {}
    for where, _, _, box in _named_boxes(space, family_space, model_space):
        for name, dist in box.recipe:
            if not dist.varies:
                continue
            first_kind, first_where = kinds.setdefault(name, (dist.kind, where))
            if first_kind != dist.kind:
                _reject(f"{where}.{name}", dist.raw(), f"a {first_kind} distribution, as in {first_where}.{name}")


def sampled_fields(raw_space: Any, raw_models: Any = None) -> Dict[str, str]:
    """The fields a spec's `space:` samples with their distributions: lr and wd (log_uniform), then each
    recipe field that some box varies, by name (`raw_models`: the spec's `models:`, for timm: keys)."""
    varied = {
        name: dist.kind
        for _, _, _, box in _named_boxes(*_space(raw_space, (), _models(raw_models) if raw_models else None))
        for name, dist in box.recipe
        if dist.varies
    }
    return {"lr": "log_uniform", "wd": "log_uniform", **dict(sorted(varied.items()))}


def _recipe(raw: Any, check_paths: bool) -> Dict[str, Any]:
    """The spec's `recipe:`, TrialConfig fields fixed for every trial, with an init checkpoint pinned."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        _reject("recipe", raw, f"a mapping with keys from {', '.join(RECIPE_FIELDS)}")
    for key in raw:
        if key not in RECIPE_FIELDS:
            _reject("recipe", key, ", ".join(RECIPE_FIELDS), RECIPE_FIELDS)
    try:
        return pin_init(raw, must_exist=check_paths)  # trial keys name an init checkpoint's bytes
    except ConfigError as exc:
        raise SpecError(f"recipe.{exc}")


def _resources(raw: Any) -> Resources:
    """The spec's `resources:`, cpu and gpu per trial."""
    raw = raw or {}
    if not isinstance(raw, dict) or set(raw) - {"cpu", "gpu"}:
        typo = min(set(raw) - {"cpu", "gpu"}, key=str) if isinstance(raw, dict) else None
        _reject("resources", raw, "a mapping with keys cpu and gpu", ("cpu", "gpu"), typo)
    res = Resources(**raw)
    for name in ("cpu", "gpu"):
        value = getattr(res, name)
        if not finite_in(value, 0):
            _reject(f"resources.{name}", value, "a finite number >= 0 (fractions allowed)")
    if res.cpu == 0 and res.gpu == 0:
        _reject("resources", raw, "at least some cpu or gpu per trial")
    if res.gpu > 1 and res.gpu != int(res.gpu):
        _reject("resources.gpu", res.gpu, "a fraction <= 1 or a whole number")
    return res


MODEL_KEYS = ("name", "family", "size")  # of a mapping in `models:`


def _models(value: Any) -> Dict[str, ModelSpec]:
    """The spec's `models:` (each a registered name, timm:<name>, or {name, family, size} for a timm: model) as
    model -> ModelSpec, in order; SpecError naming `models[i]` (whether timm knows a name: check_models)."""
    catalogue = list_models()
    allowed = f"{', '.join(catalogue)}, or {TIMM_MODELS}"
    if not isinstance(value, list) or not value:
        _reject("models", value, f"a non-empty list of {allowed}")
    specs: Dict[str, ModelSpec] = {}
    for index, entry in enumerate(value):
        where, options = f"models[{index}]", {}
        if isinstance(entry, dict):
            if "name" not in entry or not set(entry) <= {"name", "family", "size"}:
                typo = min(set(entry) - {"name", "family", "size"}, key=str, default=None)
                _reject(where, entry, "a mapping with the key name and optionally family and size", MODEL_KEYS, typo)
            where, options = f"{where}.name", {k: v for k, v in entry.items() if k != "name"}
            entry = entry["name"]
        if not isinstance(entry, str):
            _reject(where, entry, "a string (a model name) or a mapping {name, family, size}")
        if not is_timm(entry) and entry not in catalogue:
            _reject("models", entry, allowed, catalogue)
        try:
            spec = get_spec(entry, **options)
        except ConfigError as exc:
            about, _, rest = str(exc).partition(": ")
            raise SpecError(f"models[{index}]{'' if about == 'model' else '.' + about}: {rest}")
        if entry in specs:
            _reject("models", value, "a list without repeats")
        specs[entry] = spec
    return specs


def parse_spec(raw: Any, check_paths: bool = True) -> StudySpec:
    """Validate a raw spec mapping (as loaded from YAML) into a StudySpec."""
    # The fields are checked in this order so that the first bad one is the one an error names.
    _check_keys(raw)
    name = _name(raw.get("name"))
    dataset = _dataset(raw)
    model_specs = _models(raw.get("models"))
    optimizers = _nonempty_list(raw, "optimizers", OPTIMIZERS)
    epochs = _integers(raw, "epochs", 1, MAX_EPOCHS, f"integers in [1, {MAX_EPOCHS}]")
    seeds = _integers(raw, "seeds", 0, MAX_SEED, "integers in [0, 2**63)") if "seeds" in raw else (0,)
    samples = _samples(raw.get("samples"))
    _check_trial_count(len(model_specs), len(optimizers), len(epochs), samples, len(seeds))
    sampler = _sampler(raw.get("sampler", "random"))
    paired = _paired(raw.get("paired", True))
    max_retries = _max_retries(raw.get("max_retries", 2))
    sampler_seed = _sampler_seed(raw.get("sampler_seed", 0))
    fuse = _fuse(raw.get("fuse", "auto"))
    space, family_space, model_space = _space(raw.get("space"), optimizers, model_specs)
    recipe = _recipe(raw.get("recipe"), check_paths)
    resources = _resources(raw.get("resources"))
    spec = StudySpec(
        name=name,
        dataset=dataset,
        models=tuple(model_specs),
        optimizers=optimizers,
        epochs=epochs,
        samples=samples,
        space=space,
        family_space=family_space,
        model_space=model_space,
        recipe=recipe,
        sampler=sampler,
        paired=paired,
        sampler_seed=sampler_seed,
        seeds=seeds,
        resources=resources,
        max_retries=max_retries,
        fuse=fuse,
        source=raw,
        model_specs=model_specs,
    )
    _check_recipe_values(spec)
    _check_space_values(spec)
    return _pin_dataset(spec, check_paths)


def _check_keys(raw: Any) -> None:
    """SpecError unless the spec is a mapping of known keys (the first unknown one named)."""
    if not isinstance(raw, dict):
        raise SpecError(f"spec: the file holds {_a(type(raw))}; allowed: a YAML mapping of the spec's keys")
    unknown = sorted(set(raw) - _KEYS, key=str)
    if unknown:
        _reject("spec", unknown[0], f"the keys {', '.join(sorted(_KEYS))} (unknown keys are errors)", sorted(_KEYS))


def _name(value: Any) -> str:
    """The study's `name:`, a string that STUDY_NAME matches."""
    if not isinstance(value, str) or not STUDY_NAME.fullmatch(value):
        # YAML reads some unquoted names as other types; say how to keep them strings
        unquoted = not (isinstance(value, str) or value is None)
        quote = " (quote it: YAML reads an unquoted 2001-12-14 as a date, 1e3 as a number)" if unquoted else ""
        _reject("name", value, STUDY_NAME_RULE + quote)
    return value


def _dataset(raw: Mapping) -> DataSpec:
    """The spec's `dataset:` (digits when absent) as a DataSpec, not yet pinned."""
    try:
        return DataSpec.from_config(raw.get("dataset", "digits"))
    except DataError as exc:
        raise SpecError(f"{exc}{_dataset_hint(raw.get('dataset'))}")


def _integers(raw: Mapping, key: str, low: int, high: int, allowed: str) -> Tuple[int, ...]:
    """`key`: a non-empty list of integers in [low, high] without repeats."""
    values = _nonempty_list(raw, key, kind=int)
    for value in values:
        if not whole_in(value, low, high):
            _reject(key, value, allowed)
    return values


def _samples(value: Any) -> int:
    """`samples:`, the samples per cell, an integer in [1, MAX_TRIALS]."""
    if not isinstance(value, int) or not whole_in(value, 1, MAX_TRIALS):  # isinstance narrows the type
        _reject("samples", value, f"an integer in [1, {MAX_TRIALS}]")
    return value


def _check_trial_count(models: int, optimizers: int, epochs: int, samples: int, seeds: int) -> None:
    """SpecError naming `samples` when the study would have more than MAX_TRIALS trials."""
    n_trials = models * optimizers * epochs * samples * seeds
    if n_trials > MAX_TRIALS:
        _reject(
            "samples",
            samples,
            f"at most {MAX_TRIALS} trials per study; this spec has {models} "
            f"models x {optimizers} optimizers x {epochs} epochs x "
            f"{samples} samples x {seeds} seeds = {n_trials} (split it into studies)",
        )


def _sampler(value: Any) -> str:
    """`sampler:`, one of SAMPLERS."""
    if value not in SAMPLERS:
        _reject("sampler", value, ", ".join(SAMPLERS), SAMPLERS)
    return value


def _paired(value: Any) -> bool:
    """`paired:`, true or false."""
    if not isinstance(value, bool):
        _reject("paired", value, "true or false")
    return value


def _max_retries(value: Any) -> int:
    """`max_retries:`, an integer in [0, MAX_RETRIES]."""
    if not whole_in(value, 0, MAX_RETRIES):
        _reject("max_retries", value, f"an integer in [0, {MAX_RETRIES}]")
    return value


def _sampler_seed(value: Any) -> int:
    """`sampler_seed:`, an integer in [0, 2**63)."""
    if not whole_in(value, 0, MAX_SEED):
        _reject("sampler_seed", value, "an integer in [0, 2**63)")
    return value


def _fuse(value: Any) -> Any:
    """`fuse:`, off, auto or an integer K >= 1."""
    if value is False:  # YAML 1.1 reads an unquoted `off` (or `no`, `false`) as false
        value = "off"
    if value is True:
        _reject("fuse", value, "off, auto or an integer K >= 1 (YAML reads on/yes/true as true: write auto or K)")
    if not (value in FUSE_MODES or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)):
        _reject("fuse", value, "off, auto or an integer K >= 1", FUSE_MODES)
    return value


def _pin_dataset(spec: StudySpec, check_paths: bool) -> StudySpec:
    """The spec with its dataset's path checked and a prepared folder's digest pinned."""
    try:  # so that trial keys name a prepared folder's arrays
        return dataclasses.replace(spec, dataset=pin_data(spec.dataset, must_exist=check_paths))
    except DataError as exc:
        raise SpecError(str(exc))


def _dataset_hint(raw: Any) -> str:
    """ "did you mean ..." for a `dataset:` error (hpstudy.trainers.data_spec words it): an unknown key's near
    miss of a DataSpec field, else an unknown name's of a dataset."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict):
        return ""
    fields = sorted(DataSpec.__dataclass_fields__)
    unknown = sorted((str(key) for key in raw if key not in fields), key=str)
    if unknown:
        return did_you_mean(unknown[0], fields)
    return did_you_mean(raw.get("name"), DATASETS)


def _check_recipe_values(spec: StudySpec, check_model: bool = False) -> None:
    """Build one TrialConfig per model so bad recipe values fail now, not in a worker; an error
    about a recipe field is named `recipe.<field>`. With `check_model`, each model's own checks run too
    (TrialConfig.check_model, read back from the model counts' cache when made before): see check_models."""
    for model in spec.models:
        box = spec.box(model, spec.optimizers[0])
        try:
            trial_config(
                dict(
                    spec.recipe,
                    model=model,
                    optimizer=spec.optimizers[0],
                    epochs=min(spec.epochs),
                    lr=box.lr[0],
                    wd=box.wd[0],
                    dataset=spec.dataset,
                ),
                check_model=check_model,
            )
        except ConfigError as exc:
            field_name = str(exc).split(":")[0]
            raise SpecError(f"recipe.{exc}" if field_name in spec.recipe else str(exc))


def _check_space_values(spec: StudySpec) -> None:
    """SpecError naming `space.<...>.<field>` for a recipe field a box samples that the recipe fixes too, or
    a box end or choice that TrialConfig refuses (with the box's other fields at their first values, on the
    shortest schedule); and, with sampler: grid, unless `samples` is k^d for each cell's d axes."""
    for where, optimizer, owner, box in _named_boxes(spec.space, spec.family_space, spec.model_space):
        model = owner if owner in spec.model_space else spec.models[0]  # the checks without check_model need a model
        base = dict(
            spec.recipe,
            **{name: dist.values[0] for name, dist in box.recipe},
            model=model,
            optimizer=optimizer,
            epochs=min(spec.epochs),
            lr=box.lr[0],
            wd=box.wd[0],
            dataset=spec.dataset,
        )
        for name, dist in box.recipe:
            if name in spec.recipe:
                _reject(
                    f"{where}.{name}",
                    dist.raw(),
                    f"a field fixed in recipe: (recipe.{name} is {shown(spec.recipe[name])}) or sampled in space:, "
                    f"not both",
                )
            for value in dist.values:
                try:
                    TrialConfig.from_dict(dict(base, **{name: value}), check_model=False)
                except ConfigError as exc:
                    about = str(exc).split(":")[0]  # a field of the box (this one or another at its first value)?
                    in_box = about in dict(box.recipe)
                    raise SpecError(f"{where}.{exc}" if in_box else f"{where}.{name}: {shown(value)}: {exc}")
    if spec.sampler == "grid":
        for model in spec.models:
            for optimizer in spec.optimizers:
                axes = [name for name, _ in spec.box(model, optimizer).axes()]
                d, n = len(axes), spec.samples
                if round(n ** (1 / d)) ** d != n:
                    _reject(
                        "samples",
                        n,
                        "a perfect square with sampler: grid (k x k log grid)"
                        if d == 2
                        else f"k^{d} for an integer k with sampler: grid (a grid over {', '.join(axes)} for "
                        f"{model}, {optimizer})",
                    )


def check_models(spec: StudySpec) -> None:
    """SpecError when a model of the spec cannot train as its recipe and dataset ask (image size, batches of
    one image under BatchNorm, `freeze` beyond its parameter groups): run before any trial, after the
    spec was read, or timm does not know a timm: model's name. Reading the spec imports no torch; this builds
    the models (torch, timm) unless each outcome is in the model counts' cache (hpstudy.trainers.model_counts)."""
    for index, model in enumerate(spec.models):
        try:
            check_timm_name(model)
        except ConfigError as exc:
            raise SpecError(f"models[{index}]{str(exc).removeprefix('model')}")
    _check_recipe_values(spec, check_model=True)


MAX_SPEC_BYTES = 1 << 20  # a study spec is a few hundred bytes; a larger file is not one


def load_spec(path: str, check_paths: bool = True) -> StudySpec:
    """Read and validate a YAML spec file: SpecError naming the file for one that cannot be read, is
    not UTF-8, is not YAML or nests too deeply."""
    if not os.path.isfile(path):
        raise SpecError(
            f"--config: {path!r} is not a file; allowed: a YAML study spec (bundled: {', '.join(bundled_configs())})"
        )
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"--config: cannot read {path!r} ({exc.strerror or type(exc).__name__})")
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES} bytes; allowed: a YAML study spec")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{path}: not UTF-8 text (byte {exc.start} is {data[exc.start : exc.start + 1]!r}); "
            f"allowed: a YAML study spec in UTF-8"
        )
    try:
        raw = yaml.load(text, Loader=SpecLoader)
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML {_yaml_problem(exc)}")
    except ValueError as exc:  # a value YAML's constructors cannot make (an integer of over 4,300 digits)
        raise SpecError(f"{path}: a value YAML cannot read ({str(exc)[:MAX_SHOWN]}); allowed: a YAML study spec")
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to read; allowed: a YAML study spec")
    return parse_spec(raw, check_paths=check_paths)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error on one line: where (line and column, 1-based) and what, without the source excerpt."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return "(" + " ".join(line.strip() for line in str(exc).splitlines()) + ")"
    what = ", ".join(filter(None, [getattr(exc, "context", None), exc.problem]))
    return f"at line {mark.line + 1}, column {mark.column + 1}: {what}"


class SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, except that `1e-4` and `1e7` are numbers (YAML 1.1 needs a dot in a float,
    `1.0e-4`, so its loader leaves the common spelling as a string) and a key given twice in a mapping
    is an error (YAML would keep the last one silently)."""

    def construct_mapping(self, node, deep=False):
        """A mapping; ConstructorError at the second occurrence of a key."""
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the safe loader's own construct_mapping names an unhashable key
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"found the key {shown(key)} twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?([0-9][0-9_]*(\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def configs_dir() -> str:
    """The folder of bundled study specs (installed with the package)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def bundled_configs() -> List[str]:
    """Names of the bundled specs, without .yaml."""
    return sorted(f[:-5] for f in os.listdir(configs_dir()) if f.endswith(".yaml"))


def resolve_config(name_or_path: str) -> str:
    """A path for a spec given as a path or as a bundled name (e.g. `demo_digits`)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    bundled = os.path.join(configs_dir(), f"{name_or_path.removesuffix('.yaml')}.yaml")
    return bundled if os.path.isfile(bundled) else name_or_path
