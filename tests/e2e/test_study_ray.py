"""End to end on a real local Ray: no mocks. The first test, a study run and resumed, is in the default
tier (`pytest`); the others are slow."""

import logging
import os
import re
import signal
import subprocess
import time

import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest

from hpstudy.study.faults import CRASH_DIR_ENV
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.lease import STALE_ENV
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.trainers.schema import TRIAL_SCHEMA
from tests.helpers import REPO, logged, run_edf, run_edf_command, small_spec, stored_row, write_spec


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


def test_study_runs_once_and_resumes_to_nothing(local_ray, tmp_path, capsys, caplog):
    from hpstudy.study.runner import run_study

    # the CNN's SGD box is absurd, so those three trials diverge
    space = dict(small_spec()["space"], cnn={"sgd": {"lr": [1e3, 1e4], "wd": [1e-5, 1e-4]}})
    spec = parse_spec(small_spec(space=space))
    store = str(tmp_path / "store")
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        summary = run_study(spec, store, progress_interval=1)
    rows = load_trials(store, "e2e")
    # the run returns a summary of the stored rows (not the rows: those stay in the store)
    pd.testing.assert_frame_equal(summary, rows[summary.columns.tolist()])
    expected = {t.key for t in expand(spec)}
    assert len(expected) == 12
    assert len(rows) == 12 and set(rows["trial_key"]) == expected
    assert rows.groupby(["model", "optimizer"]).size().tolist() == [3, 3, 3, 3]
    diverged = rows[(rows["model"] == "cnn_tiny") & (rows["optimizer"] == "sgd")]
    assert set(diverged["status"]) == {"diverged"} and (diverged["top1_err"] == 90.0).all()
    assert set(rows.drop(diverged.index)["status"]) == {"ok"}
    assert (rows.loc[rows["status"] == "ok", "epochs_done"] == 1).all()
    assert rows["top1_err"].between(0, 100).all()
    assert rows["node"].notna().all() and rows["flops"].gt(0).all()
    # compacted at the end of the run: the 12 finished trials in one file
    files = sorted((tmp_path / "store/trials/study=e2e").iterdir())
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == 12
    assert pq.read_schema(files[0]) == TRIAL_SCHEMA
    assert len(load_epochs(store, "e2e")) == 9  # diverged trials stop before an epoch ends
    lines = logged(caplog)  # the driver's lines: the plan, then the status lines
    assert lines[0] == f"study e2e: 12 trials, 0 already stored, 12 to run; store {store}"
    assert "12/12 done (ok 9, diverged 3, failed 0)" in lines[-1] and "best top-1" in lines[-1]
    assert "12/12 done" not in capsys.readouterr().out  # the library prints none of them itself

    mtimes = {f.name: f.stat().st_mtime_ns for f in files}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        again = run_study(spec, store)
    assert logged(caplog) == [f"study e2e: 12 trials, 12 already stored, 0 to run; store {store}"]
    assert {f.name: f.stat().st_mtime_ns for f in (tmp_path / "store/trials/study=e2e").iterdir()} == mtimes
    pd.testing.assert_frame_equal(again, summary)


def _wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _listening_addresses(root_pid):
    try:
        procs = [psutil.Process(root_pid)] + psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    pids = {p.pid for p in procs}
    return {c.laddr.ip for c in psutil.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN and c.pid in pids}


