"""How far the best-of-k win probability (hpstudy.analysis.stats.best_of_k_win) strays from 0.5 when two cells do
not differ, and how far it moves when one is better, measured by simulation: for each distribution and n,
`--studies` simulated pairs of cells of n trials, the curve at k = 1, 2, 4, 8, n / 2 and n. Under the null (b
drawn as a) its spread grows with k, towards a coin flip at k = n (the observed bests compared), so a curve that
rises with k is not by itself evidence; docs/analysis.md quotes this. Prints one JSON object.

    python -m bench.best_of_k [--studies 2000] [--ns 8,24] [--seed 0]

Distributions and the shift of the better cell: as bench.effects (a grid of 360 images, a tenth diverged, ...).
"""

import sys
from typing import Dict, List

import numpy as np

from bench.effects import DISTRIBUTIONS, SHIFT, run_cells
from hpstudy.analysis.stats import best_of_k_win


def budgets(n: int) -> List[int]:
    """The k reported for n trials a cell: 1, 2, 4, 8 (those up to n), n / 2 and n."""
    return sorted({k for k in (1, 2, 4, 8) if k <= n} | {max(1, n // 2), n})


def spread(name: str, n: int, studies: int, seed: int) -> Dict[str, object]:
    """Per k, the curve's mean and sd over `studies` pairs drawn alike (null) and with b SHIFT points worse, and
    under the null the share outside [0.1, 0.9]."""
    draw, ks = DISTRIBUTIONS[name], budgets(n)
    rng = np.random.default_rng([seed, n])
    null, shifted = np.empty((studies, len(ks))), np.empty((studies, len(ks)))
    for study in range(studies):
        a, b, c = draw(rng, n), draw(rng, n), draw(rng, n)
        null[study] = best_of_k_win(a, b, ks)
        shifted[study] = best_of_k_win(a, np.where(c >= 90.0, c, c + SHIFT), ks)
    return {
        "distribution": name,
        "n": n,
        "studies": studies,
        "k": ks,
        "null_mean": np.round(null.mean(axis=0), 3).tolist(),
        "null_sd": np.round(null.std(axis=0), 3).tolist(),
        "null_outside_0.1_0.9": np.round(((null < 0.1) | (null > 0.9)).mean(axis=0), 3).tolist(),
        "shifted_mean": np.round(shifted.mean(axis=0), 3).tolist(),
        "shifted_sd": np.round(shifted.std(axis=0), 3).tolist(),
    }


def main(argv=None) -> int:
    """Print the spread of every distribution and n as one JSON object."""
    return run_cells("best_of_k", __doc__, spread, argv, 2000, "8,24", shift=SHIFT)


if __name__ == "__main__":
    sys.exit(main())
