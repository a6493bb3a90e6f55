"""A report's jobs shared with a worker process (hpstudy.analysis.report_jobs): every job runs exactly once
whichever process takes it, a report drawn with a worker is byte for byte the report drawn without one, a
figure registered at run time is still drawn, and a worker that dies or a job that fails loses nothing and
leaves no process behind."""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

import hpstudy.analysis.report_jobs as report_jobs
from hpstudy.analysis.catalogue import catalogue_state
from hpstudy.analysis.report_jobs import JobFolder, finish, read_inputs, worker_beside, worker_wanted, write_inputs
from tests.helpers import epochs_of, make_trials

if TYPE_CHECKING:  # matplotlib: imported by the tests that draw, not when they are collected
    from hpstudy.analysis.figures import Plot
    from hpstudy.analysis.report_figures import Study

SHARER = textwrap.dedent(
    """
    import os, sys, time
    from hpstudy.analysis.report_jobs import JobFolder

    folder, log, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ready = os.path.join(os.path.dirname(folder), "ready")
    os.makedirs(ready, exist_ok=True)
    open(os.path.join(ready, str(os.getpid())), "w").close()

    def job(i):
        def run():
            with open(log, "a") as f:
                f.write(f"{i}\\n")
            deadline = time.monotonic() + 60
            while len(os.listdir(ready)) < 2 and time.monotonic() < deadline:  # both started: both take jobs
                time.sleep(0.01)
            time.sleep(0.02)
            return {"i": i}
        return run

    JobFolder(folder).run({f"job {i}": job(i) for i in range(count)}, backward=sys.argv[4] == "backward")
    """
)


@pytest.mark.parametrize("count", [1, 2, 7, 40])
def test_two_processes_sharing_a_folder_run_every_job_exactly_once(tmp_path, count):
    """The report's process and its worker, each in its own order, over the same jobs: each job's side effect
    happens once and every job has its record, whoever ran it."""
    log = tmp_path / "ran.log"
    argv = [sys.executable, "-c", SHARER, str(tmp_path / "jobs"), str(log), str(count)]
    sharers = [subprocess.Popen([*argv, order]) for order in ("forward", "backward")]
    assert [sharer.wait(timeout=120) for sharer in sharers] == [0, 0]
    assert sorted(map(int, log.read_text().split())) == list(range(count))
    folder = JobFolder(str(tmp_path / "jobs"))
    records = [folder.done(f"job {i}") for i in range(count)]
    assert [r["result"] for r in records] == [{"i": i} for i in range(count)]
    assert {r["pid"] for r in records} <= {s.pid for s in sharers}
    if count >= 2:  # a job waits until both have started
        assert len({r["pid"] for r in records}) == 2


def test_a_job_claimed_by_a_process_that_died_is_run_by_the_reports_process(tmp_path):
    folder = JobFolder(str(tmp_path))
    assert folder.claim("taken") and not folder.claim("taken")  # a worker took it, then died: no record
    ran = []
    jobs = {"taken": lambda: ran.append("taken") or {"v": 1}, "free": lambda: ran.append("free") or {"v": 2}}
    assert finish(folder, jobs, None) == {"taken": {"v": 1}, "free": {"v": 2}}
    assert sorted(ran) == ["free", "taken"]
    assert folder.done("taken")["pid"] == os.getpid()


