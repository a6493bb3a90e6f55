"""Deterministic sampling of lr, wd and any recipe field a box samples, and expansion of a spec into trial
configs with trial keys.

Sampled floats are rounded to SIGNIFICANT_DIGITS before they are keyed and trained: the last bits of
np.exp/np.log differ between numpy 1.x and 2.x (and between platforms), and a key must not.
"""

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

from hpstudy.study.spec import Box, Distribution, SpecError, StudySpec
from hpstudy.study.store.layout import StoreLike
from hpstudy.study.store.read import load_trials
from hpstudy.trainers.config import OWN_CHECKS, TrialConfig, own_checks
from hpstudy.trainers.data_spec import raise_first_bad
from hpstudy.trainers.errors import ConfigError
from hpstudy.trainers.schema import FINISHED
from hpstudy.trainers.zoo import is_timm


@dataclass(frozen=True)
class PlannedTrial:
    """One trial of a study before it runs: its key, its cell, and the full trial config."""

    key: str
    model: str
    optimizer: str
    epochs: int
    sample: int
    seed: int
    config: Dict[str, Any]


def _stream_seed(*parts: Any) -> int:
    """A stable 64-bit seed from the parts (Python's hash() is salted per process)."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).digest()
    return int.from_bytes(digest[:8], "little")


def unit_points(sampler: str, n: int, seed: int, d: int = 2) -> np.ndarray:
    """n points in [0, 1]^d: iid uniform, scrambled Sobol, or a k^d grid spanning the ends."""
    if sampler == "random":
        return np.random.default_rng(seed).random((n, d))
    if sampler == "sobol":
        from scipy.stats import qmc  # here: scipy.stats takes 1.5 s to import, which status and query never need

        # Draw the next power of two (scipy's balance property) and keep the first n points.
        m = max(0, (n - 1).bit_length())
        return qmc.Sobol(d=d, scramble=True, seed=seed).random_base2(m)[:n]
    if sampler == "grid":
        k = round(n ** (1 / d))
        axis = np.linspace(0.0, 1.0, k) if k > 1 else np.array([0.5])
        return np.stack([coordinate.ravel() for coordinate in np.meshgrid(*[axis] * d, indexing="ij")], axis=1)
    raise SpecError(f"sampler: bad value {sampler!r}; allowed: random, sobol, grid")


SIGNIFICANT_DIGITS = 6  # of a sampled float: far finer than any box's resolution, far coarser than an ulp


def rounded(value: float) -> float:
    """`value` to SIGNIFICANT_DIGITS significant digits (decimal, so the same on every platform)."""
    return float(f"{value:.{SIGNIFICANT_DIGITS - 1}e}")


def scaled(units: List[float], dist: Distribution) -> List[Any]:
    """Unit coordinates mapped onto `dist`: log-uniformly or uniformly onto [low, high] (rounded, see
    `rounded`, and kept inside it, so a fixed value is exactly the value written), onto the integers of
    [low, high] in equal shares, or onto its choices in equal shares."""
    low, high = dist.values[0], dist.values[-1]
    if dist.kind == "log_uniform":
        start, width = math.log(low), math.log(high) - math.log(low)
        return [min(max(rounded(math.exp(start + u * width)), low), high) for u in units]
    if dist.kind == "uniform":
        return [min(max(rounded(low + u * (high - low)), low), high) for u in units]
    if dist.kind == "int":
        return [low + min(int(u * (high - low + 1)), high - low) for u in units]
    return [dist.values[min(int(u * len(dist.values)), len(dist.values) - 1)] for u in units]


def scale_to_box(points: np.ndarray, box: Box) -> List[Tuple]:
    """Map unit points onto the box's axes (Box.axes: lr, wd, then the recipe fields it varies)."""
    columns = [scaled(points[:, i].tolist(), dist) for i, (_, dist) in enumerate(box.axes())]
    return list(zip(*columns)) if columns else [() for _ in points]


def _stream_identity(box: Box) -> Dict[str, Any]:
    """What a box's sample stream depends on: lr's and wd's boxes and the distributions of the recipe fields it
    varies (none for a box of lr and wd alone, so its stream, and its trials' keys, are those it always had)."""
    varied = [[name, dist.kind, list(dist.values)] for name, dist in box.axes()[2:]]
    return {"lr": box.lr, "wd": box.wd, **({"recipe": varied} if varied else {})}


