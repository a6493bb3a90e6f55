"""Orchestration overhead, side by side on the same trials; prints one JSON object.

    python -m bench.orchestration [--trials 16] [--epochs 2] [--concurrency 2] [--micro]
                                  [--methods raw,hpstudy,tune,optuna]

The same trial configs (vit_c_tiny and cnn_tiny on digits, AdamW and SGD; or near-zero trials on
8 px synthetic data with --micro) run four ways:
  raw      back to back in this process, one thread each: the limit is their summed wall / concurrency;
  hpstudy  run_study on a local Ray of `concurrency` CPUs (stored, compacted, resumable);
  tune     the Ray Tune program a user would write instead: a function trainable that trains one
           config and reports its row, Tuner with tune.grid_search over the configs, default settings
           (1 CPU a trial), the result table written to Parquet at the end;
  optuna   Optuna's study.optimize in this process, n_jobs = concurrency, each trial the next config.
Each method's ratio is its wall / the limit (1.0 = no overhead). hpstudy runs first in a fresh
process so `driver_peak_rss_mb` (ru_maxrss) is its driver's; `trials_per_s_first/last_tenth` are
hpstudy's storing rate over the first and the last tenth of the run (from the rows' finished_at).
"""

import argparse
import contextlib
import json
import os
import platform
import resource
import sys
import tempfile
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import torch  # noqa: E402

from hpstudy.study.ray_session import TUNE_ENV  # noqa: E402
from hpstudy.study.runner import run_study  # noqa: E402
from hpstudy.study.sampling import expand  # noqa: E402
from hpstudy.study.spec import parse_spec  # noqa: E402
from hpstudy.study.store.read import load_trials  # noqa: E402
from hpstudy.trainers.trial import train_trial  # noqa: E402

MICRO_DATA = {"name": "synthetic", "image_size": 8, "n_train": 32, "n_val": 16, "num_classes": 4}
METHODS = ("hpstudy", "raw", "tune", "optuna")


