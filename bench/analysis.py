"""Analysis speed on a large table: EDF + DKW band + gaps for 20 groups of 1,000,000 trial rows.

    python -m bench.analysis [--rows 1000000]

Prints one JSON object with the wall time of each step (seconds, one run on this machine).
"""

import argparse
import json
import os
import platform
import time

import numpy as np
import pandas as pd

from hpstudy.analysis.edf import edf_table
from hpstudy.analysis.gaps import optimizer_gap


def make_table(rows: int, seed: int = 0) -> pd.DataFrame:
    """rows trials over 10 models x 2 optimizers (20 groups), 5% diverged at chance."""
    rng = np.random.default_rng(seed)
    models = np.array([f"m{i}" for i in range(10)])
    err = rng.gamma(2.0, 3.0, rows) + 20
    diverged = rng.random(rows) < 0.05
    return pd.DataFrame(
        {
            "model": pd.Categorical(models[rng.integers(0, 10, rows)]),
            "optimizer": pd.Categorical(np.where(rng.random(rows) < 0.5, "adamw", "sgd")),
            "epochs": 50,
            "status": np.where(diverged, "diverged", "ok"),
            "top1_err": np.where(diverged, 99.9, err),
            "lr": 10 ** rng.uniform(-4, -2, rows),
            "wd": 10 ** rng.uniform(-2, 0, rows),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    table = make_table(args.rows)
    t0 = time.perf_counter()
    edf = edf_table(table, by=["model", "optimizer"], reference="min")
    t1 = time.perf_counter()
    gaps = optimizer_gap(table, by=["model", "epochs"])
    t2 = time.perf_counter()
    print(
        json.dumps(
            {
                "bench": "analysis",
                "rows": args.rows,
                "groups": int(edf.groupby(["model", "optimizer"], observed=True).ngroups),
                "edf_dkw_s": round(t1 - t0, 3),
                "gaps_s": round(t2 - t1, 3),
                "total_s": round(t2 - t0, 3),
                "gap_rows": len(gaps),
                "target_s": 5.0,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            }
        )
    )


if __name__ == "__main__":
    main()
