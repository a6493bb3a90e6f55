"""The peak-memory estimate's terms, each derived by hand: fp32 weights, gradients, optimizer state and EMA
from a parameter count taken on a real model, activations linear in the micro-batch, and the overhead."""

import dataclasses

import pytest

from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.memory import OVERHEAD_GB, activation_bytes_per_image, peak_memory_gb
from tests.helpers import TINY_TRIAL

CLASSES = 10
BASE = TrialConfig.from_dict(
    dict(TINY_TRIAL, lr=0.1, batch_size=64, dataset={"name": "synthetic", "image_size": 16, "num_classes": CLASSES}),
    check_model=False,
)


@pytest.fixture(scope="module")
def weights_gb():
    """Bytes of one fp32 copy of the weights, counted on a model built on the CPU, in GB."""
    from hpstudy.trainers.models import build_model

    return 4 * sum(p.numel() for p in build_model("cnn_tiny", CLASSES, 16).parameters()) / 1e9


def _peak(**changes) -> float:
    return peak_memory_gb(dataclasses.replace(BASE, **changes), CLASSES)


def test_state_copies_per_optimizer_and_ema(weights_gb):
    """SGD keeps momentum (1 copy), AdamW two moments (2), EMA one more, besides weights and gradients."""
    assert _peak(optimizer="adamw") - _peak() == pytest.approx(weights_gb, rel=1e-9)
    assert _peak(ema_decay=0.99) - _peak() == pytest.approx(weights_gb, rel=1e-9)
    activations = 2 * (_peak() - _peak(batch_size=32))
    assert _peak() - activations - OVERHEAD_GB == pytest.approx(3 * weights_gb, rel=1e-9)  # weights, grads, momentum


@pytest.mark.parametrize("batch", [2, 64, 256])
@pytest.mark.parametrize("accum", [1, 2])
def test_activations_grow_with_the_micro_batch_only(batch, accum, weights_gb):
    per_image = activation_bytes_per_image("cnn_tiny", CLASSES, 16) / 1e9
    assert per_image > 0
    expected = OVERHEAD_GB + 3 * weights_gb + per_image * batch / accum
    assert _peak(batch_size=batch, accum_steps=accum) == pytest.approx(expected, rel=1e-9)


def test_gradient_checkpointing_keeps_a_quarter_of_the_activations():
    activations = 2 * (_peak() - _peak(batch_size=32))
    assert _peak() - _peak(grad_checkpointing=True) == pytest.approx(0.75 * activations, rel=1e-9)


def test_activations_are_counted_at_the_datasets_image_size():
    """Twice the side, more than twice the bytes (the feature maps grow with the pixel count, the head's
    pooled features and logits do not); the estimate of a 32 px trial takes the 32 px count."""
    small, large = (activation_bytes_per_image("cnn_tiny", CLASSES, size) for size in (16, 32))
    assert 2 * small < large <= 4 * small
    bigger = dataclasses.replace(BASE, dataset=dataclasses.replace(BASE.dataset, image_size=32))
    assert peak_memory_gb(bigger, CLASSES) - _peak() == pytest.approx(64 * (large - small) / 1e9, rel=1e-9)
