"""Fusion planning (study/fusion.py): which trials train together, and how many per group."""

import logging

import pytest

from hpstudy.study.fusion import fusion_groups, fusion_notes, fusion_sizes
from hpstudy.study.sampling import PlannedTrial, expand
from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.fused_spec import check_fusable
from tests.helpers import logged, small_spec


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


def test_a_given_k_for_an_unfusable_recipe_is_refused_and_auto_says_why_it_does_not_fuse(caplog):
    recipe = dict(small_spec()["recipe"], mixup=0.2)
    with pytest.raises(SpecError) as info:
        fusion_sizes(_spec(2, recipe=recipe), expand(_spec(2, recipe=recipe)), {"cpu": 1, "gpu": 0})
    assert str(info.value).startswith("fuse: bad value 2 for this recipe (mixup: 0.2 is not supported in fused")
    assert str(info.value).endswith("); allowed: off or auto")
    auto = _spec("auto", recipe=recipe)
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        assert fusion_sizes(auto, expand(auto), {"cpu": 1, "gpu": 0}) == {}
    (said,) = logged(caplog)
    assert said.startswith("fuse auto: no fusion: mixup: 0.2 is not supported in fused")


def test_auto_counts_the_pending_trials_of_each_cell_not_of_the_model(caplog):
    """Resuming with one trial left per (optimizer, length) cell: no group of 2 can form, so nothing
    is measured (a count over the model's cells would find 4 and start a measurement on Ray)."""
    import ray

    spec = _spec("auto", models=["cnn_tiny"])
    pending = [t for t in expand(spec) if t.sample == 0]
    assert sorted((t.optimizer, t.epochs) for t in pending) == [("adamw", 1), ("adamw", 3), ("sgd", 1), ("sgd", 3)]
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        assert fusion_sizes(spec, pending, {"cpu": 1, "gpu": 0}) == {}
    assert not caplog.records and not ray.is_initialized()


def _sampling(fuse, seeds, **fields):
    """A cnn_tiny spec whose adamw box samples `fields` beside lr and wd (its sgd box: lr and wd only)."""
    space = dict(small_spec()["space"], adamw=dict(small_spec()["space"]["adamw"], **fields))
    recipe = {"batch_size": 64, "device": "cpu"}
    return parse_spec(
        small_spec(name="f", fuse=fuse, models=["cnn_tiny"], samples=2, seeds=seeds, space=space, recipe=recipe)
    )


def test_trials_that_differ_in_a_sampled_recipe_field_never_fuse_but_the_seeds_of_one_sample_do():
    spec = _sampling(3, [0, 1, 2], label_smoothing={"uniform": [0.0, 0.3]})
    groups = fusion_groups(expand(spec), {"cnn_tiny": 3})
    assert [[(t.optimizer, t.sample, t.seed) for t in g] for g in groups] == [
        [("adamw", 0, 0), ("adamw", 0, 1), ("adamw", 0, 2)],
        [("adamw", 1, 0), ("adamw", 1, 1), ("adamw", 1, 2)],
        [("sgd", 0, 0), ("sgd", 0, 1), ("sgd", 0, 2)],  # lr/wd only: samples fuse together, in plan order
        [("sgd", 1, 0), ("sgd", 1, 1), ("sgd", 1, 2)],
    ]
    assert len({g[0].config["label_smoothing"] for g in groups[:2]}) == 2
    for group in groups:  # what the fused trainer checks before it trains a group
        check_fusable([TrialConfig.from_dict(t.config, check_model=False) for t in group])


def test_the_plan_names_each_cell_that_cannot_fuse_its_samples_and_auto_measures_nothing_there(caplog):
    import ray

    assert fusion_notes(_sampling("auto", [0], label_smoothing={"uniform": [0.0, 0.3]})) == [
        "fuse: off for cell cnn_tiny adamw: label_smoothing is sampled and fused trials share it"
    ]
    assert fusion_notes(_sampling(2, [0, 1], label_smoothing={"uniform": [0.0, 0.3]}, warmup_epochs=0.2)) == [
        "fuse: only the seeds of one sample fuse for cell cnn_tiny adamw: label_smoothing is sampled and fused "
        "trials share it"
    ]
    assert fusion_notes(
        _sampling(2, [0], warmup_epochs={"uniform": [0.0, 0.5]}, label_smoothing={"choice": [0, 0.1]})
    ) == ["fuse: off for cell cnn_tiny adamw: label_smoothing, warmup_epochs are sampled and fused trials share them"]
    assert fusion_notes(_sampling("off", [0], label_smoothing={"uniform": [0.0, 0.3]})) == []
    auto = _sampling("auto", [0], label_smoothing={"uniform": [0.0, 0.3]})
    pending = [t for t in expand(auto) if t.optimizer == "adamw"]
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        assert fusion_sizes(auto, pending, {"cpu": 1, "gpu": 0}) == {}
    assert logged(caplog) == fusion_notes(auto)[:1] and not ray.is_initialized()


def test_a_sampled_option_fusion_does_not_support_refuses_a_given_k_and_auto_says_why():
    spec = _sampling(2, [0, 1], mixup={"uniform": [0.0, 0.8]})
    with pytest.raises(SpecError) as info:
        fusion_sizes(spec, expand(spec), {"cpu": 1, "gpu": 0})
    assert str(info.value) == (
        "fuse: bad value 2 for this recipe (mixup is sampled and is not supported in fused training; train "
        "alone); allowed: off or auto"
    )
