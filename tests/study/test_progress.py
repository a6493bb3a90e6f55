"""Tune pickles hpstudy's stopper and callbacks at every experiment-state save: they must not carry the
study; and the status line they print: done, running, pending, ETA."""

import itertools
import logging
import sys
import time
from functools import partial
from types import SimpleNamespace

import pytest

from hpstudy.study.sampling import expand
from hpstudy.study.spec import SpecError, parse_spec
from tests.helpers import logged, small_spec


def test_tune_hooks_pickle_without_the_studys_plan(tmp_path):
    from ray import cloudpickle

    from hpstudy.study.progress import ProgressPrinter
    from hpstudy.study.tune.stopper import RunStopper
    from hpstudy.study.tune.store_writer import StoreWriter

    trials = expand(parse_spec(small_spec(samples=50)))
    groups = [{"keys": [t.key], "configs": [t.config]} for t in trials]
    writer = StoreWriter(str(tmp_path), "s", trials, groups)
    assert len(cloudpickle.dumps(writer.__dict__)) > 10_000  # the plan it holds is large
    for hook in (writer, RunStopper(writer), ProgressPrinter(writer, len(trials))):
        assert len(cloudpickle.dumps(hook)) < 200


def _printer(statuses, total, running=0, minutes_ago=10.0):
    """A ProgressPrinter over a tally of `statuses` (cnn_tiny rows, error 20 + i), started `minutes_ago`."""
    from hpstudy.study.progress import ProgressPrinter, Tally

    tally = Tally()
    for i, status in enumerate(statuses):
        tally.add({"trial_key": f"k{i}", "model": "cnn_tiny", "status": status, "top1_err": 20.0 + i, "device": None})
    printer = ProgressPrinter(SimpleNamespace(tally=tally), total=total, interval=3600)
    printer.started, printer.running = time.time() - 60 * minutes_ago, running
    return printer


def test_the_status_line_counts_running_and_pending_and_projects_the_eta():
    """2 of 10 done in 10 min, 3 running: 5 pending, ETA 10 min / 2 x 8 = 40 min."""
    assert _printer(["ok", "failed"], 10, running=3).line() == (
        "[10.0 min] 2/10 done (ok 1, diverged 0, failed 1), 3 running, 5 pending | ETA 40.0 min | "
        "best top-1: cnn_tiny 20.00%"
    )
    # 3 of 4 done, 2 running (a retry): pending never goes below 0; ETA 0.5 min / 3 x 1 = 10 s
    assert (
        _printer(["ok", "diverged", "ok"], 4, running=2, minutes_ago=0.5)
        .line()
        .startswith("[30 s] 3/4 done (ok 2, diverged 1, failed 0), 2 running, 0 pending | ETA 10 s |")
    )
    assert (
        _printer([], 4, running=4).line()
        == "[10.0 min] 0/4 done (ok 0, diverged 0, failed 0), 4 running, 0 pending | ETA -"
    )


def test_running_is_counted_from_tunes_trials_at_each_step_and_is_0_in_the_last_line(caplog):
    printer = _printer(["ok"], 6)
    trials = [SimpleNamespace(status=s) for s in ("RUNNING", "PENDING", "RUNNING", "TERMINATED")]
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        printer.on_step_begin(0, trials)  # first call: the interval since the last print (never) has passed
        printer.on_step_begin(1, trials[:1])  # within the interval: no line
        printer.on_trial_error(2, trials[:1], trials[0])  # an error prints at once
        printer.final()
    lines = logged(caplog)
    assert [line.split(", ", 2)[2].split(" |")[0] for line in lines] == [
        "failed 0), 2 running, 3 pending",
        "failed 0), 1 running, 4 pending",
        "failed 0), 0 running, 5 pending",
    ]


def _shell(monkeypatch, *apps):
    """An IPython whose shell was started by `apps` (a kernel: IPKernelApp; a terminal: TerminalIPythonApp)."""
    shell = SimpleNamespace(config={app: {} for app in apps})
    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=lambda: shell))


def test_a_notebook_is_an_ipython_kernel_not_a_terminal_ipython(monkeypatch):
    from hpstudy.study.progress import in_notebook

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not in_notebook()
    _shell(monkeypatch, "TerminalIPythonApp")
    assert not in_notebook()
    monkeypatch.setitem(sys.modules, "IPython", SimpleNamespace(get_ipython=lambda: None))  # imported, no shell
    assert not in_notebook()
    _shell(monkeypatch, "IPKernelApp")
    assert in_notebook()


