"""Coverage of the effect sizes' bootstrap intervals (hpstudy.analysis.effects), measured by simulation: for
each distribution and n, `--studies` simulated pairs of cells, and the share of intervals that hold the true
value (the probability of improvement and the IQM of cell a, from one sample of 2,000,000 per cell). Prints one
JSON object; docs/analysis.md quotes it.

    python -m bench.effects [--studies 1000] [--ns 8,24,64] [--seed 0]

Distributions (errors in points; b is a's distribution shifted by SHIFT points): normal (sd 2), a grid of
whole images of 360 (the reproduction's validation set: ties), skewed (lognormal), and diverged (a tenth of
trials at chance, 90 points).
"""

import argparse
import json
import math
import sys
import time
from typing import Callable, Dict

import numpy as np

from hpstudy.analysis.effects import CONFIDENCE, pair_effects, probability_of_improvement

SHIFT = 1.0
TRUTH_SAMPLE = 2_000_000


def _normal(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.normal(10.0, 2.0, n)


def _grid360(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.round(rng.normal(10.0, 2.0, n) * 3.6) / 3.6  # whole images of 360: 0.28 points a step


def _skewed(rng: np.random.Generator, n: int) -> np.ndarray:
    return 8.0 + rng.lognormal(0.0, 0.8, n) * 2.0


def _diverged(rng: np.random.Generator, n: int) -> np.ndarray:
    errors = rng.normal(10.0, 2.0, n)
    return np.where(rng.random(n) < 0.1, 90.0, errors)


DISTRIBUTIONS: Dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "normal": _normal,
    "grid360": _grid360,
    "skewed": _skewed,
    "diverged": _diverged,
}


def _draw_pair(draw, rng: np.random.Generator, n: int):
    """Cell a and cell b (a's distribution SHIFT points higher; on the grid, a whole number of its steps)."""
    a, b = draw(rng, n), draw(rng, n)
    return a, np.where(b >= 90.0, b, b + SHIFT)


def true_values(draw) -> Dict[str, float]:
    """The probability of improvement and a's IQM, from one large sample per cell."""
    from scipy.stats import trim_mean

    rng = np.random.default_rng(12345)
    a, b = _draw_pair(draw, rng, TRUTH_SAMPLE)
    sub = slice(0, 200_000)  # the pairwise count on a subsample: its Monte-Carlo error is ~0.001
    return {"p_a_better": probability_of_improvement(a[sub], b[sub]), "iqm_a": float(trim_mean(a, 0.25))}


def coverage(name: str, n: int, studies: int, seed: int) -> Dict[str, object]:
    """The share of `studies` intervals that hold the truth, per quantity, with its Monte-Carlo se."""
    draw = DISTRIBUTIONS[name]
    truth = true_values(draw)
    rng = np.random.default_rng([seed, n])
    held = {key: 0 for key in truth}
    for study in range(studies):
        found = pair_effects(*_draw_pair(draw, rng, n), seed=study)
        for key, value in truth.items():
            held[key] += found[f"{key}_low"] <= value <= found[f"{key}_high"]
    out: Dict[str, object] = {"null": name, "n": n, "studies": studies, "truth": truth}
    for key, count in held.items():
        rate = count / studies
        out[key] = {"coverage": rate, "mc_se": math.sqrt(rate * (1 - rate) / studies)}
    return out


def run_cells(bench: str, doc: str, measure: Callable, argv, studies: int, ns: str, **stated) -> int:
    """The command line of a bench of simulated pairs of cells: `measure(distribution, n, studies, seed)` for every
    distribution and n, printed as one JSON object with `stated` and the seconds it took."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=studies, help="simulated pairs per distribution and n")
    parser.add_argument("--ns", default=ns, help="trials per cell, comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.time()
    cells = [measure(name, int(n), args.studies, args.seed) for name in DISTRIBUTIONS for n in args.ns.split(",")]
    json.dump(
        {"bench": bench, **stated, "cells": cells, "seconds": round(time.time() - start, 1)}, sys.stdout, indent=1
    )
    print()
    return 0


def main(argv=None) -> int:
    """Print the coverage of every distribution and n as one JSON object."""
    return run_cells("effects", __doc__, coverage, argv, 1000, "8,24,64", confidence=CONFIDENCE)


if __name__ == "__main__":
    sys.exit(main())
