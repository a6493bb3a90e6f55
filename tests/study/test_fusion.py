"""Fusion planning (study/fusion.py): which trials train together, and how many per group."""

import pytest
import ray

from hpstudy.study.fusion import fusion_groups, fusion_sizes
from hpstudy.study.sampling import PlannedTrial, expand
from hpstudy.study.spec import SpecError, parse_spec
from tests.helpers import small_spec


def _trial(model, optimizer, epochs, sample):
    return PlannedTrial(f"{model}-{optimizer}-{epochs}-{sample}", model, optimizer, epochs, sample, 0, {})


def test_groups_never_mix_training_lengths_optimizers_or_models():
    """Two lengths of one (model, optimizer) interleaved in the plan still fuse apart, in plan order."""
    trials = [_trial("cnn_tiny", "adamw", e, s) for s in range(3) for e in (1, 3)]
    trials += [_trial("cnn_tiny", "sgd", 1, s) for s in range(2)] + [
        _trial("vit_c_tiny", "adamw", 1, s) for s in range(3)
    ]
    groups = [[t.key for t in g] for g in fusion_groups(trials, {"cnn_tiny": 2})]
    assert groups == [
        ["cnn_tiny-adamw-1-0", "cnn_tiny-adamw-1-1"],
        ["cnn_tiny-adamw-1-2"],
        ["cnn_tiny-adamw-3-0", "cnn_tiny-adamw-3-1"],
        ["cnn_tiny-adamw-3-2"],
        ["cnn_tiny-sgd-1-0", "cnn_tiny-sgd-1-1"],
        ["vit_c_tiny-adamw-1-0"],  # a model without a fusion size trains alone
        ["vit_c_tiny-adamw-1-1"],
        ["vit_c_tiny-adamw-1-2"],
    ]


def _spec(fuse, **changes):
    return parse_spec(small_spec(name="f", fuse=fuse, epochs=[1, 3], **changes))


def test_fuse_off_or_nothing_pending_fuses_nothing_and_a_given_k_applies_to_every_model():
    assert fusion_sizes(_spec("off"), expand(_spec("off")), {"cpu": 1, "gpu": 0}) == {}
    assert fusion_sizes(_spec(3), [], {"cpu": 1, "gpu": 0}) == {}
    assert fusion_sizes(_spec(3), expand(_spec(3)), {"cpu": 1, "gpu": 0}) == {"vit_c_tiny": 3, "cnn_tiny": 3}


def test_a_given_k_for_an_unfusable_recipe_is_refused_and_auto_says_why_it_does_not_fuse(capsys):
    recipe = dict(small_spec()["recipe"], mixup=0.2)
    with pytest.raises(SpecError) as info:
        fusion_sizes(_spec(2, recipe=recipe), expand(_spec(2, recipe=recipe)), {"cpu": 1, "gpu": 0})
    assert str(info.value).startswith("fuse: bad value 2 for this recipe (mixup: 0.2 is not supported in fused")
    assert str(info.value).endswith("); allowed: off or auto")
    auto = _spec("auto", recipe=recipe)
    assert fusion_sizes(auto, expand(auto), {"cpu": 1, "gpu": 0}) == {}
    assert capsys.readouterr().out.startswith("fuse auto: no fusion: mixup: 0.2 is not supported in fused")


def test_auto_counts_the_pending_trials_of_each_cell_not_of_the_model(capsys):
    """Resuming with one trial left per (optimizer, length) cell: no group of 2 can form, so nothing
    is measured (a count over the model's cells would find 4 and start a measurement on Ray)."""
    spec = _spec("auto", models=["cnn_tiny"])
    pending = [t for t in expand(spec) if t.sample == 0]
    assert sorted((t.optimizer, t.epochs) for t in pending) == [("adamw", 1), ("adamw", 3), ("sgd", 1), ("sgd", 3)]
    assert fusion_sizes(spec, pending, {"cpu": 1, "gpu": 0}) == {}
    assert capsys.readouterr().out == "" and not ray.is_initialized()
