"""How the commands scale with a study's trial count; prints one JSON object.

    python -m bench.scale [--sizes 2000,20000,100000] [--timeout 600] [--limit-gb 8]

For each size, plans a study of that many trials with the project's planner (3 models x 2 optimizers x
2 lengths, lr and wd sampled; `expand`) and stores one complete row per planned trial with the
project's writers (the schema's row of the planned config, as a trainer returns it: `row_fields`;
a result drawn per model and cell, 5% diverged, 2% failed), in merged files of MERGED rows as the
run's periodic compactions leave them, and the spec record a run writes. Then runs, each in a fresh
process (bench.scale_child: it imports only what the command does) under an address-space cap
(`limit_gb`) and a wall limit (`timeout`): `hpstudy status`,
`hpstudy query` (a filter and two columns), `load_study` (the report's read, every column),
`hpstudy report` (into a temporary folder) and `hpstudy compact`. Per command: `wall_s` (the process,
start to exit: what a user waits for), `cpu_s`, `peak_rss_mb` (VmHWM), the same of any process it started
and waited for (`worker_cpu_s`, `worker_peak_rss_mb`: a large report's worker, hpstudy.analysis.report_jobs;
the command's memory is at most the sum of the two peaks) and `rows`. Also, in this
process: expanding a 100,000-trial spec (`expand_s`). Targets (docs/performance.md): the 20,000-trial
report <= 60 s and <= 2 GB; status, query and load at 100,000 rows (a study's most trials,
spec.MAX_TRIALS) <= 3 s; expanding 100,000 trials <= 5 s. Growth exponents between sizes are computed
by the reader of the JSON (log ratio of times over log ratio of sizes).
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Dict, List

import numpy as np

from bench.scale_child import STUDY
from hpstudy.study.sampling import PlannedTrial, expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import _to_table, _write_table
from hpstudy.study.store.spec_record import write_spec_record
from hpstudy.study.store.store import Store
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.schema import DIVERGED, FAILED, OK, TRIAL_FIELDS, TRIAL_SCHEMA

MERGED = 10_000  # rows per merged file (a run compacts every COMPACT_EVERY trials; its merged files hold them)
COMMANDS = ["status", "query", "load_study", "report", "compact"]
TARGETS = {"report_20000_s": 60, "report_20000_mb": 2048, "read_100000_s": 3, "expand_100000_s": 5}


def design(trials: int) -> Dict:
    """A spec of about `trials` trials: 3 models x 2 optimizers x 2 lengths, lr and wd sampled."""
    cells = 3 * 2 * 2
    return {
        "name": STUDY,
        "dataset": {"name": "digits", "image_size": 16},
        "models": ["vit_p_tiny", "vit_c_tiny", "cnn_tiny"],
        "optimizers": ["adamw", "sgd"],
        "epochs": [10, 20],
        "samples": max(1, trials // cells),
        "space": {
            "adamw": {"lr": [1e-4, 1e-2], "wd": [1e-3, 1.0]},
            "sgd": {"lr": [1e-2, 1.0], "wd": [1e-6, 1e-3]},
        },
        "seeds": [0],
        "resources": {"cpu": 1, "gpu": 0},
    }


def stored_rows(planned: List[PlannedTrial], seed: int = 0) -> List[Dict]:
    """One complete stored row per planned trial: its config's row fields and a drawn result."""
    rng = np.random.default_rng(seed)
    base = {"vit_p_tiny": 12.0, "vit_c_tiny": 9.0, "cnn_tiny": 10.0}
    start = datetime(2026, 12, 1, tzinfo=timezone.utc)
    rows = []
    for i, trial in enumerate(planned):
        draw = rng.random()
        status = FAILED if draw < 0.02 else DIVERGED if draw < 0.07 else OK
        error = None if status == FAILED else 90.0 if status == DIVERGED else base[trial.model] + rng.gamma(2.0, 2.0)
        row = {**dict.fromkeys(TRIAL_FIELDS), **TrialConfig.from_dict(trial.config, check_model=False).row_fields()}
        row.update(
            trial_key=trial.key,
            status=status,
            top1_err=error,
            top5_err=None if error is None else error / 4,
            best_top1_err=error,
            train_loss=None if status != OK else 0.1 + rng.random(),
            epochs_done=trial.epochs,
            wall_s=30.0,
            device="cpu",
            hostname="bench-host",
            config_json=json.dumps(trial.config, sort_keys=True),
            error="RuntimeError: bench" if status == FAILED else None,
            finished_at=start + timedelta(seconds=i),
        )
        rows.append(row)
    return rows


