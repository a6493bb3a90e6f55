"""Deterministic (lr, wd) sampling and expansion of a spec into trial configs with trial keys."""

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Tuple

import numpy as np
from scipy.stats import qmc

from study.spec import Box, SpecError, StudySpec
from trainers.config import TrialConfig


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
        k = round(n ** 0.5)
        axis = np.linspace(0.0, 1.0, k) if k > 1 else np.array([0.5])
        lr, wd = np.meshgrid(axis, axis, indexing="ij")
        return np.stack([lr.ravel(), wd.ravel()], axis=1)
    raise SpecError(f"sampler: bad value {sampler!r}; allowed: random, sobol, grid")


def scale_to_box(points: np.ndarray, box: Box) -> List[Tuple[float, float]]:
    """Map unit points log-uniformly onto the closed box."""
    out = []
    for u_lr, u_wd in points:
        out.append(tuple(float(np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo))))
                         for u, (lo, hi) in ((u_lr, box.lr), (u_wd, box.wd))))
    return out


def sample_box(spec: StudySpec, model: str, optimizer: str, epochs: int) -> List[Tuple[float, float]]:
    """The spec's (lr, wd) samples for one cell.

    With `paired`, the stream depends on the optimizer and box only, so models that share a box get
    the same points (paired comparisons); otherwise each model gets its own stream.
    """
    box = spec.box(model, optimizer)
    stream = (spec.sampler_seed, optimizer, asdict(box)) + (() if spec.paired else (model, epochs))
    points = unit_points(spec.sampler, spec.samples, _stream_seed(*stream) % 2**32)
    return scale_to_box(points, box)


def cells(spec: StudySpec) -> List[Tuple[str, str, int]]:
    """The (model, optimizer, epochs) cells of the spec, in order."""
    return [(m, o, e) for m in spec.models for o in spec.optimizers for e in spec.epochs]


def _planned(spec: StudySpec, model: str, optimizer: str, epochs: int, sample: int, lr: float, wd: float,
             seed: int) -> PlannedTrial:
    """One trial of the spec, its config validated and keyed."""
    cfg = TrialConfig.from_dict(dict(spec.recipe, model=model, optimizer=optimizer, epochs=epochs, lr=lr,
                                     wd=wd, seed=seed, dataset=asdict(spec.dataset)))
    return PlannedTrial(cfg.key, model, optimizer, epochs, sample, seed, cfg.to_dict())


def expand_cell(spec: StudySpec, model: str, optimizer: str, epochs: int) -> List[PlannedTrial]:
    """The trials of one cell, in order: samples x seeds."""
    return [_planned(spec, model, optimizer, epochs, i, lr, wd, seed)
            for i, (lr, wd) in enumerate(sample_box(spec, model, optimizer, epochs)) for seed in spec.seeds]


def first_trials(spec: StudySpec) -> List[PlannedTrial]:
    """Each model's first trial (first optimizer, schedule, sample and seed), nothing else expanded."""
    return [_planned(spec, m, spec.optimizers[0], spec.epochs[0], 0,
                     *sample_box(spec, m, spec.optimizers[0], spec.epochs[0])[0], spec.seeds[0])
            for m in spec.models]


def expand(spec: StudySpec) -> List[PlannedTrial]:
    """All trials of the spec, in a fixed order: models x optimizers x epochs x samples x seeds."""
    return [trial for cell in cells(spec) for trial in expand_cell(spec, *cell)]
