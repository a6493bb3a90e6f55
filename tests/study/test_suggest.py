"""`hpstudy suggest` (study/suggest.py): which rows it reads, and the spec lines it prints."""

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.spec_record import write_spec_record
from hpstudy.study.suggest import suggest, yaml_number
from hpstudy.trainers.errors import ConfigError
from tests.helpers import small_spec, stored_row

# (model, optimizer, epochs, log10 lr, log10 wd, status): 2-epoch rows that would move every 5-epoch
# point if pooled with it, a cell whose 5-epoch trials failed throughout, and a cell whose medians'
# product lies outside its good lr·wd range
ROWS = [
    *[("cnn_tiny", "sgd", 2, 0, -4, "ok")] * 3,
    ("cnn_tiny", "sgd", 5, -3, -4, "ok"),
    ("cnn_tiny", "sgd", 5, -2, -4, "ok"),
    ("cnn_tiny", "sgd", 5, -1, -4, "failed"),
    ("cnn_tiny", "adamw", 5, -4, -4, "ok"),
    ("cnn_tiny", "adamw", 5, -4, -3, "ok"),
    ("cnn_tiny", "adamw", 5, -3, -4, "ok"),
    ("vit_p_tiny", "adamw", 2, -3, -2, "ok"),
    *[("vit_p_tiny", "adamw", 5, -3, -2, "failed")] * 2,
]


def quartile_ranges(cell, metric):
    """A stand-in for good_ranges that a hand can follow: quartiles of the ok rows' log10 lr, wd and lr·wd."""
    assert cell["epochs"].nunique() == 1, "suggest never pools training lengths"
    ok = cell[cell["status"] == "ok"]
    logs = {"log10_lr": np.log10(ok["lr"]), "log10_wd": np.log10(ok["wd"])}
    logs["log10_lr_wd"] = logs["log10_lr"] + logs["log10_wd"]
    table = pd.DataFrame({k: np.percentile(v, [25, 50, 75]) for k, v in logs.items()}, index=["p2.5", "p50", "p97.5"])
    return table.assign(n=len(ok), n_left_out=len(cell) - len(ok), metric=metric)


@pytest.fixture
def store(tmp_path):
    for i, (model, opt, epochs, log_lr, log_wd, status) in enumerate(ROWS):
        row = dict(model=model, optimizer=opt, epochs=epochs, lr=10.0**log_lr, wd=10.0**log_wd, status=status)
        write_trial(
            str(tmp_path), "s", stored_row(trial_key=f"k{i}", top1_err=None if status == "failed" else 9.0, **row)
        )
    return str(tmp_path)


