"""The tests behind every verdict, as result objects (`Test`); each rule's error rate is measured.

Three rules, chosen by the design of the groups compared (`design_of`):

- `welch` (groups that repeat one configuration over seeds): the difference of mean errors, or a
  contrast of several group means (a difference of two gaps), with a Welch t interval and p
  (Welch-Satterthwaite df, scipy.stats.t). The convention of papers that report mean ± sd over
  seeds; it assumes roughly normal seed noise, which the calibration measures.
- `best` (groups of random (lr, wd) samples): the difference of best errors, or a contrast of
  bests, tested by the bootstrap of the minimum made exact and calibrated. Each group's resampled
  minimum has a closed-form law (P(min* >= v_(i)) = ((n - i + 1) / n)^n), so the bootstrap law of
  the contrast T is computed, not drawn: it cannot flip with a seed. Its null is "the groups share
  one distribution": a verdict says the distributions differ, the lower tail favouring one. The raw bootstrap p,
  2 min(P*(T <= 0), P*(T >= 0)), is too liberal (about 10% false decisions at 5%), so it is
  calibrated: p = the share of null studies (normal errors, these n, CALIBRATION_STUDIES of them)
  whose bootstrap p is at most this one (a Monte-Carlo p, (1 + count) / (1 + studies)). For two
  groups the raw p depends on ranks only, so the calibrated test is exact for any continuous
  error distribution; a four-group contrast assumes normal-like tails (measured by the
  calibration). The interval is the bootstrap percentile interval at the calibrated level, so it
  excludes 0 exactly when p <= alpha. Where
  even the smallest attainable p exceeds alpha (3 vs 3), the design cannot decide, and says so.
- `ks` (Δ-EDFs of random samples): the two one-sided KS distances between the Δ-EDFs, each by a
  permutation test at alpha / 2 of the median-centred errors that recomputes both references
  (`ks_pair`); p = 2 min. Conservative, measured.

`holm` adjusts a family of p-values (Holm 1979); the error rates of every rule, at the n users run,
are measured in tests/analysis/test_calibration.py and tabled in docs/calibration.md.
"""

import functools
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from scipy import optimize
from scipy import stats as sps
from scipy.special import ndtri

from hpstudy.analysis.stats import StatsError

