import copy
import os
import re

import numpy as np
import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hpstudy.study import spec as spec_module
from hpstudy.study.sampling import expand, sample_box
from hpstudy.study.spec import Box, Resources, SpecError, bundled_configs, load_spec, parse_spec, resolve_config
from hpstudy.trainers.config import OPTIMIZERS, TrialConfig
from hpstudy.trainers.data_spec import DataSpec
from hpstudy.trainers.zoo import FAMILIES, list_models

BASE = {
    "name": "t",
    "dataset": {"name": "digits"},
    "models": ["vit_p_tiny", "vit_c_tiny", "cnn_tiny"],
    "optimizers": ["adamw", "sgd"],
    "epochs": [2],
    "samples": 4,
    "space": {
        "adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]},
        "sgd": {"lr": [0.01, 1.0], "wd": [1e-5, 1e-4]},
        "cnn": {"adamw": {"lr": [1e-3, 4e-2], "wd": [0.01, 0.2]}},
    },
}


def with_(**changes):
    spec = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            spec.pop(key)
        else:
            spec[key] = value
    return spec


@pytest.mark.parametrize(
    "raw,message",
    [
        (with_(models=["vit_x"]), "models: bad value 'vit_x'; allowed: vit_p_1gf"),
        (with_(optimizers=["adam"]), "optimizers: bad value 'adam'; allowed: adamw, sgd"),
        (with_(dataset={"name": "mnist"}), "unknown dataset 'mnist'"),
        (with_(models=[]), "models: bad value []; allowed: a non-empty list"),
        (with_(optimizers=[]), "optimizers: bad value []"),
        (with_(epochs=[]), "epochs: bad value []"),
        (with_(samples=0), "samples: bad value 0; allowed: an integer in [1, 100000]"),
        (
            with_(space={"adamw": {"lr": [0, 1e-2], "wd": [0.01, 0.5]}, "sgd": BASE["space"]["sgd"]}),
            "space.adamw.lr: bad value [0, 0.01]; allowed: low > 0",
        ),
        (
            with_(space={"adamw": {"lr": [1e-2, 1e-4], "wd": [0.01, 0.5]}, "sgd": BASE["space"]["sgd"]}),
            "space.adamw.lr: bad value [0.01, 0.0001]; allowed: low <= high",
        ),
        (
            with_(space={"adamw": BASE["space"]["adamw"]}),
            "space: bad value ['adamw']; allowed: a box for every listed optimizer; missing 'sgd'",
        ),
        (
            with_(space="adamw"),
            "space: bad value 'adamw'; allowed: a mapping of optimizer -> {lr, wd} (and family or model",
        ),
        (with_(sampels=4), "spec: bad value 'sampels'"),
        (with_(recipe={"batch_sise": 64}), "recipe: bad value 'batch_sise'; allowed: batch_size"),
        (with_(recipe={"batch_size": 0}), "recipe.batch_size: bad value 0"),
        (
            with_(dataset={"name": "cifar10", "path": "/no/such/dir"}),
            "dataset.path: dataset 'cifar10': path '/no/such/dir' does not exist",
        ),
        (with_(resources={"cpu": -1}), "resources.cpu: bad value -1"),
        (with_(resources={"cpu": 1, "gpu": 1.5}), "resources.gpu: bad value 1.5"),
        (with_(resources={"cpus": 1}), "resources: bad value {'cpus': 1}"),
        (with_(sampler="lhs"), "sampler: bad value 'lhs'; allowed: random, sobol, grid"),
        (with_(sampler="grid", samples=5), "samples: bad value 5; allowed: a perfect square"),
        (with_(name="a b"), "name: bad value 'a b'"),
        (with_(fuse="yes"), "fuse: bad value 'yes'"),
        (
            with_(space=dict(BASE["space"], vit_x_tiny={"adamw": {"lr": 1e-3, "wd": 0.05}})),
            "space: bad value 'vit_x_tiny'; allowed: optimizer names (adamw, sgd), family names (vit_p, vit_c, cnn",
        ),
        (
            with_(space=dict(BASE["space"], vit_x_tiny={"adamw": {"lr": 1e-3, "wd": 0.05}})),
            "or model names (vit_p_1gf, vit_c_1gf",
        ),
        (
            with_(space=dict(BASE["space"], vit_c_tiny=[1e-3, 0.05])),
            "space.vit_c_tiny: bad value [0.001, 0.05]; allowed: a mapping of optimizer -> {lr, wd}",
        ),
        (
            with_(space=dict(BASE["space"], vit_c_tiny={"adam": {"lr": 1e-3, "wd": 0.05}})),
            "space.vit_c_tiny: bad value 'adam'; allowed: adamw, sgd",
        ),
        (
            with_(space=dict(BASE["space"], vit_c_tiny={"adamw": {"lr": 1e-3}})),
            "space.vit_c_tiny.adamw: bad value {'lr': 0.001}; allowed: a mapping with exactly the keys lr and wd",
        ),
        (
            with_(space=dict(BASE["space"], vit_c_tiny={"adamw": {"lr": 0, "wd": 0.05}})),
            "space.vit_c_tiny.adamw.lr: bad value [0, 0]; allowed: low > 0",
        ),
        (
            with_(space=dict(BASE["space"], vit_c_tiny={"adamw": {"lr": float("nan"), "wd": 0.05}})),
            "space.vit_c_tiny.adamw.lr: bad value [nan, nan]; allowed: finite numbers",
        ),
        (
            with_(space=dict(BASE["space"], vit_c_tiny={"sgd": {"lr": 0.1, "wd": "1e-5"}})),
            "space.vit_c_tiny.sgd.wd: bad value '1e-5'; allowed: [low, high]",
        ),
    ],
)
def test_every_bad_input_is_rejected_by_name(raw, message):
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert message in str(info.value)


