"""Good ranges, fANOVA importance and the scatter figure of any sampled hyperparameter, not only lr and wd:
log10 for a log-uniform one, linear for a uniform or int one, the share of the bootstrap's best per value for a
choice (hpstudy.analysis.stats, figures, report)."""

import json

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.stats import StatsError, good_ranges, hp_importance
from tests.helpers import make_trials

LR_WD = {"lr": "log_uniform", "wd": "log_uniform"}


def cell(n=40, seed=0) -> pd.DataFrame:
    """One (model, optimizer) cell of n ok trials with their final error only (what every metric reads): lr
    and wd log-uniform, label_smoothing uniform, warmup w = i % 4 and a choice c (unrelated to the error
    unless a test makes them)."""
    trials = make_trials(models=("cnn_tiny",), optimizers=("adamw",), n=n, seed=seed, diverge_share=0.0)
    trials = trials.drop(columns="best_top1_err")
    rng = np.random.default_rng(seed + 7)
    return trials.assign(
        label_smoothing=rng.uniform(0.0, 0.3, n), w=np.arange(n) % 4, c=rng.choice(["a", "b", None], n)
    )


def test_default_keys_keep_lr_and_wd_columns_and_a_uniform_field_is_its_values_percentiles():
    trials = cell()
    default = good_ranges(trials)
    assert list(default.columns) == ["log10_lr", "log10_wd", "log10_lr_wd", "n", "sample_size", "n_left_out", "metric"]
    # the same winners (they depend on the errors alone): a uniform field holding log10 lr has log10 lr's range
    wider = good_ranges(trials.assign(u=np.log10(trials["lr"])), keys={**LR_WD, "u": "uniform"})
    assert list(wider.columns[:4]) == ["log10_lr", "log10_wd", "log10_lr_wd", "u"]
    np.testing.assert_array_equal(wider["u"].to_numpy(), default["log10_lr"].to_numpy())
    pd.testing.assert_frame_equal(wider.drop(columns="u"), default)


def test_an_int_field_and_a_choice_get_the_ranges_and_shares_their_best_trials_have():
    """Error 10 - 2w + [0, 1): any w = 3 trial beats every other. A bootstrap sample of 10 of the 40 holds one
    (10 of them) with probability 1 - 0.75^10 = 0.944, so w's p2.5 is 2 and its p50 and p97.5 are 3; the 4
    best trials have c = a, so a is the best of a sample with probability 1 - 0.9^10 = 0.651."""
    n = 40
    trials = cell(n)
    trials["top1_err"] = 10 - 2 * trials["w"] + np.random.default_rng(3).uniform(0, 1, n)
    best_four = trials["top1_err"].nsmallest(4).index
    trials["c"] = np.where(trials.index.isin(best_four), "a", None)
    ranges = good_ranges(trials, keys={"w": "int", "c": "choice"})
    assert list(ranges.columns) == ["w", "c=a", "c=null", "n", "sample_size", "n_left_out", "metric"]
    assert ranges["w"].tolist() == [2, 3, 3]
    share = ranges["c=a"].iloc[0]
    assert abs(share - (1 - 0.9**10)) < 0.035  # 3.5 standard errors of 2500 bootstrap draws
    assert (ranges["c=a"] + ranges["c=null"] == 1).all() and ranges["c=a"].nunique() == 1
    with pytest.raises(StatsError, match="keys: w: bad distribution 'normal'; allowed: log_uniform, uniform"):
        good_ranges(trials, keys={"w": "normal"})


@pytest.mark.parametrize("driver", ["w", "c"])
def test_importance_goes_to_the_field_the_error_depends_on(driver):
    trials = cell()
    noise = np.random.default_rng(5).normal(0, 0.1, len(trials))
    effect = {"w": 3.0 * trials["w"], "c": 10.0 * (trials["c"] == "b")}[driver]
    trials["top1_err"] = 10 + effect + noise
    keys = {**LR_WD, "label_smoothing": "uniform", "w": "int", "c": "choice"}
    importance = hp_importance(trials, keys=keys)
    shares = {name: importance[name] for name in keys}
    assert max(shares, key=shares.get) == driver and shares[driver] > 0.5
    assert sum(shares.values()) == pytest.approx(1.0)


