"""The epochs -> steps schedule a trial trains with, alone and fused, against the closed form of a
linear warmup from 0 followed by a half-period cosine, and which lr a trial row stores."""

import math

import pytest

from hpstudy.trainers.config import TrialConfig
from tests.helpers import TINY_TRIAL, tiny_trainer


def closed_form(step: int, steps_per_epoch: int, epochs: int, warmup_epochs: float, peak: float, floor: float):
    """The lr before optimizer step `step` (0-based), derived by hand from the recipe in epochs."""
    total = epochs * steps_per_epoch
    warmup = min(round(warmup_epochs * steps_per_epoch), total - 1)  # a warmup reaches the peak by the last step
    if step < warmup:
        return peak * step / warmup
    progress = (step - warmup) / (total - warmup)
    return floor * peak + (1 - floor) * peak * (1 + math.cos(math.pi * progress)) / 2


def _config(**changes) -> TrialConfig:
    return TrialConfig.from_dict(dict(TINY_TRIAL, **changes), check_model=False)


@pytest.mark.parametrize("steps_per_epoch", [1, 7, 50])
@pytest.mark.parametrize(
    "epochs,warmup_epochs,floor", [(3, 0.0, 0.0), (4, 0.5, 0.0), (10, 2.0, 0.1), (6, 1.3, 0.25), (2, 1.9, 0.0)]
)
def test_every_step_of_the_trial_schedule_is_the_closed_form(steps_per_epoch, epochs, warmup_epochs, floor):
    """Warmup is given in epochs and runs for round(warmup_epochs * steps_per_epoch) steps."""
    import torch

    from hpstudy.trainers.loop import trial_schedule

    cfg = _config(epochs=epochs, warmup_epochs=warmup_epochs, min_lr_ratio=floor, lr=0.4)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.peak_lr)
    schedule = trial_schedule(opt, cfg, steps_per_epoch)
    for step in range(epochs * steps_per_epoch):
        schedule.step_update(step)
        expected = closed_form(step, steps_per_epoch, epochs, warmup_epochs, 0.4, floor)
        assert opt.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-9, abs=1e-12), step


@pytest.mark.parametrize("steps_per_epoch", [1, 7])
def test_the_fused_members_lr_per_step_is_the_closed_form_at_their_scaled_peak(steps_per_epoch):
    from hpstudy.trainers.fused import _lr_per_step

    cfg = _config(epochs=5, warmup_epochs=1.5, min_lr_ratio=0.1, lr=0.8, reference_batch_size=32)
    expected = [closed_form(s, steps_per_epoch, 5, 1.5, 0.8 * 8 / 32, 0.1) for s in range(5 * steps_per_epoch)]
    assert _lr_per_step(cfg, steps_per_epoch) == pytest.approx(expected, rel=1e-9, abs=1e-12)


WARM = dict(epochs=3, warmup_epochs=1.5, min_lr_ratio=0.1, reference_batch_size=32)  # 2 steps an epoch


def test_a_trial_alone_trains_with_the_closed_form_schedule_of_its_epochs():
    """The solo Trainer's optimizer starts at the batch-scaled peak and its schedule counts steps of
    its data (16 images, batch 8: 2 an epoch), warming up for 3 of its 6 steps."""
    trainer = tiny_trainer(lr=0.2, **WARM)
    lrs = []
    for step in range(6):
        trainer.schedule.step_update(step)
        lrs.append(trainer.optimizer.param_groups[0]["lr"])
    assert lrs == pytest.approx([closed_form(s, 2, 3, 1.5, 0.05, 0.1) for s in range(6)], rel=1e-9, abs=1e-12)


def test_fused_members_train_with_the_closed_form_schedule_of_their_epochs():
    from hpstudy.trainers.fused import FusedTrainer

    cfgs = [TrialConfig.from_dict(dict(TINY_TRIAL, **WARM, seed=s, lr=lr)) for s, lr in ((0, 0.2), (1, 0.4))]
    table = FusedTrainer(cfgs).lr_table  # step x member
    for member, peak in enumerate((0.05, 0.1)):
        expected = [closed_form(s, 2, 3, 1.5, peak, 0.1) for s in range(6)]
        assert table[:, member].tolist() == pytest.approx(expected, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("reference", [None, 8, 32, 2])
def test_the_row_stores_the_sampled_lr_whatever_the_reference_batch(reference):
    cfg = _config(lr=0.3, reference_batch_size=reference)
    assert cfg.row_fields()["lr"] == 0.3
    assert cfg.peak_lr == pytest.approx(0.3 * 8 / (reference or 8), rel=1e-12)
