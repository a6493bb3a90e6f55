"""Monte-Carlo p-values whose verdict does not depend on the random draw.

A permutation p (or a p calibrated on simulated null studies) estimated from `draws` random draws is
(1 + count) / (1 + draws), valid at any number of draws; its verdict at a threshold (α, or one of
Holm's α / k) can still differ from the exact p's when the exact p lies near the threshold.
`sequential` draws in batches until the Clopper-Pearson interval of the exact p at 1 - RISK (scipy's
`binomtest(...).proportion_ci`) holds no threshold, so that any seed gives the same verdict with
probability at least 1 - RISK, or until `most` draws; a p whose interval still holds a threshold is
`borderline`, and its interval is reported beside it. This is the interval form of Gandy's (2009)
sequential Monte-Carlo test, written here because scipy's `permutation_test` draws a fixed number.
"""

from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import scipy

RISK = 0.001  # the chance that a verdict differs from the exact p's (a different seed's) at most
DOUBLINGS = 5  # draws at most: the first look's times 2^DOUBLINGS; a p still this close to a threshold is borderline


class MonteCarloP(NamedTuple):
    """A Monte-Carlo p: `hits`, the draws at least as extreme as the data, of `draws` draws."""

    hits: int
    draws: int
    exact: bool = False  # every draw enumerated: p is the exact p, no interval

    @property
    def p(self) -> float:
        """The p-value: hits / draws where enumerated, else (1 + hits) / (1 + draws)."""
        return self.hits / self.draws if self.exact else (1 + self.hits) / (1 + self.draws)

    @property
    def interval(self) -> Optional[Tuple[float, float]]:
        """The exact p's Clopper-Pearson interval at 1 - RISK (None where enumerated)."""
        if self.exact:
            return None
        ci = scipy.stats.binomtest(self.hits, self.draws).proportion_ci(confidence_level=1 - RISK, method="exact")
        return float(ci.low), float(ci.high)

    def settled(self, thresholds: Sequence[float]) -> bool:
        """Whether no threshold lies inside the exact p's interval (every verdict is that of the exact p)."""
        interval = self.interval
        return interval is None or not any(interval[0] < t < interval[1] for t in thresholds)


def sequential(count_more: Callable[[int, int], int], thresholds: Sequence[float], first: int) -> MonteCarloP:
    """Draw until the p is settled at `thresholds`, or first x 2^DOUBLINGS draws are made: `count_more(start,
    k)` makes draws start .. start + k - 1 (the same draws for the same start, whatever came before) and
    returns how many were at least as extreme as the data. The total doubles at each look (first, 2 first,
    4 first, ...), so a settled p costs at most twice the draws it needed."""
    hits, draws = count_more(0, first), first
    while True:
        result = MonteCarloP(hits, draws)
        if result.settled(thresholds) or draws >= first << DOUBLINGS:
            return result
        hits += count_more(draws, draws)
        draws *= 2