def test_suggest_prints_a_block_per_length_each_cells_medians_in_catalogue_order(store):
    """5 epochs: cnn_tiny sgd: ok lr 1e-3, 1e-2 -> median 10^-2.5 = 0.00316, quartiles 10^-2.75, 10^-2.25;
    cnn_tiny adamw: median lr = wd = 1e-4, lr·wd 1e-8 below its quartiles 10^-7.5 .. 10^-7. 2 epochs: each
    cell its own point (cnn_tiny sgd at lr 1, never blended with its 5-epoch trials)."""
    lines = suggest(store, "s", quartile_ranges).splitlines()
    assert lines[0] == f"# hpstudy suggest --store {store} --study s   (metric: paper)"
    assert lines[4:6] == [
        "# The study ran 2 lengths (2, 5 epochs): each length is its own",
        "# point, never pooled; one block (YAML document) per length below: paste the one your spec trains.",
    ]
    assert lines[6:] == [
        "---",
        "# from the 2-epoch trials",
        "space:",
        "  adamw: {lr: 0.001, wd: 0.01}   # = vit_p_tiny's; required per optimizer, used by no model below",
        "  sgd: {lr: 1, wd: 0.0001}   # = cnn_tiny's; required per optimizer, used by no model below",
        "  vit_p_tiny:",
        "    # vit_p_tiny, adamw, 2 epochs: n = 1 counted (0 left out); good lr [0.001, 0.001], wd [0.01, 0.01]",
        "    adamw: {lr: 0.001, wd: 0.01}",
        "  cnn_tiny:",
        "    # cnn_tiny, sgd, 2 epochs: n = 3 counted (0 left out); good lr [1, 1], wd [0.0001, 0.0001]",
        "    sgd: {lr: 1, wd: 0.0001}",
        "---",
        "# from the 5-epoch trials",
        "space:",
        "  adamw: {lr: 0.0001, wd: 0.0001}   # = cnn_tiny's; required per optimizer, used by no model below",
        "  sgd: {lr: 0.00316, wd: 0.0001}   # = cnn_tiny's; required per optimizer, used by no model below",
        "  vit_p_tiny:",
        "    # vit_p_tiny, adamw, 5 epochs: no suggestion (every trial failed)",
        "  cnn_tiny:",
        "    # cnn_tiny, adamw, 5 epochs: n = 3 counted (0 left out); good lr [0.0001, 0.000316], wd [0.0001, "
        "0.000316]; lr·wd lies OUTSIDE the good lr·wd range: check the scatter figure",
        "    adamw: {lr: 0.0001, wd: 0.0001}",
        "    # cnn_tiny, sgd, 5 epochs: n = 2 counted (1 left out); good lr [0.00178, 0.00562], wd [0.0001, 0.0001]",
        "    sgd: {lr: 0.00316, wd: 0.0001}",
    ]
    short, long = (doc["space"] for doc in yaml.safe_load_all("\n".join(lines)) if doc)
    assert short["cnn_tiny"] == {"sgd": {"lr": 1, "wd": 1e-4}}
    assert long["cnn_tiny"] == {"adamw": {"lr": 1e-4, "wd": 1e-4}, "sgd": {"lr": 0.00316, "wd": 1e-4}}
    assert long["vit_p_tiny"] is None  # a comment only: no box for a cell that has none


def test_suggest_filters_by_model_and_optimizer_and_names_a_bad_filter(store):
    only = suggest(store, "s", quartile_ranges, models=["cnn_tiny"], optimizers=["sgd"]).splitlines()
    assert only[6:] == [
        "---",
        "# from the 2-epoch trials",
        "space:",
        "  sgd: {lr: 1, wd: 0.0001}   # = cnn_tiny's; required per optimizer, used by no model below",
        "  cnn_tiny:",
        "    # cnn_tiny, sgd, 2 epochs: n = 3 counted (0 left out); good lr [1, 1], wd [0.0001, 0.0001]",
        "    sgd: {lr: 1, wd: 0.0001}",
        "---",
        "# from the 5-epoch trials",
        "space:",
        "  sgd: {lr: 0.00316, wd: 0.0001}   # = cnn_tiny's; required per optimizer, used by no model below",
        "  cnn_tiny:",
        "    # cnn_tiny, sgd, 5 epochs: n = 2 counted (1 left out); good lr [0.00178, 0.00562], wd [0.0001, 0.0001]",
        "    sgd: {lr: 0.00316, wd: 0.0001}",
    ]
    with pytest.raises(ConfigError, match=r"^--optimizer: bad value 'lion'; allowed \(in the study\): adamw, sgd$"):
        suggest(store, "s", quartile_ranges, optimizers=["lion"])
    with pytest.raises(ConfigError, match=r"^--model/--optimizer: no \(model, optimizer\) of the study matches$"):
        suggest(store, "s", quartile_ranges, models=["vit_p_tiny"], optimizers=["sgd"])


@pytest.mark.parametrize(
    "value,text",
    [
        (1e-5, "1.00e-05"),
        (1e-4, "0.0001"),
        (10**-2.5, "0.00316"),
        (0.5, "0.5"),
        (1234.5, "1.23e+03"),
        (2e5, "2.00e+05"),
    ],
)
def test_yaml_number_keeps_3_significant_digits_and_reads_back_as_that_number(value, text):
    assert yaml_number(value) == text
    read = yaml.safe_load(f"x: {text}")["x"]
    assert isinstance(read, float) and math.isclose(read, float(f"{value:.2e}"))


