"""Trial keys and paired sampling: a key changes with every config field and with nothing else, paired
models (and schedules) get the same points, and recipe fields sampled beside lr and wd."""

import dataclasses
import hashlib
import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpstudy.study.sampling import (
    cells,
    expand,
    expand_for_store,
    first_trials,
    sample_box,
    scale_to_box,
    scaled,
    unit_points,
)
from hpstudy.study.spec import Box, Distribution, SpecError, parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_trials, stored_keys
from hpstudy.trainers.config import TrialConfig
from hpstudy.trainers.data_spec import DataSpec
from tests.helpers import planned_row, small_spec

BASE = {
    "model": "cnn_tiny",
    "optimizer": "adamw",
    "epochs": 2,
    "lr": 1e-3,
    "wd": 0.05,
    "dataset": {"name": "synthetic", "image_size": 8},
}
# every TrialConfig field with another valid value than BASE's (or the default): a new field needs one
OTHER = {
    "model": "vit_p_tiny",
    "optimizer": "sgd",
    "epochs": 3,
    "lr": 2e-3,
    "wd": 0.1,
    "seed": 1,
    "batch_size": 64,
    "reference_batch_size": 256,
    "warmup_epochs": 1.0,
    "min_lr_ratio": 0.1,
    "label_smoothing": 0.1,
    "mixup": 0.8,
    "cutmix": 1.0,
    "auto_augment": "original",
    "ema_decay": 0.999,
    "grad_clip": 1.0,
    "divergence_loss": 50.0,
    "amp": True,
    "channels_last": True,
    "device": "cpu",
    "dtype": "float64",
    "num_workers": 0,
    "accum_steps": 2,
    "grad_checkpointing": True,
    "decode": "workers",
    "compile": "inductor",
    "init": "/checkpoints/a.pt",
    "dataset": dict(BASE["dataset"], image_size=16),
}
# fields that only take another value together with others: (changes, the config they are compared with)
NEEDS = {
    "init_sha256": ({"init": "/checkpoints/a.pt", "init_sha256": "0" * 64}, {"init": "/checkpoints/a.pt"}),
    "freeze": ({"init": "/checkpoints/a.pt", "freeze": 1}, {"init": "/checkpoints/a.pt"}),
    "family": ({"model": "timm:resnet10t", "family": "cnn"}, {"model": "timm:resnet10t"}),
}
# only the installed timm's version validates: tests/trainers/test_timm_models.py checks the key names it
NOT_VARIED = {"timm_version"}
OTHER_DATA = {
    "name": "digits",
    "path": "/data/elsewhere",
    "image_size": 16,
    "num_classes": 4,
    "n_train": 64,
    "n_val": 32,
    "seed": 1,
}
PREPARED = {"name": "prepared", "path": "/data/prepared"}
NEEDS_DATA = {"digest": (dict(PREPARED, digest="0" * 64), PREPARED)}


def key(**changes) -> str:
    return TrialConfig.from_dict(dict(BASE, **changes)).key


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(TrialConfig) if f.name not in NOT_VARIED])
def test_the_key_changes_with_every_config_field(name):
    changes, compared = NEEDS.get(name) or ({name: OTHER[name]}, {})
    assert key(**changes) != key(**compared)


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(DataSpec)])
def test_the_key_changes_with_every_dataset_field(name):
    changes, compared = NEEDS_DATA.get(name) or ({name: OTHER_DATA[name]}, {})
    assert key(dataset=dict(BASE["dataset"], **changes)) != key(dataset=dict(BASE["dataset"], **compared))


def test_the_key_is_the_same_when_defaults_are_spelled_out():
    defaults = {f.name: f.default for f in dataclasses.fields(TrialConfig) if f.default is not dataclasses.MISSING}
    data_defaults = {f.name: f.default for f in dataclasses.fields(DataSpec) if f.name != "name"}
    spelled = {**defaults, **BASE, "dataset": dict(data_defaults, **BASE["dataset"])}
    assert "accum_steps" in spelled and "seed" in spelled and "n_train" in spelled["dataset"]
    assert TrialConfig.from_dict(spelled).key == key()
    assert TrialConfig.from_dict(dict(reversed(list(spelled.items())))).key == key()  # order is not part of it


