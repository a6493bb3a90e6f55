"""Analysis speed on a large table: EDF + DKW band + gaps for 20 groups of 1,000,000 trial rows; and
the bootstraps a report runs per cell.

    python -m bench.analysis [--rows 1000000]
    python -m bench.analysis --bootstraps [--baseline DIR]

Prints one JSON object with the wall time of each step (seconds, one run on this machine). With
--bootstraps: seconds per call (best of 5) of `bootstrap_band`, `expected_best_band` and
`area_interval` as the report calls them, at 24, 96 and 512 trials; --baseline DIR times the same
calls from an older `analysis/` folder beside them (`git archive HEAD analysis | tar -x -C DIR`,
then DIR/analysis).
"""

import argparse
import importlib.util
import json
import os
import platform
import time
from typing import Callable, Dict, Optional

import numpy as np
import pandas as pd

from hpstudy.analysis import edf, inference, stats
from hpstudy.analysis.edf import edf_table
from hpstudy.analysis.gaps import optimizer_gap

BOOTSTRAP_TRIALS = (24, 96, 512)


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


def _load(folder: str, name: str):
    """The module `name` (edf, stats, inference) from the analysis folder `folder`."""
    spec = importlib.util.spec_from_file_location(f"baseline_{name}", os.path.join(folder, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _calls(edf_module, stats_module, inference_module, errors: np.ndarray) -> Dict[str, Callable[[], object]]:
    """The report's bootstraps of one cell: as summary_table, expected_best_table and the Δ-EDF finding call them
    (the budgets of this checkout's expected_best_table for either folder, so both compute the same curve)."""
    ks = stats.budget_grid(len(errors))
    return {
        "bootstrap_band": lambda: edf_module.bootstrap_band(errors, n_boot=300),
        "expected_best_band": lambda: stats_module.expected_best_band(errors, ks, n_boot=200),
        "area_interval": lambda: inference_module.area_interval(errors, errors[::-1] + 1.0),
    }


def _seconds(call: Callable[[], object], reps: int = 5) -> float:
    """Best of `reps` wall times of `call` (the machine is shared: the minimum is the least noisy)."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return min(times)


def bootstraps(baseline: Optional[str]) -> Dict:
    """Seconds per call of each bootstrap at BOOTSTRAP_TRIALS trials, and of the baseline's."""
    base = (_load(baseline, "edf"), _load(baseline, "stats"), _load(baseline, "inference")) if baseline else None
    cases = []
    for n in BOOTSTRAP_TRIALS:
        errors = np.random.default_rng(n).gamma(2.0, 3.0, n) + 20
        now = _calls(edf, stats, inference, errors)
        then = _calls(*base, errors) if base else {}
        for name, call in now.items():
            case = {"function": name, "trials": n, "s": round(_seconds(call), 5)}
            if name in then:
                case["baseline_s"] = round(_seconds(then[name]), 5)
                case["speedup"] = round(case["baseline_s"] / case["s"], 1)
            cases.append(case)
    return {"bench": "analysis_bootstraps", "baseline": baseline, "cases": cases, "machine": _machine()}


def _machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--bootstraps", action="store_true", help="time the report's bootstraps per cell instead")
    parser.add_argument("--baseline", help="with --bootstraps: an older analysis/ folder to time beside them")
    args = parser.parse_args()
    if args.bootstraps:
        print(json.dumps(bootstraps(args.baseline)))
        return
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
                "machine": _machine(),
            }
        )
    )


if __name__ == "__main__":
    main()