def bench_spec(trials: int, epochs: int, micro: bool = False) -> dict:
    """vit_c_tiny and cnn_tiny on digits (or on micro synthetic data: near-zero trials, to isolate
    orchestration cost and driver memory), AdamW and SGD: trials / 4 samples per cell."""
    dataset = MICRO_DATA if micro else {"name": "digits", "image_size": 16}
    return {
        "name": "bench_orchestration",
        "dataset": dataset,
        "fuse": "off",
        "recipe": {"batch_size": 64, "warmup_epochs": 0.5, "device": "cpu"},
        "models": ["vit_c_tiny", "cnn_tiny"],
        "optimizers": ["adamw", "sgd"],
        "epochs": [epochs],
        "samples": max(1, trials // 4),
        "sampler": "sobol",
        "space": {"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]}, "sgd": {"lr": [0.01, 0.1], "wd": [1e-5, 1e-4]}},
        "resources": {"cpu": 1},
    }


def run_hpstudy(spec, concurrency: int) -> dict:
    """The study through run_study; its wall, driver peak RSS and storing rate early and late."""
    with tempfile.TemporaryDirectory() as store, contextlib.redirect_stdout(sys.stderr):
        start = time.perf_counter()
        run_study(spec, store, num_cpus=concurrency, progress_interval=1e9)
        wall = time.perf_counter() - start
        stored = load_trials(store, spec.name, columns=["finished_at"])["finished_at"].sort_values()
    times = (stored - stored.iloc[0]).dt.total_seconds().to_numpy()
    tenth = len(times) // 10
    # the storing rate over a tenth of the run: only meaningful with enough trials in a tenth
    rate = lambda part: round((len(part) - 1) / (part[-1] - part[0]), 2) if tenth >= 10 and part[-1] > part[0] else None
    return {
        "wall_s": round(wall, 2),
        "stored_rows": len(stored),
        "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "trials_per_s_first_tenth": rate(times[:tenth]),
        "trials_per_s_last_tenth": rate(times[-tenth:]),
    }


def run_raw(configs) -> dict:
    """Each config trained in this process, one after another, one thread (as each Ray trial runs)."""
    torch.set_num_threads(1)
    walls = []
    for config in configs:
        start = time.perf_counter()
        train_trial(config)
        walls.append(time.perf_counter() - start)
    return {"sum_s": round(sum(walls), 2), "mean_trial_s": round(sum(walls) / len(walls), 3)}


def _tune_trainable(config):
    """A user's function trainable: train one config, report its row's numbers."""
    from ray import tune

    row = train_trial(config["trial"])
    tune.report({"top1_err": row["top1_err"], "status": row["status"], "wall_s": row["wall_s"]})


def run_tune(configs, concurrency: int) -> dict:
    """Plain Ray Tune over the same configs: grid_search, default settings (none of hpstudy's Tune
    environment, which an earlier method in this process may have set), results to Parquet."""
    import ray
    from ray import tune

    saved = {name: os.environ.pop(name) for name in TUNE_ENV if name in os.environ}
    try:
        with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(sys.stderr):
            start = time.perf_counter()
            ray.init(num_cpus=concurrency, include_dashboard=False, logging_level="WARNING")
            try:
                results = tune.Tuner(
                    _tune_trainable,
                    param_space={"trial": tune.grid_search(configs)},
                    run_config=tune.RunConfig(storage_path=folder, verbose=0),
                ).fit()
                table = results.get_dataframe().drop(columns=["config/trial"], errors="ignore")
                table.to_parquet(os.path.join(folder, "results.parquet"))
            finally:
                ray.shutdown()
            wall = time.perf_counter() - start
    finally:
        os.environ.update(saved)
    rows = int(table["top1_err"].notna().sum()) if "top1_err" in table else 0
    return {"wall_s": round(wall, 2), "errors": results.num_errors, "rows_with_top1_err": rows}


def run_optuna(configs, concurrency: int) -> dict:
    """Optuna's study.optimize in this process (threads), each trial training the next config."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    torch.set_num_threads(1)
    study = optuna.create_study()
    objective = lambda trial: train_trial(configs[trial.number])["top1_err"]
    start = time.perf_counter()
    study.optimize(objective, n_trials=len(configs), n_jobs=concurrency)
    return {"wall_s": round(time.perf_counter() - start, 2), "trials": len(study.trials)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--micro", action="store_true", help="near-zero trials (synthetic 8 px data)")
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated, run in this order (default: {','.join(METHODS)})",
    )
    args = parser.parse_args()
    methods = args.methods.split(",")
    if not methods or set(methods) - set(METHODS):
        parser.error(f"--methods: bad value {args.methods!r}; allowed: a comma-separated subset of {METHODS}")
    spec = parse_spec(bench_spec(args.trials, args.epochs, args.micro))
    configs = [t.config for t in expand(spec)]
    run = {
        "hpstudy": lambda: run_hpstudy(spec, args.concurrency),
        "raw": lambda: run_raw(configs),
        "tune": lambda: run_tune(configs, args.concurrency),
        "optuna": lambda: run_optuna(configs, args.concurrency),
    }
    results = {}
    for method in methods:
        print(f"bench.orchestration: {method} ...", file=sys.stderr, flush=True)
        results[method] = run[method]()
    if "raw" in results:
        limit = results["raw"]["sum_s"] / args.concurrency
        results["raw"]["limit_s"] = round(limit, 2)
        for method in set(results) - {"raw"}:
            results[method]["ratio_to_limit"] = round(results[method]["wall_s"] / limit, 3)
    print(
        json.dumps(
            {
                "bench": "orchestration",
                "trials": len(configs),
                "epochs": args.epochs,
                "micro": args.micro,
                "concurrency": args.concurrency,
                **results,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
            }
        )
    )


if __name__ == "__main__":
    main()