def test_the_key_is_a_short_hex_digest_and_differs_across_seeds_of_a_study():
    assert len(key()) == 20 and int(key(), 16) >= 0
    spec = parse_spec(
        {
            "name": "k",
            "dataset": {"name": "digits"},
            "models": ["cnn_tiny", "vit_p_tiny"],
            "optimizers": ["adamw"],
            "epochs": [1, 2],
            "samples": 2,
            "seeds": [0, 1],
            "space": {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}},
        }
    )
    trials = expand(spec)
    assert len(trials) == 2 * 1 * 2 * 2 * 2 == len({t.key for t in trials})
    for t in trials:
        assert t.key == TrialConfig.from_dict(t.config).key
        assert (t.config["model"], t.config["optimizer"], t.config["epochs"], t.config["seed"]) == (
            t.model,
            t.optimizer,
            t.epochs,
            t.seed,
        )
    # models x optimizers x epochs x samples x seeds, in that order
    assert [(t.model, t.epochs, t.sample, t.seed) for t in trials[:8]] == [
        ("cnn_tiny", e, s, seed) for e in (1, 2) for s in (0, 1) for seed in (0, 1)
    ]
    assert cells(spec) == [
        ("cnn_tiny", "adamw", 1),
        ("cnn_tiny", "adamw", 2),
        ("vit_p_tiny", "adamw", 1),
        ("vit_p_tiny", "adamw", 2),
    ]
    assert first_trials(spec) == [trials[0], trials[8]]


def _spec(**changes):
    raw = {
        "name": "p",
        "dataset": {"name": "digits"},
        "models": ["vit_p_tiny", "vit_c_tiny", "cnn_tiny"],
        "optimizers": ["adamw", "sgd"],
        "epochs": [2, 4],
        "samples": 5,
        "sampler": "random",
        "space": {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}, "sgd": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}},
    }
    return parse_spec(dict(raw, **changes))


@pytest.mark.parametrize("sampler", ["random", "sobol"])
def test_paired_models_and_schedules_share_points(sampler):
    spec = _spec(sampler=sampler)
    points = {(m, e): sample_box(spec, m, "adamw", e) for m in spec.models for e in spec.epochs}
    assert len({tuple(p) for p in points.values()}) == 1, "paired: one set of points for every model and length"
    assert len(set(points[("cnn_tiny", 2)])) == 5
    # the stream is the optimizer's (same box, other optimizer: other points) and the sampler seed's
    assert sample_box(spec, "cnn_tiny", "sgd", 2) != points[("cnn_tiny", 2)]
    assert sample_box(_spec(sampler=sampler, sampler_seed=1), "cnn_tiny", "adamw", 2) != points[("cnn_tiny", 2)]
    by_trial = {}
    for t in expand(spec):
        by_trial.setdefault((t.optimizer, t.sample), set()).add((t.config["lr"], t.config["wd"]))
    assert all(len(v) == 1 for v in by_trial.values())


def test_unpaired_models_and_schedules_get_their_own_points():
    spec = _spec(paired=False)
    points = [tuple(sample_box(spec, m, "adamw", e)) for m in spec.models for e in spec.epochs]
    assert len(set(points)) == len(points) == 6
    assert sample_box(spec, "cnn_tiny", "adamw", 2) == sample_box(_spec(paired=False), "cnn_tiny", "adamw", 2)


def test_a_model_key_that_repeats_the_box_it_overrides_changes_no_trial_key():
    base = _spec()
    space = dict(
        base.source["space"],
        vit_c_tiny={"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}},
        cnn_tiny={"sgd": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}},
    )
    assert [t.key for t in expand(_spec(space=space))] == [t.key for t in expand(base)]


