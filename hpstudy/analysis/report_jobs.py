"""A report's jobs that need nothing of each other (fANOVA importance per cell, each figure), shared between
the report's process and one worker process beside it on a machine with two CPUs or more.

Both processes plan the same jobs from the same rows (the worker reads them from Parquet files in a
private folder) and take them in plan order, each job claimed by creating its file (O_EXCL: one process
runs it) and its JSON-able result written beside: the worker from the first, the report's process (once its
own work is done) from the last. The worker is started as a module of its own
(`python -m hpstudy.analysis.report_worker FOLDER`), not through multiprocessing, whose spawned workers run
the calling script's top level again (a user's script without an `if __name__ == "__main__":` guard would
run twice). When the report's own work is done it takes what is left, waits for the worker, and runs
again here whatever has no result (a worker that died loses time, not a figure). The worker plans from
hpstudy's registries as imported (a figure registered at run time by the user's code is drawn here) and with
the rcParams a new process loads (where the caller changed them, the report runs alone).
"""

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import sys
import sysconfig
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import pandas as pd

log = logging.getLogger(__name__)

Job = Callable[[], Dict[str, Any]]  # returns a JSON-able result
WORKER_FROM_TRIALS = 1_000  # below it the worker's start (~3 s of imports) costs about what it saves
WORKER_MODULE = "hpstudy.analysis.report_worker"
WORKER_SWITCH = "HPSTUDY_REPORT_WORKER"  # "0": never start one (e.g. a container whose memory is tight)
GRACE_S = 120.0  # once this process is done, how long the worker may take to finish its one job
PARAMS = "params.json"
# rcParams of the session, not of a saved figure (matplotlib's styles leave the same ones alone): pyplot and
# matplotlib.use() change some of them in the calling process; so are the webagg.* ones, left out by changed_rc
SESSION_RC = {"backend", "backend_fallback", "interactive", "toolbar", "figure.max_open_warning", "figure.raise_window"}
SESSION_RC |= {"savefig.directory", "tk.window_focus", "docstring.hardcopy"}


