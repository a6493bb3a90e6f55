"""Live progress of a study on the driver: done / running / pending (a fused group's members each count),
ETA, best error per model; as a line every few seconds (a terminal), a tqdm bar (a notebook) or not at all;
the trials running per cell are recorded in the store for `hpstudy status` (study/store/running.py). A
trial that fails (a lost node, a killed worker) is one warning line of this module's logger, whether Ray
retries it or it is stored failed; Tune's traceback of it is kept for --debug (this logger at DEBUG)."""

import contextlib
import contextvars
import logging
import os
import re
import sys
import time
from collections import Counter
from typing import Dict, Iterator, List, Optional, Set, Tuple, Union

from ray import tune
from tqdm.auto import tqdm

from hpstudy.study.spec import SpecError
from hpstudy.study.store.running import clear_running, write_running
from hpstudy.trainers.errors import shown
from hpstudy.trainers.schema import FAILED, STATUSES

logger = logging.getLogger(__name__)
TUNE_CONTROLLER = "ray.tune.execution.tune_controller"  # logs each failed trial task with its traceback
TUNE_TRIAL_FAILED = "Trial task failed for trial "


class TuneTracebacks(logging.Filter):
    """On Tune's controller logger: its "Trial task failed for trial ..." record and traceback passes
    only when this module's logger is at DEBUG (--debug); ProgressPrinter says it in one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TUNE_TRIAL_FAILED) or logger.isEnabledFor(logging.DEBUG)


TUNE_TRACEBACKS = TuneTracebacks()


TYPED = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)(: |$)")


def trial_error(trial) -> str:
    """The error that ended a Tune trial's last attempt, on one line: the last `Type: message` line of its
    traceback, else the first line of its message, and `its node died` when the message says so (read as
    text from the last entry of the trial's error file: the pickled error beside it is never unpickled);
    "unknown error" when there is none."""
    text = ""
    with contextlib.suppress(Exception):
        if trial.error_file and os.path.exists(trial.error_file):
            with open(trial.error_file, errors="replace") as f:
                text = f.read().rsplit("Failure # ", 1)[-1]
    lines = [line.strip() for line in text.splitlines()[1:] if line.strip()]
    typed = [line for line in lines if TYPED.match(line)]  # a task's traceback ends with "SomeError: message"
    first = typed[-1] if typed else lines[0] if lines else "unknown error"
    sentence = first.split(". ")[0]  # Ray's messages run on: "... rpc_code: 14. The task may or may not ..."
    first = sentence if len(sentence) >= 20 else first
    node = "; its node died" if any("node has died" in line or "node was terminated" in line for line in lines) else ""
    return f"{first}{node}"


# how a run shows its progress: "auto" = a bar in an IPython kernel (Jupyter, VS Code, Colab), else lines
DISPLAYS = ("auto", "bar", "lines", "off")
_DISPLAY = contextvars.ContextVar("hpstudy_progress_display", default="auto")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def in_notebook() -> bool:
    """Whether this process is an IPython kernel (a notebook), not a terminal or a plain interpreter."""
    ipython = sys.modules.get("IPython")  # only if already imported: a kernel has imported it
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in shell.config


@contextlib.contextmanager
def progress_display(progress: Union[str, bool]) -> Iterator[None]:
    """Show the progress of the runs started inside the block as `progress`: one of DISPLAYS, True
    (= "auto") or False (= "off"); SpecError for anything else."""
    display = ("auto" if progress else "off") if isinstance(progress, bool) else progress
    if not isinstance(display, str) or display not in DISPLAYS:
        raise SpecError(
            f"progress: bad value {shown(progress)}; allowed: {', '.join(map(repr, DISPLAYS))}, True (= 'auto') "
            f"or False (= 'off')"
        )
    token = _DISPLAY.set(display)
    try:
        yield
    finally:
        _DISPLAY.reset(token)


class Tally:
    """What the run has stored so far, in memory that does not grow with the trials' rows: counts
    per status and per device, the best error per model, and the stored trial keys."""

    def __init__(self) -> None:
        self.statuses: Counter[str] = Counter()
        self.devices: Counter[str] = Counter()
        self.best: Dict[str, float] = {}
        self.keys: Set[str] = set()

    def add(self, row: Dict) -> None:
        """Count one stored trial row."""
        self.keys.add(row["trial_key"])
        self.statuses[row["status"]] += 1
        if row.get("device"):
            self.devices[row["device"].split(":")[0].split(" ")[0]] += 1
        if row["status"] != FAILED:
            self.best[row["model"]] = min(self.best.get(row["model"], float("inf")), row["top1_err"])

    def __len__(self) -> int:
        return sum(self.statuses.values())


class SavedEmpty:
    """A driver-side Tune hook that Tune pickles with its experiment state (a blob inside the state's
    JSON, again at every save) and in tuner.pkl; hpstudy never restores them (the store is the
    record), so they pickle as empty instead of with the study's plan and tally, which grow with its
    trials and made each save, and so each trial's turnaround, slower the larger the study."""

    def __getstate__(self) -> dict:
        return {}


class ProgressPrinter(SavedEmpty, tune.Callback):
    """Shows the run's status as `progress_display` set it (by default "auto"): a line at most every
    `interval` seconds and when trials end, or a tqdm bar (tqdm.auto: a widget in a notebook) whose
    ETA, like the line's, comes from the average finishing rate so far."""

    def __init__(self, writer, total: int, interval: float = 10.0):
        self.writer, self.total, self.interval = writer, total, interval
        self.started = time.time()
        self.last_print = 0.0
        self.running = 0
        self.cells: Counter = Counter()  # the running trials per (model, optimizer, epochs) last recorded
        display = _DISPLAY.get()
        self.display = ("bar" if in_notebook() else "lines") if display == "auto" else display
        self.drawn: Optional[Tuple[int, str]] = None  # what the bar shows now: (done, postfix)
        # smoothing=0: the bar's ETA from the average finishing rate since the start, as the line's
        self.bar = tqdm(total=total, unit="trial", smoothing=0, dynamic_ncols=True) if self.display == "bar" else None

    def details(self) -> List[str]:
        """The devices finished trials trained on (so a GPU study that trains on CPUs shows it) and the
        best top-1 error per model, as far as known."""
        devices, best = self.writer.tally.devices, self.writer.tally.best
        parts = []
        if devices:
            parts.append("on " + ", ".join(f"{d} {n}" for d, n in sorted(devices.items())))
        if best:
            parts.append("best top-1: " + ", ".join(f"{m} {e:.2f}%" for m, e in sorted(best.items())))
        return parts

    def counts(self) -> str:
        """Trials stored per status, e.g. `ok 3, diverged 1, failed 0`."""
        return ", ".join(f"{s} {self.writer.tally.statuses[s]}" for s in STATUSES)

    def line(self) -> str:
        """The status line: counts, ETA from the finishing rate, devices, best top-1 error per model."""
        done = len(self.writer.tally)
        elapsed = time.time() - self.started
        eta = elapsed / done * (self.total - done) if done else float("nan")
        pending = self.total - done - self.running
        parts = [
            f"[{_minutes(elapsed)}] {done}/{self.total} done ({self.counts()}), "
            f"{self.running} running, {max(0, pending)} pending",
            f"ETA {_minutes(eta)}" if done else "ETA -",
        ]
        return " | ".join(parts + self.details())

    def _show_bar(self, bar: tqdm, force: bool) -> None:
        """Move `bar` (self.bar) to what is stored, redrawn when that or the postfix changed (or `force`)."""
        state = (len(self.writer.tally), " | ".join([f"{self.counts()}, {self.running} running", *self.details()]))
        if force or state != self.drawn:
            self.drawn = state
            bar.n = state[0]
            bar.set_postfix_str(state[1])  # redraws

    def _maybe_show(self, force: bool = False) -> None:
        if self.bar is not None:
            self._show_bar(self.bar, force)
        elif self.display == "lines" and (force or time.time() - self.last_print >= self.interval):
            self.last_print = time.time()
            logger.info("%s", self.line())

    def _members(self, trial) -> List[str]:
        """The study's trial keys a Tune trial trains: a fused group's members (one unknown key when it is not
        one of the writer's groups)."""
        with contextlib.suppress(AttributeError, KeyError, IndexError, TypeError):
            return list(self.writer.groups[trial.config["group"]]["keys"])
        return [""]

    def on_step_begin(self, iteration, trials, **info):
        """Count the study's trials running now (each member of a fused group is one) and record them per cell
        in the store when that changed (hpstudy status reads it)."""
        keys = [key for t in trials if t.status == "RUNNING" for key in self._members(t)]
        self.running = len(keys)
        cells = Counter()
        for key in keys:
            with contextlib.suppress(AttributeError, KeyError):
                t = self.writer.by_key[key]
                cells[(t.model, t.optimizer, t.epochs)] += 1
        if cells != self.cells:
            self.cells = cells
            write_running(self.writer.store, self.writer.study, dict(cells))
        self._maybe_show()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._maybe_show()

    def setup(self, **info):
        """Tune's per-trial tracebacks behind --debug for the run (TuneTracebacks; removed in final)."""
        logging.getLogger(TUNE_CONTROLLER).addFilter(TUNE_TRACEBACKS)

    def _about(self, trial) -> str:
        """`group-000003 (2 trials)`: the Tune trial and how many of the study's trials it trains."""
        with contextlib.suppress(AttributeError, KeyError, IndexError, TypeError):
            group = self.writer.groups[trial.config["group"]]["keys"]
            return f"{trial} ({len(group)} trial{'' if len(group) == 1 else 's'})"
        return str(trial)

    def on_trial_recover(self, iteration, trials, trial, **info):
        """One line for a failed trial that Ray runs again (a lost node, a killed worker)."""
        logger.warning(
            "%s failed (%s); Ray runs it again (failures so far %d, max_retries %d)",
            self._about(trial),
            trial_error(trial),
            getattr(trial, "num_failures", 0),
            getattr(trial, "max_failures", 0),
        )

    def on_trial_error(self, iteration, trials, trial, **info):
        logger.warning(
            "%s failed (%s) after %d retries; stored as failed",
            self._about(trial),
            trial_error(trial),
            max(0, getattr(trial, "num_failures", 0) - 1),
        )
        self._maybe_show(force=True)

    def final(self) -> None:
        """The last status (a line, or the bar's last state, closed), once the run ends (or is interrupted)."""
        self.running = 0
        if self.cells:
            clear_running(self.writer.store, self.writer.study)
        self._maybe_show(force=True)
        if self.bar is not None:
            self.bar.close()
        logging.getLogger(TUNE_CONTROLLER).removeFilter(TUNE_TRACEBACKS)