def test_models_of_one_family_at_their_own_fixed_points_train_at_them():
    # model keys come before the family's (vit_p) and the optimizer's box
    space = {
        "adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]},
        "sgd": {"lr": 0.1, "wd": 1e-5},
        "vit_p": {"adamw": {"lr": 3e-3, "wd": 0.2}},
        "vit_p_tiny": {"adamw": {"lr": 1e-3, "wd": 0.05}},
        "vit_p_1gf": {"adamw": {"lr": 2e-3, "wd": 0.05}},
    }
    spec = _spec(models=["vit_p_tiny", "vit_p_1gf", "vit_c_tiny"], samples=1, seeds=[0, 1], space=space)
    trials = expand(spec)
    got = {}
    for t in trials:
        got.setdefault((t.model, t.optimizer), set()).add((t.config["lr"], t.config["wd"]))
    assert [len(v) for v in got.values()] == [1] * 6  # seeds share the point
    point = {cell: next(iter(v)) for cell, v in got.items()}
    assert point[("vit_p_tiny", "adamw")] == pytest.approx((1e-3, 0.05), rel=1e-12)  # exp(log(x)): to an ulp
    assert point[("vit_p_1gf", "adamw")] == pytest.approx((2e-3, 0.05), rel=1e-12)
    assert point[("vit_c_tiny", "sgd")] == point[("vit_p_tiny", "sgd")] == pytest.approx((0.1, 1e-5), rel=1e-12)
    assert point[("vit_c_tiny", "adamw")] != point[("vit_p_tiny", "adamw")]
    assert len({t.key for t in trials}) == len(trials) == 3 * 2 * 2 * 1 * 2


def test_unit_points_known_layouts():
    grid = unit_points("grid", 9, 0)
    assert grid.tolist() == [[a, b] for a in (0.0, 0.5, 1.0) for b in (0.0, 0.5, 1.0)]
    assert unit_points("grid", 1, 0).tolist() == [[0.5, 0.5]]
    for sampler, n in (("random", 7), ("sobol", 7), ("sobol", 8), ("sobol", 1)):
        points = unit_points(sampler, n, 3)
        assert points.shape == (n, 2) and (points >= 0).all() and (points <= 1).all()
        np.testing.assert_array_equal(points, unit_points(sampler, n, 3))
        assert not np.array_equal(points, unit_points(sampler, n, 4))
    # Sobol keeps the first n of the next power of two: n = 6 is a prefix of n = 8
    np.testing.assert_array_equal(unit_points("sobol", 6, 3), unit_points("sobol", 8, 3)[:6])
    with pytest.raises(SpecError, match="sampler: bad value 'lhs'"):
        unit_points("lhs", 4, 0)


def test_scale_to_box_is_log_uniform_onto_the_closed_box():
    box = Box(lr=(1e-4, 1e-2), wd=(1e-3, 1e-1))
    (low, mid, high) = scale_to_box(np.array([[0.0, 0.0], [0.5, 0.25], [1.0, 1.0]]), box)
    assert low == pytest.approx((1e-4, 1e-3)) and high == pytest.approx((1e-2, 1e-1))
    assert mid == pytest.approx((1e-3, 10**-2.5))
    assert all(isinstance(v, float) for v in mid)


BIG_SEEDS = [2**31, 2**32, 2**63 - 1, 2**63 - 1 - 2**32]  # equal modulo 2**32 in pairs: (2**32, 0) too


def test_seeds_up_to_2_63_keep_their_value_and_key_through_the_plan_and_the_store(tmp_path):
    spec = parse_spec(small_spec(name="big", models=["cnn_tiny"], optimizers=["sgd"], samples=1, seeds=[0, *BIG_SEEDS]))
    trials = expand(spec)
    assert [t.seed for t in trials] == [t.config["seed"] for t in trials] == [0, *BIG_SEEDS]
    assert len({t.key for t in trials}) == 5  # no two seeds share a key (none truncated to 32 bits)
    for t in trials[1:]:
        write_trial(str(tmp_path), "big", planned_row(t, status="ok", config_json=json.dumps(t.config)))
    stored = load_trials(str(tmp_path), "big").set_index("trial_key")
    assert [int(stored.loc[t.key, "seed"]) for t in trials[1:]] == BIG_SEEDS
    assert expand_for_store(spec, str(tmp_path)) == trials  # resume finds each under its own key
    assert stored_keys(str(tmp_path), "big") == {t.key for t in trials[1:]}


def test_a_sampler_seed_above_2_32_draws_its_own_points():
    """Two sampler seeds 2**32 apart (the larger 2**63 - 1) give different (lr, wd) points."""
    points = [
        sample_box(parse_spec(small_spec(sampler="random", sampler_seed=s)), "cnn_tiny", "sgd", 1)
        for s in (2**63 - 1, 2**63 - 1 - 2**32)
    ]
    assert points[0] != points[1] and len(points[0]) == 3


