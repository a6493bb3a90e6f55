"""Stopping a study as users do (slow tier, a real local Ray): Ctrl-C in a terminal (a pty, so the
terminal sends the SIGINT) and SIGTERM exit 130 / 143 with a last line saying how to resume, and a
rerun finishes with every trial stored once. Nothing prints a traceback, the workers Ray ends on the
way out included (their lines reach the terminal only with --debug once the run is stopping)."""

import os
import re
import signal
import subprocess
import time

import pytest

from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.read import load_trials
from tests.helpers import REPO, in_terminal, run_edf, run_edf_command, small_spec, write_spec

pytestmark = pytest.mark.slow

SPEC = small_spec(
    name="stop",
    models=["cnn_tiny"],
    optimizers=["adamw"],
    samples=8,
    epochs=[2],
    space={"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]}},
)


def _wait_for_stored(trial_dir, n, proc, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if trial_dir.exists() and len(list(trial_dir.glob("*.parquet"))) >= n:
            return
        assert proc.poll() is None, "the study ended before it could be interrupted"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {n} stored trials")


def _last_line(text):
    """The last line a terminal shows (colour escapes are invisible)."""
    visible = re.sub(r"\x1b\[[0-9;]*m", "", text).replace("\r", "")
    return [line.strip() for line in visible.splitlines() if line.strip()][-1]


def test_ctrl_c_and_sigterm_exit_130_and_143_then_a_rerun_stores_each_trial_once(tmp_path):
    config, store = write_spec(tmp_path, SPEC), str(tmp_path / "store")
    trial_dir = tmp_path / "store/trials/study=stop"
    keys = {t.key for t in expand(parse_spec(SPEC))}

    terminal, output = in_terminal(run_edf_command(config, store))
    try:
        _wait_for_stored(trial_dir, 1, terminal)
        os.write(terminal.master, b"\x03")  # Ctrl-C, as typed
        assert terminal.wait(120) == 130
    finally:
        if terminal.poll() is None:
            terminal.kill()
        terminal.reader.join(10)
        os.close(terminal.master)
    text = "".join(output)
    stored = load_trials(store, "stop")
    assert 1 <= len(stored) < 8 and set(stored["status"]) == {"ok"}  # nothing stored as failed
    assert _last_line(text) == f"interrupted: {len(stored)}/8 stored; rerun the same command to resume"
    assert "SIGINT: stopping: no new trial starts, running trials are cancelled" in text
    assert "Tuner.restore" not in text and "Traceback" not in text, text[-3000:]

    before = len(stored)
    driver = subprocess.Popen(
        run_edf_command(config, store),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_stored(trial_dir, before + 1, driver)
        driver.send_signal(signal.SIGTERM)  # as a scheduler or `timeout` would
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    assert driver.returncode == 143, err[-3000:]
    stored = load_trials(store, "stop")
    assert err.strip().splitlines()[-1] == f"interrupted: {len(stored)}/8 stored; rerun the same command to resume"
    assert f"{before} already stored, {8 - before} to run" in out and "Traceback" not in err, err[-3000:]
    assert not [p for p in (tmp_path / "store").rglob("*") if ".tmp-" in p.name]  # no half-written file

    done = run_edf(config, store)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(stored)} already stored, {8 - len(stored)} to run" in done.stdout
    rows = load_trials(store, "stop")
    assert len(rows) == 8 and set(rows["trial_key"]) == keys and set(rows["status"]) == {"ok"}
    # compacted by the runs: every trial in a merged file (one per compaction that merged any)
    assert all(p.name.startswith("compact-") for p in trial_dir.glob("*.parquet"))
