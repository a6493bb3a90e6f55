"""Orchestration overhead: a study of N short trials through run_study on a local Ray against the
same trials run back-to-back in one process with no Ray; prints one JSON object.

    python -m bench.orchestration [--trials 40] [--epochs 2] [--concurrency 2] [--micro]

overhead ratio = Ray study wall / (sum of raw trial walls / concurrency); per-trial overhead =
(Ray wall - raw sum / concurrency) / N. The Ray phase runs first so the driver's peak RSS
(ru_maxrss) is measured before the raw phase builds models in this process.
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

from study.runner import run_study  # noqa: E402
from study.sampling import expand  # noqa: E402
from study.spec import parse_spec  # noqa: E402
from trainers.trial import train_trial  # noqa: E402


MICRO_DATA = {"name": "synthetic", "image_size": 8, "n_train": 32, "n_val": 16, "num_classes": 4}


def bench_spec(trials: int, epochs: int, micro: bool = False) -> dict:
    """vit_c_tiny and cnn_tiny on digits (or on micro synthetic data: near-zero trials, to isolate
    orchestration cost and driver memory), AdamW and SGD: trials / 4 samples per cell."""
    dataset = MICRO_DATA if micro else {"name": "digits", "image_size": 16}
    return {"name": "bench_orchestration", "dataset": dataset, "fuse": "off",
            "recipe": {"batch_size": 64, "warmup_epochs": 0.5, "device": "cpu"},
            "models": ["vit_c_tiny", "cnn_tiny"], "optimizers": ["adamw", "sgd"], "epochs": [epochs],
            "samples": max(1, trials // 4), "sampler": "sobol",
            "space": {"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]},
                      "sgd": {"lr": [0.01, 0.1], "wd": [1e-5, 1e-4]}},
            "resources": {"cpu": 1}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--micro", action="store_true", help="near-zero trials (synthetic 8 px data)")
    parser.add_argument("--skip-raw", action="store_true",
                        help="Ray phase only (driver memory and wall for large N)")
    args = parser.parse_args()
    spec = parse_spec(bench_spec(args.trials, args.epochs, args.micro))
    trials = expand(spec)
    with tempfile.TemporaryDirectory() as store, contextlib.redirect_stdout(sys.stderr):
        t0 = time.perf_counter()
        rows = run_study(spec, store, num_cpus=args.concurrency, progress_interval=1e9)
        ray_wall = time.perf_counter() - t0
    driver_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    torch.set_num_threads(1)  # as each Ray trial runs (one thread per CPU held)
    raw = []
    for trial in [] if args.skip_raw else trials:
        t = time.perf_counter()
        train_trial(trial.config)
        raw.append(time.perf_counter() - t)
    ideal = sum(raw) / args.concurrency
    compared = {} if args.skip_raw else {
        "mean_raw_trial_s": round(sum(raw) / len(raw), 3), "raw_sum_s": round(sum(raw), 2),
        "overhead_ratio": round(ray_wall / ideal, 4),
        "overhead_per_trial_s": round((ray_wall - ideal) / len(trials), 3)}
    print(json.dumps({
        "bench": "orchestration", "trials": len(trials), "epochs": args.epochs, "micro": args.micro,
        "concurrency": args.concurrency, "stored_rows": len(rows), **compared,
        "ray_study_wall_s": round(ray_wall, 2),
        "mean_in_worker_trial_s": round(float(rows["wall_s"].mean()), 3),
        "driver_peak_rss_mb": round(driver_rss_mb, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores"}))


if __name__ == "__main__":
    main()