ALPHA = 0.05
POWER = 0.8  # "detectable": the effect found with this probability at ALPHA
CALIBRATION_STUDIES = 4000  # null studies behind each calibrated p of the `best` rule
CALIBRATION_SEED = 20211  # fixed: the calibration is a constant of (n, ...), not a draw per report
MAX_PLANNED = 512  # trials_for_ks searches up to this many trials per model
N_PERM = 9999  # permutations of the Δ-EDF test (exact enumeration below this many splits)
PERMUTATION_SEED = 1979  # mixed with the data: one pair of samples has one p in every report
DIGITS = 4  # decimals kept in the atoms of a contrast of bests: errors are percentages stored as float32
TAIL = 40  # atoms of a minimum's bootstrap law kept: the rest carry less than e^-40 of its mass
RULES = {
    "welch": "Welch t on seed means",
    "best": "exact bootstrap of the best, calibrated",
    "ks": "Δ-EDF permutation KS test, α/2 per direction",
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

    @property
    def decidable(self) -> bool:
        """Whether this design can reach alpha at all."""
        return self.p is not None and self.floor <= self.alpha

    @property
    def significant(self) -> bool:
        """p <= alpha (never where the design cannot reach alpha)."""
        return self.decidable and self.p is not None and self.p <= self.alpha


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
    df = float(parts.sum() ** 2 / np.sum(parts**2 / (np.array(n) - 1)))
    t_crit = float(sps.t.isf(alpha / 2, df))
    p = float(2 * sps.t.sf(abs(estimate) / se, df))
    ci = (estimate - t_crit * se, estimate + t_crit * se)
    return Test(**base, ci=ci, level=1 - alpha, p=p, df=df)


def welch_detectable(sds: Sequence[float], n: Sequence[int], alpha: float = ALPHA, power: float = POWER) -> float:
    """The difference of two means the Welch test finds with probability `power`, for seed sds and
    n per group (noncentral t, scipy.stats.nct); inf where it cannot be tested."""
    parts = np.array([s**2 / k for s, k in zip(sds, n)], float)
    if min(n) < 2 or not np.isfinite(parts).all() or parts.sum() == 0:
        return float("inf")
    se = float(np.sqrt(parts.sum()))
    df = float(parts.sum() ** 2 / np.sum(parts**2 / (np.array(n) - 1)))
    t_crit = sps.t.isf(alpha / 2, df)

    def short(delta: float) -> float:
        nc = delta / se
        reach = float(sps.nct.sf(t_crit, df, nc) + sps.nct.cdf(-t_crit, df, nc))
        return (1.0 if np.isnan(reach) else reach) - power  # scipy's nct is NaN far in the tail, where power is 1

    high = se * (t_crit + 10)
    return float(optimize.brentq(short, 0.0, high)) if short(high) > 0 else float("inf")


# ---- best (exact bootstrap of the minimum, calibrated) --------------------------------------------


def min_law(errors: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The bootstrap law of the minimum of n errors resampled with replacement: (values, probabilities),
    values ascending; P(min* >= v_(i)) = ((n - i + 1) / n)^n. Only the TAIL + 1 smallest errors carry
    mass above e^-TAIL (< 1e-17): the rest of it is put on the last of them."""
    return _law(np.sort(np.asarray(errors, float))[: TAIL + 1], len(errors))


def _law(smallest: np.ndarray, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """min_law from the sorted smallest errors of a sample of n."""
    survival = ((n - np.arange(len(smallest))) / n) ** n
    return smallest, survival - np.append(survival[1:], 0.0)


def _null_smallest(rng: np.random.Generator, n: int) -> np.ndarray:
    """The TAIL + 1 smallest of n standard normal draws, sorted, drawn directly (uniform order
    statistics as normalized sums of exponentials): O(TAIL), not O(n)."""
    k = min(n, TAIL + 1)
    sums = np.cumsum(rng.standard_exponential(k))
    return ndtri(sums / (sums[-1] + rng.standard_gamma(n + 1 - k)))


def _sum_law(laws, weights) -> Tuple[np.ndarray, np.ndarray]:
    """The law of sum_k w_k X_k (w = +-1) of independent discrete laws, materialized, sorted."""
    values, probs = np.zeros(1), np.ones(1)
    for (v, p), w in zip(laws, weights):
        values = np.add.outer(values, w * v).ravel()
        probs = np.multiply.outer(probs, p).ravel()
    values = np.round(values, DIGITS)  # a contrast equal to 0 in decimals is 0, not float32 noise of 1e-6
    order = np.argsort(values, kind="stable")
    return values[order], probs[order]


class ContrastLaw:
    """The exact bootstrap law of T = sum_k w_k min*_k from each minimum's law (`min_law`), held as
    two halves (T = X + Y): a four-group contrast costs 2 x 41^2 atoms at any n, not 41^4."""

    def __init__(self, laws: Sequence[Tuple[np.ndarray, np.ndarray]], weights: Sequence[float]):
        half = len(laws) // 2
        self.x, px = _sum_law(laws[:half], weights[:half])
        self.cx = np.cumsum(px)
        self.y, self.py = _sum_law(laws[half:], weights[half:])

    def at_most(self, t: float) -> float:
        """P(T <= t)."""
        idx = np.searchsorted(self.x, t - self.y, side="right")
        return float(np.sum(self.py * np.where(idx > 0, self.cx[np.maximum(idx - 1, 0)], 0.0)))

    def at_least(self, t: float) -> float:
        """P(T >= t)."""
        idx = np.searchsorted(self.x, t - self.y, side="left")
        return float(np.sum(self.py * (1.0 - np.where(idx > 0, self.cx[np.maximum(idx - 1, 0)], 0.0))))

    def raw_p(self) -> float:
        """The two-sided bootstrap p at 0: 2 min(P(T <= 0), P(T >= 0)), at most 1."""
        return round(min(1.0, max(0.0, 2 * min(self.at_most(0.0), self.at_least(0.0)))), 12)  # 0 is 0

    def _atom_above(self, t: float) -> float:
        """The smallest atom of T above `t`."""
        idx = np.searchsorted(self.x, t - self.y, side="right")
        ok = idx < len(self.x)
        return float((self.x[idx[ok]] + self.y[ok]).min())

    def _atom_below(self, t: float) -> float:
        """The largest atom of T below `t`."""
        idx = np.searchsorted(self.x, t - self.y, side="left") - 1
        ok = idx >= 0
        return float((self.x[idx[ok]] + self.y[ok]).max())

    def lower(self, q: float) -> float:
        """inf{t: P(T <= t) >= q}: so lower(q) > 0 exactly when P(T <= 0) < q."""
        lo, hi = self.x[0] + self.y[0] - 1.0, self.x[-1] + self.y[-1]
        for _ in range(200):
            mid = (lo + hi) / 2
            if mid in (lo, hi):
                break
            lo, hi = (lo, mid) if self.at_most(mid) >= q else (mid, hi)
        return self._atom_above(lo)

    def upper(self, q: float) -> float:
        """sup{t: P(T >= t) >= q}: so upper(q) < 0 exactly when P(T >= 0) < q."""
        lo, hi = self.x[0] + self.y[0], self.x[-1] + self.y[-1] + 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            if mid in (lo, hi):
                break
            lo, hi = (mid, hi) if self.at_least(mid) >= q else (lo, mid)
        return self._atom_below(hi)


@functools.lru_cache(maxsize=256)
def null_raw_ps(n: Tuple[int, ...], weights: Tuple[float, ...], studies: int = CALIBRATION_STUDIES) -> np.ndarray:
    """The raw bootstrap p of `studies` null studies (every group N(0, 1), these n), sorted."""
    rng = np.random.default_rng([CALIBRATION_SEED, *n, len(weights)])
    return np.sort([ContrastLaw([_law(_null_smallest(rng, k), k) for k in n], weights).raw_p() for _ in range(studies)])


def calibrated_p(raw: float, null: np.ndarray) -> float:
    """(1 + the null studies whose raw bootstrap p is at most `raw`) / (1 + their number): a Monte-Carlo
    p-value, never 0, valid at any number of null studies."""
    return float((np.searchsorted(null, raw, side="right") + 1) / (len(null) + 1))


def best_contrast(groups: Sequence[np.ndarray], weights: Sequence[float], alpha: float = ALPHA) -> Test:
    """The contrast sum_k w_k min_k of best errors (w = +-1), by the exact, calibrated bootstrap of
    the minimum (module docstring)."""
    groups = [np.asarray(g, float) for g in groups]
    n = tuple(len(g) for g in groups)
    if min(n) < 1:
        return Test(
            rule="best", estimate=float("nan"), ci=None, level=None, p=None, n=n, alpha=alpha, why_untestable="no trial"
        )
    estimate = float(sum(w * g.min() for w, g in zip(weights, groups)))
    null = null_raw_ps(n, tuple(weights))
    law = ContrastLaw([min_law(g) for g in groups], weights)
    p = calibrated_p(law.raw_p(), null)
    floor = calibrated_p(0.0, null)  # a raw p of 0 (samples fully apart) is the smallest there is
    # p <= alpha exactly when the raw p is below null[k]: the interval at that calibrated level
    k = int(np.floor(alpha * (len(null) + 1) - 1 + 1e-9))
    threshold = float(null[k]) if 0 <= k < len(null) else (1.0 if k >= len(null) else 0.0)
    if floor > alpha:  # no interval: at any level it would decide what this design cannot
        return Test(rule="best", estimate=estimate, ci=None, level=None, p=p, n=n, alpha=alpha, floor=floor)
    ci = (law.lower(threshold / 2), law.upper(threshold / 2))
    return Test(rule="best", estimate=estimate, ci=ci, level=1 - threshold, p=p, n=n, alpha=alpha, floor=floor)


# ---- ks (Δ-EDFs) --------------------------------------------------------------------------------


def delta_ks(values: np.ndarray, is_a: np.ndarray, n_a: int) -> Tuple[np.ndarray, np.ndarray]:
    """One-sided KS distances between Δ-EDFs (Δ = error - its own group's best) for each labelling
    `is_a` (True: group a; the last axis runs over the pooled values, both arrays broadcast):
    sup (F_a - F_b) and sup (F_b - F_a), taken at the ends of ties."""
    shape = np.broadcast_shapes(np.shape(values), np.shape(is_a))
    v, is_a = np.broadcast_to(values, shape), np.broadcast_to(is_a, shape)
    n_b = shape[-1] - n_a
    min_a = np.where(is_a, v, np.inf).min(-1, keepdims=True)
    delta = v - np.where(is_a, min_a, np.where(is_a, np.inf, v).min(-1, keepdims=True))
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


def _centred(ea: np.ndarray, eb: np.ndarray) -> np.ndarray:
    """Both models' errors, each centred on its median: a difference in location is not a difference
    of Δ-EDFs, and pooled uncentred errors would make one (measured: 25-35% false decisions)."""
    return np.concatenate([ea - np.median(ea), eb - np.median(eb)])


def _labelings(n_a: int, n_b: int, rng: np.random.Generator, n_perm: int) -> Tuple[np.ndarray, bool]:
    """Every split of n_a + n_b values into groups of n_a and n_b where there are at most n_perm of
    them (exact), else n_perm random ones; and whether they are exhaustive."""
    total = n_a + n_b
    if math.comb(total, n_a) <= n_perm:
        splits = np.zeros((math.comb(total, n_a), total), bool)
        for row, chosen in enumerate(itertools.combinations(range(total), n_a)):
            splits[row, list(chosen)] = True
        return splits, True
    return np.argsort(rng.random((n_perm, total)), axis=1) < n_a, False


class DeltaKS(NamedTuple):
    """The Δ-EDF test's result: the Test and each direction's distance and permutation p."""

    test: Test
    d_a_better: float  # sup (F_a - F_b) of the Δ-EDFs: how far a's lies above b's
    d_b_better: float
    p_a_better: float
    p_b_better: float


def ks_pair(
    ea: np.ndarray, eb: np.ndarray, alpha: float = ALPHA, n_perm: int = N_PERM, seed: int = PERMUTATION_SEED
) -> DeltaKS:
    """The Δ-EDF test of two models' errors: one-sided KS distances between their Δ-EDFs (H1: a's Δ
    stochastically smaller, its trials nearer its best; and b's), each judged by a permutation test
    at alpha / 2. The errors of each model are centred on its median and pooled; every split
    recomputes both references (a plain KS test takes them as known and decides about a third of
    null studies at n = 24). Under "one shape, any location" the centred errors are exchangeable
    up to the medians' noise, which makes the test conservative (docs/calibration.md). Exact
    enumeration up to n_perm splits, else n_perm random ones seeded by the data. The Test's
    estimate is the larger D, its p = 2 min of the one-sided p."""
    ea, eb = np.asarray(ea, float), np.asarray(eb, float)
    values = _centred(ea, eb)
    observed = np.arange(len(values)) < len(ea)
    d_a, d_b = (float(d[0]) for d in delta_ks(values, observed[None, :], len(ea)))
    splits, exact = _labelings(len(ea), len(eb), data_rng(seed, ea, eb), n_perm)
    perm_a, perm_b = delta_ks(values, splits, len(ea))
    tol = 1e-12

    def p_of(perm: np.ndarray, d: float) -> float:
        at_least = int(np.sum(perm >= d - tol))
        return at_least / len(perm) if exact else (at_least + 1) / (len(perm) + 1)

    p_a, p_b = p_of(perm_a, d_a), p_of(perm_b, d_b)
    total = math.comb(len(values), len(ea))
    floor = min(1.0, 2 * (1 / total if exact else max(1 / total, 1 / (n_perm + 1))))
    n = (len(ea), len(eb))
    p = min(1.0, 2 * min(p_a, p_b))
    test = Test(rule="ks", estimate=max(d_a, d_b), ci=None, level=None, p=p, n=n, alpha=alpha, floor=floor)
    return DeltaKS(test, d_a, d_b, p_a, p_b)


def ks_power(d: float, n: Tuple[int, int], alpha: float = ALPHA, n_sim: int = 200, seed: int = 0) -> float:
    """Simulated power of the Δ-EDF test (one direction, at alpha / 2, 199 permutations) when a's
    errors are U(0, 1) and b's U(0, 1 / (1 - d)): both start at their best, and their Δ-EDFs are
    D = d apart (b's errors spread 1 / (1 - d) times wider). Studies run in batches, all against
    one set of random splits (each study's test stays exact)."""
    rng = np.random.default_rng([seed, *n])
    width = 1 / (1 - d) if d < 1 else 1e6
    total = n[0] + n[1]
    splits, exact = _labelings(n[0], n[1], rng, 199)
    observed = np.arange(total) < n[0]
    hits = 0
    batch = max(1, 4_000_000 // (len(splits) * total))
    for start in range(0, n_sim, batch):
        k = min(batch, n_sim - start)
        a, b = rng.random((k, n[0])), rng.random((k, n[1])) * width
        a, b = a - np.median(a, axis=1, keepdims=True), b - np.median(b, axis=1, keepdims=True)
        values = np.concatenate([a, b], axis=1)[:, None, :]
        d_obs = delta_ks(values, observed, n[0])[0]  # (k, 1)
        at_least = np.sum(delta_ks(values, splits, n[0])[0] >= d_obs - 1e-12, axis=1)
        p = at_least / len(splits) if exact else (at_least + 1) / (len(splits) + 1)
        hits += int(np.sum(p <= alpha / 2))
    return hits / n_sim


@functools.lru_cache(maxsize=256)
def ks_detectable(n: Tuple[int, int], alpha: float = ALPHA, power: float = POWER) -> float:
    """The Δ-EDF distance D found with probability `power` at these n (`ks_power`, to 0.01); inf
    where even D = 0.99 is not (n too small)."""
    if ks_power(0.99, n, alpha) < power:
        return float("inf")
    lo, hi = 0, 99  # in hundredths
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ks_power(mid / 100, n, alpha) >= power else (mid, hi)
    return hi / 100


@functools.lru_cache(maxsize=256)
def trials_for_ks(d: float, alpha: float = ALPHA, power: float = POWER) -> int:
    """Trials per model (equal n) for the Δ-EDF test to find a distance d with probability `power`
    (`ks_power`); MAX_PLANNED + 1 where even MAX_PLANNED would not; StatsError outside 0 < d < 1."""
    if not 0 < d < 1:
        raise StatsError(f"trials_for_ks: d: bad value {d!r}; allowed: 0 < d < 1 (a KS distance)")
    hi = 4
    while ks_power(d, (hi, hi), alpha) < power:
        if hi >= MAX_PLANNED:
            return MAX_PLANNED + 1  # more than MAX_PLANNED: not worth simulating further
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ks_power(d, (mid, mid), alpha) >= power else (mid, hi)
    return hi


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


def data_rng(seed: int, *arrays: np.ndarray) -> np.random.Generator:
    """A generator seeded by `seed` and the data: one quantity gets one interval in every report."""
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(a, float).tobytes() for a in arrays)).digest()
    return np.random.default_rng([seed, *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def area_interval(ea: np.ndarray, eb: np.ndarray, seed: int = 0, n_boot: int = 4000) -> Tuple[float, float]:
    """95% percentile interval of the signed area between two Δ-EDFs, mean Δ of b - mean Δ of a, each
    sample resampled with replacement and its reference (best) recomputed in every resample (fixed
    references miss the truth in 20-40% of studies); seeded by the data (`data_rng`)."""
    rng = data_rng(seed, ea, eb)
    ra, rb = (e[rng.integers(0, len(e), (n_boot, len(e)))] for e in (ea, eb))
    draws = (rb.mean(1) - rb.min(1)) - (ra.mean(1) - ra.min(1))
    lo, hi = np.quantile(draws, [ALPHA / 2, 1 - ALPHA / 2])
    return float(lo), float(hi)
