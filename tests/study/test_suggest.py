"""`hpstudy suggest` (study/suggest.py): which rows it reads, and the spec lines it prints."""

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from hpstudy.study.store import write_trial
from hpstudy.study.suggest import suggest, yaml_number
from hpstudy.trainers.errors import ConfigError
from tests.helpers import stored_row

# (model, optimizer, epochs, log10 lr, log10 wd, status): 2-epoch rows that would move every point
# if read, a cell whose longest schedule failed throughout, and a cell whose medians' product lies
# outside its good lr·wd range
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
    assert set(cell["epochs"]) == {5}, "suggest reads the longest schedule only"
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


def test_suggest_prints_each_cells_medians_at_its_longest_schedule_in_catalogue_order(store):
    """cnn_tiny sgd: ok lr 1e-3, 1e-2 -> median 10^-2.5 = 0.00316, quartiles 10^-2.75, 10^-2.25;
    cnn_tiny adamw: median lr = wd = 1e-4, lr·wd 1e-8 below its quartiles 10^-7.5 .. 10^-7."""
    lines = suggest(store, "s", quartile_ranges).splitlines()
    assert lines[0] == f"# hpstudy suggest --store {store} --study s   (metric: paper)"
    assert lines[lines.index("space:") + 1 :] == [
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
    space = yaml.safe_load("\n".join(lines))["space"]
    assert space["cnn_tiny"] == {"adamw": {"lr": 1e-4, "wd": 1e-4}, "sgd": {"lr": 0.00316, "wd": 1e-4}}
    assert space["vit_p_tiny"] is None  # a comment only: no box for a cell that has none


def test_suggest_filters_by_model_and_optimizer_and_names_a_bad_filter(store):
    only = suggest(store, "s", quartile_ranges, models=["cnn_tiny"], optimizers=["sgd"]).splitlines()
    assert only[only.index("space:") + 1 :] == [
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