def build(root: str, trials: int) -> int:
    """A store holding a study of about `trials` trials (see the module's docstring); its row count."""
    spec_source = design(trials)
    planned = expand(parse_spec(spec_source))
    store = Store.open(root)
    directory = store.partition("trials", STUDY)
    for first in range(0, len(planned), MERGED):
        table = _to_table(stored_rows(planned[first : first + MERGED], seed=first), TRIAL_SCHEMA, "trial row")
        _write_table(store.fs, directory, f"compact-{uuid.uuid4().hex[:12]}.parquet", table)
    write_spec_record(store, STUDY, spec_source, len(planned), [t.key for t in planned])
    return len(planned)


def run_child(name: str, root: str, out: str, limit_gb: float, timeout: float) -> Dict:
    """One command in a fresh process (bench.scale_child): its result and wall seconds, or why it failed or that it
    ran out of time."""
    argv = [sys.executable, "-m", "bench.scale_child", name, root, out]
    start = time.perf_counter()
    try:
        done = subprocess.run([*argv, repr(limit_gb)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"wall_s": round(time.perf_counter() - start, 2), "failed": f"did not finish within {timeout:g} s"}
    result = {"wall_s": round(time.perf_counter() - start, 2)}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1][:300]
        return {**result, "failed": f"exit {done.returncode}: {last}"}
    return {**result, **json.loads(done.stdout.strip().splitlines()[-1])}


def expansion_seconds(trials: int = 100_000) -> float:
    """Seconds to plan a spec of `trials` trials (parse and expand), in this process."""
    start = time.perf_counter()
    expand(parse_spec(design(trials)))
    return round(time.perf_counter() - start, 2)


def main() -> None:
    """Parse the arguments; run one child, or the whole bench and print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,20000,100000", help="comma-separated trial counts")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"comma-separated, of {', '.join(COMMANDS)}")
    parser.add_argument("--expand", type=int, default=100_000, help="trials of the spec whose expansion is timed")
    parser.add_argument("--timeout", type=float, default=600.0, help="wall seconds each command may take")
    parser.add_argument("--limit-gb", type=float, default=8.0, help="address-space limit of each command's process")
    args = parser.parse_args()
    commands = [name for name in args.commands.split(",") if name]
    unknown = [name for name in commands if name not in COMMANDS]
    if unknown:
        parser.error(f"--commands: unknown command {unknown[0]!r}; allowed: {', '.join(COMMANDS)}")
    try:
        sizes = [int(size) for size in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: bad value {args.sizes!r}; allowed: comma-separated whole numbers")
    results = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="hpstudy-scale-") as folder:
            root, out = os.path.join(folder, "store"), os.path.join(folder, "report")
            start = time.perf_counter()
            rows = build(root, size)
            built = round(time.perf_counter() - start, 2)
            per_command = {name: run_child(name, root, out, args.limit_gb, args.timeout) for name in commands}
            results[str(size)] = {"rows": rows, "build_s": built, **per_command}
    print(
        json.dumps(
            {
                "bench": "scale",
                "sizes": results,
                "expand_trials": args.expand,
                "expand_s": expansion_seconds(args.expand) if args.expand else None,
                "targets": TARGETS,
                "timeout_s": args.timeout,
                "limit_gb": args.limit_gb,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, local disk",
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