def _events(printer):
    """Two steps (3 running, then 1), an error and the end of the run."""
    trials = [SimpleNamespace(status=s) for s in ("RUNNING", "RUNNING", "RUNNING", "PENDING")]
    printer.on_step_begin(0, trials)
    printer.on_step_begin(1, trials[:1])
    printer.on_trial_error(2, trials[:1], trials[0])
    printer.final()


def test_in_a_notebook_auto_shows_a_tqdm_bar_of_the_stored_trials_instead_of_lines(monkeypatch, capsys, caplog):
    from hpstudy.study.progress import progress_display

    _shell(monkeypatch, "IPKernelApp")
    # a wide bar: tqdm 4.66 (the oldest pyproject.toml allows) reads its width from COLUMNS when its stream is no
    # terminal, and pytest-xdist's workers set COLUMNS=80, which cut the bar's text
    monkeypatch.setenv("COLUMNS", "500")
    with progress_display("auto"):
        printer = _printer(["ok", "failed"], 10)
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        _events(printer)
    out, err = capsys.readouterr()
    assert out == "" and logged(caplog) == []  # the bar is drawn (tqdm, on stderr), no status line is logged
    frames = [frame.strip() for frame in err.split("\r") if frame.strip()]
    assert "running" not in frames[0]  # drawn empty when the run starts
    running = [frame.split(" running")[0].rsplit(", ", 1)[1] for frame in frames[1:]]
    assert [n for n, _ in itertools.groupby(running)] == ["3", "1", "0"]  # then at each change
    last = frames[-1]
    assert last.startswith("20%|") and "| 2/10 [" in last
    assert last.endswith("ok 1, diverged 0, failed 1, 0 running | best top-1: cnn_tiny 20.00%]")
    assert printer.bar.n == 2


@pytest.mark.parametrize("progress", ["lines", "auto", True])
def test_in_a_terminal_auto_and_lines_log_the_status_lines(progress, monkeypatch, capsys, caplog):
    """The lines are INFO records of hpstudy.study.progress (a terminal shows them: the command line's handler)."""
    from hpstudy.study.progress import progress_display

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    with progress_display(progress):
        printer = _printer(["ok"], 6)
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        _events(printer)
    assert printer.bar is None and capsys.readouterr() == ("", "")  # the library prints nothing itself
    assert {r.name for r in caplog.records if r.levelno == logging.INFO} == {"hpstudy.study.progress"}
    assert [line.split(" | ")[0].split(", ", 3)[3] for line in logged(caplog)] == [
        "3 running, 2 pending",
        "1 running, 4 pending",
        "0 running, 5 pending",
    ]


@pytest.mark.parametrize("progress", ["off", False])
def test_off_shows_nothing_even_in_a_notebook(progress, monkeypatch, capsys, caplog):
    from hpstudy.study.progress import progress_display

    _shell(monkeypatch, "IPKernelApp")
    with progress_display(progress):
        printer = _printer(["ok", "diverged"], 4)
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        _events(printer)
    assert printer.bar is None and capsys.readouterr() == ("", "") and logged(caplog) == []


def test_the_display_is_set_for_the_block_only_and_a_bad_one_is_a_spec_error(monkeypatch):
    from hpstudy.study.progress import progress_display

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    with progress_display("off"):
        assert _printer([], 1).display == "off"
    assert _printer([], 1).display == "lines"
    with pytest.raises(SpecError, match=r"^progress: bad value 'bars'; allowed: 'auto', 'bar', 'lines', 'off', True"):
        with progress_display("bars"):
            pass


# A trial that fails (issue #37 item 7): one warning line of the progress logger, Tune's traceback of it only
# with --debug (the `hpstudy` logger at DEBUG).


def _failed_trial(tmp_path, error, failures=1, name="group-000001"):
    """A Tune trial as Tune leaves it after a failure: its error pickled and in its error file (Trial.handle_error)."""
    from ray import cloudpickle

    pickled, text = tmp_path / "error.pkl", tmp_path / "error.txt"
    pickled.write_bytes(cloudpickle.dumps(error))
    text.write_text(f"Failure # {failures} (occurred at 2026-12-03_06-00-00)\n{error}\n")
    return SimpleNamespace(
        config={"group": 1},
        num_failures=failures,
        max_failures=2,
        pickled_error_file=str(pickled),
        error_file=str(text),
        name=name,
    )


class _Trial(SimpleNamespace):
    def __str__(self):
        return self.name


def _actor_unavailable(message):
    from ray.exceptions import ActorUnavailableError

    return ActorUnavailableError(message, b"\x01" * 16)


