"""Live progress of a study on the driver: done / running / pending, ETA, best error per model."""

import time
from collections import Counter
from typing import Dict, Set

from ray import tune

from hpstudy.trainers.schema import FAILED, STATUSES


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


class Tally:
    """What the run has stored so far, in memory that does not grow with the trials' rows: counts
    per status and per device, the best error per model, and the stored trial keys."""

    def __init__(self):
        self.statuses, self.devices = Counter(), Counter()
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
    """Prints a one-line status at most every `interval` seconds and when trials end."""

    def __init__(self, writer, total: int, interval: float = 10.0):
        self.writer, self.total, self.interval = writer, total, interval
        self.started = time.time()
        self.last_print = 0.0
        self.running = 0

    def line(self) -> str:
        """The status line: counts, ETA from the finishing rate, the devices finished trials trained on
        (so a GPU study that trains on CPUs shows it), best top-1 error per model."""
        tally = self.writer.tally
        done, statuses, devices, best = len(tally), tally.statuses, tally.devices, tally.best
        elapsed = time.time() - self.started
        eta = elapsed / done * (self.total - done) if done else float("nan")
        pending = self.total - done - self.running
        counts = ", ".join(f"{s} {statuses[s]}" for s in STATUSES)
        parts = [
            f"[{_minutes(elapsed)}] {done}/{self.total} done ({counts}), "
            f"{self.running} running, {max(0, pending)} pending",
            f"ETA {_minutes(eta)}" if done else "ETA -",
        ]
        if devices:
            parts.append("on " + ", ".join(f"{d} {n}" for d, n in sorted(devices.items())))
        if best:
            parts.append("best top-1: " + ", ".join(f"{m} {e:.2f}%" for m, e in sorted(best.items())))
        return " | ".join(parts)

    def _maybe_print(self, force: bool = False) -> None:
        if force or time.time() - self.last_print >= self.interval:
            self.last_print = time.time()
            print(self.line(), flush=True)

    def on_step_begin(self, iteration, trials, **info):
        self.running = sum(t.status == "RUNNING" for t in trials)
        self._maybe_print()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._maybe_print()

    def on_trial_error(self, iteration, trials, trial, **info):
        self._maybe_print(force=True)

    def final(self) -> None:
        """The last status line, printed once the run ends (or is interrupted)."""
        self.running = 0
        self._maybe_print(force=True)
