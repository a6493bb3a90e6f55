"""The EMA gain and the peak table's noise floor (analysis/gaps.py) on hand-made tables whose numbers are
worked out in the docstrings: several trials and models, gains that clip at 0, a mean that is not the
median, several seed configurations of unequal spread, and rows that are left out."""

import math

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.gaps import ema_gain, optimizer_gap, peak_table
from hpstudy.analysis.metric import LeftOutWarning

pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")

NAN = float("nan")
# (model, status, best_top1_err, best_ema_top1_err)
EMA = pd.DataFrame(
    [
        ("m", "ok", 11.0, 10.0),  # gain 1
        ("m", "ok", 12.0, 12.5),  # EMA worse: gain max(0, -0.5) = 0
        ("m", "ok", 15.0, 13.0),  # gain 2
        ("m", "ok", 20.0, 14.0),  # gain 6
        ("m", "diverged", 90.0, 90.0),  # gain 0, counted
        ("m", "failed", NAN, NAN),  # left out
        ("m", "ok", 9.0, NAN),  # no EMA best: left out, and its raw 9 is not m's best
        ("k", "ok", 30.0, 29.5),  # gain 0.5
        ("k", "ok", 28.0, 25.0),  # gain 3
        ("off", "ok", 5.0, NAN),  # EMA never on: no row
    ],
    columns=["model", "status", "best_top1_err", "best_ema_top1_err"],
)


def test_ema_gain_clips_each_trials_gain_at_zero_and_takes_mean_and_median():
    """m: gains 1, 0, 2, 6, 0 (n = 5): mean 9/5, median 1 (unclipped the mean would be 8.5/5); best raw
    11 (the left-out 9 does not count), best EMA 10, gain of the bests 1; 2 left out.
    k: gains 0.5 and 3: mean = median = 1.75; bests 28 and 25, gain of the bests 3."""
    table = ema_gain(EMA).set_index("model")
    assert table.index.tolist() == ["k", "m"]  # `off` never ran EMA
    assert table.loc["m", "n"] == 5 and table.loc["m", "n_left_out"] == 2
    assert table.loc["m", "gain_mean"] == pytest.approx(9 / 5, rel=1e-12)
    assert table.loc["m", "gain_median"] == 1.0
    assert table.loc["m", ["best", "best_ema", "gain_of_best"]].tolist() == [11.0, 10.0, 1.0]
    assert table.loc["k", ["n", "n_left_out"]].tolist() == [2, 0]
    assert table.loc["k", ["gain_mean", "gain_median"]].tolist() == pytest.approx([1.75, 1.75], rel=1e-12)
    assert table.loc["k", ["best", "best_ema", "gain_of_best"]].tolist() == [28.0, 25.0, 3.0]


def test_ema_gain_by_two_keys_keeps_the_groups_apart():
    frame = EMA.assign(epochs=[5, 5, 10, 10, 10, 10, 10, 5, 5, 5])
    table = ema_gain(frame, by=["model", "epochs"]).set_index(["model", "epochs"])
    # m at 5 epochs: gains 1 and 0, bests 11 and 10; at 10: gains 2, 6, 0 (median 2), bests 15 and 13
    assert table.loc[("m", 5), ["n", "gain_mean", "gain_median", "gain_of_best"]].tolist() == [2, 0.5, 0.5, 1.0]
    assert table.loc[("m", 10), ["n", "gain_mean", "gain_median"]].tolist() == pytest.approx([3, 8 / 3, 2.0])
    assert table.loc[("m", 10), ["best", "best_ema", "gain_of_best"]].tolist() == [15.0, 13.0, 2.0]
    assert table.loc[("m", 10), "n_left_out"] == 2


def _peak_rows():
    """Model m: config A (AdamW, lr 1e-3) seeds 0, 1 at 10 and 12 (variance 2), its seed 2 failed;
    config B (AdamW, lr 2e-3) seeds 0, 1, 2 at 20, 23, 26 (variance 9); config C (SGD) one seed at 15.
    Model q: two configurations, one seed each."""
    rows = [
        ("m", "adamw", 1e-3, 0, "ok", 10.0),
        ("m", "adamw", 1e-3, 1, "ok", 12.0),
        ("m", "adamw", 1e-3, 2, "failed", NAN),
        ("m", "adamw", 2e-3, 0, "ok", 20.0),
        ("m", "adamw", 2e-3, 1, "ok", 23.0),
        ("m", "adamw", 2e-3, 2, "ok", 26.0),
        ("m", "sgd", 1e-3, 0, "ok", 15.0),
        ("q", "sgd", 1e-2, 0, "ok", 31.0),
        ("q", "sgd", 3e-2, 0, "ok", 30.0),
    ]
    frame = pd.DataFrame(rows, columns=["model", "optimizer", "lr", "seed", "status", "top1_err"])
    return frame.assign(epochs=10, wd=0.1)


def test_the_noise_floor_pools_the_seed_variances_of_every_repeated_configuration():
    """sqrt of the mean of the per-configuration variances, sqrt((2 + 9) / 2) (not the mean sd,
    (sqrt 2 + 3) / 2, nor a df-weighted pool, sqrt(20 / 3)); a configuration with one seed adds
    nothing, and a model without repeats has no floor."""
    table = peak_table(_peak_rows(), metric="final").set_index("model")
    m, q = table.loc["m"], table.loc["q"]
    assert m["noise_floor"] == pytest.approx(math.sqrt(5.5), rel=1e-12)
    assert [m["best_err"], m["optimizer"], m["lr"], m["n"], m["seeds"], m["n_left_out"]] == [
        10.0,
        "adamw",
        1e-3,
        6,
        3,
        1,
    ]
    assert np.isnan(q["noise_floor"]) and [q["best_err"], q["lr"], q["n"], q["seeds"]] == [30.0, 3e-2, 2, 1]


def test_optimizer_gap_names_a_model_whose_trials_were_all_left_out():
    """Model b's one SGD trial failed and its AdamW one has no finite error: b has no gap, and the
    warning says why (model a: 12 - 10 = 2 points)."""
    frame = pd.DataFrame(
        {
            "model": ["a"] * 4 + ["b"] * 2,
            "optimizer": ["sgd", "sgd", "adamw", "adamw", "sgd", "adamw"],
            "epochs": 10,
            "status": ["ok"] * 4 + ["failed", "ok"],
            "top1_err": [12.0, 13.0, 10.0, 11.0, NAN, math.inf],
        }
    )
    with pytest.warns(
        LeftOutWarning,
        match=r"^optimizer_gap: left out 2 of 6 rows: 1 failed, 1 without a finite final error; "
        r"model b, epochs 10: all 2 trials left out$",
    ):
        gap = optimizer_gap(frame, metric="final")
    assert gap["model"].tolist() == ["a"] and gap.loc[0, "gap"] == 2.0
