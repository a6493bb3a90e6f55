"""Live progress of a study on the driver: done / running / pending, ETA, best error per model."""

import time
from collections import Counter

from ray import tune

from trainers.schema import FAILED, STATUSES


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


class ProgressPrinter(tune.Callback):
    """Prints a one-line status at most every `interval` seconds and when trials end."""

    def __init__(self, writer, total: int, interval: float = 10.0):
        self.writer, self.total, self.interval = writer, total, interval
        self.started = time.time()
        self.last_print = 0.0
        self.running = 0

    def line(self) -> str:
        """The status line: counts, ETA from the finishing rate, the devices finished trials trained on
        (so a GPU study that trains on CPUs shows it), best top-1 error per model."""
        finished = self.writer.finished
        done = len(finished)
        statuses = Counter(r["status"] for r in finished)
        elapsed = time.time() - self.started
        eta = elapsed / done * (self.total - done) if done else float("nan")
        best = {}
        for r in finished:
            if r["status"] != FAILED:
                best[r["model"]] = min(best.get(r["model"], float("inf")), r["top1_err"])
        pending = self.total - done - self.running
        counts = ", ".join(f"{s} {statuses[s]}" for s in STATUSES)
        parts = [f"[{_minutes(elapsed)}] {done}/{self.total} done ({counts}), "
                 f"{self.running} running, {max(0, pending)} pending",
                 f"ETA {_minutes(eta)}" if done else "ETA -"]
        devices = Counter(r["device"].split(":")[0].split(" ")[0] for r in finished if r.get("device"))
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
