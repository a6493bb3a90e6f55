"""Drivers of one study at once, end to end on real local Rays (slow tier): a second `run_edf.py` of a
running study (another spec, or the same) and an `hpstudy compact` beside it are refused naming the
running driver, or with --wait run after it; a SIGKILLed driver's lease holds a rerun off until it is
stale, and no longer. Before the study's lease both drivers ran: the spec record was the last one's,
the first one's rows were "from an earlier spec", the same spec trained every trial twice."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pyarrow.dataset as pads
import pytest

from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.lease import STALE_ENV, Lease, StudyBusy
from hpstudy.study.store.read import load_trials
from tests.helpers import REPO, run_edf_command, small_spec, write_spec

pytestmark = pytest.mark.slow

ONE_CELL = dict(models=["cnn_tiny"], optimizers=["adamw"], epochs=[2])
FIRST = small_spec(name="dup", samples=4, **ONE_CELL)
OTHER = small_spec(name="dup", samples=2, space={"adamw": {"lr": [1e-3, 2e-3], "wd": [0.01, 0.1]}}, **ONE_CELL)


def _start(argv, env=None):
    """A driver in its own session (so its local Ray's processes can be killed with it)."""
    return subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(os.environ, **(env or {})),
    )


def _finish(proc, timeout=400):
    """(exit code, stdout, stderr) of a driver; its session is killed if it is still there."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, out, err


def _wait_for(predicate, proc, timeout=120):
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "timed out"
        time.sleep(0.1)


def _compact(store, *flags):
    return [sys.executable, "-m", "hpstudy", "compact", "--store", store, "--study", "dup", *flags]


def _raw_keys(store):
    """Every trial row on disk as pyarrow reads the files, duplicates included."""
    table = pads.dataset(os.path.join(store, "trials"), format="parquet", partitioning="hive").to_table()
    return table.column("trial_key").to_pylist()


def _refused_by(err, store, pid):
    """Whether stderr is the one line that refuses a driver, naming the running one."""
    line = err.strip()
    return (
        "\n" not in line
        and line.startswith(f"error: study 'dup' in {store} is being written by hpstudy run on host ")
        and f"{socket.gethostname()}, pid {pid}, started 20" in line
        and "wait for it to end, or pass --wait" in line
    )


def test_a_second_driver_or_a_compaction_of_a_running_study_is_refused_naming_it(tmp_path):
    (tmp_path / "other").mkdir()
    first, other = write_spec(tmp_path, FIRST), write_spec(tmp_path / "other", OTHER)
    store = str(tmp_path / "store")
    running = _start(run_edf_command(first, store))
    try:
        _wait_for((tmp_path / "store/leases/dup.json").exists, running)
        seconds = _start(run_edf_command(other, store)), _start(run_edf_command(first, store)), _start(_compact(store))
        refused = [_finish(proc, 120) for proc in seconds]
        code, out, err = _finish(running)
    finally:
        _finish(running, 1)
    assert code == 0, err[-3000:]
    assert "4/4 done (ok 4" in out
    for other_code, other_out, other_err in refused:  # another spec, the same spec, a compaction
        assert other_code == 2 and _refused_by(other_err, store, running.pid), other_err[-3000:]
        assert "note:" not in other_out and "to run" not in other_out  # nothing planned, nothing trained
    keys = {t.key for t in expand(parse_spec(FIRST))}
    assert sorted(_raw_keys(store)) == sorted(keys)  # each trial trained and stored once
    with open(tmp_path / "store/specs/dup.json") as f:
        assert json.load(f)["spec"]["samples"] == 4  # the record is the running driver's spec
    status = subprocess.run(
        [sys.executable, "-m", "hpstudy", "status", "--store", store, "--study", "dup"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert "4/4 trials of the spec stored as ok/diverged" in status.stdout and "earlier spec" not in status.stdout
    assert not (tmp_path / "store/leases/dup.json").exists()


def test_with_wait_a_second_driver_and_a_compaction_run_after_the_first(tmp_path):
    (tmp_path / "other").mkdir()
    spec = small_spec(name="dup", samples=2, **ONE_CELL)
    first, other = write_spec(tmp_path, spec), write_spec(tmp_path / "other", OTHER)
    store = str(tmp_path / "store")
    running, waiting = _start(run_edf_command(first, store)), ()
    try:
        _wait_for((tmp_path / "store/leases/dup.json").exists, running)
        waiting = _start(run_edf_command(other, store, "--wait")), _start(_compact(store, "--wait"))
        code, out, err = _finish(running)
        after = [_finish(proc) for proc in waiting]
    finally:
        for proc in (running, *waiting):
            _finish(proc, 1)
    assert code == 0, err[-3000:]
    for other_code, other_out, other_err in after:
        assert other_code == 0, other_err[-3000:]
        assert f"waiting: study 'dup' is being written by hpstudy run on host {socket.gethostname()}, pid " in other_out
    run_out = after[0][1]
    # it ran once the first was done: the spec it replaces is announced, before its plan
    assert run_out.index("waiting: ") < run_out.index("note: study 'dup'") < run_out.index("2 trials, 0 already")
    assert "2 stored rows come from that earlier spec" in run_out and "2/2 done (ok 2" in run_out
    first_keys, other_keys = ({t.key for t in expand(parse_spec(s))} for s in (spec, OTHER))
    keys = _raw_keys(store)
    assert len(keys) == len(set(keys)) and set(keys) == first_keys | other_keys  # both specs' trials, once each


def _line(proc, prefix, lines):
    """Read the driver's output into `lines` up to the first line that starts with `prefix`; that line."""
    for line in proc.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no line starting {prefix!r}: {''.join(lines)[-3000:]}")


def test_a_sigkilled_drivers_lease_holds_a_rerun_off_until_stale_and_no_longer(tmp_path):
    stale_s = 10.0
    spec = small_spec(name="dup", samples=6, **ONE_CELL)
    config, store = write_spec(tmp_path, spec), str(tmp_path / "store")
    killed = _start(run_edf_command(config, store), env={STALE_ENV: str(stale_s)})
    rerun, lines = None, []
    try:
        _wait_for((tmp_path / "store/leases/dup.json").exists, killed)
        rerun = _start(run_edf_command(config, store, "--wait"))  # its own stale limit is the default's
        assert f"pid {killed.pid}, " in _line(rerun, "waiting: ", lines)
        assert killed.poll() is None
        os.kill(killed.pid, signal.SIGKILL)
        killed_at = time.time()
        _finish(killed, 30)
        with pytest.raises(StudyBusy, match=f"pid {killed.pid}, .* taken over {stale_s:g} s after its last heartbeat"):
            Lease(store, "dup", "a rerun without --wait").acquire()  # before it is stale
        _line(rerun, "study dup: 6 trials, ", lines)
        took_over = time.time() - killed_at
        code, out, err = _finish(rerun)
    finally:
        _finish(killed, 1)
        if rerun is not None:
            _finish(rerun, 1)
    assert code == 0, err[-3000:]
    # the holder's stale limit counts (not the rerun's 180 s): its last heartbeat was at most stale_s / 6
    # before the kill; after the take-over, a compaction and the plan before that line
    assert stale_s * 5 / 6 - 0.5 < took_over < stale_s + 6, took_over
    rows = load_trials(store, "dup")
    assert len(rows) == 6 and rows["trial_key"].is_unique and set(rows["status"]) == {"ok"}
    assert not (tmp_path / "store/leases/dup.json").exists()