def test_a_worker_that_fails_costs_time_not_results(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(report_jobs, "WORKER_MODULE", "hpstudy.analysis.no_such_worker")
    folder = JobFolder(str(tmp_path))
    jobs = {f"job {i}": (lambda i=i: {"i": i}) for i in range(5)}
    frame = pd.DataFrame({"a": [1.0]})
    with caplog.at_level(logging.WARNING, logger=report_jobs.__name__):
        with worker_beside(str(tmp_path), {"trials": frame}, {}, start=True) as worker:
            results = finish(folder, jobs, worker)
    assert results == {f"job {i}": {"i": i} for i in range(5)}
    assert worker.returncode == 1
    [warning] = caplog.records
    assert "exited with 1" in warning.message and "no_such_worker" in warning.message


def test_an_error_on_the_way_stops_the_worker(tmp_path):
    trials = make_trials(n=8)
    with pytest.raises(RuntimeError, match="findings failed"):
        with worker_beside(str(tmp_path), {"trials": trials}, {"metric": "final"}, start=True) as worker:
            raise RuntimeError("findings failed")
    assert worker.returncode == -signal.SIGKILL  # killed and waited for, not left to end on its own


OBJECT_COLUMNS = {  # object columns Parquet would not give back as they are, or not store at all
    "mixed types": lambda n: [1, "a"] * (n // 2),
    "an integer beyond 64 bits": lambda n: [2**63] * n,
    "None among integers": lambda n: [64, None] * (n // 2),
    "lists": lambda n: [[1, 2]] * n,
}


@pytest.mark.parametrize("why", [*OBJECT_COLUMNS, "no process"])
def test_a_worker_that_cannot_start_leaves_the_report_alone(tmp_path, monkeypatch, caplog, why):
    """A column of objects other than strings (which Parquet changes or refuses), or no process to be had: no
    worker, and the report's process takes every job."""
    trials = make_trials(n=4)
    if why in OBJECT_COLUMNS:
        trials = trials.assign(note=pd.Series(OBJECT_COLUMNS[why](len(trials)), index=trials.index, dtype=object))
    else:
        monkeypatch.setattr(sys, "executable", str(tmp_path / "python-none"))
    with caplog.at_level(logging.INFO, logger=report_jobs.__name__):
        with worker_beside(str(tmp_path), {"trials": trials}, {}, start=True) as worker:
            assert worker is None
            assert finish(JobFolder(str(tmp_path)), {"a": lambda: {"v": 1}}, worker) == {"a": {"v": 1}}
    assert ("no worker, its inputs do not convert to Parquet" in caplog.text) is (why in OBJECT_COLUMNS)
    assert ("no worker, it cannot be started" in caplog.text) is (why == "no process")


@pytest.mark.parametrize("change", ["none", "a model registered", "a label changed"])
def test_a_worker_takes_no_job_where_the_reports_catalogue_is_not_its_own(tmp_path, change):
    """A model registered at run time (or changed) in the report's process is not in a new one: a worker that drew
    would name or order it otherwise, so it draws nothing and the report's process draws every figure."""
    import hpstudy.analysis.report_worker as report_worker
    from hpstudy.analysis.report import plan_jobs

    trials = make_trials(models=("vit_c_tiny", "cnn_tiny"), optimizers=("adamw",), n=8).assign(family="vit")
    catalogue = catalogue_state()
    if change == "a model registered":
        catalogue.append(["mine", "Mine", "mine", "tiny"])
    elif change == "a label changed":
        catalogue[0][1] += " (renamed)"
    params = {"metric": "final", "keys": {"lr": "log_uniform", "wd": "log_uniform"}, "sizes": {}}
    _, planned, jobs = plan_jobs(trials, pd.DataFrame(), out=str(tmp_path / "out"), **params)
    report_plan = list(jobs)[1:]  # the report's own plan: the worker takes no job outside it
    inputs = {**params, "out": str(tmp_path / "out"), "catalogue": catalogue, "jobs": report_plan}
    write_inputs(str(tmp_path), {"trials": trials}, inputs)
    assert report_worker.main([str(tmp_path)]) == 0
    taken = [name for name in jobs if JobFolder(str(tmp_path)).done(name)]
    assert taken == (report_plan if change == "none" else [])
    assert len(planned) >= 3


@pytest.mark.parametrize("empty_epochs", [True, False])
def test_the_inputs_reach_the_worker_as_they_were(tmp_path, empty_epochs):
    trials = make_trials(n=6).assign(family="vit", epochs=lambda t: t["epochs"].astype("int64"))
    trials["model"] = trials["model"].astype("category")
    epochs = pd.DataFrame() if empty_epochs else epochs_of(trials)
    params = {"metric": "best", "keys": {"lr": "log_uniform"}, "sizes": {}, "out": "x"}
    write_inputs(str(tmp_path), {"trials": trials, "epochs": epochs}, params)
    frames, back = read_inputs(str(tmp_path))
    assert back == params
    pd.testing.assert_frame_equal(frames["trials"], trials)
    assert ("epochs" in frames) is not empty_epochs
    if not empty_epochs:
        pd.testing.assert_frame_equal(frames["epochs"], epochs)


@pytest.mark.parametrize("trials,cpus,wanted", [(999, 8, False), (1000, 2, True), (10**6, 1, False)])
def test_a_worker_is_wanted_from_a_thousand_trials_on_two_cpus(monkeypatch, trials, cpus, wanted):
    import matplotlib

    monkeypatch.setattr(report_jobs, "available_cpus", lambda: cpus)
    with matplotlib.rc_context():
        matplotlib.rc_file_defaults()
        assert worker_wanted(trials) is wanted


@pytest.mark.parametrize(
    "switch,executable,wanted", [("0", "python3", False), ("1", "python3", True), (None, "uwsgi", False)]
)
def test_no_worker_where_switched_off_or_the_interpreter_is_not_python(monkeypatch, switch, executable, wanted):
    import matplotlib

    monkeypatch.setattr(report_jobs, "available_cpus", lambda: 2)
    monkeypatch.setattr(sys, "executable", f"/usr/bin/{executable}")
    if switch is None:
        monkeypatch.delenv(report_jobs.WORKER_SWITCH, raising=False)
    else:
        monkeypatch.setenv(report_jobs.WORKER_SWITCH, switch)
    with matplotlib.rc_context():
        matplotlib.rc_file_defaults()
        assert worker_wanted(10**4) is wanted


def test_a_worker_that_does_not_finish_is_stopped_and_its_job_run_here(tmp_path, monkeypatch):
    monkeypatch.setattr(report_jobs, "GRACE_S", 0.5)
    folder = JobFolder(str(tmp_path))
    assert folder.claim("stuck")  # the hung worker's job
    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    assert finish(folder, {"stuck": lambda: {"v": 1}}, hung) == {"stuck": {"v": 1}}
    assert hung.returncode == -signal.SIGKILL  # stopped after GRACE_S, not waited for forever


def test_a_process_stops_taking_jobs_when_told(tmp_path):
    """The worker's `stop`: its report's process is gone (os.getppid() changed), so it takes no more jobs."""
    folder, ran = JobFolder(str(tmp_path)), []
    jobs = {f"job {i}": (lambda i=i: ran.append(i) or {"i": i}) for i in range(5)}
    folder.run(jobs, stop=lambda: len(ran) >= 2)
    assert ran == [0, 1] and folder.done("job 2") is None


@pytest.mark.parametrize("param,value", [("font.size", 13.0), ("lines.linewidth", 0.5), ("axes.grid", True)])
def test_a_caller_who_changed_matplotlibs_rc_gets_a_report_drawn_alone(monkeypatch, caplog, param, value):
    """A worker would draw with the rcParams a new process loads: where the caller changed one, no worker."""
    import matplotlib

    monkeypatch.setattr(report_jobs, "available_cpus", lambda: 2)
    with matplotlib.rc_context():
        matplotlib.rc_file_defaults()
        matplotlib.rcParams[param] = value
        with caplog.at_level(logging.INFO, logger=report_jobs.__name__):
            assert not worker_wanted(10**4)
    assert f"changed matplotlib's rcParams ({param})" in caplog.text


@pytest.mark.parametrize(
    "text,cpus", [("max 100000", None), ("100000 100000", 1), ("150000 100000", 1), ("400000 100000", 4), ("", None)]
)
def test_a_cgroup_cpu_quota_caps_the_cpus_a_report_counts(tmp_path, text, cpus):
    assert report_jobs.quota_cpus(text) == cpus
    (tmp_path / "cpu.max").write_text(text)
    affinity = report_jobs.available_cpus(str(tmp_path / "no-such-file"))
    assert report_jobs.available_cpus(str(tmp_path / "cpu.max")) == (affinity if cpus is None else min(affinity, cpus))


def _count_figure(table: pd.DataFrame) -> "Plot":
    from matplotlib.figure import Figure

    from hpstudy.analysis.figures import Plot

    fig = Figure()
    fig.add_subplot().bar(table["model"], table["n"])
    return Plot(fig, table, f"Trials per model, n = {int(table['n'].sum())}.")


def _counts(study: "Study"):
    from hpstudy.analysis.report_figures import Planned

    table = study.rows.kept.groupby("model").size().rename("n").reset_index()
    yield Planned("trial_counts", "models", table, _count_figure, {"aggregate": "count per model"})


def test_a_report_shared_with_a_worker_writes_the_files_of_one_without(tmp_path, monkeypatch, caplog):
    """Every file (report.json, the page, each figure's PDF, SVG, PNG, CSV and JSON) is byte for byte the same;
    the worker drew some of them, and a figure registered at run time (which the worker does not know) is in
    both."""
    import matplotlib

    import hpstudy.analysis.report as report_module
    from hpstudy.analysis.report import build_report
    from hpstudy.analysis.report_figures import FIGURES

    trials = make_trials(models=("vit_c_tiny", "cnn_tiny"), optimizers=("adamw",), epochs=(6,), n=10, seed=5)
    trials = trials.assign(family=trials["model"], train_loss=np.random.default_rng(1).uniform(0.1, 2, len(trials)))
    record = {"n_trials": len(trials), "spec": {"name": "s", "models": ["vit_c_tiny", "cnn_tiny"]}}
    monkeypatch.setitem(FIGURES, "trial_counts", _counts)
    monkeypatch.setattr(report_jobs, "available_cpus", lambda: 2)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    finish_here = report_jobs.finish

    def after_the_worker_took_one(jobs, planned, worker):  # on a loaded machine this process could be first
        deadline = time.monotonic() + 120
        while worker is not None and not os.listdir(os.path.join(jobs.folder, "claims")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return finish_here(jobs, planned, worker)

    monkeypatch.setattr(report_module, "finish", after_the_worker_took_one)
    folders = {}
    for name, least in (("alone", 10**9), ("shared", 0)):
        monkeypatch.setattr(report_jobs, "WORKER_FROM_TRIALS", least)
        with caplog.at_level(logging.DEBUG, logger=report_jobs.__name__), matplotlib.rc_context():
            matplotlib.rc_file_defaults()  # as a new process: a test before this one may have changed them
            build_report(trials, epochs_of(trials), record, str(tmp_path / name), "final")
        folders[name] = {p.name: p.read_bytes() for p in (tmp_path / name).iterdir()}
    drawn = {name[: -len(".pdf")] for name in folders["shared"] if name.endswith(".pdf")}
    assert drawn >= {
        "delta_edf_adamw_6ep",
        "hp_scatter_adamw_6ep",
        "best_of_k_models",
        "generalization",
        "trial_counts",
    }
    [alone, shared] = [r.message for r in caplog.records if r.message.startswith("report jobs:")]
    assert alone.endswith(" 0 of them by the worker") and not shared.endswith(" 0 of them by the worker")
    assert (
        "trial_counts.svg" in folders["shared"]
        and "trial_counts" in json.loads(folders["shared"]["report.json"])["figures"]
    )
    assert sorted(folders["alone"]) == sorted(folders["shared"])
    differ = [name for name in folders["alone"] if folders["alone"][name] != folders["shared"][name]]
    assert differ == []