def test_the_scatter_has_a_panel_per_sampled_field_a_choice_as_categories_and_shades_numeric_ranges():
    from hpstudy.analysis.figures import hp_names, hp_scatter_figure, hp_scatter_table

    trials = cell()
    keys = {**LR_WD, "label_smoothing": "uniform", "c": "choice"}
    assert hp_names() == "lr, wd and lr·wd"
    assert hp_names(keys) == "lr, wd, lr·wd, label_smoothing and c"
    table = hp_scatter_table(trials, keys=keys)
    assert list(table.columns) == [
        "model",
        "optimizer",
        "epochs",
        "lr",
        "wd",
        "label_smoothing",
        "c",
        "error",
        "status",
        "n",
        "metric",
    ]
    ranges = {"cnn_tiny": good_ranges(trials, keys=keys)}
    axes = hp_scatter_figure(table, ranges, keys=keys).fig.axes
    assert [ax.get_xlabel() for ax in axes] == ["log10 lr", "log10 wd", "log10 lr·wd", "label_smoothing", "c"]
    assert [t.get_text() for t in axes[4].get_xticklabels()] == ["a", "b", "null"]
    assert [len(ax.patches) for ax in axes] == [1, 1, 1, 1, 0]  # good ranges shaded; none for a choice
    span = axes[3].patches[0]  # axvspan: a Polygon (matplotlib 3.8) or a Rectangle (3.9+), x in data units
    xs = span.get_path().transformed(span.get_patch_transform()).vertices[:, 0]
    smoothing = xs.min(), xs.max()
    assert smoothing == pytest.approx(ranges["cnn_tiny"].loc[["p2.5", "p97.5"], "label_smoothing"].tolist())
    on_c = np.concatenate([line.get_xdata() for line in axes[4].get_lines()])
    assert sorted(set(on_c.tolist())) == [0, 1, 2]


def test_the_report_analyses_the_recorded_fields_that_vary_in_each_cell():
    from hpstudy.analysis.report import hp_keys, ranges_and_importance

    varied = cell(seed=1).assign(model="cnn_tiny")
    fixed = cell(seed=2).assign(model="vit_c_tiny", label_smoothing=0.1)
    trials = pd.concat([varied, fixed], ignore_index=True)
    record = {"sampled": {**LR_WD, "label_smoothing": "uniform", "warmup_epochs": "int"}}
    keys = hp_keys(trials, record)
    assert keys == {**LR_WD, "label_smoothing": "uniform"}  # warmup_epochs is no column of these trials
    assert hp_keys(trials, None) == hp_keys(trials, {"n_trials": 1}) == LR_WD
    table, ranges = ranges_and_importance(trials, keys=keys)
    assert set(table["epochs"]) == {10}  # one length: a cell per model
    by_model = table.set_index(["model", "percentile"])
    assert (
        by_model.loc[("cnn_tiny", "p50"), "label_smoothing"]
        == ranges[("cnn_tiny", "adamw", 10)].loc["p50", "label_smoothing"]
    )
    assert by_model.loc[("cnn_tiny", "p50"), "importance_label_smoothing"] > 0
    # fixed in vit_c_tiny's cell: neither ranged nor weighed there, lr and wd still are
    assert "label_smoothing" not in ranges[("vit_c_tiny", "adamw", 10)]
    assert np.isnan(by_model.loc[("vit_c_tiny", "p50"), "importance_label_smoothing"])
    assert by_model.loc[("vit_c_tiny", "p50"), ["importance_lr", "importance_wd"]].sum() == pytest.approx(1.0)


@pytest.mark.slow
def test_a_report_of_a_study_with_a_sampled_field_ranges_and_plots_it(tmp_path):
    from hpstudy.analysis.report import build_report

    trials = cell(n=16).assign(study="s", family="cnn", top5_err=1.0, flops=1, params=1, epochs_done=10)
    record = {"n_trials": 16, "spec": {"name": "s"}, "sampled": {**LR_WD, "label_smoothing": "uniform"}}
    page = build_report(trials, pd.DataFrame(), record, str(tmp_path))
    report = json.load(open(tmp_path / "report.json"))
    assert {"label_smoothing", "importance_label_smoothing"} <= set(report["tables"]["good_ranges"][0])
    scatter = json.load(open(tmp_path / "hp_scatter_adamw_10ep.json"))
    assert "label_smoothing" in scatter["columns"]
    assert "against lr, wd, lr·wd and label_smoothing (AdamW; 10 epochs)" in open(page).read()