def sample_box(spec: StudySpec, model: str, optimizer: str, epochs: int) -> List[Tuple]:
    """The spec's samples for one cell: a tuple per sample, in the order of the box's axes (lr, wd, then the
    recipe fields it varies).

    With `paired`, the stream depends on the optimizer and box only, so models that share a box get
    the same points (paired comparisons); otherwise each model gets its own stream.
    """
    box = spec.box(model, optimizer)
    axes = box.axes()
    stream = (spec.sampler_seed, optimizer, _stream_identity(box)) + (() if spec.paired else (model, epochs))
    unit = unit_points(spec.sampler, spec.samples, _stream_seed(*stream) % 2**32, len(axes))
    points = scale_to_box(unit, box)
    distinct = len(set(points))
    if distinct < len(points):
        described = f"lr {list(box.lr)}, wd {list(box.wd)}" + "".join(f", {n} {d.raw()}" for n, d in axes[2:])
        raise SpecError(
            f"samples: bad value {spec.samples} for the box {described} of "
            f"{model} ({optimizer}): it gives {distinct} distinct ({', '.join(name for name, _ in axes)}) points at "
            f"{SIGNIFICANT_DIGITS} significant digits, so trials would repeat under one key; allowed: "
            f"samples <= {distinct}, or a wider box (repeat a fixed value with seeds)"
        )
    return points


def sampled_values(spec: StudySpec, model: str, optimizer: str, epochs: int) -> List[Dict[str, Any]]:
    """The cell's samples as the config fields they set: lr, wd and the recipe fields its box samples or fixes."""
    box = spec.box(model, optimizer)
    names = [name for name, _ in box.axes()]
    return [dict(box.fixed(), **dict(zip(names, point))) for point in sample_box(spec, model, optimizer, epochs)]


def check_samples(spec: StudySpec) -> None:
    """SpecError when a cell's box gives fewer distinct points than `samples` (see sample_box)."""
    for cell in cells(spec):
        sample_box(spec, *cell)


def cells(spec: StudySpec) -> List[Tuple[str, str, int]]:
    """The (model, optimizer, epochs) cells of the spec, in order."""
    return [(m, o, e) for m in spec.models for o in spec.optimizers for e in spec.epochs]


def _config(spec: StudySpec, model: str, optimizer: str, epochs: int, values: Dict[str, Any], seed: int) -> TrialConfig:
    """The validated trial config of the spec at the sampled `values` (lr, wd, ...)."""
    return TrialConfig.from_dict(
        dict(
            spec.recipe,
            **values,
            model=model,
            **({"family": spec.model_specs[model].family} if is_timm(model) else {}),  # as the spec's models: gives it
            optimizer=optimizer,
            epochs=epochs,
            seed=seed,
            dataset=spec.dataset,  # a DataSpec, validated with the spec
        ),
        check_model=False,
    )


def _planned(
    spec: StudySpec, model: str, optimizer: str, epochs: int, sample: int, values: Dict[str, Any], seed: int
) -> PlannedTrial:
    """One trial of the spec at the sampled `values` (lr, wd, ...), its config validated and keyed."""
    cfg = _config(spec, model, optimizer, epochs, values, seed)
    return PlannedTrial(cfg.key, model, optimizer, epochs, sample, seed, cfg.to_dict())


def _json_scalar(value: Any) -> str:
    """What json.dumps writes for `value` (a float's or int's repr, as json's encoder writes them when finite)."""
    return repr(value) if type(value) in (float, int) else json.dumps(value)


def _varying(template: TrialConfig, names: List[str]) -> Optional[Tuple[List[str], List[str]]]:
    """The template's canonical JSON (to_json) cut where the `names` fields' values stand: (the text between
    them, the names in the order they appear); None where a mark stands elsewhere too (a path that holds it)."""
    marks: Dict[str, Any] = {name: f"\x00{name}\x00" for name in names}
    text = dataclasses.replace(template, **marks).to_json()  # replace builds without validating: marks are str
    quoted = {name: json.dumps(mark) for name, mark in marks.items()}
    if any(text.count(mark) != 1 for mark in quoted.values()):
        return None
    ordered = sorted(names, key=lambda name: text.index(quoted[name]))
    parts = []
    for name in ordered:
        before, text = text.split(quoted[name], 1)
        parts.append(before)
    return parts + [text], ordered


