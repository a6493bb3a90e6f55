"""The Tune callback that stores a study's finished trials (and its failed ones) from the driver."""

import json
import os
from datetime import datetime, timezone
from typing import Dict, List, Optional, Sequence

from ray import tune

from hpstudy.study.interruption import Interruption
from hpstudy.study.progress import SavedEmpty, Tally
from hpstudy.study.sampling import PlannedTrial
from hpstudy.study.store.layout import StoreFault, StoreLike
from hpstudy.study.store.store import Store
from hpstudy.study.trackers import Tracker, warn
from hpstudy.trainers import schema
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.provenance import versions


def failed_row(trial: PlannedTrial, error: str) -> Dict:
    """The stored row of a trial that failed after its last retry (left out of EDFs, counted)."""
    row = {**dict.fromkeys(schema.TRIAL_FIELDS), **TrialConfig.from_dict(trial.config).row_fields()}
    return dict(
        row,
        trial_key=trial.key,
        status=schema.FAILED,
        versions=versions(),
        error=error[-4000:],
        finished_at=datetime.now(timezone.utc),
    )


class StoreWriter(SavedEmpty, tune.Callback):
    """Writes each finished trial (and its epochs) to the store from the driver, exactly once.

    A store fault (full, unwritable, unreachable) is kept in `fault` and stops writing; the
    `RunStopper` then ends the run. Each stored row then goes to every tracker (study/trackers.py)."""

    def __init__(
        self,
        store: StoreLike,
        study: str,
        trials: List[PlannedTrial],
        groups: List[Dict],
        interruption: Optional[Interruption] = None,
        compact_every: int = 0,
        trackers: Sequence[Tracker] = (),
    ):
        self.store, self.study, self.compact_every = Store.of(store), study, compact_every
        self.trackers = trackers
        self.by_key = {t.key: t for t in trials}
        self.groups = groups
        self.interruption = interruption or Interruption()
        self.tally = Tally()  # counts, not rows: the driver's memory stays flat
        self.fault: Optional[StoreFault] = None
        self.stop_reason: Optional[str] = None  # a trial found its node unable to run any trial

    def on_trial_result(self, iteration, trials, trial, result, **info):
        """Store the rows a group reports at its end (as failed when it reports a deterministic error;
        a `stop_study` error also stops the whole run)."""
        if "trial_error" in result:
            self._store_failed(trial.config["group"], result["trial_error"])
            if result.get("stop_study") and self.stop_reason is None:
                self.stop_reason = result["trial_error"]
        if "rows_json" not in result:
            return
        # written, the rows leave the result: Tune keeps each trial's last result for the whole run
        for row in json.loads(result.pop("rows_json")):
            epochs = row.pop("epoch_log")
            self._write(row, epochs)

    def on_trial_error(self, iteration, trials, trial, **info):
        """Store the group's trials as failed (after Ray's retries)."""
        self._store_failed(trial.config["group"], _error_text(trial))

    def _store_failed(self, group: int, error: str) -> None:
        """Store a group's trials as failed, except those it had already stored."""
        for key in self.groups[group]["keys"]:
            if key not in self.tally.keys:
                self._write(failed_row(self.by_key[key], error))

    def _write(self, row: Dict, epochs=()) -> None:
        """Store one row (and its epochs) unless a fault came before; compact every `compact_every` rows."""
        if self.fault is not None:
            return
        try:
            with self.interruption.writing():
                self.store.write_trial(self.study, row, epochs)
        except StoreFault as exc:
            self.fault = exc
            return
        self.tally.add(row)
        self._track(row, epochs)
        if self.compact_every and len(self.tally) % self.compact_every == 0:
            try:
                self.store.compact(self.study)
            except StoreFault as exc:
                self.fault = exc

    def _track(self, row: Dict, epochs) -> None:
        """Hand a stored row (with its study) and its epochs to each tracker: a tracker that fails costs
        one warning line, never the store's row nor the other trackers'."""
        stored = {**row, "study": self.study}
        for tracker in self.trackers:
            try:
                tracker.log_trial(stored, epochs)
            except Exception as exc:
                warn(tracker, f"did not log trial {row['trial_key']}", exc)


def _error_text(trial) -> str:
    """The trial's error trace: Tune writes it to the trial's local folder first, and only later to
    storage (where `Trial.get_error` reads), so read the local file when it is there."""
    path = trial.error_file
    if path and os.path.exists(path):
        with open(path) as f:
            return f.read()
    return str(trial.get_error() or "unknown error")
