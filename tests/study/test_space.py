"""Recipe fields in `space:` (study/spec.py): their YAML forms, what is refused by name, how boxes of an
optimizer, a family and a model combine, what the spec record names, and the loader's columns of them."""

import copy
import json

import pytest

from hpstudy.study.sampling import expand
from hpstudy.study.spec import Box, Distribution, SpecError, load_spec, parse_spec, sampled_fields
from hpstudy.study.store.layout import StoreFault, write_trial
from hpstudy.study.store.read import load_study, with_sampled_columns
from hpstudy.study.store.spec_record import load_spec_record, write_spec_record
from tests.helpers import planned_row, small_spec, write_spec

BASE = {
    "name": "r",
    "dataset": {"name": "digits"},
    "models": ["vit_c_tiny", "cnn_tiny"],
    "optimizers": ["adamw"],
    "epochs": [4],
    "samples": 8,
    "space": {"adamw": {"lr": [1e-4, 1e-2], "wd": [0.01, 0.5]}},
}
FIELDS = "lr, wd and the recipe fields batch_size, reference_batch_size, warmup_epochs"


def sampling(space=None, **fields) -> dict:
    """BASE with `fields` added to the adamw box (and `space` entries added beside it)."""
    raw = copy.deepcopy(BASE)
    raw["space"]["adamw"].update(fields)
    raw["space"].update(space or {})
    return raw