def test_unreadable_resources_for_this_machine(tmp_path):
    from hpstudy.service import check_local_resources

    spec = parse_spec(with_(resources={"cpu": 1, "gpu": 1}))
    with pytest.raises(SpecError, match="resources.gpu: bad value 1; allowed: <= 0"):
        check_local_resources(spec, num_cpus=2)
    spec = parse_spec(with_(resources={"cpu": 64}))
    with pytest.raises(SpecError, match="resources.cpu: bad value 64; allowed: <= 2"):
        check_local_resources(spec, num_cpus=2)


def test_expansion_is_deterministic_and_complete():
    spec = parse_spec(BASE)
    a, b = expand(spec), expand(parse_spec(copy.deepcopy(BASE)))
    assert [t.key for t in a] == [t.key for t in b]
    assert len(a) == 3 * 2 * 1 * 4 and len({t.key for t in a}) == len(a)
    assert [t.model for t in a[:8]] == ["vit_p_tiny"] * 8


def test_samples_are_log_uniform_in_the_closed_box_with_family_override():
    spec = parse_spec(with_(samples=400, models=["vit_p_tiny", "cnn_tiny"], optimizers=["adamw"]))
    vit = np.array(sample_box(spec, "vit_p_tiny", "adamw", 2))
    cnn = np.array(sample_box(spec, "cnn_tiny", "adamw", 2))
    assert vit[:, 0].min() >= 1e-4 and vit[:, 0].max() <= 1e-2
    assert cnn[:, 0].min() >= 1e-3 and cnn[:, 0].max() <= 4e-2
    # log-uniform: log10(lr) is uniform on [-4, -2], so its mean is -3 and its quartiles are even
    logs = np.log10(vit[:, 0])
    assert abs(logs.mean() + 3) < 0.08 and abs(np.median(logs) + 3) < 0.12


def test_paired_models_share_samples_unpaired_do_not():
    paired = parse_spec(BASE)
    assert sample_box(paired, "vit_p_tiny", "adamw", 2) == sample_box(paired, "vit_c_tiny", "adamw", 2)
    unpaired = parse_spec(with_(paired=False))
    assert sample_box(unpaired, "vit_p_tiny", "adamw", 2) != sample_box(unpaired, "vit_c_tiny", "adamw", 2)


def test_sobol_and_grid_samplers():
    sobol = np.log(np.array(sample_box(parse_spec(with_(sampler="sobol", samples=16)), "vit_p_tiny", "adamw", 2)))
    # a scrambled Sobol set of 16 puts exactly one point in each of 16 strips of log lr
    strips = np.floor((sobol[:, 0] - np.log(1e-4)) / (np.log(1e-2) - np.log(1e-4)) * 16)
    assert sorted(strips.astype(int).tolist()) == list(range(16))
    grid = np.array(sample_box(parse_spec(with_(sampler="grid", samples=9)), "vit_p_tiny", "adamw", 2))
    assert sorted(set(np.round(grid[:, 0], 12))) == pytest.approx([1e-4, 1e-3, 1e-2])
    assert sorted(set(np.round(grid[:, 1], 12))) == pytest.approx([0.01, np.sqrt(0.01 * 0.5), 0.5])


