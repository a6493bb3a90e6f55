"""A local study's start-up, split into its parts; prints one JSON object.

    python -m bench.startup [--trials 4,64] [--concurrency 2]

Near-zero trials (bench.orchestration's --micro spec: 8 px synthetic data) run through run_study on a
local Ray at two study sizes; the line through the two walls gives
  fixed_s      what a study costs before and after its trials (the intercept);
  per_trial_s  what each more trial adds (the slope): its own compute on a warm worker and what Tune
               and the store add.
The fixed cost's parts are timed on their own: `ray_start_s` and `ray_stop_s` (hpstudy's local Ray
session entered and left, nothing run), and `actor_import_s` (a fresh interpreter importing what a
trial's Ray actor imports: Ray Tune, torch, timm and hpstudy's trainers; each actor pays it before
its first trial; the median of 3, beside `interpreter_s`, a bare interpreter's start). The parts
overlap in part (an actor imports while Tune starts the others) and leave out Tune's start and end
and hpstudy's store and compactions, so they do not add up to `fixed_s`. `command_wall_s` is what a
user waits for the smaller study from the command line (`python -m hpstudy run ... --report none`):
the driver's own imports and its exit on top of run_study.
Targets: fixed <= 6 s, per trial <= 0.05 s.
"""

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

import yaml

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from bench.orchestration import bench_spec  # noqa: E402
from hpstudy.study.ray_session import ray_session  # noqa: E402
from hpstudy.study.runner import run_study  # noqa: E402
from hpstudy.study.spec import parse_spec  # noqa: E402

TARGET_FIXED_S = 6.0
TARGET_PER_TRIAL_S = 0.05
ACTOR_IMPORTS = "import ray.tune, hpstudy.study.trainable"


def line_through(points: Sequence[Sequence[float]]) -> Dict[str, float]:
    """Intercept and slope of the line through two (trials, wall_s) points."""
    (n0, wall0), (n1, wall1) = points
    if n0 == n1:
        raise ValueError(f"two different study sizes are needed, got {n0} twice")
    slope = (wall1 - wall0) / (n1 - n0)
    return {"fixed_s": wall0 - slope * n0, "per_trial_s": slope}


def study_wall(trials: int, concurrency: int) -> float:
    """Seconds run_study takes for `trials` near-zero trials on a fresh local Ray."""
    spec = parse_spec(bench_spec(trials, 1, micro=True))
    with tempfile.TemporaryDirectory() as store, contextlib.redirect_stdout(sys.stderr):
        start = time.perf_counter()
        run_study(spec, store, num_cpus=concurrency, progress_interval=1e9)
        return time.perf_counter() - start


def command_wall(trials: int, concurrency: int) -> float:
    """Seconds `python -m hpstudy run` takes for `trials` near-zero trials, from its start to its exit."""
    with tempfile.TemporaryDirectory() as folder:
        config = os.path.join(folder, "startup.yaml")
        with open(config, "w") as out:
            yaml.safe_dump(bench_spec(trials, 1, micro=True), out)
        store = os.path.join(folder, "store")
        command = ["run", "--config", config, "--store", store, "--report", "none", "--num-cpus", str(concurrency)]
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hpstudy", *command], check=True, stdout=sys.stderr)
        return time.perf_counter() - start


def ray_session_walls(concurrency: int) -> Dict[str, float]:
    """Seconds to enter and to leave hpstudy's local Ray session with nothing run in it."""
    start = time.perf_counter()
    with ray_session(None, concurrency):
        started = time.perf_counter()
    return {"ray_start_s": started - start, "ray_stop_s": time.perf_counter() - started}


def import_wall(statement: str, repeats: int = 3) -> float:
    """Median seconds a fresh interpreter takes to run `statement` (its start-up included)."""
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], check=True)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls)


def parse_sizes(text: str) -> List[int]:
    """`--trials`: two different study sizes, each a multiple of 4 (a micro study's cells)."""
    parts = text.split(",")
    sizes = [int(part) for part in parts] if all(part.strip().isdigit() for part in parts) else []
    if len(sizes) != 2 or len(set(sizes)) != 2 or any(n < 4 or n % 4 for n in sizes):
        raise ValueError(f"--trials: bad value {text!r}; allowed: two different multiples of 4, e.g. 4,64")
    return sorted(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", default="4,64", help="two study sizes (default: 4,64)")
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    try:
        sizes = parse_sizes(args.trials)
    except ValueError as exc:
        parser.error(str(exc))
    if args.concurrency < 1:
        parser.error(f"--concurrency: bad value {args.concurrency}; allowed: >= 1")
    print("bench.startup: the actor's imports, then Ray alone ...", file=sys.stderr, flush=True)
    parts = {"actor_import_s": import_wall(ACTOR_IMPORTS), "interpreter_s": import_wall("pass")}
    parts.update(ray_session_walls(args.concurrency))
    walls = {}
    for trials in sizes:
        print(f"bench.startup: a study of {trials} trials ...", file=sys.stderr, flush=True)
        walls[trials] = study_wall(trials, args.concurrency)
    print("bench.startup: the smaller study from the command line ...", file=sys.stderr, flush=True)
    command = command_wall(sizes[0], args.concurrency)
    line = line_through(sorted(walls.items()))
    rounded = lambda values: {k: round(v, 3) for k, v in values.items()}
    print(
        json.dumps(
            {
                "bench": "startup",
                "concurrency": args.concurrency,
                "study_wall_s": {str(n): round(w, 2) for n, w in walls.items()},
                "command_wall_s": {str(sizes[0]): round(command, 2)},
                **rounded(line),
                **rounded(parts),
                "target_fixed_s": TARGET_FIXED_S,
                "target_per_trial_s": TARGET_PER_TRIAL_S,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
            }
        )
    )


if __name__ == "__main__":
    main()