# The errors are made as a test runs (Ray's own needs ray imported): these make them.
UNAVAILABLE = partial(
    _actor_unavailable, "The actor is temporarily unavailable: RpcError: RPC error: Socket closed rpc_code: 14."
)
TASK_ERROR = partial(
    RuntimeError,
    "ray::ImplicitFunc.train() (pid=4242, ip=127.0.0.1)\nTraceback (most recent call last):\n"
    '  File "trial.py", line 3, in fit\nValueError: lr: bad value -1.0',
)


@pytest.mark.parametrize(
    "error,line",
    [
        (
            UNAVAILABLE,
            "The actor 01010101010101010101010101010101 is unavailable: The actor is "
            "temporarily unavailable: RpcError: RPC error: Socket closed rpc_code: 14.",
        ),
        (
            partial(
                RuntimeError, "The actor died unexpectedly.\nThe actor died because its node has died. Node Id: 1a2b"
            ),
            "The actor died unexpectedly.; its node died",
        ),
        (TASK_ERROR, "ValueError: lr: bad value -1.0"),
        (partial(ValueError, ""), "unknown error"),
    ],
)
def test_a_trials_error_is_one_line_read_as_text(error, line, tmp_path):
    """Read from the error file's last entry (Tune writes str(error) there); the pickled error is never read."""
    from hpstudy.study.progress import trial_error

    trial = _Trial(**vars(_failed_trial(tmp_path, error())))
    trial.pickled_error_file = "/nonexistent/never-read.pkl"
    assert trial_error(trial) == line


def test_a_trials_error_falls_back_to_its_error_file_and_then_to_unknown(tmp_path):
    from hpstudy.study.progress import trial_error

    trial = _Trial(**vars(_failed_trial(tmp_path, RuntimeError("first\nThe actor died because its node has died."))))
    trial.pickled_error_file = str(tmp_path / "gone.pkl")
    assert trial_error(trial) == "first; its node died"
    trial.error_file = None
    assert trial_error(trial) == "unknown error"


def _groups_printer(tmp_path):
    from hpstudy.study.progress import ProgressPrinter
    from hpstudy.study.tune.store_writer import StoreWriter

    trials = expand(parse_spec(small_spec(samples=2, models=["cnn_tiny"], optimizers=["adamw"])))
    groups = [{"keys": [trials[0].key]}, {"keys": [t.key for t in trials]}]
    return ProgressPrinter(StoreWriter(str(tmp_path), "s", trials, groups), len(trials), interval=3600)


def test_a_retried_trial_and_a_failed_one_are_one_warning_line_each(tmp_path, caplog, capsys):
    printer = _groups_printer(tmp_path)
    trial = _Trial(**vars(_failed_trial(tmp_path, UNAVAILABLE())))
    with caplog.at_level(logging.WARNING, logger="hpstudy.study.progress"):
        printer.on_trial_recover(0, [trial], trial)
        trial.num_failures = 3
        printer.on_trial_error(0, [trial], trial)
    assert [(r.name, r.levelname) for r in caplog.records] == [("hpstudy.study.progress", "WARNING")] * 2
    retried, failed = (r.getMessage() for r in caplog.records)
    assert retried == (
        "group-000001 (2 trials) failed (The actor 01010101010101010101010101010101 is "
        "unavailable: The actor is temporarily unavailable: RpcError: RPC error: Socket closed rpc_code: 14.); "
        "Ray runs it again (failures so far 1, max_retries 2)"
    )
    assert failed.startswith("group-000001 (2 trials) failed (The actor ") and failed.endswith(
        ") after 2 retries; stored as failed"
    )


@pytest.mark.parametrize("debug", [False, True])
def test_tunes_traceback_of_a_failed_trial_shows_only_with_debug_while_a_run_goes_on(debug, tmp_path, caplog):
    from hpstudy.study.progress import TUNE_CONTROLLER

    tune_logger = logging.getLogger(TUNE_CONTROLLER)
    hpstudy_logger = logging.getLogger("hpstudy")
    before = hpstudy_logger.level
    hpstudy_logger.setLevel(logging.DEBUG if debug else logging.NOTSET)
    printer, unavailable = _groups_printer(tmp_path), UNAVAILABLE()
    try:
        with caplog.at_level(logging.ERROR, logger=TUNE_CONTROLLER):
            printer.setup()
            tune_logger.error("Trial task failed for trial group-000001", exc_info=unavailable)
            tune_logger.error("another error of Tune's")
            printer.final()
            tune_logger.error("Trial task failed for trial group-000002", exc_info=unavailable)  # after the run
    finally:
        hpstudy_logger.setLevel(before)
    shown = [r.getMessage() for r in caplog.records if r.name == TUNE_CONTROLLER]
    expected = ["another error of Tune's", "Trial task failed for trial group-000002"]
    assert shown == (["Trial task failed for trial group-000001"] + expected if debug else expected)
