"""Two-sample permutation p-values: every split of the pooled values enumerated where there are few,
else random splits in seeded blocks, drawn until the verdict is settled (`montecarlo.sequential`).

Written here rather than with `scipy.stats.permutation_test` because the tests need what it does not
give: a statistic computed for a whole batch of splits at once (both groups' bests recomputed per
split), draws that are the same whatever the batches (so a p drawn further extends the same draws), and
draws that continue until the verdict does not depend on the seed.
"""

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from hpstudy.analysis.montecarlo import DOUBLINGS, MonteCarloP, sequential

EXACT_SPLITS = 2**15  # enumerate every split up to this many (16 + 16 values have 601,080,390)
FIRST = 10_000  # random splits before the first look
# Values permuted at the first look at most: FIRST splits up to 500 pooled values; a bigger sample's first
# look draws fewer splits (a multiple of BLOCK), so its cost stops growing with n, and `sequential` draws
# more wherever the verdict is not settled (the same guarantee: any seed, the same verdict, 1 - RISK)
FIRST_VALUES = 5_000_000
BLOCK = 1_000  # splits drawn from one seeded generator: the draws do not depend on how they are batched
CHUNK_VALUES = 1 << 20  # values handled at once (memory bounded whatever the n or the number of splits)

# splits (rows of n_a True among the pooled values) -> whether each is at least as extreme as the data
Extreme = Callable[[np.ndarray], np.ndarray]


def exact_splits(n_a: int, total: int) -> np.ndarray:
    """Every split of `total` values into n_a and the rest (rows), the observed one (the first n_a) first."""
    splits = np.zeros((math.comb(total, n_a), total), bool)
    for row, chosen in enumerate(itertools.combinations(range(total), n_a)):
        splits[row, list(chosen)] = True
    return splits


def _count(splits: np.ndarray, extreme: Extreme) -> int:
    """How many splits are at least as extreme as the data, chunked."""
    rows = max(1, CHUNK_VALUES // splits.shape[1])
    return sum(int(np.sum(extreme(splits[start : start + rows]))) for start in range(0, len(splits), rows))


def first_look(total: int, first: int = FIRST) -> int:
    """The random splits of the first look for `total` pooled values: `first`, or fewer (at least BLOCK) so
    that the first look permutes at most FIRST_VALUES values."""
    return max(BLOCK, min(first, FIRST_VALUES // total // BLOCK * BLOCK))


def permutation_p(
    n_a: int, total: int, extreme: Extreme, thresholds: Sequence[float], seed: Sequence[int], first: int = FIRST
) -> MonteCarloP:
    """The permutation p of a two-sample statistic (`extreme` judges splits against the data): exact over
    every split up to EXACT_SPLITS, else first_look(total, first) random splits (a multiple of BLOCK) from
    generators seeded by `seed` (and the block's number), more until the verdict at `thresholds` is settled."""
    if math.comb(total, n_a) <= EXACT_SPLITS:
        splits = exact_splits(n_a, total)
        return MonteCarloP(_count(splits, extreme), len(splits), exact=True)

    def count_more(start: int, k: int) -> int:
        count = 0
        for block in range(start // BLOCK, (start + k) // BLOCK):
            rng = np.random.default_rng([*seed, block])
            rows = max(1, CHUNK_VALUES // total)
            for done in range(0, BLOCK, rows):
                keys = rng.random((min(rows, BLOCK - done), total))  # drawn in order: the same whatever `rows`
                count += int(np.sum(extreme(np.argsort(keys, axis=1) < n_a)))
        return count

    return sequential(count_more, thresholds, first_look(total, first))


def smallest_p(n_a: int, total: int, most_extreme: int, first: int = FIRST) -> float:
    """The smallest p a design can give when `most_extreme` splits are as extreme as the most extreme data:
    their share where every split is enumerated, else also no less than one over the most draws."""
    splits = math.comb(total, n_a)
    share = most_extreme / splits
    most = first_look(total, first) << DOUBLINGS
    return min(1.0, share if splits <= EXACT_SPLITS else max(share, 1 / (most + 1)))
