"""TrialConfig validation: every field's range, each bound on both sides, refused by the field's name."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.trainers.config import MAX_BATCH, MAX_EPOCHS, OWN_CHECKS, TrialConfig, own_checks
from hpstudy.trainers.errors import ConfigError, shown

BASE = dict(model="cnn_tiny", optimizer="sgd", epochs=4, lr=0.1, wd=0.0, batch_size=8, device="cpu")

# field: (values at or just inside each bound, values just outside); the ranges are the README's
RANGES = {
    "compile": (["off", "inductor"], ["fast", None, "graph"]),  # graph needs CUDA: BASE trains on the cpu
    "optimizer": (["adamw", "sgd"], ["adam", "SGD", None]),
    "epochs": ([1, MAX_EPOCHS], [0, MAX_EPOCHS + 1, 2.0, True]),
    "lr": ([1e-300, 10.0], [0.0, -1e-3, math.inf, math.nan]),
    "wd": ([0.0, 1.0], [-1e-9, math.inf, math.nan]),
    "seed": ([0, 2**31, 2**63 - 1], [-1, 2**63, 1.0]),
    "batch_size": ([2, MAX_BATCH], [0, MAX_BATCH + 1]),
    "reference_batch_size": ([None, 1, MAX_BATCH], [0, MAX_BATCH + 1, 256.0]),
    "warmup_epochs": ([0.0, 3.99], [-0.5, 4, 4.5, math.nan]),
    "min_lr_ratio": ([0.0, 1.0], [-0.01, 1.01]),
    "label_smoothing": ([0.0, 0.999], [1.0, -0.1, math.nan]),
    "mixup": ([0.0, 0.8], [-0.1, math.inf]),
    "cutmix": ([0.0, 1.0], [-0.1, math.nan]),
    "auto_augment": ([None, "original", "rand-m9-mstd0.5"], ["", "imagenet", 1]),
    "ema_decay": ([None, 1e-6, 0.9999], [0.0, 1.0, 1.5]),
    "grad_clip": ([None, 1e-6], [0.0, -1.0, math.inf]),
    "divergence_loss": ([1e-6, 1e6], [0.0, math.inf]),
    "amp": ([None, True, False], [1, "yes"]),
    "channels_last": ([None, True, False], [0]),
    "device": (["auto", "cpu", "cuda", "cuda:3"], ["gpu", "cuda:", "cuda:x"]),
    "dtype": (["float32", "float64"], ["float16"]),
    "num_workers": ([0, 1024], [-1, 1025]),
    "accum_steps": ([1, 2, 8], [0, 3, 16, True, 2.0]),
    "grad_checkpointing": ([True, False], [1, "yes", None]),
    "decode": (["auto", "workers", "device"], ["gpu"]),
}
CASES = [(f, v, ok) for f, (good, bad) in RANGES.items() for ok, values in ((True, good), (False, bad)) for v in values]


@pytest.mark.parametrize("field,value,ok", CASES, ids=[f"{f}={v!r}" for f, v, _ in CASES])
def test_each_field_takes_its_range_and_refuses_what_lies_outside_by_name(field, value, ok):
    config = dict(BASE, **{field: value})
    if ok:
        assert getattr(TrialConfig.from_dict(config, check_model=False), field) == value
    else:
        with pytest.raises(ConfigError, match=rf"^{field}: ") as refused:
            TrialConfig.from_dict(config, check_model=False)
        assert shown(value) in str(refused.value), str(refused.value)  # the value refused, as given


def test_every_field_with_a_range_is_covered_here():
    """A new field gets its bounds into RANGES (model, dataset and the fine-tuning fields have their own tests)."""
    own_tests = {"model", "dataset", "init", "init_sha256", "freeze", "family", "timm_version"}
    assert set(RANGES) | own_tests == set(TrialConfig.__dataclass_fields__)


def test_mixup_and_cutmix_need_an_even_batch():
    for option in ("mixup", "cutmix"):
        with pytest.raises(ConfigError, match="^batch_size: 7 is odd"):
            TrialConfig.from_dict(dict(BASE, batch_size=7, **{option: 0.2}), check_model=False)
    assert TrialConfig.from_dict(dict(BASE, batch_size=7), check_model=False).batch_size == 7


# the recipe defaults docs/training-and-data.md names
DOCUMENTED_DEFAULTS = dict(
    batch_size=128,
    reference_batch_size=None,
    warmup_epochs=0,
    min_lr_ratio=0,
    label_smoothing=0,
    mixup=0,
    cutmix=0,
    ema_decay=None,
    grad_clip=None,
    amp=None,
    channels_last=None,
    device="auto",
    dtype="float32",
    accum_steps=1,
    grad_checkpointing=False,
    decode="auto",
    divergence_loss=100,
)


def test_a_config_of_only_the_required_fields_takes_the_documented_defaults():
    required = {k: BASE[k] for k in ("model", "optimizer", "epochs", "lr", "wd")}
    config = TrialConfig.from_dict(required, check_model=False)
    assert {k: getattr(config, k) for k in DOCUMENTED_DEFAULTS} == DOCUMENTED_DEFAULTS
    with pytest.raises(ConfigError, match=r"^trial config: missing required field\(s\) \['lr'\]$"):
        TrialConfig.from_dict({k: v for k, v in required.items() if k != "lr"}, check_model=False)


def test_a_dataset_that_is_not_a_data_spec_is_refused_by_name():
    """A TrialConfig built directly (not through from_dict) with a dataset name instead of a DataSpec."""
    with pytest.raises(ConfigError, match=r"^dataset: bad value 'digits'; allowed: a DataSpec$"):
        TrialConfig(**BASE, dataset="digits").validate(check_model=False)


@settings(max_examples=200)
@given(
    st.sampled_from(sorted(OWN_CHECKS)),
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(-(2**70), 2**70),
        st.booleans(),
        st.none(),
        st.text(max_size=3),
    ),
)
def test_a_field_checked_on_its_own_fails_validation_exactly_when_its_own_check_does(name, value):
    """sampling.expand_cell validates a cell's first trial whole and checks only the OWN_CHECKS fields of the
    rest: so a config that differs from a valid one in such a field alone must be valid exactly when that
    field's own check passes, and fail with the same message."""
    base = {"model": "cnn_tiny", "optimizer": "adamw", "epochs": 2, "lr": 1e-3, "wd": 0.05, "seed": 0}
    ((_, _, ok, allowed),) = own_checks({name: value})
    try:
        TrialConfig.from_dict(dict(base, **{name: value}), check_model=False)
    except ConfigError as exc:
        assert not ok and str(exc) == f"{name}: bad value {shown(value)}; allowed: {allowed}"
    else:
        assert ok