def expand_cell(spec: StudySpec, model: str, optimizer: str, epochs: int) -> List[PlannedTrial]:
    """The trials of one cell, in order: samples x seeds. Where the cell's trials differ only in fields
    checked on their own (lr, wd, seed: OWN_CHECKS), the first trial's config is validated whole and the
    others check those fields and fill them into its config and canonical JSON, giving the keys and configs
    that validating each whole gives, about 4x faster (docs/performance.md)."""
    samples = sampled_values(spec, model, optimizer, epochs)
    names = list(dict.fromkeys([name for values in samples[:1] for name in values] + ["seed"]))
    cut = None
    if samples and spec.seeds and set(names) <= set(OWN_CHECKS):
        template = _config(spec, model, optimizer, epochs, samples[0], spec.seeds[0])
        cut = _varying(template, names)
    if cut is None:
        return [
            _planned(spec, model, optimizer, epochs, i, values, seed)
            for i, values in enumerate(samples)
            for seed in spec.seeds
        ]
    config = template.to_dict()
    parts, ordered = cut
    # each trial's first bad field as validating it whole would name it: sample 0, then the seeds, then the rest
    for values in [samples[0], *({"seed": seed} for seed in spec.seeds), *samples[1:]]:
        raise_first_bad(own_checks(values), ConfigError)
    text = "%s".join(part.replace("%", "%%") for part in parts)
    trials = []
    for i, values in enumerate(samples):
        for seed in spec.seeds:
            varied = dict(values, seed=seed)
            key = hashlib.sha256((text % tuple(_json_scalar(varied[name]) for name in ordered)).encode()).hexdigest()
            trial_config = dict(config, **varied, dataset=dict(config["dataset"]))
            trials.append(PlannedTrial(key[:20], model, optimizer, epochs, i, seed, trial_config))
    return trials


def first_trials(spec: StudySpec) -> List[PlannedTrial]:
    """Each model's first trial (first optimizer, schedule, sample and seed), nothing else expanded."""
    return [
        _planned(
            spec,
            m,
            spec.optimizers[0],
            spec.epochs[0],
            0,
            sampled_values(spec, m, spec.optimizers[0], spec.epochs[0])[0],
            spec.seeds[0],
        )
        for m in spec.models
    ]


def expand(spec: StudySpec) -> List[PlannedTrial]:
    """All trials of the spec, in a fixed order: models x optimizers x epochs x samples x seeds."""
    return [trial for cell in cells(spec) for trial in expand_cell(spec, *cell)]


def _identity(config: Dict[str, Any]) -> str:
    """A trial's config with lr and wd rounded as the sampler rounds them, as canonical JSON: equal for a
    trial keyed before the rounding (its exp/log value) and after it."""
    return json.dumps(
        dict(config, lr=rounded(config["lr"]), wd=rounded(config["wd"])), sort_keys=True, separators=(",", ":")
    )


def adopt_stored_keys(trials: List[PlannedTrial], stored: pd.DataFrame) -> List[PlannedTrial]:
    """`trials` with the key of a stored ok/diverged row of the same trial (`trial_key`, `config_json`,
    `status`, `finished_at` columns; the newest where two are) that an older sampler keyed (unrounded lr/wd,
    or another numpy): resume skips it and the report counts it, instead of training it again under the
    new key. A failed row is not adopted (its trial is trained again, under the new key), nor one whose
    config cannot be read."""
    planned, stored_keys = {t.key for t in trials}, set(stored["trial_key"])
    older = stored[
        ~stored["trial_key"].isin(planned) & stored["config_json"].notna() & stored["status"].isin(FINISHED)
    ].sort_values("finished_at", kind="stable")
    if older.empty:
        return trials
    by_identity = {}
    for key, text in zip(older["trial_key"], older["config_json"]):
        try:
            by_identity[_identity(json.loads(text))] = key  # the newest row of a trial wins
        except (ValueError, TypeError, KeyError, ArithmeticError, RecursionError):
            continue  # not a config this sampler wrote
    adopted = []
    for trial in trials:
        if trial.key not in stored_keys:
            canonical = json.loads(TrialConfig.from_dict(trial.config, check_model=False).to_json())  # as stored
            trial = dataclasses.replace(trial, key=by_identity.get(_identity(canonical), trial.key))
        adopted.append(trial)
    return adopted


def expand_for_store(spec: StudySpec, store: StoreLike) -> List[PlannedTrial]:
    """`expand(spec)`, each trial under the key its row has in `store` (see adopt_stored_keys)."""
    return adopt_stored_keys(expand(spec), load_trials(store, spec.name, columns=["config_json", "status"]))