@pytest.mark.slow
def test_driver_sigkill_then_restart_stores_each_trial_once(tmp_path):
    spec = small_spec(name="kill", samples=3, epochs=[2])
    config, store = write_spec(tmp_path, spec), str(tmp_path / "store")
    trial_dir = tmp_path / "store/trials/study=kill"
    count = lambda: len([f for f in trial_dir.glob("*.parquet")]) if trial_dir.exists() else 0
    driver = subprocess.Popen(
        run_edf_command(config, store),
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, STALE_ENV: "3"},  # its lease, left by the kill, is stale 3 s after its last heartbeat
    )
    try:
        _wait_for(lambda: count() >= 3, 240, "three stored trials")
        # the local Ray of run_edf.py listens on loopback only
        addresses = _listening_addresses(driver.pid)
        assert addresses and addresses <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, addresses
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
    finally:
        try:
            os.killpg(driver.pid, signal.SIGKILL)  # Ray's own processes of that driver
        except ProcessLookupError:
            pass
    stored_before = count()
    assert 3 <= stored_before < 12
    # the killed driver's lease is stale: the rerun takes it over (tests/study/store/test_lease.py: before, refused)
    time.sleep(3.5)
    done = run_edf(config, store, module=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{stored_before} already stored, {12 - stored_before} to run" in done.stdout
    rows = load_trials(store, "kill")
    assert len(rows) == 12 and rows["trial_key"].is_unique
    assert set(rows["trial_key"]) == {t.key for t in expand(parse_spec(spec))}
    # the rerun's compactions merged what the killed run stored, then its own trials
    assert [f.name.startswith("compact-") for f in trial_dir.glob("*.parquet")] == [True, True]


@pytest.mark.slow
def test_worker_crash_is_retried_then_failed_trials_rerun(tmp_path):
    spec = small_spec(name="crash", models=["cnn_tiny"], samples=1, max_retries=1)
    config, store = write_spec(tmp_path, spec), str(tmp_path / "store")
    retried, failing = [t.key for t in expand(parse_spec(spec))]
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    (crashes / retried).write_text("1")  # dies once, retried once: stored ok
    (crashes / failing).write_text("2")  # dies on the try and the retry: stored failed
    first = run_edf(config, store, env={CRASH_DIR_ENV: str(crashes)})
    assert first.returncode == 1, first.stderr[-3000:]  # exit 1: some trials failed
    rows = load_trials(store, "crash").set_index("trial_key")
    assert rows.loc[retried, "status"] == "ok" and rows.loc[failing, "status"] == "failed"
    assert "actor died unexpectedly" in rows.loc[failing, "error"] and pd.isna(rows.loc[failing, "top1_err"])
    assert (crashes / retried).read_text() == "0" and (crashes / failing).read_text() == "0"
    # a failed trial is not done: the next run trains it again
    second = run_edf(config, store, env={CRASH_DIR_ENV: str(crashes)})
    assert second.returncode == 0, second.stderr[-3000:]
    assert "1 already stored, 1 to run" in second.stdout
    assert load_trials(store, "crash")["status"].tolist() == ["ok", "ok"]


@pytest.mark.slow
def test_fused_groups_store_k_rows_and_resume_per_member(local_ray, tmp_path, caplog):
    from hpstudy.study.fusion import AUTO_FUSE_MIN_SPEEDUP, fusion_groups, fusion_sizes
    from hpstudy.study.runner import run_study
    from hpstudy.study.store.layout import write_trial

    spec = parse_spec(small_spec(name="fused", models=["cnn_tiny"], optimizers=["adamw"], samples=4, fuse=2))
    trials = expand(spec)
    assert [len(g) for g in fusion_groups(trials, {"cnn_tiny": 2})] == [2, 2]
    store = str(tmp_path)
    # one member of the first group is already stored, as after a crash mid-study
    write_trial(
        store,
        "fused",
        stored_row(trial_key=trials[0].key, model="cnn_tiny", optimizer="adamw", status="ok", top1_err=1.0),
    )
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        run_study(spec, store)
    rows = load_trials(store, "fused").set_index("trial_key")
    assert len(rows) == 4 and rows.loc[trials[0].key, "top1_err"] == 1.0  # not trained again
    trained = rows.drop(trials[0].key)
    assert set(trained["status"]) == {"ok"} and (trained["epochs_done"] == 1).all()
    epochs = load_epochs(store, "fused")  # a fused member's epoch has no training error
    assert epochs.loc[epochs["train_top1_err"].isna(), "trial_key"].nunique() >= 2  # a fused pair ran
    assert "3 to run" in logged(caplog)[0]
    # fuse: auto measures on a worker and reports what it decided
    auto = parse_spec(small_spec(name="auto", models=["cnn_tiny"], samples=2, fuse="auto"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        sizes = fusion_sizes(auto, expand(auto), {"cpu": 1, "gpu": 0})
    said = re.search(
        r"fuse auto: cnn_tiny: 2 fused run ([0-9.]+)x the speed of 2 alone -> (fuse 2|no fusion)",
        "\n".join(logged(caplog)),
    )
    speedup, decision = float(said.group(1)), said.group(2)
    assert sizes == ({"cnn_tiny": 2} if decision == "fuse 2" else {})
    # the decision is the threshold's (the printed speedup is rounded to 2 decimals)
    assert (decision == "fuse 2") == (speedup >= AUTO_FUSE_MIN_SPEEDUP) or abs(speedup - AUTO_FUSE_MIN_SPEEDUP) < 0.01


@pytest.mark.slow
def test_a_study_longer_than_one_tune_run_stores_each_trial_once_and_compacts_as_it_goes(
    local_ray, tmp_path, monkeypatch
):
    """Tune runs of at most TUNE_RUN_GROUPS groups (here 3) bound the driver's bookkeeping; the
    store is compacted before the run, every 2 stored trials and after it; each Tune run's folder is
    removed when it ends."""
    import hpstudy.study.runner as runner
    import hpstudy.study.store.store as store_module
    from hpstudy.study.runner import run_study

    compactions = []
    real_compact = store_module.compact
    monkeypatch.setattr(runner, "TUNE_RUN_GROUPS", 3)
    monkeypatch.setattr(runner, "TUNE_STORAGE", str(tmp_path / "tune"))
    # Store.compact: before the run, after it (the runner) and during it (the writer)
    monkeypatch.setattr(store_module, "compact", lambda *a: compactions.append(a) or real_compact(*a))
    spec = parse_spec(
        small_spec(
            name="long",
            models=["cnn_tiny"],
            optimizers=["adamw"],
            samples=7,
            dataset={"name": "synthetic", "image_size": 8, "n_train": 32, "n_val": 16, "num_classes": 4},
        )
    )
    store = str(tmp_path / "store")
    summary = run_study(spec, store, compact_every=2, progress_interval=1)
    assert sorted(summary["trial_key"]) == sorted(t.key for t in expand(spec))
    assert len(compactions) == 1 + 7 // 2 + 1
    # each compaction merged what was stored since the one before: 2 + 2 + 2 + 1 trials
    merged = sorted((tmp_path / "store/trials/study=long").iterdir())
    assert all(f.name.startswith("compact-") for f in merged)
    assert sorted(pq.read_metadata(f).num_rows for f in merged) == [1, 2, 2, 2]
    assert load_trials(store, "long")["trial_key"].is_unique
    assert (tmp_path / "tune").is_dir() and not list((tmp_path / "tune").iterdir())
    # nor does Ray's process-wide log_once set keep Tune's per-trial keys (read where Ray keeps it)
    from ray.util.debug import _logged

    assert not [key for key in _logged if key.startswith("tune_func_encode:")]


@pytest.mark.slow
def test_a_local_ray_runs_as_many_trials_at_once_as_it_holds(local_ray, tmp_path, monkeypatch):
    """On a local Ray (here 2 CPUs) the run is capped at what it holds, --max-concurrent lower; and
    Tune's scheduler picks no trial to start first (its pick took idle actors from trials whose own
    actor was starting, and killed that actor)."""
    import hpstudy.study.runner as runner
    from hpstudy.study.runner import run_study

    assert runner.local_slots({"cpu": 1, "gpu": 0}) == 2 and runner.local_slots({"cpu": 0.5, "gpu": 0}) == 4
    assert runner.local_slots({"cpu": 3, "gpu": 0}) == 1 and runner.local_slots({"cpu": 0, "gpu": 0}) is None
    assert runner.local_slots({"cpu": 0.1, "gpu": 0}) == 20
    assert runner.IdleActorsToNewTrials().choose_trial_to_run(None) is None
    caps = []
    real_run_trials = runner.run_trials
    monkeypatch.setattr(
        runner, "run_trials", lambda *a, **k: caps.append(k["max_concurrent"]) or real_run_trials(*a, **k)
    )
    spec = parse_spec(
        small_spec(
            name="cap",
            models=["cnn_tiny"],
            optimizers=["adamw"],
            samples=2,
            dataset={"name": "synthetic", "image_size": 8, "n_train": 32, "n_val": 16, "num_classes": 4},
        )
    )
    assert len(run_study(spec, str(tmp_path / "a"))) == 2
    assert len(run_study(spec, str(tmp_path / "b"), max_concurrent=1)) == 2
    assert caps == [2, 1]
