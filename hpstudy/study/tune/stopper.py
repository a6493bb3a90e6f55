"""The Tune stopper of a study: ends the whole run on a store fault, a node that cannot run
trials, or a stop signal."""

import logging
import signal
from typing import Dict

from ray.tune.stopper import Stopper

from hpstudy.study.progress import SavedEmpty
from hpstudy.study.ray_session import workers_stopping
from hpstudy.study.tune.store_writer import StoreWriter

logger = logging.getLogger(__name__)


class RunStopper(SavedEmpty, Stopper):
    """Stops the whole run (no new trials; running ones cancelled) once the StoreWriter has met a
    store fault (nothing more can be stored), a trial found its node unable to run trials, or a
    stop signal came; says so once for a signal (a warning of this module's logger: stderr in a terminal)."""

    def __init__(self, writer: StoreWriter):
        self.writer = writer

    def __call__(self, trial_id: str, result: Dict) -> bool:
        """No single trial is stopped for its own results."""
        return False

    def stop_all(self) -> bool:
        """True once a write has failed, a node cannot run trials, or a stop signal came (then what the
        trials' workers print as Ray ends them reaches the terminal only with --debug)."""
        interruption = self.writer.interruption
        if interruption.signum is not None and not interruption.noted:
            interruption.noted = True
            logger.warning(
                "%s: stopping: no new trial starts, running trials are cancelled (a rerun trains them again), "
                "finished trials stay stored; send it again to quit at once",
                signal.Signals(interruption.signum).name,
            )
        stop = self.writer.fault is not None or self.writer.stop_reason is not None or interruption.signum is not None
        if stop:
            workers_stopping()
        return stop
