"""TrialConfig.to_dict is dataclasses.asdict, field by field (the fast path that expansion of a 100,000-trial
spec depends on), for configs of every model kind and sampled values; so keys do not change."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.trainers.config import TrialConfig

CONFIGS = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["vit_p_tiny", "vit_c_tiny", "cnn_tiny", "timm:resnet10t"]),
        "optimizer": st.sampled_from(["adamw", "sgd"]),
        "epochs": st.integers(1, 400),
        "lr": st.floats(1e-6, 10.0),
        "wd": st.floats(0.0, 1.0),
        "seed": st.integers(0, 2**63 - 1),
    },
    optional={
        "batch_size": st.integers(2, 512),
        "label_smoothing": st.floats(0.0, 0.99),
        "warmup_epochs": st.floats(0.0, 0.5),
        "dataset": st.sampled_from(["digits", {"name": "synthetic", "image_size": 8, "n_train": 16, "n_val": 8}]),
    },
)


@settings(max_examples=60)
@given(CONFIGS)
def test_to_dict_is_asdict_and_round_trips(values):
    cfg = TrialConfig.from_dict(values, check_model=False)
    assert cfg.to_dict() == dataclasses.asdict(cfg)
    again = TrialConfig.from_dict(cfg.to_dict(), check_model=False)
    assert again == cfg and again.key == cfg.key
    changed = cfg.to_dict()
    changed["dataset"]["name"] = "elsewhere"  # a copy: the config is not changed through it
    assert cfg.dataset.name != "elsewhere"
