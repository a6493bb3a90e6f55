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
With --reuse the same studies run again on one Ray started once before them (`ray start --head` on a
free loopback port, as a user would for many short studies, joined with --address): `reused_ray`
holds their walls, fixed and per-trial cost (or `error`, the first part kept); what is left of the fixed
cost there is the actors' imports and Tune. Refused before anything runs when a Ray already runs on this
machine; the bench ends only the Ray it started.
Targets: fixed <= 6 s, per trial <= 0.05 s.
"""

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterator, List, Optional, Sequence

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


def study_wall(trials: int, concurrency: int, address: Optional[str] = None) -> float:
    """Seconds run_study takes for `trials` near-zero trials on a fresh local Ray (or the Ray at `address`)."""
    spec = parse_spec(bench_spec(trials, 1, micro=True))
    with tempfile.TemporaryDirectory() as store, contextlib.redirect_stdout(sys.stderr):
        start = time.perf_counter()
        run_study(spec, store, address=address, num_cpus=concurrency, progress_interval=1e9)
        return time.perf_counter() - start


def command_wall(trials: int, concurrency: int, address: Optional[str] = None) -> float:
    """Seconds `python -m hpstudy run` takes for `trials` near-zero trials, from its start to its exit."""
    with tempfile.TemporaryDirectory() as folder:
        config = os.path.join(folder, "startup.yaml")
        with open(config, "w") as out:
            yaml.safe_dump(bench_spec(trials, 1, micro=True), out)
        store = os.path.join(folder, "store")
        command = ["run", "--config", config, "--store", store, "--report", "none", "--num-cpus", str(concurrency)]
        command += ["--address", address] if address else []
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "hpstudy", *command], check=True, stdout=sys.stderr)
        return time.perf_counter() - start


def ray_session_walls(concurrency: int) -> Dict[str, float]:
    """Seconds to enter and to leave hpstudy's local Ray session with nothing run in it."""
    start = time.perf_counter()
    with ray_session(None, concurrency):
        started = time.perf_counter()
    return {"ray_start_s": started - start, "ray_stop_s": time.perf_counter() - started}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ray_command(*args: str) -> List[str]:
    """The `ray` command of this interpreter's environment."""
    found = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if found is None:
        raise RuntimeError("bench.startup --reuse: the `ray` command is not installed beside this Python")
    return [found, *args]


def ray_is_running(address: Optional[str] = None) -> bool:
    """Whether a Ray runs on this machine, or at `address` (`ray status` finds one)."""
    command = _ray_command("status", *(["--address", address] if address else []))
    return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


@contextlib.contextmanager
def running_ray(concurrency: int, timeout: float = 120.0) -> Iterator[str]:
    """A Ray started once with `ray start --head --block` on a free loopback port, in a process group of its
    own; yields its address once it answers and ends that Ray after, so no other Ray on the machine is touched."""
    address = f"127.0.0.1:{_free_port()}"
    start = ["start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", address.split(":")[1]]
    start += ["--num-cpus", str(concurrency), "--include-dashboard", "false", "--disable-usage-stats"]
    head = subprocess.Popen(_ray_command(*start), stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ray_is_running(address):
            if head.poll() is not None:
                raise RuntimeError(f"bench.startup --reuse: `ray start` exited with {head.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"bench.startup --reuse: no Ray answered at {address} within {timeout:.0f} s")
            time.sleep(0.5)
        yield address
    finally:
        # SIGTERM to `ray start` alone: it drains its node through the GCS, then stops what it started (the
        # whole group at once would end the GCS first and leave the drain waiting 30 s for it)
        head.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            head.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # whatever of its group is left
        head.wait()


def reused_ray_walls(sizes: Sequence[int], concurrency: int) -> Dict[str, object]:
    """The studies of `sizes` and the smaller one's command on one Ray started before them."""
    with running_ray(concurrency) as address:
        walls = {}
        for trials in sizes:
            print(f"bench.startup: a study of {trials} trials on a running Ray ...", file=sys.stderr, flush=True)
            walls[trials] = study_wall(trials, concurrency, address)
        command = command_wall(sizes[0], concurrency, address)
    line = line_through(sorted(walls.items()))
    return {
        "study_wall_s": {str(n): round(w, 2) for n, w in walls.items()},
        "command_wall_s": {str(sizes[0]): round(command, 2)},
        **{name: round(value, 3) for name, value in line.items()},
    }


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
    parser.add_argument("--reuse", action="store_true", help="also run the studies on one Ray started before them")
    args = parser.parse_args()
    try:
        sizes = parse_sizes(args.trials)
    except ValueError as exc:
        parser.error(str(exc))
    if args.concurrency < 1:
        parser.error(f"--concurrency: bad value {args.concurrency}; allowed: >= 1")
    if args.reuse and ray_is_running():
        parser.error("--reuse: a Ray already runs on this machine; stop it (`ray stop`) first")
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
    reused: Dict[str, object] = {}
    if args.reuse:
        try:
            reused["reused_ray"] = reused_ray_walls(sizes, args.concurrency)
        except (RuntimeError, subprocess.CalledProcessError) as exc:  # the first part still prints
            reused["reused_ray"] = {"error": str(exc)}
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
                **reused,
                "target_fixed_s": TARGET_FIXED_S,
                "target_per_trial_s": TARGET_PER_TRIAL_S,
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
            }
        )
    )


if __name__ == "__main__":
    main()
