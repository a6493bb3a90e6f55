"""The tests behind every verdict, as result objects (`Test`); each rule's error rate is measured.

Three rules, chosen by the design of the groups compared (`design_of`):

- `welch` (groups that repeat one configuration over seeds): the difference of mean errors, or a
  contrast of several group means (a difference of two gaps), with a Welch t interval and p
  (Welch-Satterthwaite df, scipy.stats.t). The convention of papers that report mean ± sd over
  seeds; it assumes roughly normal seed noise, which the calibration measures.
- `best` (groups of random (lr, wd) samples): the difference of best errors, or a contrast of
  bests, by the bootstrap of the minimum made exact and calibrated. Each group's resampled minimum
  has a closed-form law (P(min* >= v_(i)) = ((n - i + 1) / n)^n), so the bootstrap law of the
  contrast T is computed, not drawn. The raw bootstrap p, 2 min(P*(T <= 0), P*(T >= 0)), is too
  liberal (about 10% false decisions at 5%), so it is calibrated: for two groups by its permutation
  p over splits of the pooled errors (exact under "one distribution" for any errors, ties included);
  for four (a difference of gaps) by the share of normal null studies at these n whose raw p is at
  most this one (normal-like tails assumed, measured). Both are Monte-Carlo p-values drawn until the
  verdict is settled (`montecarlo.sequential`). Its null is "the groups share one distribution": a
  verdict says that the cells' lowest errors differ, in the direction of their bests; it is not a
  test of equal expected bests (two cells with one expected best and unequal spreads are decided
  often, measured). Where even the smallest attainable p exceeds alpha (3 vs 3), the design cannot
  decide, and says so. No interval.
- `delta` (Δ-EDFs of random samples): the probability that a random trial of one model lies nearer
  its own best than a random trial of the other (Mann-Whitney U of Δ = error - own best), by a
  permutation test of the errors aligned by the Hodges-Lehmann shift (`delta_test`).

A Monte-Carlo p is drawn until its verdict is the same for any seed with probability 1 -
montecarlo.RISK, or reported as borderline with its interval. `holm` adjusts a family of p-values
(Holm 1979); the error rates of every rule, at the n users run and on the errors they have (continuous,
on a grid of k of N images, with ties and diverged trials), are measured in
tests/analysis/test_calibration.py and tabled in docs/calibration.md.
"""

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import scipy
from scipy.special import ndtri

from hpstudy.analysis import permutation
from hpstudy.analysis.montecarlo import MonteCarloP, sequential
from hpstudy.analysis.stats import StatsError

ALPHA = 0.05
POWER = 0.8  # "detectable": the effect found with this probability at ALPHA
CALIBRATION_STUDIES = 4000  # null studies behind a calibrated p of the `best` rule at the first look
CALIBRATION_BLOCK = 1000  # null studies drawn from one seeded generator (the same whatever the batches)
CALIBRATION_SEED = 20211  # the calibration is a constant of (n, ...), not a draw per report
PERMUTATION_SEED = 1979  # mixed with the data: one pair of samples has one p in every report
DIGITS = 4  # decimals kept in the atoms of a contrast of bests: errors are percentages stored as float32
TAIL = 40  # atoms of a minimum's bootstrap law kept: the rest carry less than e^-40 of its mass
RULES = {
    "welch": "Welch t on seed means",
    "best": "exact bootstrap of the best, calibrated",
    "delta": "permutation test of Δ ranks, aligned",
    "stratified": "Mann-Whitney p per cell, merged by e x their geometric mean (valid however cells depend)",
}


@dataclass(frozen=True)
class Test:
    """One test's result: estimate, interval, p and what the design can reach."""

    rule: str  # a key of RULES
    estimate: float
    ci: Optional[Tuple[float, float]]  # None where the rule gives no interval (ks) or cannot test
    level: Optional[float]  # the interval's coverage (calibrated for `best`)
    p: Optional[float]  # None where the data cannot be tested (no seed variation, n < 2)
    n: Tuple[int, ...]  # per group
    alpha: float = ALPHA
    floor: float = 0.0  # the smallest p this design can give; above alpha: it cannot decide
    df: Optional[float] = None  # Welch's degrees of freedom
    why_untestable: str = ""  # where p is None
    mc: Optional[Tuple[float, float]] = None  # a Monte-Carlo p's interval for the exact p (montecarlo.RISK)

    @property
    def decidable(self) -> bool:
        """Whether this design can reach alpha at all."""
        return self.p is not None and self.floor <= self.alpha

    @property
    def borderline(self) -> bool:
        """Whether the exact p may lie on either side of alpha: a Monte-Carlo p whose interval holds alpha
        after every draw allowed (montecarlo.sequential); its verdict would depend on the seed."""
        return self.mc is not None and self.mc[0] < self.alpha < self.mc[1]

    @property
    def significant(self) -> bool:
        """p <= alpha, and so for any seed (never where the design cannot reach alpha or p is borderline)."""
        return self.decidable and self.p is not None and self.p <= self.alpha and not self.borderline


