"""A test across cells: whether a's trials beat b's in the cells a design separates, valid however the cells
depend on each other.

Cells of one study are rarely independent: a study that samples lr/wd trains the same configurations at every
length (and for every model), a seed study the same seeds in every cell, so a configuration's or a seed's error
in one cell predicts it in another. A permutation within each cell, independently, assumes they are not, and
rejects far more often than alpha when they are. Here each cell gets its own one-sided p of the Mann-Whitney
statistic (every split of the cell enumerated up to permutation.EXACT_SPLITS, ties included, else scipy's
tie-corrected normal approximation of `mannwhitneyu`), and the cells' p's are merged by e times their
geometric mean, a valid p under any dependence between them (Vovk and Wang 2020, "Combining p-values via
averaging"), on the side of 1/2 the estimate lies, doubled for that choice of side. Where the cells are
independent it is conservative; its size and power, shared units included, are measured by
`python -m bench.stratified`.
"""

import functools
import math
from typing import Sequence, Tuple

import numpy as np
import scipy

from hpstudy.analysis.effects import CONFIDENCE, mean_improvement
from hpstudy.analysis.inference import ALPHA, Test
from hpstudy.analysis.permutation import EXACT_SPLITS, exact_splits

RULE = "stratified"
TOLERANCE = 1e-9  # a split's probability this near the data's is as extreme (float sums in another order)

Cells = Sequence[Tuple[np.ndarray, np.ndarray]]


def _splits(ea: np.ndarray, eb: np.ndarray) -> int:
    return math.comb(len(ea) + len(eb), len(ea))


@functools.lru_cache(maxsize=64)
def _split_matrix(n_a: int, total: int) -> np.ndarray:
    """permutation.exact_splits, kept: a family's cells repeat a few sizes, and listing 32,768 splits takes 30 ms."""
    return exact_splits(n_a, total).astype(float)


def cell_p(ea: np.ndarray, eb: np.ndarray, a_lower: bool) -> float:
    """One cell's one-sided p that a's errors lie lower (`a_lower`) or higher than b's, by a's probability of
    improvement (the Mann-Whitney U over n_a n_b): the share of every split of the pooled errors at least as far
    on that side, ties as they are (midranks), up to EXACT_SPLITS splits; beyond, scipy's tie-corrected normal
    approximation (`mannwhitneyu(method="asymptotic")`)."""
    n_a, n_b = len(ea), len(eb)
    if _splits(ea, eb) > EXACT_SPLITS:
        alternative = "less" if a_lower else "greater"
        return float(scipy.stats.mannwhitneyu(ea, eb, alternative=alternative, method="asymptotic").pvalue)
    ranks = scipy.stats.rankdata(np.concatenate([ea, eb]))
    improvement = 1 - (_split_matrix(n_a, n_a + n_b) @ ranks - n_a * (n_a + 1) / 2) / (n_a * n_b)
    observed = improvement[0]  # exact_splits lists the data's own split first
    far = improvement >= observed - TOLERANCE if a_lower else improvement <= observed + TOLERANCE
    return float(np.mean(far))


def merged_p(ps: Sequence[float]) -> float:
    """e times the geometric mean of p-values: a valid p however they depend on each other (Vovk and Wang 2020)."""
    return min(1.0, math.e * math.exp(float(np.mean(np.log(np.maximum(ps, 1e-300))))))


def smallest_p(cells: Cells) -> float:
    """The smallest p the design can give: every cell's one-sided p where all of a lies below all of b (1 /
    C(n_a + n_b, n_a) where enumerated), merged and doubled."""
    separated = [
        (np.arange(len(ea), dtype=float), np.arange(len(ea), len(ea) + len(eb), dtype=float)) for ea, eb in cells
    ]
    return min(1.0, 2 * merged_p([cell_p(ea, eb, True) for ea, eb in separated]))


def mean_improvement_test(cells: Cells, ci: Tuple[float, float], alpha: float = ALPHA) -> Test:
    """The Test of a's probability of improvement averaged over cells (effects.mean_improvement): its estimate,
    the stratified bootstrap interval `ci` (effects.mean_improvement_interval) and the merged p (module
    docstring) on the estimate's side of 1/2; n is the trials per group over all cells."""
    estimate = mean_improvement(cells)
    a_lower = estimate >= 0.5
    p = min(1.0, 2 * merged_p([cell_p(np.asarray(ea, float), np.asarray(eb, float), a_lower) for ea, eb in cells]))
    return Test(
        rule=RULE,
        estimate=estimate,
        ci=ci,
        level=CONFIDENCE,
        p=p,
        n=(sum(len(ea) for ea, _ in cells), sum(len(eb) for _, eb in cells)),
        alpha=alpha,
        floor=smallest_p(cells),
    )
