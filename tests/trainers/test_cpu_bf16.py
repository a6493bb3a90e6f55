"""bf16 (autocast) training on a CPU runs its steps with oneDNN off: oneDNN's bf16 convolution
backward_weights on AMX CPUs leaves weight-gradient taps that see only padding unwritten, holding
what the allocator freed there last (hpstudy.trainers.loop.onednn_off_for_cpu_bf16)."""

import pytest

from hpstudy.trainers.config import TrialConfig

# cnn_tiny on 8x8 images: its last stages see 1x1 maps, where a 3x3 stride-2 conv's outer taps see only padding
DATA = {"name": "synthetic", "image_size": 8, "n_train": 64, "n_val": 32, "num_classes": 4}
BASE = dict(model="cnn_tiny", optimizer="sgd", epochs=3, batch_size=16, warmup_epochs=1, device="cpu", dataset=DATA)


def _trainers(amp: bool):
    """A solo and a fused trainer (two members) of cnn_tiny, float32."""
    from hpstudy.trainers.fused import FusedTrainer
    from hpstudy.trainers.trial import Trainer

    configs = [
        TrialConfig.from_dict(dict(BASE, lr=lr, wd=wd, seed=10 + i, dtype="float32", amp=amp))
        for i, (lr, wd) in enumerate([(0.05, 1e-4), (0.1, 1e-5)])
    ]
    return {"solo": Trainer(configs[0]), "fused": FusedTrainer(configs)}


def _model(trainer):
    return trainer.base if hasattr(trainer, "base") else trainer.model


@pytest.mark.parametrize("kind", ["solo", "fused"])
@pytest.mark.parametrize("amp", [True, False])
def test_cpu_training_steps_run_without_onednn_exactly_when_bf16(kind, amp):
    import torch

    trainer = _trainers(amp)[kind]
    seen = []
    for module in _model(trainer).modules():
        if isinstance(module, torch.nn.Conv2d):
            module.register_forward_hook(lambda *_: seen.append(torch.backends.mkldnn.enabled))
    trainer.train_epoch()
    assert seen and set(seen) == {not amp}
    assert torch.backends.mkldnn.enabled  # as it was before the epoch


@pytest.mark.parametrize("kind", ["solo", "fused"])
def test_bf16_training_after_a_diverged_trial_keeps_every_weight_finite(kind):
    """A diverged trial leaves freed memory full of NaN; a bf16 trial trained next in the same process (a reused
    Ray worker) gets no NaN from it (on an AMX CPU with oneDNN's kernel: NaN weights by the second epoch, and
    fused members reported diverged)."""
    import torch

    junk = [torch.full((n,), float("nan")) for n in range(1000, 5000, 50)]
    del junk
    trainer = _trainers(True)[kind]
    for _ in range(2):
        trainer.train_epoch()
    params = trainer.model.parameters() if kind == "solo" else [trainer.flat]
    assert all(torch.isfinite(p).all() for p in params)
    if kind == "fused":
        assert bool(trainer.alive.all())