def test_single_value_range_fixes_the_value():
    spec = parse_spec(with_(samples=1, space={"adamw": {"lr": 1e-3, "wd": 0.05}, "sgd": {"lr": 0.1, "wd": 1e-5}}))
    assert sample_box(spec, "vit_p_tiny", "adamw", 2) == [pytest.approx((1e-3, 0.05))]


def test_model_keys_come_before_family_keys_and_optimizer_boxes():
    space = dict(
        BASE["space"], vit_c_tiny={"sgd": {"lr": 0.2, "wd": 2e-5}}, cnn_tiny={"adamw": {"lr": 5e-3, "wd": [0.02, 0.04]}}
    )
    spec = parse_spec(with_(space=space))
    assert spec.box("vit_c_tiny", "sgd") == Box(lr=(0.2, 0.2), wd=(2e-5, 2e-5))  # the model's own
    assert spec.box("vit_c_tiny", "adamw") == Box(lr=(1e-4, 1e-2), wd=(0.01, 0.5))  # none of its own: adamw's
    assert spec.box("cnn_tiny", "adamw") == Box(lr=(5e-3, 5e-3), wd=(0.02, 0.04))  # before the cnn family's
    assert spec.box("vit_p_tiny", "sgd") == Box(lr=(0.01, 1.0), wd=(1e-5, 1e-4))
    # a model key for a model the study does not train is allowed (like a family key)
    assert parse_spec(with_(space=dict(space, vit_p_1gf={"adamw": {"lr": 1e-3, "wd": 0.1}}))).models == spec.models


def test_model_key_in_yaml_with_scalar_fixed_points(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ndataset: {name: digits}\nmodels: [vit_p_tiny, vit_c_tiny]\noptimizers: [adamw]\n"
        "epochs: [2, 4]\nsamples: 1\nseeds: [0, 1, 2]\nspace:\n  adamw: {lr: 1e-3, wd: 0.05}\n"
        "  vit_p_tiny:\n    adamw: {lr: 5.0e-4, wd: 0.1}\n  vit_c_tiny:\n    adamw: {lr: 2e-3, wd: 0.05}\n"
    )
    trials = expand(load_spec(str(path)))
    points = {}
    for t in trials:
        points.setdefault(t.model, set()).add((t.config["lr"], t.config["wd"]))
    # one point per model (to an ulp: a fixed value goes through exp(log(x)) like a box's, keeping old keys)
    assert [len(p) for p in points.values()] == [1, 1]
    assert next(iter(points["vit_p_tiny"])) == pytest.approx((5e-4, 0.1), rel=1e-12)
    assert next(iter(points["vit_c_tiny"])) == pytest.approx((2e-3, 0.05), rel=1e-12)
    assert len(trials) == 2 * 2 * 3


def trial_key(config):
    return TrialConfig.from_dict(config).key


def test_trial_key_is_a_hash_of_the_canonical_config():
    t = expand(parse_spec(BASE))[0]
    assert trial_key(dict(t.config)) == t.key
    reordered = dict(reversed(list(t.config.items())))
    assert trial_key(reordered) == t.key
    assert trial_key(dict(t.config, lr=t.config["lr"] * 1.0001)) != t.key


def test_bundled_configs_are_the_yaml_files_of_the_package_named_without_their_suffix():
    import hpstudy.study

    folder = os.path.join(os.path.dirname(hpstudy.study.__file__), "configs")
    names = sorted(os.path.splitext(f)[0] for f in os.listdir(folder) if f.endswith(".yaml"))
    assert bundled_configs() == names and {"demo_digits", "paper_lr_wd"} <= set(names)


@pytest.mark.parametrize("name", bundled_configs())
def test_bundled_configs_are_valid(name):
    spec = load_spec(resolve_config(name), check_paths=False)
    assert len(expand(spec)) >= 1


def test_paper_lr_wd_config_matches_table_4():
    spec = load_spec(resolve_config("paper_lr_wd"), check_paths=False)
    assert spec.box("vit_p_1gf", "adamw").lr == (2.5e-4, 8e-3)
    assert spec.box("vit_c_4gf", "sgd").wd == (4e-6, 1.2e-4)
    assert spec.box("regnety_1gf", "adamw").wd == (0.0075, 0.24)
    assert spec.box("regnety_16gf", "sgd").lr == (0.25, 8.0)
    assert spec.samples == 64 and spec.epochs == (50,) and spec.recipe["batch_size"] == 2048