def _reference_plan(spec) -> list:
    """The plan of a spec of lr/wd boxes as this test derives it on its own: per cell, a stream seeded with
    sha256 of (sampler_seed, optimizer, {lr, wd}) (paired), its 2-d unit points mapped log-uniformly onto
    the box and rounded to 6 significant digits within it, then samples x seeds trial configs."""
    from scipy.stats import qmc

    plan = []
    for model in spec.models:
        for opt in spec.optimizers:
            box = spec.box(model, opt)
            parts = json.dumps([spec.sampler_seed, opt, {"lr": box.lr, "wd": box.wd}], sort_keys=True)
            seed = int.from_bytes(hashlib.sha256(parts.encode()).digest()[:8], "little") % 2**32
            if spec.sampler == "random":
                unit = np.random.default_rng(seed).random((spec.samples, 2))
            elif spec.sampler == "sobol":
                unit = qmc.Sobol(d=2, scramble=True, seed=seed).random_base2((spec.samples - 1).bit_length())
            else:
                axis = np.linspace(0, 1, round(spec.samples**0.5))
                unit = np.array([[a, b] for a in axis for b in axis])
            for epochs in spec.epochs:
                for i, (u_lr, u_wd) in enumerate(unit[: spec.samples]):
                    lr, wd = (
                        min(max(float(f"{math.exp(math.log(lo) + u * math.log(hi / lo)):.5e}"), lo), hi)
                        for u, (lo, hi) in ((float(u_lr), box.lr), (float(u_wd), box.wd))
                    )
                    for s in spec.seeds:
                        config = dict(spec.recipe, model=model, optimizer=opt, epochs=epochs, lr=lr, wd=wd, seed=s)
                        cfg = TrialConfig.from_dict(
                            dict(config, dataset=dataclasses.asdict(spec.dataset)), check_model=False
                        )
                        plan.append({"key": cfg.key, "sample": i, "config": cfg.to_dict()})
    return plan


def _plan_bytes(trials) -> bytes:
    return json.dumps([{"key": t.key, "sample": t.sample, "config": t.config} for t in trials]).encode()


@pytest.mark.parametrize("sampler,samples", [("random", 5), ("sobol", 6), ("grid", 64)])  # 64 = 8^2 = 4^3
def test_a_spec_without_sampled_recipe_fields_plans_byte_for_byte_as_lr_wd_sampling_always_did(sampler, samples):
    design = dict(
        sampler=sampler,
        samples=samples,
        models=["vit_p_tiny", "cnn_tiny"],
        seeds=[3],
        recipe={"label_smoothing": 0.1},
        epochs=[2],
    )
    spec = _spec(**design)
    assert _plan_bytes(expand(spec)) == json.dumps(_reference_plan(spec)).encode()
    # a recipe field sampled in one optimizer's box leaves the other's trials byte for byte as they were
    space = dict(spec.source["space"], adamw=dict(spec.source["space"]["adamw"], warmup_epochs={"uniform": [0, 1]}))
    with_field = expand(_spec(**design, space=space))
    assert _plan_bytes(t for t in with_field if t.optimizer == "sgd") == _plan_bytes(
        t for t in expand(spec) if t.optimizer == "sgd"
    )
    warmups = {t.config["warmup_epochs"] for t in with_field if t.optimizer == "adamw"}
    assert len(warmups) > 1 and min(warmups) >= 0 and max(warmups) <= 1


def _recipe_spec(sampler="sobol", samples=64, paired=True, **fields):
    space = {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5], **fields}, "sgd": {"lr": 0.1, "wd": 1e-4}}
    return _spec(sampler=sampler, samples=samples, paired=paired, space=space, optimizers=["adamw"], epochs=[4])