def test_each_distribution_in_yaml_and_lr_wd_as_before(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(
        "name: r\nmodels: [cnn_tiny]\noptimizers: [adamw]\nepochs: [6]\nsamples: 4\nspace:\n"
        "  adamw:\n    lr: {log_uniform: [1e-4, 1e-2]}\n    wd: [0.01, 0.5]\n"
        "    label_smoothing: {uniform: [0.0, 0.3]}\n    warmup_epochs: {int: [0, 5]}\n"
        "    batch_size: {choice: [64, 128, 256]}\n    ema_decay: {log_uniform: [0.9, 0.999]}\n"
        "    auto_augment: {choice: [null, original]}\n    min_lr_ratio: 0.01\n"
    )
    box = load_spec(str(path)).box("cnn_tiny", "adamw")
    assert box.lr == (1e-4, 1e-2) and box.wd == (0.01, 0.5)
    assert dict(box.recipe) == {
        "auto_augment": Distribution("choice", (None, "original")),
        "batch_size": Distribution("choice", (64, 128, 256)),
        "ema_decay": Distribution("log_uniform", (0.9, 0.999)),
        "label_smoothing": Distribution("uniform", (0.0, 0.3)),
        "min_lr_ratio": Distribution("choice", (0.01,)),
        "warmup_epochs": Distribution("int", (0, 5)),
    }
    # a single value fixes the field: not an axis of the samples
    assert [name for name, _ in box.axes()] == [
        "lr",
        "wd",
        "auto_augment",
        "batch_size",
        "ema_decay",
        "label_smoothing",
        "warmup_epochs",
    ]
    assert box.fixed() == {"min_lr_ratio": 0.01}


@pytest.mark.parametrize(
    "raw,message",
    [
        (
            sampling(label_smothing={"uniform": [0, 0.3]}),
            f"space.adamw: bad value 'label_smothing'; allowed: {FIELDS}",
        ),
        (
            sampling(batch_size={"uniform": [64, 256]}),
            "space.adamw.batch_size: bad value {'uniform': [64, 256]}; allowed: {int: [low, high]}, "
            "{choice: [values]} or a single value (fixes it) (the field takes an integer)",
        ),
        (
            sampling(auto_augment={"int": [0, 1]}),
            "space.adamw.auto_augment: bad value {'int': [0, 1]}; allowed: {choice: [values]} or a single value "
            "(fixes it) (the field takes a string)",
        ),
        (
            sampling(label_smoothing={"uniform": [0.0, 1.0]}),
            "space.adamw.label_smoothing: bad value 1.0; allowed: in [0, 1)",
        ),
        (
            sampling(label_smoothing={"choice": [0.1, 1.5]}),
            "space.adamw.label_smoothing: bad value 1.5; allowed: in [0, 1)",
        ),
        (
            sampling(warmup_epochs={"int": [0, 4]}),
            "space.adamw.warmup_epochs: bad value 4; allowed: >= 0 and < epochs (4)",
        ),
        (sampling(warmup_epochs={"int": [0, 1.5]}), "space.adamw.warmup_epochs: bad value [0, 1.5]; allowed: integers"),
        (sampling(ema_decay={"log_uniform": [0, 0.9]}), "space.adamw.ema_decay: bad value [0, 0.9]; allowed: low > 0"),
        (
            sampling(label_smoothing={"uniform": [0.3, 0.1]}),
            "space.adamw.label_smoothing: bad value [0.3, 0.1]; allowed: low <= high",
        ),
        (
            sampling(label_smoothing=[0.0, 0.3]),
            "space.adamw.label_smoothing: bad value [0.0, 0.3]; allowed: {log_uniform: [low, high]}, {uniform: [low, "
            "high]}, {int: [low, high]}, {choice: [values]} or a single value (fixes it) (a bare [low, high] is lr's",
        ),
        (
            sampling(label_smoothing={"normal": [0.1, 0.2]}),
            "space.adamw.label_smoothing: bad value {'normal': [0.1, 0.2]}",
        ),
        (
            sampling(batch_size={"choice": [64, 64]}),
            "space.adamw.batch_size: bad value {'choice': [64, 64]}; allowed: a choice without repeats",
        ),
        (
            sampling(batch_size={"choice": []}),
            "space.adamw.batch_size: bad value {'choice': []}; allowed: {choice: [values]}",
        ),
        (
            sampling(lr={"uniform": [1e-4, 1e-2]}),
            "space.adamw.lr: bad value {'uniform': [0.0001, 0.01]}; allowed: [low, high], {log_uniform",
        ),
        (sampling(init={"choice": ["/a.pt"]}), "(init is not sampled: a checkpoint is pinned by its bytes"),
        (sampling(device={"choice": ["cpu"]}), "(device is not sampled: a trial row's device column"),
        (
            dict(sampling(label_smoothing={"uniform": [0.0, 0.2]}), recipe={"label_smoothing": 0.1}),
            "space.adamw.label_smoothing: bad value {'uniform': [0.0, 0.2]}; allowed: a field fixed in recipe: "
            "(recipe.label_smoothing is 0.1) or sampled in space:, not both",
        ),
        (
            sampling(
                {"cnn": {"adamw": {"lr": 1e-3, "wd": 0.1, "label_smoothing": {"log_uniform": [0.01, 0.2]}}}},
                label_smoothing={"uniform": [0.0, 0.2]},
            ),
            "space.cnn.adamw.label_smoothing: bad value {'log_uniform': [0.01, 0.2]}; allowed: a uniform "
            "distribution, as in space.adamw.label_smoothing",
        ),
        (
            sampling({"cnn_tiny": {"adamw": {"lr": 1e-3, "wd": 0.1, "batch_size": {"choice": [0, 64]}}}}),
            "space.cnn_tiny.adamw.batch_size: bad value 0; allowed: an integer in [1, ",
        ),
        (
            dict(sampling(mixup=0.2, batch_size={"choice": [63, 64]})),
            "space.adamw.batch_size: 63 is odd; mixup/CutMix need an even batch",
        ),
        (
            dict(sampling(label_smoothing={"uniform": [0.0, 0.2]}), sampler="grid", samples=9),
            "samples: bad value 9; allowed: k^3 for an integer k with sampler: grid (a grid over lr, wd, "
            "label_smoothing for vit_c_tiny, adamw)",
        ),
    ],
)
def test_a_bad_sampled_field_is_refused_naming_it_the_value_and_what_is_allowed(raw, message):
    with pytest.raises(SpecError) as info:
        parse_spec(raw)
    assert message in str(info.value)


def test_a_fixed_field_in_space_is_no_axis_so_a_grid_keeps_its_square_and_a_cube_fits_three_axes():
    assert len(expand(parse_spec(dict(sampling(label_smoothing=0.1), sampler="grid", samples=9)))) == 2 * 9
    cube = parse_spec(dict(sampling(label_smoothing={"uniform": [0.0, 0.2]}), sampler="grid", samples=27))
    points = {(t.config["lr"], t.config["wd"], t.config["label_smoothing"]) for t in expand(cube)}
    assert len(points) == 27 and {p[2] for p in points} == {0.0, 0.1, 0.2}


def test_a_family_or_model_box_takes_each_field_from_the_most_specific_box_that_names_it():
    raw = sampling(
        {
            "cnn": {"adamw": {"lr": [1e-3, 1e-1], "wd": [0.01, 0.5]}},
            "cnn_tiny": {"adamw": {"lr": 1e-3, "wd": 0.1, "warmup_epochs": 1}},
        },
        label_smoothing={"uniform": [0.0, 0.2]},
        warmup_epochs={"int": [0, 3]},
    )
    spec = parse_spec(dict(raw, models=["vit_c_tiny", "cnn_tiny", "regnety_1gf"]))
    sampled = (("label_smoothing", Distribution("uniform", (0.0, 0.2))), ("warmup_epochs", Distribution("int", (0, 3))))
    assert spec.box("vit_c_tiny", "adamw") == Box((1e-4, 1e-2), (0.01, 0.5), sampled)
    assert spec.box("regnety_1gf", "adamw") == Box((1e-3, 1e-1), (0.01, 0.5), sampled)  # the family's lr/wd
    assert spec.box("cnn_tiny", "adamw") == Box(
        (1e-3, 1e-3), (0.1, 0.1), (sampled[0], ("warmup_epochs", Distribution("choice", (1,))))
    )
    by_model = {}
    for t in expand(spec):
        by_model.setdefault(t.model, set()).add((t.config["label_smoothing"], t.config["warmup_epochs"]))
    assert {w for _, w in by_model["cnn_tiny"]} == {1} and len(by_model["cnn_tiny"]) == 8
    assert {w for _, w in by_model["vit_c_tiny"]} <= {0, 1, 2, 3} and len(by_model["vit_c_tiny"]) == 8
    # the record names what some box varies: warmup_epochs varies in adamw's box though cnn_tiny fixes it
    assert sampled_fields(raw["space"]) == {
        "lr": "log_uniform",
        "wd": "log_uniform",
        "label_smoothing": "uniform",
        "warmup_epochs": "int",
    }
    assert sampled_fields(BASE["space"]) == {"lr": "log_uniform", "wd": "log_uniform"}


def test_the_spec_record_names_the_sampled_fields_and_the_loader_makes_them_columns(tmp_path):
    raw = sampling(label_smoothing={"uniform": [0.0, 0.3]}, accum_steps={"choice": [1, 2]})
    spec = parse_spec(dict(raw, models=["cnn_tiny"]))
    root = str(tmp_path)
    trials = expand(spec)
    for i, t in enumerate(trials):
        # the last row has no config: its sampled columns are null
        text = json.dumps(t.config) if i < len(trials) - 1 else None
        write_trial(root, "r", planned_row(t, status="ok", top1_err=5.0, batch_size=128, config_json=text))
    write_spec_record(root, "r", raw, len(trials), [t.key for t in trials])
    assert load_spec_record(root, "r")["sampled"] == {
        "lr": "log_uniform",
        "wd": "log_uniform",
        "accum_steps": "choice",
        "label_smoothing": "uniform",
    }
    loaded, _, _ = load_study(root, "r")
    loaded = loaded.set_index("trial_key")
    for t in trials[:-1]:
        assert loaded.loc[t.key, "label_smoothing"] == t.config["label_smoothing"]
        assert loaded.loc[t.key, "accum_steps"] == t.config["accum_steps"]
    assert loaded.loc[trials[-1].key, ["label_smoothing", "accum_steps"]].isna().all()
    # a field the canonical JSON leaves out at its default (accum_steps: 1) reads as that default
    canonical = loaded.assign(config_json=[json.dumps({"label_smoothing": 0.2})] * len(loaded))
    again = with_sampled_columns(canonical.drop(columns=["label_smoothing", "accum_steps"]), ["accum_steps"])
    assert set(again["accum_steps"]) == {1}
    # a stored column (batch_size) stays as stored; a name that is no config field is no column
    assert with_sampled_columns(loaded, ["batch_size", "no_such_field"]).equals(loaded)


def test_a_record_whose_sampled_fields_are_damaged_is_named(tmp_path):
    root = str(tmp_path)
    write_spec_record(root, "r", BASE, 8)
    path = tmp_path / "specs" / "r.json"
    path.write_text(json.dumps(dict(json.loads(path.read_text()), sampled={"lr": 3})))
    with pytest.raises(StoreFault, match="its sampled fields are not a mapping of field -> distribution"):
        load_spec_record(root, "r")


@pytest.mark.slow
def test_a_warmup_and_label_smoothing_study_on_ray_stores_them_as_columns(tmp_path):
    raw = small_spec(
        name="recipe",
        models=["cnn_tiny"],
        optimizers=["adamw"],
        samples=4,
        recipe={"batch_size": 64, "device": "cpu"},
        space={
            "adamw": {
                "lr": [1e-3, 1e-2],
                "wd": [0.01, 0.1],
                "warmup_epochs": {"uniform": [0.0, 0.5]},
                "label_smoothing": {"uniform": [0.0, 0.3]},
            }
        },
    )
    import ray

    from hpstudy.study.runner import run_study

    spec = load_spec(write_spec(tmp_path, raw))
    store = str(tmp_path / "store")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        run_study(spec, store, progress_interval=5)
    finally:
        ray.shutdown()
    trials, _, record = load_study(store, "recipe")
    assert record["sampled"] == {
        "lr": "log_uniform",
        "wd": "log_uniform",
        "label_smoothing": "uniform",
        "warmup_epochs": "uniform",
    }
    planned = {t.key: t.config for t in expand(spec)}
    assert set(trials["trial_key"]) == set(planned) and set(trials["status"]) == {"ok"}
    for key, warmup, smoothing in trials[["trial_key", "warmup_epochs", "label_smoothing"]].itertuples(index=False):
        assert (warmup, smoothing) == (planned[key]["warmup_epochs"], planned[key]["label_smoothing"])
    assert trials["label_smoothing"].nunique() == trials["warmup_epochs"].nunique() == 4
