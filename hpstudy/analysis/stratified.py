"""A test across cells: whether a's trials beat b's on average over the cells a design separates.

The statistic is `effects.mean_improvement`, the probability that a random trial of a has a lower error than
one of b of the same cell (ties half), averaged over cells with equal weights (rliable's aggregate). Its null is
"within every cell, a's and b's errors are exchangeable": the labels are permuted within each cell, never across,
and the mean recomputed; the p is two-sided about 1/2. This is van Elteren's stratified Wilcoxon test with
equal cell weights, by permutation rather than its normal approximation, so that it is exact in size (up to the
Monte-Carlo draw, `montecarlo.sequential`) with ties, diverged trials at one chance error and cells of 3 trials;
its size and power at the n users run are measured by `python -m bench.stratified`. Written here because scipy
has no stratified rank test, and `scipy.stats.permutation_test` permutes across the whole sample.
"""

import math
from typing import List, Sequence, Tuple

import numpy as np
import scipy

from hpstudy.analysis import permutation
from hpstudy.analysis.effects import CONFIDENCE
from hpstudy.analysis.inference import ALPHA, PERMUTATION_SEED, Test, data_rng
from hpstudy.analysis.montecarlo import DOUBLINGS, MonteCarloP, sequential

RULE = "stratified"
TOLERANCE = 1e-9  # a permuted mean this near the data's is as extreme (float sums in another order)

Cells = Sequence[Tuple[np.ndarray, np.ndarray]]


def _split_means(ranks: List[np.ndarray], sizes: List[int], keys: List[np.ndarray]) -> np.ndarray:
    """The mean over cells of a's probability of improvement for each row of random keys (one row per split,
    a cell's first n_a keys' positions taken as a's): 1 - (R_a - n_a (n_a + 1) / 2) / (n_a n_b) per cell, R_a
    the midranks a holds."""
    total = np.zeros(len(keys[0]))
    for r, n_a, k in zip(ranks, sizes, keys):
        n_b = len(r) - n_a
        rank_sum = (np.argsort(k, axis=1) < n_a) @ r
        total += 1 - (rank_sum - n_a * (n_a + 1) / 2) / (n_a * n_b)
    return total / len(ranks)


def smallest_p(cells: Cells, first: int = permutation.FIRST) -> float:
    """The smallest p the design can give: 1 / prod C(n_a + n_b, n_a), the data's own split alone as extreme (ties
    can leave no mirror split: a = [0], b = [5, 5]; without ties its mirror is as extreme and p >= 2 / prod C),
    and a Monte-Carlo p is never below 1 / (draws + 1)."""
    splits = math.prod(math.comb(len(ea) + len(eb), len(ea)) for ea, eb in cells)
    return min(1.0, max(1 / splits, 1 / ((first << DOUBLINGS) + 1)))


def stratified_test(
    cells: Cells,
    alpha: float = ALPHA,
    thresholds: Sequence[float] = (),
    seed: int = PERMUTATION_SEED,
    first: int = permutation.FIRST,
    exact_up_to: int = permutation.EXACT_SPLITS,
) -> Tuple[float, MonteCarloP]:
    """The stratified permutation p of the mean probability of improvement (module docstring), and the data's
    mean: exact over every split of every cell up to `exact_up_to` of them, else Monte-Carlo, drawn in
    seeded blocks (the same draws for the same cells in any order of calls) until the verdict at alpha and
    `thresholds` is settled (montecarlo.sequential)."""
    pooled = [np.concatenate([np.asarray(ea, float), np.asarray(eb, float)]) for ea, eb in cells]
    ranks = [scipy.stats.rankdata(values) for values in pooled]
    sizes = [len(ea) for ea, _ in cells]
    observed = _split_means(ranks, sizes, [np.arange(len(r), dtype=float)[None, :] for r in ranks])[0]
    extreme = lambda means: np.abs(means - 0.5) >= abs(observed - 0.5) - TOLERANCE
    if math.prod(math.comb(len(r), n_a) for r, n_a in zip(ranks, sizes)) <= exact_up_to:
        means = np.zeros(1)
        for r, n_a in zip(ranks, sizes):  # every split of every cell: the means over their product
            splits = permutation.exact_splits(n_a, len(r))
            means = np.add.outer(means, 1 - (splits @ r - n_a * (n_a + 1) / 2) / (n_a * (len(r) - n_a))).ravel()
        means /= len(ranks)
        return float(observed), MonteCarloP(int(np.sum(extreme(means))), len(means), exact=True)
    words = [seed, *data_rng(seed, *pooled, np.asarray(sizes, float)).integers(0, 2**32, 4).tolist()]

    def count_more(start: int, k: int) -> int:
        count = 0
        for block in range(start // permutation.BLOCK, (start + k) // permutation.BLOCK):
            rng = np.random.default_rng([*words, block])
            keys = [rng.random((permutation.BLOCK, len(r))) for r in ranks]
            means = _split_means(ranks, sizes, keys)
            count += int(np.sum(extreme(means)))
        return count

    return float(observed), sequential(count_more, (alpha, *thresholds), first)


def mean_improvement_test(
    cells: Cells,
    ci: Tuple[float, float],
    thresholds: Sequence[float] = (),
    alpha: float = ALPHA,
    seed: int = PERMUTATION_SEED,
) -> Test:
    """The Test of a mean probability of improvement over cells: its estimate, the stratified bootstrap
    interval `ci` (effects.mean_improvement_interval), the stratified permutation p settled at alpha and
    `thresholds` (Holm's, where a family retests it) and the design's floor; n is the trials per group over
    all cells."""
    estimate, mc = stratified_test(cells, alpha, thresholds, seed)
    return Test(
        rule=RULE,
        estimate=estimate,
        ci=ci,
        level=CONFIDENCE,
        p=mc.p,
        n=(sum(len(ea) for ea, _ in cells), sum(len(eb) for _, eb in cells)),
        alpha=alpha,
        floor=smallest_p(cells),
        mc=mc.interval,
    )
