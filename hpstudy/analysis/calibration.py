"""Measured error rates: each verdict rule run on simulated studies, without and with an effect.

`measure` runs one rule (`RULES_MEASURED`) on `studies` simulated studies at n trials per group and
returns the share decided (the false-decision rate under a null, the power with an effect) and its
Monte-Carlo standard error. A null (`NULLS`) draws every group's errors; `HELD` names the nulls each
rule claims, under which its rate must stay at most alpha + 3 standard errors (the slow test
tests/analysis/test_calibration.py), and `equal_best` shows what a `best` verdict does not mean.
The nulls are the errors users have: continuous ones, errors on a grid of k of N validation images
(a mean on a step and between steps, spreads of 0.5-4 steps; 360 images as in the reproduction, and
grids of 0.1 and 1 point), groups at different locations (a Δ-EDF compares shapes), diverged trials
at chance error, and equal expected bests with unequal spreads. The rules are the report's own
functions (`hpstudy.analysis.inference`), the rules they replaced (`naive_*`, `plain_ks`,
`median_ks`) and, for the Δ-EDF test, the same test told the models' common location (`delta_oracle`:
no test that must estimate the location can do better), so docs/calibration.md shows all of them.
Seeds differ from the calibration's own (`inference.CALIBRATION_SEED`).
"""

import functools
from typing import Any, Callable, Dict, Tuple

import numpy as np
import scipy

from hpstudy.analysis.inference import (
    ALPHA,
    best_contrast,
    delta_ks,
    delta_test,
    nearer_prob,
    raw_p,
    welch,
)

PAIR, SINGLE = (1.0, -1.0, -1.0, 1.0), (1.0, -1.0)
STEP_360 = 100 / 360  # one validation image of 360, in points of error
CHANCE = 90.0  # a diverged trial's error (ten classes), in points
DRAWS = 1000  # permutations of each simulated Δ-EDF test (a permutation p is valid at any number)
Null = Callable[[np.random.Generator, int, int], np.ndarray]  # (rng, n, group index) -> errors


def _grid(step: float, mean: float, sd: float, shift: float = 0.0) -> Null:
    """Errors of k of N images: a normal of `mean` and `sd` (in steps) rounded to whole steps of `step`
    points (at least 0); group k moved by k x `shift` steps."""
    return lambda rng, n, k: (np.round(rng.normal(mean, sd, n)).clip(0) + k * shift) * step


