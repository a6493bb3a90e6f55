"""Size, power and interval coverage of the aggregate across cells (hpstudy.analysis.stratified and
effects.mean_improvement_interval), measured by simulation at the designs users run. Prints one JSON object;
docs/analysis.md quotes it.

    python -m bench.stratified [--studies 1000] [--seed 0]

Each simulated study has the design's cells, each cell at its own level (cell k's errors 5 k points higher: cells
differ, as datasets and schedules do), a and b drawn from one of bench.effects' distributions (normal, a grid of
whole images of 360 with ties, skewed, a tenth diverged at chance error). With `shared units`, trial i of a group
is one unit in every cell (a configuration trained at every length, a seed run in every cell): its errors share
a unit effect (normal, sd UNIT_SD points) across the cells, as the committed reproduction's do. Under the null a
and b share the cell's distribution; for power and coverage b's errors are SHIFT points higher (`power_large`:
LARGE_SHIFT; diverged ones stay at chance), and the truth the interval should hold is the probability of
improvement of independent cells (the same in every cell: the levels move by whole images).
"""

import argparse
import json
import math
import sys
import time
from typing import Dict, List, Tuple

import numpy as np

from bench.effects import DISTRIBUTIONS, SHIFT, true_values
from hpstudy.analysis.effects import CONFIDENCE, mean_improvement_interval
from hpstudy.analysis.inference import ALPHA
from hpstudy.analysis.stratified import mean_improvement_test

CELL_STEP = 5.0  # points between the cells' levels: 18 images of 360, so every cell has one shape on the grid
UNIT_SD = 2.0  # points: a shared unit's effect, as large as the trials' own spread (bench.effects' sd 2)
LARGE_SHIFT = 3.0  # points: power against a large effect too (P(a better) about 0.85 a cell, as in the reproduction)
DESIGNS: Dict[str, Tuple[List[Tuple[int, int]], bool]] = {  # cells (n_a, n_b), shared units
    "reproduction": ([(3, 3)] * 8 + [(24, 24)] * 4, False),  # the committed reproduction: 3-seed and 24-sample cells
    "reproduction, shared units": ([(3, 3)] * 8 + [(24, 24)] * 4, True),
    "2 cells of 24": ([(24, 24)] * 2, False),
    "6 cells of 8": ([(8, 8)] * 6, False),
    "6 cells of 8, shared units": ([(8, 8)] * 6, True),
    "4 cells of 3": ([(3, 3)] * 4, False),
}


def _study(draw, rng: np.random.Generator, design, shared: bool, shift: float):
    """One simulated study's cells: a and b per cell, b `shift` points higher (not the diverged); with `shared`,
    trial i of each group carries one unit effect in every cell."""
    most = max(n for pair in design for n in pair)
    units = rng.normal(0.0, UNIT_SD, (2, most)) if shared else np.zeros((2, most))
    cells = []
    for k, (n_a, n_b) in enumerate(design):
        a, b = draw(rng, n_a), draw(rng, n_b)
        level = k * CELL_STEP
        a = np.where(a >= 90.0, a, a + level + units[0, :n_a])
        b = np.where(b >= 90.0, b, b + level + units[1, :n_b] + shift)
        cells.append((a, b))
    return cells


def _rate(count: int, studies: int) -> Dict[str, float]:
    rate = count / studies
    return {"rate": rate, "mc_se": math.sqrt(rate * (1 - rate) / studies)}


def measure(design: str, name: str, studies: int, seed: int) -> Dict[str, object]:
    """Size (null), power (b SHIFT higher) and the interval's coverage of the truth, over `studies` studies each."""
    draw, (cells_of, shared) = DISTRIBUTIONS[name], DESIGNS[design]
    truth = true_values(draw)["p_a_better"]
    labels = [(f"a{k}", f"b{k}") for k in range(len(cells_of))]
    rng = np.random.default_rng([seed, len(cells_of), sum(n for pair in cells_of for n in pair), shared])
    rejected, found, found_large, held, start = 0, 0, 0, 0, time.time()
    for study in range(studies):
        null = _study(draw, rng, cells_of, shared, 0.0)
        rejected += mean_improvement_test(null, (0.0, 1.0)).p <= ALPHA
        shifted = _study(draw, rng, cells_of, shared, SHIFT)
        low, high = mean_improvement_interval(shifted, labels, seed=study)
        found += mean_improvement_test(shifted, (low, high)).p <= ALPHA
        held += low <= truth <= high
        found_large += mean_improvement_test(_study(draw, rng, cells_of, shared, LARGE_SHIFT), (0.0, 1.0)).p <= ALPHA
    return {
        "design": design,
        "cells": [list(pair) for pair in cells_of],
        "shared_units": shared,
        "distribution": name,
        "studies": studies,
        "size": _rate(rejected, studies),
        "power": _rate(found, studies),
        "power_large": _rate(found_large, studies),
        "truth": truth,
        "coverage": _rate(held, studies),
        "seconds_per_study": round((time.time() - start) / studies, 4),
    }


def main(argv=None) -> int:
    """Print size, power and coverage for every design and distribution as one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--studies", type=int, default=1000, help="simulated studies per design and distribution")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.time()
    rows = [measure(design, name, args.studies, args.seed) for design in DESIGNS for name in DISTRIBUTIONS]
    out = {"bench": "stratified", "alpha": ALPHA, "shift": SHIFT, "large_shift": LARGE_SHIFT, "unit_sd": UNIT_SD}
    out["confidence"] = CONFIDENCE
    out["rows"] = rows
    json.dump({**out, "seconds": round(time.time() - start, 1)}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