def available_cpus(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The CPUs this process may use: its affinity (else the machine's), at most its cgroup's CPU quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        with open(cpu_max) as f:
            quota = quota_cpus(f.read())
    except OSError:
        return cpus
    return cpus if quota is None else min(cpus, quota)


def quota_cpus(cpu_max: str) -> Optional[int]:
    """Whole CPUs of a cgroup v2 `cpu.max` ("<quota> <period>", at least 1), None for "max" or text it is not."""
    try:
        quota, period = cpu_max.split()[:2]
        return None if quota == "max" else max(1, int(quota) // int(period))
    except ValueError:
        return None


def worker_wanted(n_trials: int) -> bool:
    """Whether a report of `n_trials` rows shares its jobs with a worker: WORKER_FROM_TRIALS rows or more, two
    CPUs or more to use, $HPSTUDY_REPORT_WORKER not "0", this interpreter a Python one, and this process
    drawing as a new one would (changed_rc)."""
    if n_trials < WORKER_FROM_TRIALS or available_cpus() < 2 or os.environ.get(WORKER_SWITCH) == "0":
        return False
    if not os.path.basename(sys.executable or "").lower().startswith("python"):  # embedded (uwsgi, ...)
        return False
    changed = changed_rc()
    if changed:
        log.info("report: no worker, this process changed matplotlib's rcParams (%s)", ", ".join(changed))
    return not changed


def changed_rc() -> List[str]:
    """The matplotlib rcParams (but SESSION_RC) that differ from those a new process loads: the figures are
    drawn with the caller's rcParams, and a worker would not have the caller's changes."""
    import matplotlib  # only when a report decides on a worker (importing the analysis stays light)

    loaded = matplotlib.rc_params()
    return [
        key
        for key, value in matplotlib.rcParams.items()
        if key not in SESSION_RC and "webagg" not in key and value != loaded[key]
    ]


class JobFolder:
    """The folder two processes share a report's jobs through: `claims/` (one empty file per job taken)
    and `results/` (one JSON file per job done), each named by a digest of the job's name."""

    def __init__(self, folder: str):
        self.folder = folder
        for kind in ("claims", "results"):
            os.makedirs(os.path.join(folder, kind), exist_ok=True)

    def _path(self, kind: str, name: str) -> str:
        return os.path.join(self.folder, kind, hashlib.sha256(name.encode()).hexdigest()[:32] + ".json")

    def claim(self, name: str) -> bool:
        """Take the job `name`: True for the one process that takes it first."""
        try:
            os.close(os.open(self._path("claims", name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    def save(self, name: str, result: Dict[str, Any], seconds: float) -> Dict[str, Any]:
        """Write a job's record: its result, the process that ran it and its seconds (whole or not at all:
        written aside, then renamed); the record."""
        record = {"job": name, "pid": os.getpid(), "seconds": seconds, "result": result}
        path = self._path("results", name)
        with open(path + ".part", "w") as f:
            json.dump(record, f)
        os.replace(path + ".part", path)
        return record

    def done(self, name: str) -> Optional[Dict[str, Any]]:
        """The saved record of the job `name` (job, pid, seconds, result), or None if no process finished it."""
        try:
            with open(self._path("results", name)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def run(self, jobs: Mapping[str, Job], backward: bool = False, stop: Callable[[], bool] = lambda: False) -> None:
        """Run, in order (from the last if `backward`), every job no process has claimed yet, until `stop()`."""
        items = list(jobs.items())
        for name, job in reversed(items) if backward else items:
            if stop():
                return
            if self.claim(name):
                self.run_one(name, job)

    def run_one(self, name: str, job: Job) -> Dict[str, Any]:
        """Run one job here (claimed or not) and save its result; the saved record."""
        start = time.perf_counter()
        result = job()
        return self.save(name, result, round(time.perf_counter() - start, 3))


def write_inputs(folder: str, frames: Mapping[str, pd.DataFrame], params: Dict[str, Any]) -> None:
    """Put the frames (as `<name>.parquet`, empty ones left out) and the JSON-able params where a worker reads
    them; ValueError for a column Parquet would not give back as it is (objects other than strings: None among
    integers comes back as floats, lists as arrays)."""
    for name, frame in frames.items():
        for column in frame.columns:
            if pd.api.types.is_object_dtype(frame[column]) and pd.api.types.infer_dtype(
                frame[column], skipna=True
            ) not in ("string", "empty"):
                raise ValueError(f"{name}: column {column!r} holds objects other than strings")
        if len(frame.columns):
            frame.to_parquet(os.path.join(folder, f"{name}.parquet"))
    with open(os.path.join(folder, PARAMS), "w") as f:
        json.dump({**params, "frames": [name for name, frame in frames.items() if len(frame.columns)]}, f)


def read_inputs(folder: str) -> Tuple[Dict[str, pd.DataFrame], Dict[str, Any]]:
    """The frames and params write_inputs put in `folder` (a frame it left out is not among them)."""
    with open(os.path.join(folder, PARAMS)) as f:
        params = json.load(f)
    frames = {name: pd.read_parquet(os.path.join(folder, f"{name}.parquet")) for name in params.pop("frames")}
    return frames, params


def _start(folder: str) -> subprocess.Popen:
    """`python -m hpstudy.analysis.report_worker FOLDER` with this interpreter and this hpstudy (its output
    kept in FOLDER/worker.log)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # above hpstudy/
    env = dict(os.environ)
    if root not in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:  # a checkout on the path
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    with open(os.path.join(folder, "worker.log"), "wb") as output:
        # -P: not the working folder first on the path, where another (or a planted) hpstudy/ could be
        return subprocess.Popen(
            [sys.executable, "-P", "-m", WORKER_MODULE, folder], stdout=output, stderr=subprocess.STDOUT, env=env
        )


@contextlib.contextmanager
def worker_beside(
    folder: str, frames: Mapping[str, pd.DataFrame], params: Dict[str, Any], start: bool
) -> Iterator[Optional[subprocess.Popen]]:
    """A worker started on the inputs (write_inputs) if `start`, else None (also where a frame does not convert
    to Parquet, e.g. a column of mixed types, or no process can be started: the report then runs alone); killed
    on leaving if it still runs
    (after `finish` it has exited: only an error on the way leaves it running)."""
    worker = None
    if start:
        try:
            write_inputs(folder, frames, params)
            worker = _start(folder)
        except OSError as exc:  # no process can be started here (a sandbox, no file handles left)
            log.info("report: no worker, it cannot be started (%s)", exc)
        except Exception as exc:  # pyarrow's errors, OverflowError of a 128-bit int, ...: the report runs alone
            log.info("report: no worker, its inputs do not convert to Parquet (%s)", exc)
    try:
        yield worker
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()


def finish(jobs: JobFolder, planned: Mapping[str, Job], worker: Optional[subprocess.Popen]) -> Dict[str, Dict]:
    """Run what no process has taken (from the last: the worker takes them from the first, so the two meet at
    one job whichever is slower), wait for the worker, run here what it left unfinished; every job's result."""
    jobs.run(planned, backward=True)
    code = 0
    if worker is not None:
        try:
            code = worker.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            code = worker.wait()
    if code != 0:
        try:
            with open(os.path.join(jobs.folder, "worker.log"), errors="replace") as f:
                last = (f.read().strip().splitlines() or ["(no output)"])[-1]
        except OSError:
            last = "(no output)"
        log.warning("report worker exited with %s (%s); its unfinished jobs are run here", code, last)
    records = {name: jobs.done(name) or jobs.run_one(name, job) for name, job in planned.items()}
    by_worker = sum(record["pid"] != os.getpid() for record in records.values())
    log.debug("report jobs: %d, %d of them by the worker", len(records), by_worker)
    return {name: record["result"] for name, record in records.items()}
