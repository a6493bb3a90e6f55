"""Warm workers: a worker process keeps the Trainer of its last trial and restarts it in place for its next
trial of the same shape (`hpstudy.trainers.trial.shape`), so that trial builds no optimizer, EMA or compiled
step again and moves nothing but its seed's initial weights to the device; its row equals a fresh Trainer's.

One trainer is kept, the last trial's: a trial of another shape, or one fine-tuned from a checkpoint (`init`),
frees it (its device memory too) before building its own, and a trial that raises frees it, so that a retry
starts afresh.
"""

from typing import Any, Dict, Optional

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.trial import EpochCallback, Trainer, run_trial


class ResidentTrainer(Trainer):
    """A Trainer its worker keeps between trials: the release at the end of `fit` leaves it whole."""

    def release(self) -> None:
        """Keep everything for the worker's next trial (`free` releases it)."""

    def free(self) -> None:
        """Release the model, optimizer, data views and device memory, as a Trainer's end of trial does."""
        super().release()


_resident: Optional[ResidentTrainer] = None


def drop_resident() -> None:
    """Free the worker's resident trainer, if it has one."""
    global _resident
    trainer, _resident = _resident, None
    if trainer is not None:
        trainer.free()


def warm_trainer(cfg: TrialConfig) -> ResidentTrainer:
    """The resident trainer restarted for `cfg` when it can be (Trainer.restarts_for), else a new one, built
    once the resident one is freed; it becomes the resident trainer."""
    global _resident
    if _resident is not None and _resident.restarts_for(cfg):
        _resident.restart(cfg)
    else:
        drop_resident()
        _resident = ResidentTrainer(cfg)
    return _resident


def train_warm(config: Dict[str, Any], on_epoch: Optional[EpochCallback] = None) -> Dict[str, Any]:
    """`train_trial` on the worker's resident trainer (`warm_trainer`). Whatever the trial raises (Tune's stop
    too) frees the resident trainer first."""
    try:
        return run_trial(warm_trainer(TrialConfig.from_dict(config)), on_epoch)
    except BaseException:
        drop_resident()
        raise