def design_of(lr: np.ndarray, wd: np.ndarray, configs: Optional[Iterable] = None) -> str:
    """'seeds' when a group ran one configuration (its repeats differ only by seed), else 'samples': more
    than one (lr, wd), or, where the rows carry their trial configs (`configs`: config_json texts), configs
    that differ in more than the seed (a study that samples recipe fields at a fixed lr and wd)."""
    if len(set(zip(np.asarray(lr).tolist(), np.asarray(wd).tolist()))) > 1:
        return "samples"
    texts = [text for text in (configs if configs is not None else ()) if isinstance(text, str)]
    return "samples" if len({_but_seed(text) for text in texts} - {None}) > 1 else "seeds"


def _but_seed(config_json: str) -> Optional[str]:
    """A trial config (JSON, parsed, never run) without its seed, as canonical JSON; None when the text is
    not a JSON object (a row whose config cannot be read says nothing of the design)."""
    try:
        config = json.loads(config_json)
    except (ValueError, RecursionError):
        return None
    if not isinstance(config, dict):
        return None
    return json.dumps({k: v for k, v in config.items() if k != "seed"}, sort_keys=True)


# ---- welch ---------------------------------------------------------------------------------------


def _satterthwaite(parts: np.ndarray, n: Sequence[int]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances `parts` (scale-free: computed on the
    parts over their largest, so tiny variances do not underflow to 0 / 0)."""
    scaled = parts / parts.max()
    return float(scaled.sum() ** 2 / np.sum(scaled**2 / (np.array(n) - 1)))


def welch(groups: Sequence[np.ndarray], weights: Sequence[float], alpha: float = ALPHA) -> Test:
    """Welch t for the contrast sum_k w_k mean_k (scipy has the two-group case only,
    `ttest_ind(equal_var=False)`, which this equals; a difference of two gaps needs four groups)."""
    groups = [np.asarray(g, float) for g in groups]
    n = tuple(len(g) for g in groups)
    estimate = float(sum(w * g.mean() for w, g in zip(weights, groups))) if min(n) else float("nan")
    base: Dict[str, Any] = dict(rule="welch", estimate=estimate, n=n, alpha=alpha)
    if min(n) < 2:
        return Test(
            **base, ci=None, level=None, p=None, why_untestable=f"fewer than 2 seeds (n = {'/'.join(map(str, n))})"
        )
    parts = np.array([w**2 * g.var(ddof=1) / len(g) for w, g in zip(weights, groups)])
    se = float(np.sqrt(parts.sum()))
    if se == 0:
        return Test(**base, ci=None, level=None, p=None, why_untestable="the seeds gave identical errors")
    df = _satterthwaite(parts, n)
    t_crit = float(scipy.stats.t.isf(alpha / 2, df))
    p = float(2 * scipy.stats.t.sf(abs(estimate) / se, df))
    ci = (estimate - t_crit * se, estimate + t_crit * se)
    return Test(**base, ci=ci, level=1 - alpha, p=p, df=df)


def welch_detectable(sds: Sequence[float], n: Sequence[int], alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference of two means the Welch test finds with probability `power`, for seed sds and
    n per group (noncentral t, scipy.stats.nct); inf where it cannot be tested."""
    parts = np.array([s**2 / k for s, k in zip(sds, n)], float)
    if min(n) < 2 or not np.isfinite(parts).all() or parts.sum() == 0:
        return float("inf")
    se = float(np.sqrt(parts.sum()))
    df = _satterthwaite(parts, n)
    t_crit = scipy.stats.t.isf(alpha / 2, df)

    def short(delta: float) -> float:
        nc = delta / se
        upper = float(scipy.stats.nct.sf(t_crit, df, nc))
        lower = float(np.nan_to_num(scipy.stats.nct.cdf(-t_crit, df, nc)))  # NaN at small df: the far tail, about 0
        return (1.0 if np.isnan(upper) else upper + lower) - power  # scipy's sf is NaN far out, where power is 1

    high = se * (t_crit + 10)
    return float(scipy.optimize.brentq(short, 0.0, high)) if short(high) > 0 else float("inf")


# ---- best (exact bootstrap of the minimum, calibrated) --------------------------------------------


def min_law(errors: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The bootstrap law of the minimum of n errors resampled with replacement: (values, probabilities),
    values ascending; P(min* >= v_(i)) = ((n - i + 1) / n)^n. Only the TAIL + 1 smallest errors carry
    mass above e^-TAIL (< 1e-17): the rest of it is put on the last of them."""
    return _law(np.sort(np.asarray(errors, float))[: TAIL + 1], len(errors))


def _law(smallest: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """min_law from the sorted smallest errors of a sample of n (the last axis; rows: studies)."""
    survival = ((n - np.arange(smallest.shape[-1])) / n) ** n
    return smallest, np.broadcast_to(survival - np.append(survival[1:], 0.0), smallest.shape)


def _null_smallest(rng: np.random.Generator, n: int, studies: int) -> np.ndarray:
    """Per study (rows), the TAIL + 1 smallest of n standard normal draws, sorted, drawn directly (uniform
    order statistics as normalized sums of exponentials): O(TAIL), not O(n)."""
    k = min(n, TAIL + 1)
    sums = np.cumsum(rng.standard_exponential((studies, k)), axis=1)
    return ndtri(sums / (sums[:, -1:] + rng.standard_gamma(n + 1 - k, (studies, 1))))


Laws = Sequence[Tuple[np.ndarray, np.ndarray]]  # per group: (values, probabilities), each (studies, atoms)


def _half_law(laws: Laws, weights: Sequence[float]) -> Tuple[np.ndarray, np.ndarray]:
    """Per study, the law of sum_k w_k X_k (w = +-1) of independent discrete laws: atoms sorted (rows)."""
    values, probs = np.zeros((len(laws[0][0]), 1)), np.ones((len(laws[0][0]), 1))
    for (v, p), w in zip(laws, weights):
        values = (values[:, :, None] + w * v[:, None, :]).reshape(len(v), -1)
        probs = (probs[:, :, None] * p[:, None, :]).reshape(len(v), -1)
    values = np.round(values, DIGITS)  # a contrast equal to 0 in decimals is 0, not float32 noise of 1e-6
    order = _stable_order(values)
    return _row_take(values, order), _row_take(probs, order)


def _row_take(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """np.take_along_axis(a, index, 1) of 2-D arrays as one flat take (about 1.7x faster at 1,000 x 1,681)."""
    return a.ravel()[index + (np.arange(len(a)) * a.shape[1])[:, None]]


def _stable_order(rounded: np.ndarray) -> np.ndarray:
    """np.argsort(rounded, axis=1, kind="stable") of values rounded to DIGITS decimals, by one sort of unique
    integer keys (the value in units of 10^-DIGITS, then its place) where they fit in 64 bits."""
    width = rounded.shape[1].bit_length()
    ticks = np.rint(rounded * 10.0**DIGITS)
    # np.round is rint(x * 10^d) / 10^d, so below 2^40 ticks the ticks are exact integers in the values'
    # order, equal exactly where the values are: the keys' order is the stable one (about 3x faster)
    if not np.all(np.abs(ticks) < 2.0 ** min(40, 62 - width)):  # also NaN and inf
        return np.argsort(rounded, axis=1, kind="stable")
    keys = (ticks.astype(np.int64) << width) | np.arange(rounded.shape[1])
    return np.sort(keys, axis=1) & ((1 << width) - 1)


def raw_ps(laws: Laws, weights: Sequence[float]) -> np.ndarray:
    """Per study, the two-sided bootstrap p at 0 of T = sum_k w_k min*_k, 2 min(P(T <= 0), P(T >= 0)) (at
    most 1), from each minimum's law (`min_law`; rows: studies). T = X + Y is held as two halves: a four-
    group contrast costs 2 x 41^2 atoms at any n, not 41^4; every study is done at once, its row's atoms
    offset so that one sorted array serves all rows."""
    half = len(laws) // 2
    x, px = _half_law(laws[:half], weights[:half])
    y, py = _half_law(laws[half:], weights[half:])
    y, py = y[:, ::-1], py[:, ::-1]  # the queries -y ascending within a row, and so over the whole array
    studies = len(x)
    span = 2 * float(max(np.abs(x).max(), np.abs(y).max())) + 1
    offset = (np.arange(studies) * span)[:, None]
    flat = (x + offset).ravel()  # rows ascending, each row's atoms above the last row's
    below = np.concatenate([np.zeros((studies, 1)), np.cumsum(px, axis=1)], axis=1)  # P(X < atom i), per row
    start = (np.arange(studies) * x.shape[1])[:, None]
    queries = (offset - y).ravel()
    at_most_idx = np.searchsorted(flat, queries, side="right").reshape(y.shape) - start  # atoms of X <= -y
    before_idx = np.searchsorted(flat, queries, side="left").reshape(y.shape) - start  # atoms of X < -y
    at_most = np.sum(py * _row_take(below, at_most_idx), axis=1)
    at_least = np.sum(py * (1.0 - _row_take(below, before_idx)), axis=1)
    return np.round(np.clip(2 * np.minimum(at_most, at_least), 0.0, 1.0), 12)  # 0 is 0


def raw_p(groups: Sequence[np.ndarray], weights: Sequence[float]) -> float:
    """The raw bootstrap p of one contrast of bests (`raw_ps` of one study)."""
    laws = [min_law(g) for g in groups]
    return float(raw_ps([(values[None, :], probs[None, :]) for values, probs in laws], weights)[0])


@functools.lru_cache(maxsize=1024)
def null_raw_ps(n: Tuple[int, ...], weights: Tuple[float, ...], block: int, seed: int = CALIBRATION_SEED) -> np.ndarray:
    """The raw bootstrap p of null studies number block x CALIBRATION_BLOCK onwards (every group N(0, 1),
    these n), sorted."""
    rng = np.random.default_rng([seed, *n, len(weights), block])
    return np.sort(raw_ps([_law(_null_smallest(rng, k, CALIBRATION_BLOCK), k) for k in n], weights))


def calibrated(
    raw: float,
    n: Tuple[int, ...],
    weights: Tuple[float, ...],
    thresholds: Sequence[float],
    seed: int = CALIBRATION_SEED,
) -> MonteCarloP:
    """The share of null studies (`null_raw_ps`) whose raw bootstrap p is at most `raw`, as a Monte-Carlo p
    (1 + count) / (1 + studies): CALIBRATION_STUDIES of them, more until the verdict at `thresholds` is
    settled (`montecarlo.sequential`)."""

    def count_more(start: int, k: int) -> int:
        blocks = range(start // CALIBRATION_BLOCK, (start + k) // CALIBRATION_BLOCK)
        return sum(int(np.searchsorted(null_raw_ps(n, weights, b, seed), raw, side="right")) for b in blocks)

    return sequential(count_more, thresholds, CALIBRATION_STUDIES)


def _split_laws(ordered: np.ndarray, order: np.ndarray, splits: np.ndarray, n_a: int) -> Laws:
    """Each split's two minimum laws (`min_law`), rows: splits; `ordered` is the pooled values sorted, `order`
    their positions (np.argsort): a group's smallest values are read off the sorted values, no split sorted."""
    in_a = splits[:, order]
    n_b = splits.shape[1] - n_a
    return [_law(_first(ordered, in_a, n_a), n_a), _law(_first(ordered, ~in_a, n_b), n_b)]


def _first(ordered: np.ndarray, members: np.ndarray, size: int) -> np.ndarray:
    """Per row of `members` (columns: the sorted values `ordered`; `size` True a row), the values of its first
    min(size, TAIL + 1) members: read in the shortest prefix that holds them in every row, from twice its
    expected width on."""
    k = min(size, TAIL + 1)
    head = min(members.shape[1], 2 * k * members.shape[1] // size)
    counts = np.cumsum(members[:, :head], axis=1, dtype=np.int32)
    while counts[:, -1].min() < k:
        head = min(members.shape[1], 2 * head)
        counts = np.cumsum(members[:, :head], axis=1, dtype=np.int32)
    return ordered[np.nonzero(members[:, :head] & (counts <= k))[1]].reshape(len(members), k)


def _permuted_best(
    groups: Sequence[np.ndarray], weights: Sequence[float], thresholds: Sequence[float], seed: int
) -> Tuple[MonteCarloP, float]:
    """Two groups: the raw bootstrap p's permutation p over splits of the pooled errors (exact under
    "one distribution" for any errors, ties included), and the smallest p the design can give."""
    x, y, _ = canonical(*groups)  # the raw p is the same for either order; the splits are too
    values = np.concatenate([x, y])
    n_a = len(x)
    raw = raw_p([x, y], weights)
    order = np.argsort(values)
    ordered = values[order]
    extreme = lambda splits: raw_ps(_split_laws(ordered, order, splits, n_a), weights) <= raw + 1e-12
    seed_words = [seed, *data_rng(seed, x, y).integers(0, 2**32, 4).tolist()]
    mc = permutation.permutation_p(n_a, len(values), extreme, thresholds, seed_words)
    return mc, permutation.smallest_p(n_a, len(values), 2)  # fully apart, either way


def best_contrast(
    groups: Sequence[np.ndarray],
    weights: Sequence[float],
    alpha: float = ALPHA,
    thresholds: Optional[Sequence[float]] = None,
    seed: int = CALIBRATION_SEED,
) -> Test:
    """The contrast sum_k w_k min_k of best errors (w = +-1), by the exact bootstrap of the minimum
    (module docstring): for two groups its raw p's permutation p over splits of the pooled errors (the
    null "one distribution", exact for any errors, ties included); for four, its raw p calibrated on
    normal null studies. No interval: a bootstrapped minimum puts most of its mass on the observed one,
    so a percentile interval has an end on the estimate and no stated coverage."""
    groups = [np.asarray(g, float) for g in groups]
    n = tuple(len(g) for g in groups)
    if min(n) < 1:
        return Test(
            rule="best", estimate=float("nan"), ci=None, level=None, p=None, n=n, alpha=alpha, why_untestable="no trial"
        )
    estimate = float(sum(w * g.min() for w, g in zip(weights, groups)))
    at = (alpha,) if thresholds is None else tuple(thresholds)
    if len(groups) == 2:
        mc, floor = _permuted_best(groups, weights, at, seed)
    else:
        key = tuple(float(w) for w in weights)
        half = len(n) // 2
        null_n = min(n, n[half:] + n[:half])  # the two halves swapped give the same null: one order for both
        mc = calibrated(raw_p(groups, weights), null_n, key, at, seed)
        floor = calibrated(0.0, null_n, key, at, seed).p  # fully apart is the smallest raw p: settled too
    return Test(
        rule="best", estimate=estimate, ci=None, level=None, p=mc.p, n=n, alpha=alpha, floor=floor, mc=mc.interval
    )


# ---- delta (Δ-EDFs) ------------------------------------------------------------------------------


def _kth_difference(a: np.ndarray, b: np.ndarray, rank: int) -> float:
    """The rank-th smallest of every difference b_j - a_i (a, b sorted), itself one of those differences:
    bisection on the count of differences below a value (O(n log n) per step; the n_a x n_b differences
    themselves would not fit in memory at 100,000 trials a model), then the difference it lands on."""

    def at_most(t: float) -> int:
        return int(len(a) * len(b) - np.searchsorted(a, b - t, side="left").sum())

    lo, hi = b[0] - a[-1], b[-1] - a[0]  # at_most(hi) = all
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (lo, mid) if at_most(mid) >= rank else (mid, hi)
    # per b_j the smallest a_i with b_j - a_i <= hi, up to float noise in b_j - hi
    tol = 1e-9 * max(float(b[-1] - a[0]) - float(b[0] - a[-1]), float(np.abs(np.concatenate([a, b])).max()), 1e-300)
    idx = np.searchsorted(a, b - hi - tol, side="left")
    ok = idx < len(a)
    return float((b[ok] - a[idx[ok]]).max())


def shift_estimate(ea: np.ndarray, eb: np.ndarray) -> float:
    """The Hodges-Lehmann shift of b against a, kept on the errors' own grid: the lower median of every
    difference b_j - a_i, itself one of them, so errors of k of N images stay on their grid once b is
    shifted back; it moves with either sample's location (delta_test orders the samples by their shapes,
    so that swapping them asks the same question)."""
    a, b = np.sort(np.asarray(ea, float)), np.sort(np.asarray(eb, float))
    return _kth_difference(a, b, (len(a) * len(b) + 1) // 2)


def _merge_ties(values: np.ndarray, tol: float) -> np.ndarray:
    """Per row, each run of values within `tol` of their sorted neighbour replaced by the run's first: a
    difference of two stored errors leaves equal errors equal only up to float noise, which must not
    split the ties the test is exact under."""
    order = np.argsort(values, axis=-1, kind="stable")
    ordered = np.take_along_axis(values, order, -1)
    starts = np.ones(ordered.shape, bool)
    starts[..., 1:] = np.diff(ordered, axis=-1) > tol
    first = np.maximum.accumulate(np.where(starts, np.arange(ordered.shape[-1]), 0), axis=-1)
    out = np.empty_like(ordered)
    np.put_along_axis(out, order, np.take_along_axis(ordered, first, -1), -1)
    return out


def nearer_prob(values: np.ndarray, is_a: np.ndarray, n_a: int) -> np.ndarray:
    """For each labelling `is_a` of `values` (rows: splits; n_a True per row), the probability that a
    random trial of group a lies nearer its own group's best than a random trial of b (Δ = error - the
    group's best; Δs within a millionth of the errors' range of each other are ties, which count half):
    the Mann-Whitney U of the Δs over n_a n_b."""
    v = np.broadcast_to(values, is_a.shape)
    best_a = np.where(is_a, v, np.inf).min(-1, keepdims=True)
    best_b = np.where(is_a, np.inf, v).min(-1, keepdims=True)
    span = float(np.max(values) - np.min(values))
    delta = v - np.where(is_a, best_a, best_b)
    # any sort will do: a tie's members share one rank, and the sums of half-integer ranks are exact
    order = np.argsort(delta, axis=-1)
    ranks = _tie_ranks(np.take_along_axis(delta, order, -1), 1e-6 * span)
    n_b = is_a.shape[-1] - n_a
    in_b = ~np.take_along_axis(is_a, order, -1)
    u_b = np.where(in_b, ranks, 0.0).sum(-1) - n_b * (n_b + 1) / 2  # pairs with Δ_b above Δ_a, ties half
    return u_b / (n_a * n_b)


def _tie_ranks(ordered: np.ndarray, tol: float) -> np.ndarray:
    """The average ranks (from 1) of values sorted along the last axis, each run of values within `tol` of
    their sorted neighbour one tie (`_merge_ties`' runs, as scipy.stats.rankdata ranks them once merged)."""
    size = ordered.shape[-1]
    place = np.arange(size)
    starts = np.ones(ordered.shape, bool)
    starts[..., 1:] = np.diff(ordered, axis=-1) > tol
    ends = np.ones(ordered.shape, bool)
    ends[..., :-1] = starts[..., 1:]
    first = np.maximum.accumulate(np.where(starts, place, 0), axis=-1)
    last = np.minimum.accumulate(np.where(ends, place, size - 1)[..., ::-1], axis=-1)[..., ::-1]
    return (first + last) / 2 + 1


class DeltaTest(NamedTuple):
    """The Δ-EDF test's result: the Test (estimate: P(a nearer its best)) and what it is read with."""

    test: Test
    shift: float  # b's errors minus a's, by Hodges-Lehmann: the pooled errors are aligned by it
    d_a_above: float  # descriptive: sup (F_a - F_b) of the Δ-EDFs
    d_b_above: float


def delta_test(
    ea: np.ndarray,
    eb: np.ndarray,
    alpha: float = ALPHA,
    thresholds: Optional[Sequence[float]] = None,
    seed: int = PERMUTATION_SEED,
    draws: int = permutation.FIRST,
) -> DeltaTest:
    """Whether one model's trials lie nearer their own best than the other's: the probability that a
    random trial of a is nearer a's best than a random trial of b is of b's (Δ = error - own best, ties
    half; 1/2 when the Δ-EDFs agree), tested two-sided by permuting the pooled errors, b's shifted back by
    the Hodges-Lehmann shift (`shift_estimate`), every split recomputing both bests. Under "one shape,
    any location" the aligned errors are exchangeable up to the shift's noise: on errors with ties (k of
    N images) the shift is exact as a rule and the test keeps its size; on continuous errors the noise
    makes it conservative at small n (docs/calibration.md). Every split is enumerated up to
    permutation.EXACT_SPLITS, else `draws` random splits seeded by the data, and more until the verdict at
    `thresholds` (default alpha; () for none) is the same for any seed with probability 1 - montecarlo.RISK
    (`montecarlo.sequential`), or borderline."""
    ea, eb = np.asarray(ea, float), np.asarray(eb, float)
    # one order of the two samples, by their Δs (which no location moves), so that neither swapping them nor
    # moving either changes the shift's side of a tie, the pooled values' order or the seed; read in ticks of a
    # billionth of the larger Δ range, as e - e.min() carries the location's float noise (0.024 at 0 is
    # 0.02400000000000091 at 41)
    shapes = [np.sort(e - e.min()) for e in (ea, eb)]
    scale = max(float(s[-1]) for s in shapes) or 1.0
    dx, dy, swapped = canonical(*(np.round(s / scale * 1e9) for s in shapes))
    x, y = (eb, ea) if swapped else (ea, eb)
    shift = shift_estimate(x, y)
    values = np.concatenate([x, y - shift])
    observed_split = (np.arange(len(values)) < len(x))[None, :]
    observed = float(nearer_prob(values, observed_split, len(x))[0])
    d_x, d_y = (float(d[0]) for d in delta_ks(values, observed_split, len(x)))
    extreme = lambda splits: np.abs(nearer_prob(values, splits, len(x)) - 0.5) >= abs(observed - 0.5) - 1e-9
    seed_words = [seed, *data_rng(seed, dx, dy).integers(0, 2**32, 4).tolist()]
    mc = permutation.permutation_p(
        len(x), len(values), extreme, (alpha,) if thresholds is None else tuple(thresholds), seed_words, draws
    )
    floor = permutation.smallest_p(len(x), len(values), 2, draws)  # the two splits that separate the Δs most
    estimate = 1 - observed if swapped else observed
    test = Test(
        rule="delta",
        estimate=estimate,
        ci=None,
        level=None,
        p=mc.p,
        n=(len(ea), len(eb)),
        alpha=alpha,
        floor=floor,
        mc=mc.interval,
    )
    return DeltaTest(test, -shift if swapped else shift, *((d_y, d_x) if swapped else (d_x, d_y)))


def delta_ks(values: np.ndarray, is_a: np.ndarray, n_a: int) -> Tuple[np.ndarray, np.ndarray]:
    """One-sided KS distances between Δ-EDFs (Δ = error - its own group's best) for each labelling
    `is_a` (True: group a; the last axis runs over the pooled values, both arrays broadcast):
    sup (F_a - F_b) and sup (F_b - F_a), taken at the ends of ties (Δs a millionth of the errors' range
    apart are one)."""
    shape = np.broadcast_shapes(np.shape(values), np.shape(is_a))
    v, is_a = np.broadcast_to(values, shape), np.broadcast_to(is_a, shape)
    n_b = shape[-1] - n_a
    min_a = np.where(is_a, v, np.inf).min(-1, keepdims=True)
    delta = v - np.where(is_a, min_a, np.where(is_a, np.inf, v).min(-1, keepdims=True))
    delta = _merge_ties(delta, 1e-6 * float(np.max(values) - np.min(values)))  # as nearer_prob reads them
    # any sort will do (quicksort is ~5x faster than a stable one here): the distances are read at the
    # ends of ties, where the counts do not depend on the order within a tie
    order = np.argsort(delta, axis=-1)
    sorted_delta = np.take_along_axis(delta, order, -1)
    from_a = np.cumsum(np.take_along_axis(is_a, order, -1), axis=-1)
    from_b = np.arange(1, shape[-1] + 1) - from_a
    diff = (from_a * n_b - from_b * n_a) / (n_a * n_b)  # integer numerators: exact where the EDFs meet
    tie_end = np.ones(shape, bool)
    tie_end[..., :-1] = sorted_delta[..., 1:] != sorted_delta[..., :-1]
    a_above = np.where(tie_end, diff, -np.inf).max(-1).clip(min=0)
    b_above = np.where(tie_end, -diff, -np.inf).max(-1).clip(min=0)
    return a_above, b_above


def delta_power(effect: float, n: Sequence[int], alpha: float = ALPHA) -> float:
    """Approximate power of the Δ-EDF test against a nearer-probability `effect` (Noether 1987, the
    Mann-Whitney test's normal approximation); the aligned test's measured power is lower at small n
    (docs/calibration.md), so this is an upper bound at n below ~24."""
    n_a, n_b = n
    z = abs(effect - 0.5) * math.sqrt(12 * n_a * n_b / (n_a + n_b + 1)) - float(scipy.stats.norm.isf(alpha / 2))
    return float(scipy.stats.norm.cdf(z))


def delta_detectable(n: Sequence[int], alpha: float = ALPHA, power: float = POWER) -> float:
    """The nearer-probability (above 1/2) the Δ-EDF test finds with probability `power` at these n
    (`delta_power`); inf where even 1 is not."""
    n_a, n_b = n
    distance = (float(scipy.stats.norm.isf(alpha / 2)) + float(scipy.stats.norm.isf(1 - power))) / math.sqrt(
        12 * n_a * n_b / (n_a + n_b + 1)
    )
    return 0.5 + distance if distance <= 0.5 else float("inf")


def trials_for_delta(effect: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Trials per model (equal n) for the Δ-EDF test to find a nearer-probability `effect` with
    probability `power` (`delta_power`); StatsError outside 0 <= effect <= 1 or at 1/2."""
    if not (0 <= effect <= 1) or effect == 0.5:
        raise StatsError(
            f"trials_for_delta: effect: bad value {effect!r}; allowed: 0 <= effect <= 1, not 1/2 (a probability)"
        )
    z = float(scipy.stats.norm.isf(alpha / 2)) + float(scipy.stats.norm.isf(1 - power))
    n = 2
    while delta_power(effect, (n, n), alpha) < power:  # 12 n^2 / (2n + 1) grows like 6 n: a few steps from the root
        n = max(n + 1, int(z**2 / (6 * (effect - 0.5) ** 2)))
    return n


# ---- families ---------------------------------------------------------------------------------------


def holm(ps: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (scipy has only Benjamini-Hochberg,
    `false_discovery_control`, which controls a different error)."""
    values = np.asarray(ps, float)
    order = np.argsort(values, kind="stable")
    m = len(values)
    adjusted = np.maximum.accumulate((m - np.arange(m)) * values[order]).clip(max=1.0)
    out = np.empty(m)
    out[order] = adjusted
    return out


def holm_interval(intervals: Sequence[Tuple[float, float]]) -> Tuple[np.ndarray, np.ndarray]:
    """Bounds on Holm's adjusted p-values from an interval per p (a Monte-Carlo p's, or (p, p) where it
    is exact): each adjusted p never decreases as any p grows, so the adjusted lower ends bound it below
    and the adjusted upper ends above."""
    lows, highs = zip(*intervals) if intervals else ((), ())
    return holm(lows), holm(highs)


def data_rng(seed: int, *arrays: np.ndarray) -> np.random.Generator:
    """A generator seeded by `seed` and the data: one quantity gets one interval in every report."""
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(a, float).tobytes() for a in arrays)).digest()
    return np.random.default_rng([seed, *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def canonical(a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray, bool]:
    """Two samples in one order whichever way they are given (by their bytes), and whether they were
    swapped: a two-sample test run on them draws the same splits for (a, b) and (b, a)."""
    swap = np.ascontiguousarray(b, float).tobytes() < np.ascontiguousarray(a, float).tobytes()
    return (b, a, True) if swap else (a, b, False)


def area_interval(ea: np.ndarray, eb: np.ndarray, seed: int = 0, n_boot: int = 4000) -> Tuple[float, float]:
    """95% percentile interval of the signed area between two Δ-EDFs, mean Δ of b - mean Δ of a, each
    sample resampled with replacement and its reference (best) recomputed in every resample (fixed
    references miss the truth in 20-40% of studies); seeded by the data (`data_rng`)."""
    rng = data_rng(seed, ea, eb)
    ra, rb = (e[rng.integers(0, len(e), (n_boot, len(e)))] for e in (ea, eb))
    draws = (rb.mean(1) - rb.min(1)) - (ra.mean(1) - ra.min(1))
    lo, hi = np.quantile(draws, [ALPHA / 2, 1 - ALPHA / 2])
    return float(lo), float(hi)