def _diverged(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Normal errors, each trial diverged (at CHANCE) with probability 0.1."""
    errors = 20 + rng.standard_normal(n)
    return np.where(rng.random(n) < 0.1, CHANCE, errors)


@functools.lru_cache(maxsize=None)
def expected_best(n: int) -> float:
    """E[min of n standard normals] (negative), by integration: n x phi(x) x (1 - Phi(x))^(n - 1)."""
    density = lambda x: x * n * scipy.stats.norm.pdf(x) * scipy.stats.norm.sf(x) ** (n - 1)
    return float(scipy.integrate.quad(density, -12, 12, limit=200)[0])


def _equal_best(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Groups 0 and 3: N(0, 1); groups 1 and 2: sd 2, moved so that the expected best of n is the same."""
    wide = k in (1, 2)
    return (2.0 if wide else 1.0) * rng.standard_normal(n) + (-expected_best(n) if wide else 0.0)


NULLS: Dict[str, Null] = {
    "normal": lambda rng, n, k: rng.standard_normal(n),
    "skewed": lambda rng, n, k: rng.gamma(2.0, 1.0, n) / np.sqrt(2.0),  # sd 1, a long right tail
    "shifted": lambda rng, n, k: rng.standard_normal(n) + 3.0 * k,  # one shape, group k moved by 3k sd
    "unequal": lambda rng, n, k: (3.0 if k % 2 == 0 else 1.0) * rng.standard_normal(n),  # equal means
    "grid360_on": _grid(STEP_360, 4.0, 1.1),  # the mean on a step
    "grid360_between": _grid(STEP_360, 4.3, 1.1),  # the reproduction's ViT-C AdamW cells
    "grid360_shifted": _grid(STEP_360, 4.3, 1.1, shift=7),  # models 7 images apart
    "grid360_narrow": _grid(STEP_360, 4.5, 0.5),  # half a step: most trials on two errors
    "grid360_wide": _grid(STEP_360, 12.3, 4.0),
    "grid01": _grid(0.1, 20.4, 2.0),  # errors to a tenth of a point (1,000 images)
    "grid1": _grid(1.0, 3.3, 0.5),  # errors to a whole point (100 images)
    "diverged": _diverged,
    "equal_best": _equal_best,  # not any rule's null: what a `best` verdict does not mean
}
GRIDS = ("grid360_on", "grid360_between", "grid360_narrow", "grid360_wide", "grid01", "grid1")
# the nulls under which each rule the report uses must decide at most alpha (+ 3 MC se) of studies
HELD: Dict[str, Tuple[str, ...]] = {
    "welch": ("normal", "skewed", "unequal", "grid360_between", "grid1"),
    "welch_pair": ("normal", "skewed", "unequal", "grid360_between"),
    "best": ("normal", "skewed", *GRIDS, "diverged"),
    "best_pair": ("normal", "skewed", "grid360_between", "grid01", "diverged"),
    "delta": ("normal", "skewed", "shifted", *GRIDS, "grid360_shifted", "diverged"),
}


def _welch(groups, weights) -> bool:
    return welch(groups, weights).significant


def _best(groups, weights) -> bool:
    return best_contrast(groups, weights).significant


def _naive_best(groups, weights) -> bool:
    """The rule before: decided when the 95% bootstrap percentile interval of the contrast of bests excludes 0."""
    return raw_p(groups, weights) < ALPHA


def _plain_ks(groups, weights) -> bool:
    """A rule before: scipy's one-sided KS tests on Δ-errors at α/2 each."""
    a, b = groups
    da, db = a - a.min(), b - b.min()
    return min(scipy.stats.ks_2samp(da, db, alternative=side).pvalue for side in ("greater", "less")) <= ALPHA / 2


def _median_ks(groups, weights, rng=np.random.default_rng(0)) -> bool:
    """The rule before this one: the one-sided KS distances of the Δ-EDFs, each by a permutation test at
    α/2 of the errors centred on each model's median (DRAWS permutations)."""
    a, b = groups
    values = np.concatenate([a - np.median(a), b - np.median(b)])
    observed = delta_ks(values, (np.arange(len(values)) < len(a))[None, :], len(a))
    permuted = delta_ks(values, np.argsort(rng.random((DRAWS, len(values))), axis=1) < len(a), len(a))
    ps = [(np.sum(perm >= d[0] - 1e-12) + 1) / (DRAWS + 1) for d, perm in zip(observed, permuted)]
    return min(ps) <= ALPHA / 2


def _delta(groups, weights) -> bool:
    """The report's Δ-EDF test at DRAWS permutations, decided at p <= alpha (its size; the report draws more
    near alpha and calls a p it cannot settle borderline, which only decides less)."""
    test = delta_test(groups[0], groups[1], thresholds=(), draws=DRAWS).test
    return test.decidable and test.p is not None and test.p <= ALPHA


def _delta_oracle(groups, weights, rng=np.random.default_rng(0)) -> bool:
    """The Δ-EDF test told that the models share one location (valid only where they do: power only)."""
    a, b = groups
    values = np.concatenate([a, b])
    observed = float(nearer_prob(values, (np.arange(len(values)) < len(a))[None, :], len(a))[0])
    splits = np.argsort(rng.random((DRAWS, len(values))), axis=1) < len(a)
    far = np.abs(nearer_prob(values, splits, len(a)) - 0.5) >= abs(observed - 0.5) - 1e-9
    return bool((np.sum(far) + 1) / (DRAWS + 1) <= ALPHA)


RULES_MEASURED: Dict[str, Tuple[Callable, Tuple[float, ...], str]] = {
    "welch": (_welch, SINGLE, "Welch t, difference of two seed means (gaps, peaks)"),
    "welch_pair": (_welch, PAIR, "Welch t, difference of two gaps (four seed means)"),
    "best": (_best, SINGLE, "calibrated exact bootstrap, difference of two bests"),
    "best_pair": (_best, PAIR, "calibrated exact bootstrap, difference of two gaps of bests"),
    "delta": (_delta, SINGLE, "Δ-EDFs: permutation test of Δ ranks, aligned by the Hodges-Lehmann shift"),
    "delta_oracle": (_delta_oracle, SINGLE, "ceiling: the same test told the common location (power only)"),
    "median_ks": (_median_ks, SINGLE, "before: Δ-EDFs, one-sided KS at α/2, errors centred on medians"),
    "plain_ks": (_plain_ks, SINGLE, "before: Δ-EDFs, one-sided KS at α/2 with the references taken as known"),
    "naive_best": (_naive_best, SINGLE, "before: 95% bootstrap interval of a difference of bests"),
    "naive_best_pair": (_naive_best, PAIR, "before: 95% bootstrap interval of a difference of gaps"),
}
EFFECTS = {"shift": "the first group shifted by `effect` sd", "spread": "the first group's sd times `effect`"}


def _with_effect(rule: str, group: np.ndarray, effect: float) -> np.ndarray:
    """The first group with the effect: its spread times `effect` for the Δ-EDF rules (a shift leaves a
    Δ-EDF alone), else shifted by `effect`."""
    if "ks" in rule or rule.startswith("delta"):
        return (group - group.mean()) * effect + group.mean()
    return group + effect


def measure(
    rule: str, n: int, studies: int = 2000, null: str = "normal", effect: float = 0.0, seed: int = 1
) -> Dict[str, Any]:
    """The share of `studies` simulated studies (n per group) that `rule` decides, with its Monte-Carlo
    standard error. effect = 0: every group from `null` (the false-decision rate); otherwise the first
    group carries the effect (`_with_effect`), which gives the power. The standard error is the rate's
    own (binomial); a size is judged against alpha's (tests/analysis/test_calibration.py)."""
    decide, weights, _ = RULES_MEASURED[rule]
    draw = NULLS[null]
    rng = np.random.default_rng([seed, n, len(weights), sorted(RULES_MEASURED).index(rule), sorted(NULLS).index(null)])
    hits = 0
    for _ in range(studies):
        groups = [draw(rng, n, k) for k in range(len(weights))]
        if effect:
            groups[0] = _with_effect(rule, groups[0], effect)
        hits += bool(decide(groups, weights))
    rate = hits / studies
    return {
        "rule": rule,
        "n": n,
        "null": null,
        "effect": effect,
        "studies": studies,
        "rate": rate,
        "mc_se": float(np.sqrt(rate * (1 - rate) / studies)),
    }