def quartile_ranges_of_fields(cell, metric, keys):
    """quartile_ranges, and for each sampled recipe field of `keys` (field -> distribution, as good_ranges
    takes them) the quartiles of its ok values (a numeric one) or the share of the ok rows per value (a choice)."""
    assert keys == {
        "lr": "log_uniform",
        "wd": "log_uniform",
        "batch_size": "choice",
        "label_smoothing": "uniform",
        "warmup_epochs": "int",
    }
    ok = cell[cell["status"] == "ok"]
    table = quartile_ranges(cell, metric)
    for name, kind in keys.items():
        if kind == "choice":
            table = table.assign(**{f"{name}={v}": (ok[name] == v).mean() for v in sorted(set(ok[name]))})
        elif name not in ("lr", "wd"):
            table[name] = np.percentile(ok[name], [25, 50, 75])
    return table


def test_suggest_fixes_each_sampled_recipe_field_beside_lr_and_wd(tmp_path):
    """cnn_tiny adamw, 4 ok rows: label_smoothing 0, .1, .2, .3 -> quartiles .075, .15, .225; warmup_epochs
    0, 1, 1, 2 -> quartiles .75, 1, 1.25; batch_size 64 in 3 of 4; lr 1e-3, 1e-2 twice each -> quartiles
    1e-3, 10^-2.5, 1e-2; wd 1e-4, 1e-3 likewise (lr·wd 10^-6, inside its quartiles 10^-6.25 .. 10^-5.75)."""
    space = {
        "adamw": {
            "lr": [1e-3, 1e-2],
            "wd": [1e-4, 1e-3],
            "label_smoothing": {"uniform": [0.0, 0.3]},
            "warmup_epochs": {"int": [0, 2]},
            "batch_size": {"choice": [64, 128]},
        }
    }
    raw = small_spec(name="r", models=["cnn_tiny"], optimizers=["adamw"], space=space, recipe={"device": "cpu"})
    root = str(tmp_path)
    for i, (lr, wd, smoothing, warmup, batch) in enumerate(
        [(1e-3, 1e-4, 0.0, 0, 64), (1e-2, 1e-4, 0.1, 1, 128), (1e-3, 1e-3, 0.2, 1, 64), (1e-2, 1e-3, 0.3, 2, 64)]
    ):
        config = {"lr": lr, "wd": wd, "label_smoothing": smoothing, "warmup_epochs": warmup, "batch_size": batch}
        row = dict(model="cnn_tiny", optimizer="adamw", epochs=5, lr=lr, wd=wd, batch_size=batch, status="ok")
        write_trial(root, "r", stored_row(trial_key=f"k{i}", top1_err=9.0, config_json=json.dumps(config), **row))
    write_spec_record(root, "r", raw, 4, [f"k{i}" for i in range(4)])
    lines = suggest(root, "r", quartile_ranges_of_fields).splitlines()
    box = "{lr: 0.00316, wd: 0.000316, batch_size: 64, label_smoothing: 0.15, warmup_epochs: 1}"
    assert lines[lines.index("space:") + 1 :] == [
        f"  adamw: {box}   # = cnn_tiny's; required per optimizer, used by no model below",
        "  cnn_tiny:",
        "    # cnn_tiny, adamw, 5 epochs: n = 4 counted (0 left out); good lr [0.001, 0.01], wd [0.0001, 0.001], "
        "batch_size 64 in 75% of the best, good label_smoothing [0.075, 0.225], good warmup_epochs [0.75, 1.25]",
        f"    adamw: {box}",
    ]
    suggested = yaml.safe_load("\n".join(lines))["space"]
    assert suggested["cnn_tiny"]["adamw"] == {
        "lr": 0.00316,
        "wd": 0.000316,
        "batch_size": 64,
        "label_smoothing": 0.15,
        "warmup_epochs": 1,
    }
    spec = parse_spec(small_spec(optimizers=["adamw"], epochs=[5], space=suggested, recipe={}))
    box = spec.box("cnn_tiny", "adamw")
    assert box.fixed() == {"batch_size": 64, "label_smoothing": 0.15, "warmup_epochs": 1}  # a fixed point