def test_int_and_choice_fields_take_each_value_in_equal_shares_and_uniform_ones_fill_their_box():
    """64 scrambled Sobol points put exactly 4 in each 1/16 strip of every coordinate (its balance), so an int
    field of 4 values and a choice of 4 get 16 trials each, and a uniform field 4 per sixteenth of its box."""
    spec = _recipe_spec(
        warmup_epochs={"int": [0, 3]},
        batch_size={"choice": [32, 64, 128, 256]},
        label_smoothing={"uniform": [0.0, 0.32]},
    )
    points = sample_box(spec, "cnn_tiny", "adamw", 4)
    names = [name for name, _ in spec.box("cnn_tiny", "adamw").axes()]
    assert names == ["lr", "wd", "batch_size", "label_smoothing", "warmup_epochs"]
    columns = dict(zip(names, zip(*points)))
    assert sorted(Counter(columns["warmup_epochs"]).items()) == [(0, 16), (1, 16), (2, 16), (3, 16)]
    assert sorted(Counter(columns["batch_size"]).items()) == [(32, 16), (64, 16), (128, 16), (256, 16)]
    smoothing = np.array(columns["label_smoothing"])
    assert Counter(np.floor(smoothing / 0.02).astype(int).tolist()) == {strip: 4 for strip in range(16)}
    assert all(float(f"{v:.5e}") == v for v in smoothing)  # 6 significant digits, as lr and wd
    assert all(isinstance(w, int) for w in columns["warmup_epochs"])
    trials = [t for t in expand(spec) if t.model == "cnn_tiny"]
    assert [(t.config["batch_size"], t.config["label_smoothing"], t.config["warmup_epochs"]) for t in trials] == [
        p[2:] for p in points
    ]


def test_paired_models_share_the_recipe_fields_points_and_unpaired_do_not():
    fields = {"label_smoothing": {"uniform": [0.0, 0.3]}, "warmup_epochs": {"int": [0, 2]}}
    paired = _recipe_spec(samples=8, **fields)
    assert sample_box(paired, "vit_p_tiny", "adamw", 4) == sample_box(paired, "vit_c_tiny", "adamw", 4)
    unpaired = _recipe_spec(samples=8, paired=False, **fields)
    assert sample_box(unpaired, "vit_p_tiny", "adamw", 4) != sample_box(unpaired, "vit_c_tiny", "adamw", 4)


def test_unit_points_in_d_dimensions_and_a_k_to_the_d_grid():
    grid = unit_points("grid", 8, 0, d=3)
    assert grid.tolist() == [[a, b, c] for a in (0.0, 1.0) for b in (0.0, 1.0) for c in (0.0, 1.0)]
    for sampler in ("random", "sobol"):
        points = unit_points(sampler, 5, 1, d=4)
        assert points.shape == (5, 4) and (points >= 0).all() and (points <= 1).all()


def test_too_few_distinct_values_of_an_int_field_are_refused_before_trials_repeat():
    spec = _recipe_spec(samples=4, lr=1e-3, wd=0.1, warmup_epochs={"int": [0, 2]})
    with pytest.raises(SpecError) as info:
        sample_box(spec, "cnn_tiny", "adamw", 4)
    assert str(info.value) == (
        "samples: bad value 4 for the box lr [0.001, 0.001], wd [0.1, 0.1], warmup_epochs {'int': [0, 2]} of "
        "cnn_tiny (adamw): it gives 3 distinct (lr, wd, warmup_epochs) points at 6 significant digits, so trials "
        "would repeat under one key; allowed: samples <= 3, or a wider box (repeat a fixed value with seeds)"
    )


@given(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(1e-3, 1e6, allow_nan=False),
    st.lists(st.floats(0, 1), min_size=1, max_size=20),
)
def test_unit_points_map_onto_a_uniform_and_a_log_uniform_range_in_order_end_to_end(low, width, units):
    """0 is low, 1 is high, 1/2 the middle (arithmetic for uniform, geometric for log-uniform), to the 6
    significant digits a sample keeps; every value inside [low, high] and in the order of its unit point, for
    any box (not only one starting at 0 or 1)."""
    high = low + width
    for kind, lo, hi, middle in (
        ("uniform", low, high, (low + high) / 2),
        ("log_uniform", width, width * 50, width * math.sqrt(50)),
    ):
        dist = Distribution(kind, (lo, hi))
        ends = scaled([0.0, 0.5, 1.0], dist)  # rounded to 6 significant digits, kept inside
        close = lambda value: pytest.approx(value, rel=1e-5, abs=1e-5 * max(abs(lo), abs(hi)))
        assert ends == [close(lo), close(middle), close(hi)], (kind, ends)
        values = scaled(sorted(units), dist)
        assert all(lo <= v <= hi for v in values) and values == sorted(values)
