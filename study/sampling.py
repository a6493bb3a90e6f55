"""Deterministic (lr, wd) sampling and expansion of a spec into trial configs with trial keys.

Sampled values are rounded to SIGNIFICANT_DIGITS before they are keyed and trained: the last bits of
np.exp/np.log differ between numpy 1.x and 2.x (and between platforms), and a key must not.
"""

import dataclasses
import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Tuple

import numpy as np
import pandas as pd
from scipy.stats import qmc

from hpstudy.study.spec import Box, SpecError, StudySpec
from hpstudy.study.store_read import load_trials
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.schema import FINISHED


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


def unit_points(sampler: str, n: int, seed: int) -> np.ndarray:
    """n points in [0, 1]^2: iid uniform, scrambled Sobol, or a k x k grid spanning the ends."""
    if sampler == "random":
        return np.random.default_rng(seed).random((n, 2))
    if sampler == "sobol":
        # Draw the next power of two (scipy's balance property) and keep the first n points.
        m = max(0, (n - 1).bit_length())
        return qmc.Sobol(d=2, scramble=True, seed=seed).random_base2(m)[:n]
    if sampler == "grid":
        k = round(n**0.5)
        axis = np.linspace(0.0, 1.0, k) if k > 1 else np.array([0.5])
        lr, wd = np.meshgrid(axis, axis, indexing="ij")
        return np.stack([lr.ravel(), wd.ravel()], axis=1)
    raise SpecError(f"sampler: bad value {sampler!r}; allowed: random, sobol, grid")


SIGNIFICANT_DIGITS = 6  # of a sampled lr or wd: far finer than any box's resolution, far coarser than an ulp


def rounded(value: float) -> float:
    """`value` to SIGNIFICANT_DIGITS significant digits (decimal, so the same on every platform)."""
    return float(f"{value:.{SIGNIFICANT_DIGITS - 1}e}")


def scale_to_box(points: np.ndarray, box: Box) -> List[Tuple[float, float]]:
    """Map unit points log-uniformly onto the closed box, rounded (see `rounded`) and kept inside it
    (a box's ends are the spec's own numbers, so a fixed value is exactly the value written)."""
    return [
        tuple(
            min(max(rounded(math.exp(math.log(lo) + float(u) * (math.log(hi) - math.log(lo)))), lo), hi)
            for u, (lo, hi) in ((u_lr, box.lr), (u_wd, box.wd))
        )
        for u_lr, u_wd in points
    ]


def sample_box(spec: StudySpec, model: str, optimizer: str, epochs: int) -> List[Tuple[float, float]]:
    """The spec's (lr, wd) samples for one cell.

    With `paired`, the stream depends on the optimizer and box only, so models that share a box get
    the same points (paired comparisons); otherwise each model gets its own stream.
    """
    box = spec.box(model, optimizer)
    stream = (spec.sampler_seed, optimizer, asdict(box)) + (() if spec.paired else (model, epochs))
    points = scale_to_box(unit_points(spec.sampler, spec.samples, _stream_seed(*stream) % 2**32), box)
    distinct = len(set(points))
    if distinct < len(points):
        raise SpecError(
            f"samples: bad value {spec.samples} for the box lr {list(box.lr)}, wd {list(box.wd)} of "
            f"{model} ({optimizer}): it gives {distinct} distinct (lr, wd) points at "
            f"{SIGNIFICANT_DIGITS} significant digits, so trials would repeat under one key; allowed: "
            f"samples <= {distinct}, or a wider box (repeat a fixed value with seeds)"
        )
    return points


def check_samples(spec: StudySpec) -> None:
    """SpecError when a cell's box gives fewer distinct (lr, wd) points than `samples` (see sample_box)."""
    for cell in cells(spec):
        sample_box(spec, *cell)


def cells(spec: StudySpec) -> List[Tuple[str, str, int]]:
    """The (model, optimizer, epochs) cells of the spec, in order."""
    return [(m, o, e) for m in spec.models for o in spec.optimizers for e in spec.epochs]


def _planned(
    spec: StudySpec, model: str, optimizer: str, epochs: int, sample: int, lr: float, wd: float, seed: int
) -> PlannedTrial:
    """One trial of the spec, its config validated and keyed."""
    cfg = TrialConfig.from_dict(
        dict(
            spec.recipe,
            model=model,
            optimizer=optimizer,
            epochs=epochs,
            lr=lr,
            wd=wd,
            seed=seed,
            dataset=asdict(spec.dataset),
        ),
        check_model=False,
    )
    return PlannedTrial(cfg.key, model, optimizer, epochs, sample, seed, cfg.to_dict())


def expand_cell(spec: StudySpec, model: str, optimizer: str, epochs: int) -> List[PlannedTrial]:
    """The trials of one cell, in order: samples x seeds."""
    return [
        _planned(spec, model, optimizer, epochs, i, lr, wd, seed)
        for i, (lr, wd) in enumerate(sample_box(spec, model, optimizer, epochs))
        for seed in spec.seeds
    ]


def first_trials(spec: StudySpec) -> List[PlannedTrial]:
    """Each model's first trial (first optimizer, schedule, sample and seed), nothing else expanded."""
    return [
        _planned(
            spec,
            m,
            spec.optimizers[0],
            spec.epochs[0],
            0,
            *sample_box(spec, m, spec.optimizers[0], spec.epochs[0])[0],
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


def expand_for_store(spec: StudySpec, store: str) -> List[PlannedTrial]:
    """`expand(spec)`, each trial under the key its row has in `store` (see adopt_stored_keys)."""
    return adopt_stored_keys(expand(spec), load_trials(store, spec.name, columns=["config_json", "status"]))