def test_missing_config_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match="--config: '/no/spec.yaml' is not a file"):
        load_spec("/no/spec.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(str(bad))
    ok = tmp_path / "ok.yaml"
    ok.write_text(yaml.safe_dump(BASE))
    assert load_spec(str(ok)).name == "t"


@pytest.mark.parametrize(
    "changes,field,value",
    [
        (dict(epochs=[1, 100_000]), "epochs", (1, 100_000)),
        (dict(seeds=[0, 2**31, 2**63 - 1]), "seeds", (0, 2**31, 2**63 - 1)),
        (dict(sampler_seed=2**63 - 1), "sampler_seed", 2**63 - 1),
        (dict(max_retries=0), "max_retries", 0),
        (dict(max_retries=100), "max_retries", 100),
        (dict(fuse=1), "fuse", 1),
        (dict(resources={"cpu": 0, "gpu": 0.25}), "resources", Resources(cpu=0, gpu=0.25)),
        (dict(resources={"cpu": 0.5, "gpu": 2}), "resources", Resources(cpu=0.5, gpu=2)),
    ],
)
def test_every_field_takes_the_ends_of_its_range(changes, field, value):
    assert getattr(parse_spec(with_(**changes)), field) == value


@pytest.mark.parametrize(
    "changes,message",
    [
        (dict(epochs=[0]), "epochs: bad value 0; allowed: integers in [1, 100000]"),
        (dict(epochs=[100_001]), "epochs: bad value 100001; allowed: integers in [1, 100000]"),
        (dict(seeds=[2**63]), f"seeds: bad value {2**63}; allowed: integers in [0, 2**63)"),
        (dict(sampler_seed=2**63), f"sampler_seed: bad value {2**63}; allowed: an integer in [0, 2**63)"),
        (dict(sampler_seed=-1), "sampler_seed: bad value -1; allowed: an integer in [0, 2**63)"),
        (dict(max_retries=101), "max_retries: bad value 101; allowed: an integer in [0, 100]"),
        (dict(max_retries=-1), "max_retries: bad value -1; allowed: an integer in [0, 100]"),
        (dict(fuse=0), "fuse: bad value 0; allowed: off, auto or an integer K >= 1"),
        (dict(paired="yes"), "paired: bad value 'yes'; allowed: true or false"),
        (dict(resources={"cpu": 0, "gpu": 0}), "resources: bad value {'cpu': 0, 'gpu': 0}; allowed: at least some"),
        (dict(resources={"cpu": 1, "gpu": float("inf")}), "resources.gpu: bad value inf; allowed: a finite number"),
        (dict(samples=100_001), "samples: bad value 100001; allowed: an integer in [1, 100000]"),
    ],
)
def test_every_field_refuses_just_past_the_ends_of_its_range(changes, message):
    with pytest.raises(SpecError) as info:
        parse_spec(with_(**changes))
    assert str(info.value).startswith(message)


def test_the_study_size_cap_counts_every_factor_and_allows_exactly_the_cap():
    """3 models x 2 optimizers x 2 epochs x 5 seeds = 60 trials per sample: 1666 samples are 99,960
    trials, 1667 are 100,020 (one factor left out of the count would let 1667 through)."""
    factors = dict(epochs=[1, 2], seeds=[0, 1, 2, 3, 4])
    assert parse_spec(with_(samples=1666, **factors)).samples == 1666
    with pytest.raises(SpecError) as info:
        parse_spec(with_(samples=1667, **factors))
    assert str(info.value) == (
        "samples: bad value 1667; allowed: at most 100000 trials per study; this spec has 3 models x 2 "
        "optimizers x 2 epochs x 1667 samples x 5 seeds = 100020 (split it into studies)"
    )
    exact = with_(models=["cnn_tiny"], optimizers=["sgd"], space={"sgd": BASE["space"]["sgd"]}, epochs=[1, 2])
    assert parse_spec(dict(exact, samples=50_000)).samples == 50_000  # 100,000 trials: at the cap
    with pytest.raises(SpecError, match="= 100002 "):
        parse_spec(dict(exact, samples=50_001))


# Near-name hints (issue #37): a key or name typed with one character deleted, inserted or two neighbours
# swapped is named back in the one error line ("did you mean 'epochs'?"), at every level of the spec.
TYPO_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


@st.composite
def typo_of(draw, names):
    """(intended, typo): one of `names` with one character deleted, inserted or two neighbours swapped,
    the result none of `names` (a typo that is another valid name is no typo)."""
    name = draw(st.sampled_from(sorted(names)))
    at = draw(st.integers(0, len(name)))
    edit = draw(st.sampled_from(["delete", "insert", "swap"] if len(name) > 1 else ["insert"]))
    if edit == "delete":
        at = min(at, len(name) - 1)
        typo = name[:at] + name[at + 1 :]
    elif edit == "insert":
        typo = name[:at] + draw(st.sampled_from(TYPO_CHARS)) + name[at:]
    else:
        at = min(at, len(name) - 2)
        typo = name[:at] + name[at + 1] + name[at] + name[at + 2 :]
    assume(typo and typo not in names)
    return name, typo


BOX = {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}


def without(mapping, key):
    """`mapping` without `key`."""
    return {k: v for k, v in mapping.items() if k != key}


OVERRIDE = {"adamw": BOX}  # a family's or model's box in space:
# where a typo goes -> (the valid names there, the spec with `typo` in place of one of them)
TYPO_PLACES = {
    "spec key": (sorted(spec_module._KEYS), lambda name, typo: {**without(BASE, name), typo: 1}),
    "dataset key": (
        sorted(DataSpec.__dataclass_fields__),
        lambda name, typo: with_(dataset={"name": "digits", typo: 1} if name != "name" else {typo: "digits"}),
    ),
    "dataset name": (spec_module.DATASETS, lambda name, typo: with_(dataset={"name": typo})),
    "recipe key": (spec_module.RECIPE_FIELDS, lambda name, typo: with_(recipe={typo: 1})),
    "space key": (
        [*OPTIMIZERS, *FAMILIES, *list_models()],
        lambda name, typo: with_(space={**BASE["space"], typo: BOX if name in OPTIMIZERS else OVERRIDE}),
    ),
    "space override key": (OPTIMIZERS, lambda name, typo: with_(space={**BASE["space"], "cnn": {typo: BOX}})),
    "box key": (
        spec_module.BOX_KEYS,
        lambda name, typo: with_(space={**BASE["space"], "adamw": {**without(BOX, name), typo: 1}}),
    ),
    "distribution": (
        spec_module.DISTRIBUTIONS,
        lambda name, typo: with_(space={**BASE["space"], "adamw": {**BOX, "label_smoothing": {typo: [0.0, 0.1]}}}),
    ),
    "model name": (list_models(), lambda name, typo: with_(models=[typo])),
    "models key": (
        spec_module.MODEL_KEYS,
        lambda name, typo: with_(models=[{"name": "timm:resnet18", typo: "cnn"} if name != "name" else {typo: "x"}]),
    ),
    "optimizer": (OPTIMIZERS, lambda name, typo: with_(optimizers=[typo])),
    "resources key": (("cpu", "gpu"), lambda name, typo: with_(resources={typo: 1})),
    "sampler": (spec_module.SAMPLERS, lambda name, typo: with_(sampler=typo)),
    "fuse": (spec_module.FUSE_MODES, lambda name, typo: with_(fuse=typo)),
}


@pytest.mark.parametrize("place", sorted(TYPO_PLACES))
@settings(max_examples=60)
@given(data=st.data())
def test_a_typo_of_any_valid_key_or_name_is_refused_with_a_hint_naming_it(place, data):
    names, spec_with = TYPO_PLACES[place]
    name, typo = data.draw(typo_of(names), label="(intended, typo)")
    with pytest.raises(SpecError) as info:
        parse_spec(spec_with(name, typo), check_paths=False)
    message = str(info.value)
    assert "\n" not in message and f"{typo!r}" in message, message
    hint = re.search(r"; did you mean ('[^']+'(?: or '[^']+')*)\?$", message)
    assert hint, message
    assert repr(name) in hint.group(1).split(" or "), message


@pytest.mark.parametrize(
    "raw,message",
    [
        (with_(banana=1), "spec: bad value 'banana'; allowed: the keys "),
        (with_(recipe={"zzzzzz": 1}), "recipe: bad value 'zzzzzz'; allowed: batch_size"),
        (with_(models=["x" * 10_000]), "models: bad value 'xxxxx"),
        (with_(optimizers=[3]), "optimizers[0]: bad value 3; allowed: a string"),
    ],
)
def test_a_value_near_no_valid_name_gets_no_hint(raw, message):
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert str(info.value).startswith(message) and "did you mean" not in str(info.value)
