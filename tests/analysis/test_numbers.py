import ast
import contextlib
import importlib
import itertools
import os
import re
import warnings

import numpy as np
import pandas as pd
import pytest

import hpstudy.analysis.stats as stats
from hpstudy.analysis.edf import (
    bootstrap_band,
    dkw_epsilon,
    edf_at,
    edf_table,
    effective_sample_size,
    normalized_weights,
    step_points,
    weighted_edf_at,
)
from hpstudy.analysis.findings import findings, findings_table
from hpstudy.analysis.gaps import ema_gain, length_gap, optimizer_gap, peak_table
from hpstudy.analysis.inference import TAIL, best_contrast, delta_power, min_law, trials_for_delta
from hpstudy.analysis.metric import ERR, LeftOutWarning, MetricError, usable
from hpstudy.analysis.stats import (
    StatsError,
    expected_best,
    expected_best_band,
    good_ranges,
    hp_importance,
    trials_for_dkw,
)
from hpstudy.trainers.errors import HpstudyError
from hpstudy.trainers.zoo import get_spec
from tests.helpers import REPO, make_trials


def test_edf_is_the_exact_right_continuous_step():
    errors = np.array([3.0, 1.0, 2.0, 2.0, 5.0])
    assert edf_at(errors, [0.5, 1.0, 1.5, 2.0, 4.99, 5.0, 9.0]).tolist() == [0, 0.2, 0.2, 0.6, 0.8, 1, 1]
    x, f = step_points(errors)
    assert x.tolist() == [1, 2, 3, 5] and f.tolist() == [0.2, 0.6, 0.8, 1.0]


def test_edf_table_per_group_and_delta_references():
    frame = pd.DataFrame(
        {
            "model": ["a"] * 4 + ["b"] * 3,
            "optimizer": "adamw",
            "status": "ok",
            "top1_err": [4.0, 2.0, 3.0, 2.0, 7.0, 5.0, 6.0],
        }
    )
    table = edf_table(frame, by=["model"])
    a = table[table["model"] == "a"]
    assert a["error"].tolist() == [2, 2, 3, 4] and a["F"].tolist() == [0.5, 0.5, 0.75, 1.0]
    assert a["delta"].tolist() == [0, 0, 1, 2] and (a["reference"] == 2).all()
    assert (table["reference_kind"] == "group minimum").all()
    for model, group in table.groupby("model"):
        raw = frame.loc[frame["model"] == model, "top1_err"]
        assert np.allclose(group["F"], edf_at(raw, group["error"]))
    matched = edf_table(frame, by=["model"], reference="matched", match=["optimizer"])
    assert (matched["reference"] == 2.0).all()  # the best of every model in the cell
    stated = edf_table(frame, by=["model"], reference={("a",): 1.0, ("b",): 4.0})
    assert stated.loc[stated["model"] == "b", "delta"].tolist() == [1, 2, 3]
    assert (stated["reference_kind"] == "stated reference runs").all()


def test_diverged_trials_sit_at_chance_and_lower_the_plateau():
    trials = make_trials(models=("vit_p_tiny",), optimizers=("adamw",), n=200, diverge_share=0.25, seed=1)
    table = edf_table(trials, by=["model"], reference=0.0)
    share = (trials["status"] == "diverged").mean()
    below_chance = table.loc[table["error"] < 90, "F"].max()
    assert below_chance == pytest.approx(1 - share)  # the plateau before chance error
    assert table["F"].max() == 1.0 and table["diverged_share"].iloc[0] == pytest.approx(share)


def test_failed_trials_are_excluded_and_counted():
    from hpstudy.analysis.report import left_out_table

    trials = make_trials(n=50, fail_share=0.2, seed=2)
    rows = usable(trials)
    assert (rows.kept["status"] != "failed").all() and np.isfinite(rows.kept[ERR]).all()
    table = left_out_table(rows)
    assert table["failed"].sum() == (trials["status"] == "failed").sum() > 0
    assert list(table.columns) == ["model", "optimizer", "epochs", "failed", "no_finite_error"]
    assert (table["no_finite_error"] == 0).all()


def test_the_issues_minimal_case_failed_rows_leave_the_edf_and_the_good_range():
    frame = pd.DataFrame(
        {
            "model": "vit_p_tiny",
            "optimizer": "adamw",
            "epochs": 10,
            "seed": 0,
            "status": ["ok", "ok", "failed"],
            "top1_err": [10.0, 11.0, np.nan],
            "lr": [1e-3, 1e-2, 1.0],
            "wd": [0.1, 0.05, 0.3],
        }
    )
    with pytest.warns(LeftOutWarning, match="edf_table: left out 1 of 3 rows: 1 failed"):
        table = edf_table(frame, metric="final")
    assert table["n"].tolist() == [2, 2] and table["F"].tolist() == [0.5, 1.0]
    assert (table["n_left_out"] == 1).all() and (table["diverged_share"] == 0).all()
    assert table["dkw_eps"].iloc[0] == pytest.approx(np.sqrt(np.log(40) / 4), rel=1e-12)  # sqrt(ln(2 / 0.05) / 2n)
    with pytest.warns(LeftOutWarning):
        ranges = good_ranges(frame, metric="final")
    # the failed trial's lr (log10 = 0) never wins: only the two trials that count can be best
    assert set(ranges["log10_lr"]) <= {-3.0, -2.0} and ranges.loc["p97.5", "log10_lr"] < 0
    assert ranges["n"].iloc[0] == 2 and ranges["n_left_out"].iloc[0] == 1


def test_a_group_whose_trials_are_all_left_out_is_named():
    frame = pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "optimizer": "adamw",
            "epochs": 10,
            "lr": 1e-3,
            "wd": 0.1,
            "seed": 0,
            "status": ["ok", "ok", "failed", "ok"],
            "top1_err": [10.0, 11.0, np.nan, np.inf],
        }
    )
    for table in (edf_table, peak_table):
        with pytest.warns(
            LeftOutWarning,
            match=rf"^{table.__name__}: left out 2 of 4 rows: 1 failed, 1 without "
            r"a finite final error; model b: all 2 trials left out$",
        ):
            result = table(frame, metric="final")
        assert set(result["model"]) == {"a"}  # b has no row: the warning is where it is accounted for
    with pytest.warns(LeftOutWarning, match=r"rows: 1 failed, 0 without .*; model a: all 1 trial left out$"):
        edf_table(frame.iloc[[0, 2]].assign(model=["b", "a"]), metric="final")


def _metric_frame():
    """Four trials: EMA on in the first two (one diverged), off in the third, failed fourth."""
    return pd.DataFrame(
        {
            "model": "vit_c_tiny",
            "status": ["ok", "diverged", "ok", "failed"],
            "top1_err": [12.0, 90.0, 15.0, np.nan],
            "best_top1_err": [11.0, 90.0, 14.0, np.nan],
            "ema_top1_err": [10.5, 90.0, np.nan, np.nan],
            "best_ema_top1_err": [10.0, 90.0, np.nan, np.nan],
        }
    )


def test_metric_choice_and_the_papers_convention():
    frame = _metric_frame()
    values = {m: usable(frame, m).kept[ERR].tolist() for m in ("final", "best", "ema_best", "paper")}
    assert values == {
        "final": [12.0, 90.0, 15.0],
        "best": [11.0, 90.0, 14.0],
        "ema_best": [10.0, 90.0],
        "paper": [10.0, 90.0, 14.0],
    }  # EMA best where EMA was on, else raw best
    assert usable(frame, "paper").metric == "paper = ema_best for 2 trials with EMA, best for 1 without"
    assert len(usable(frame, "ema_best").left_out) == 2  # the failed trial and the one without EMA
    assert usable(frame.iloc[:2], "paper").metric == "paper = ema_best"
    with pytest.raises(MetricError, match="metric: bad value 'top5'"):
        usable(frame, "top5")
    no_ema = frame.drop(columns="best_ema_top1_err")
    with pytest.raises(MetricError, match="no column 'best_ema_top1_err'"):
        usable(no_ema, "ema_best")
    with pytest.raises(MetricError, match="metric ema_best: no trial has a value"):
        usable(frame.assign(best_ema_top1_err=np.nan), "ema_best")
    # a store written before best_ema_top1_err existed: paper falls back to best, and says why
    old = usable(no_ema, "paper")
    assert old.kept[ERR].tolist() == values["best"]
    assert old.metric == (
        "paper = best (EMA ran but best_ema_top1_err is missing: a store written before that column existed)"
    )
    assert usable(no_ema.drop(columns="ema_top1_err"), "paper").metric == "paper = best (no trial used EMA)"
    assert (
        usable(no_ema.drop(columns=["ema_top1_err", "best_top1_err"]), "paper").metric
        == "paper = final (the table has no best_top1_err) (no trial used EMA)"
    )
    # a study stored partly before that column: a row whose EMA ran but whose EMA best was not recorded
    # has no paper error (its raw best is not pycls's EMA best): left out, and the label says so
    pre_column = {
        "model": "vit_c_tiny",
        "status": "ok",
        "top1_err": 13.0,
        "best_top1_err": 12.5,
        "ema_top1_err": 12.0,
        "best_ema_top1_err": np.nan,
    }
    mixed = pd.concat([frame, pd.DataFrame([pre_column])], ignore_index=True)
    with pytest.warns(
        LeftOutWarning,
        match=r"left out 2 of 5 rows: 1 failed, 1 without a finite paper error "
        r"\(1 of them with EMA stored before best_ema_top1_err existed",
    ):
        rows = usable(mixed, "paper", "mixed")
    assert rows.kept[ERR].tolist() == values["paper"] and rows.left_out.index.tolist() == [3, 4]
    assert rows.metric == (
        "paper = ema_best for 2 trials with EMA, best for 1 without; left out: 1 with EMA "
        "stored before best_ema_top1_err existed: EMA best not recorded"
    )
    assert usable(mixed, "best").kept[ERR].tolist() == [*values["best"], 12.5]  # other metrics keep it


def _flops(trials):
    """A FLOPs column as a study stores it: one value per model, null for failed trials."""
    per_model = trials["model"].map({"vit_p_tiny": 4.1e7, "vit_c_tiny": 4.0e7, "cnn_tiny": 2.0e6})
    return trials.assign(flops=per_model.where(trials["status"] != "failed"))


LEFT_OUT_CLAUSE = re.compile(r"; \d+ left out \(failed / no finite error\)")


def _without_counts(result):
    """A result without what says how much was left out (the one thing allowed to differ)."""
    if isinstance(result, list):  # findings: the scope sentence counts the left out, the others end so
        scope, *tested = result
        return [
            (scope.statistic, scope.n),
            *[dict(f.as_dict(), n_left_out=None, sentence=LEFT_OUT_CLAUSE.sub("", f.sentence)) for f in tested],
        ]
    if isinstance(result, pd.DataFrame):
        return result.drop(columns=[c for c in result.columns if c.startswith("n_left_out")])
    if isinstance(result, dict):
        return {k: v for k, v in result.items() if not k.startswith("n_left_out")}
    return result


def _assert_same(a, b):
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (tuple, list)):
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        np.testing.assert_array_equal(a, b)


def _count(result):
    """How many rows a result says were left out (None if it has no room to say)."""
    if isinstance(result, list):
        return result[0].n_left_out[0]  # the scope finding's
    if isinstance(result, dict):
        return result.get("n_left_out")
    if not isinstance(result, pd.DataFrame) or "n_left_out" not in result:
        return None
    groups = [c for c in ("model", "optimizer", "epochs") if c in result]
    return int(result.drop_duplicates(groups)["n_left_out"].sum() if groups else result["n_left_out"].iloc[0])


def _trained(trials):
    """The trials that did not diverge, with the family and a final train loss, as the store has them."""
    trained = trials[trials["status"] != "diverged"]
    return trained.assign(
        family=trained["model"].map(lambda m: get_spec(m).family), train_loss=trained["top1_err"] / 20
    )


def _drawing(module: str):
    """hpstudy.analysis.<module>, which loads matplotlib: imported by the test that calls it, not at collection."""
    return importlib.import_module(f"hpstudy.analysis.{module}")


TABLE_CALLS = {
    "edf_table": lambda t: edf_table(t, by=["model", "optimizer", "epochs"]),
    "edf_table_matched": lambda t: edf_table(t, reference="matched", match=["optimizer"]),
    "normalized_weights": lambda t: normalized_weights(t, bins=3),
    "good_ranges": lambda t: good_ranges(t[t["model"] == "vit_p_tiny"], n_boot=200),
    "hp_importance": lambda t: hp_importance(t[(t["model"] == "cnn_tiny") & (t["optimizer"] == "adamw")]),
    "optimizer_gap": lambda t: optimizer_gap(t),
    "length_gap": lambda t: length_gap(t),
    "peak_table": lambda t: peak_table(t),
    "ema_gain": lambda t: ema_gain(t),
    "expected_best_table": lambda t: _drawing("figures").expected_best_table(t, n_boot=10),
    "hp_scatter_table": lambda t: _drawing("figures").hp_scatter_table(t),
    "error_vs_epochs_table": lambda t: _drawing("figures").error_vs_epochs_table(t),
    "generalization_table": lambda t: _drawing("figures").generalization_table(_trained(t)),
    "findings": lambda t: findings(t),
    "equalize_counts+edf_table": lambda t: edf_table(_drawing("report_figures").equalize_counts(t, ["model"])),
}
ARRAY_CALLS = {
    "edf_at": lambda a, b: edf_at(a, [20.0, 40.0, 90.0]),
    "step_points": lambda a, b: step_points(a),
    "bootstrap_band": lambda a, b: bootstrap_band(a, n_boot=100),
    "weighted_edf_at": lambda a, b: weighted_edf_at(a, np.ones_like(a), [20.0, 40.0]),
    "expected_best": lambda a, b: expected_best(a, [1, 2, 5], "plugin"),
    "expected_best_band": lambda a, b: expected_best_band(a, [1, 3], n_boot=50),
}


def _dirty_and_clean(**design):
    """Trials with failed rows (null errors) and one ok row with an infinite error, and the same
    table without them."""
    trials = _flops(make_trials(fail_share=0.2, seed=11, ema=True, **design))
    trials.loc[trials.index[3], "best_ema_top1_err"] = np.inf
    clean = trials[(trials["status"] != "failed") & np.isfinite(trials["best_ema_top1_err"])]
    assert 0 < len(clean) < len(trials) - 1
    return trials, clean


@pytest.fixture(scope="module")
def dirty_and_clean():
    """_dirty_and_clean of 3 models x 2 optimizers x 2 lengths, 16 trials each."""
    return _dirty_and_clean(epochs=(5, 10), n=16)


@pytest.fixture(scope="module")
def small_dirty_and_clean():
    """_dirty_and_clean of 2 models x 2 optimizers, 8 trials each: findings' tests and power
    simulations take ~38 s on the large table, ~5 s on this one."""
    return _dirty_and_clean(models=("vit_c_tiny", "cnn_tiny"), epochs=(5,), n=8)


SILENT = {"findings"}  # counts what it left out in its sentences instead of warning


@pytest.mark.parametrize(
    "name",
    # findings runs permutation tests and power simulations (about 10 s on the small table): slow
    # tier; the fast tier pins its left-out counts in tests/analysis/test_findings.py
    [pytest.param(n, marks=pytest.mark.slow) if n in SILENT else n for n in sorted(TABLE_CALLS)],
)
def test_table_functions_leave_out_failed_rows_themselves(name, request):
    dirty, clean = request.getfixturevalue("small_dirty_and_clean" if name in SILENT else "dirty_and_clean")
    caller = {"edf_table_matched": "edf_table", "equalize_counts+edf_table": "edf_table"}.get(name, name)
    with (
        contextlib.nullcontext()
        if name in SILENT
        else pytest.warns(LeftOutWarning, match=rf"^{caller}: left out \d+ of \d+ rows: \d+ failed")
    ):
        result = TABLE_CALLS[name](dirty)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LeftOutWarning)  # nothing to leave out: no warning
        expected = TABLE_CALLS[name](clean)
    _assert_same(_without_counts(result), _without_counts(expected))
    assert _count(expected) in (0, None) and _count(result) != 0


@pytest.mark.parametrize("name", sorted(ARRAY_CALLS))
def test_array_functions_leave_out_non_finite_errors_themselves(name, dirty_and_clean):
    dirty, _ = dirty_and_clean
    a = dirty.loc[dirty["optimizer"] == "adamw", "best_ema_top1_err"].to_numpy()
    b = dirty.loc[dirty["optimizer"] == "sgd", "best_ema_top1_err"].to_numpy()
    with pytest.warns(LeftOutWarning, match=rf"^{name}: left out \d+ of \d+ (values|pairs) .*not finite"):
        result = ARRAY_CALLS[name](a, b)
    expected = ARRAY_CALLS[name](a[np.isfinite(a)], b[np.isfinite(b)])
    _assert_same(_without_counts(result), _without_counts(expected))
    if isinstance(result, dict):
        assert result["n_left_out"] == (~np.isfinite(a)).sum() + (~np.isfinite(b)).sum() > 0


@pytest.mark.slow
def test_report_tables_leave_out_failed_rows_themselves(dirty_and_clean, small_dirty_and_clean):
    from hpstudy.analysis.report import ranges_and_importance, summary_table

    dirty, clean = dirty_and_clean
    stored_counts = ["ok", "diverged", "failed"]  # the summary counts what is stored, by status
    for table, warns in (
        (lambda t: summary_table(t).drop(columns=stored_counts), True),
        (lambda t: ranges_and_importance(t)[0], True),
    ):
        with pytest.warns(LeftOutWarning) if warns else contextlib.nullcontext():
            result = table(dirty)
        _assert_same(_without_counts(result), _without_counts(table(clean)))
    # the report's tables of tests: findings count what they left out in their rows instead of warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", LeftOutWarning)
        pairs, clean_pairs = (findings_table(findings(t), "edf_pair") for t in small_dirty_and_clean)
    assert len(pairs) > 0 and pairs["n_left_out"].sum() > 0 and (clean_pairs["n_left_out"] == 0).all()
    _assert_same(_without_counts(pairs), _without_counts(clean_pairs))


def test_dkw_epsilon_and_planner():
    assert dkw_epsilon(100, 0.05) == pytest.approx(np.sqrt(np.log(40) / 200))
    n = trials_for_dkw(0.1, 0.05)
    assert dkw_epsilon(n, 0.05) <= 0.1 < dkw_epsilon(n - 1, 0.05)
    # DKW band coverage in simulation is at least 95%
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 1, 201)
    cover = np.mean([np.abs(edf_at(rng.random(50), grid) - grid).max() <= dkw_epsilon(50) for _ in range(400)])
    assert cover >= 0.95


def test_trials_for_delta_plans_for_80_percent_power():
    """The Δ-EDF planner (Noether's normal approximation to the Mann-Whitney test): the fewest trials per
    model whose power at the nearer-probability reaches 80%; symmetric about 1/2."""
    n = trials_for_delta(0.75)
    assert delta_power(0.75, (n, n)) >= 0.8 > delta_power(0.75, (n - 1, n - 1))
    # half the power needs fewer trials; a probability nearer 1/2 more; the other direction as many
    assert trials_for_delta(0.75, power=0.5) < n < trials_for_delta(0.7) and trials_for_delta(0.25) == n
    assert delta_power(0.5, (20, 20)) == pytest.approx(0.025, rel=1e-3)  # no effect: one tail of a two-sided test
    assert delta_power(1.0, (20, 20)) > 0.999 and delta_power(0.9, (20, 20)) == delta_power(0.1, (20, 20))
    for bad in (0.5, 1.5, -0.1):
        with pytest.raises(StatsError, match=rf"^trials_for_delta: effect: bad value {bad}; allowed: 0 <= effect <= 1"):
            trials_for_delta(bad)


def _brute_force(v, k, replace):
    draws = itertools.product(v, repeat=k) if replace else itertools.combinations(v, k)
    return np.mean([min(d) for d in draws])


def test_expected_best_estimators_match_enumeration():
    v = np.array([7.0, 3.0, 9.5, 3.0, 5.0, 1.5])
    ks = range(1, 7)
    plugin = expected_best(v, ks, "plugin")
    unbiased = expected_best(v, ks, "unbiased")
    for k, p, u in zip(ks, plugin, unbiased):
        assert p == pytest.approx(_brute_force(v, k, replace=True))
        assert u == pytest.approx(_brute_force(v, k, replace=False))
    assert unbiased[0] == pytest.approx(v.mean()) and unbiased[-1] == pytest.approx(v.min())
    for estimator in ("unbiased", "plugin"):  # neither extrapolates beyond the n trials run
        with pytest.raises(StatsError, match=r"ks: bad value 7..7; k must be in \[1, 6\] for n = 6 trials"):
            expected_best(v, [7], estimator)
    with pytest.warns(LeftOutWarning), pytest.raises(StatsError, match="n = 5 trials"):
        expected_best(np.append(v[:5], np.nan), [6], "plugin")


@pytest.mark.parametrize(
    "errors, ks, estimator, message",
    [
        ([1.0, 2.0], [], "unbiased", r"^expected_best: ks: bad value \[\] \(no k\); k must be in \[1, 2\] for n = 2"),
        ([], [1], "unbiased", r"^expected_best: errors: no finite error \(n = 0 trials\); allowed: at least one trial"),
        ([], [], "plugin", r"^expected_best: errors: no finite error"),
        ([1.0, 2.0], [0, 2], "plugin", r"^expected_best: ks: bad value 0..2; k must be in \[1, 2\]"),
        ([1.0, 2.0], [1], "mean", r"^expected_best: estimator: bad value 'mean'; allowed: plugin, unbiased$"),
    ],
    ids=["no k", "no error", "neither", "k below 1", "unknown estimator"],
)
def test_expected_best_names_what_it_cannot_estimate(errors, ks, estimator, message):
    with pytest.raises(StatsError, match=message) as caught:
        expected_best(np.array(errors), ks, estimator)
    assert isinstance(caught.value, HpstudyError)  # a user's mistake: exit code 2 at the command line


def test_unbiased_estimator_is_unbiased_in_simulation():
    rng = np.random.default_rng(4)
    k, n, reps = 4, 12, 4000
    # the best of k iid Exp(1) draws has expectation 1/k
    unbiased = np.mean([expected_best(rng.exponential(1.0, n), [k], "unbiased")[0] for _ in range(reps)])
    plugin = np.mean([expected_best(rng.exponential(1.0, n), [k], "plugin")[0] for _ in range(reps)])
    stderr = 1.0 / k / np.sqrt(reps)
    assert abs(unbiased - 1 / k) < 4 * stderr
    assert plugin - 1 / k > 4 * stderr  # drawing with replacement overstates the best error


def test_normalized_weights_sum_to_one_and_equalise_bins():
    flops = np.array([1e6] * 10 + [1e7] * 3 + [1e8] * 1)
    frame = pd.DataFrame({"status": "ok", "top1_err": np.arange(14, dtype=float), "flops": flops})
    weights = normalized_weights(frame, metric="final")
    w = weights["weight"].to_numpy()
    assert w.sum() == pytest.approx(1.0) and (weights["metric"] == "final").all()
    for value in (1e6, 1e7, 1e8):
        assert w[flops == value].sum() == pytest.approx(1 / 3)
    assert effective_sample_size(w) == pytest.approx(1 / (w**2).sum())
    assert 1 < effective_sample_size(w) < len(w)
    errors = weights["error"].to_numpy()
    assert weighted_edf_at(errors, w, [13.0])[0] == pytest.approx(1.0)
    assert weighted_edf_at(errors, w, [9.0])[0] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="covariate 'flops' must be finite and > 0"):
        normalized_weights(frame.assign(flops=0.0), metric="final")


def test_optimizer_and_length_gaps_on_a_hand_made_table():
    frame = pd.DataFrame(
        {
            "model": ["m"] * 8,
            "status": ["ok"] * 6 + ["diverged"] * 2,
            "optimizer": ["adamw", "adamw", "sgd", "sgd", "adamw", "adamw", "adamw", "adamw"],
            "epochs": [50, 50, 50, 50, 100, 200, 400, 400],
            "top1_err": [20.0, 22.0, 25.0, 21.5, 18.0, 17.0, 90.0, 90.0],
            "lr": 1e-3,
            "wd": 0.1,
            "seed": 0,
        }
    )
    gap = optimizer_gap(frame, metric="final")
    assert len(gap) == 1 and gap.loc[0, "gap"] == pytest.approx(1.5)
    test = best_contrast([np.array([25.0, 21.5]), np.array([20.0, 22.0])], (1.0, -1.0))
    assert gap.loc[0, "gap_p"] == test.p and test.floor > 0.05  # 2 vs 2: no p below alpha
    assert test.ci is None and not {"gap_lo", "gap_hi", "gap_level"} & set(gap.columns)  # the best rule: no interval
    assert gap.loc[0, "best_sgd"] == 21.5 and gap.loc[0, "best_adamw"] == 20.0
    assert gap.loc[0, "gap_at_k"] == pytest.approx(min(25, 21.5) - min(20, 22))  # k = 2: all trials
    lengths = length_gap(frame[frame["optimizer"] == "adamw"], metric="final").set_index("epochs")
    # every 400-epoch run diverged: the reference is the best shorter schedule (200 epochs), flagged
    assert lengths["reference_fallback"].all() and (lengths["reference_epochs"] == 200).all()
    assert lengths.loc[50, "gap"] == pytest.approx(3.0) and lengths.loc[200, "gap"] == 0.0
    assert lengths.loc[400, "diverged"]


def test_peak_table_reports_noise_floor_from_seeds():
    frame = pd.DataFrame(
        {
            "model": "m",
            "optimizer": "adamw",
            "epochs": 10,
            "lr": [1e-3, 1e-3, 2e-3],
            "wd": 0.1,
            "seed": [0, 1, 0],
            "top1_err": [10.0, 12.0, 15.0],
            "status": "ok",
        }
    )
    peak = peak_table(frame, metric="final").iloc[0]
    assert peak["best_err"] == 10.0 and peak["n"] == 3 and peak["seeds"] == 2
    assert peak["noise_floor"] == pytest.approx(np.std([10.0, 12.0], ddof=1))


def test_summary_table_states_the_design_and_gives_no_edf_band_for_seeds():
    """One lr/wd over seeds is not an lr/wd EDF: its DKW and bootstrap half-widths are left empty."""
    from hpstudy.analysis.report import summary_table

    frame = pd.DataFrame(
        {
            "model": "m",
            "optimizer": ["adamw"] * 3 + ["sgd"] * 3,
            "epochs": 10,
            "lr": [1e-3] * 3 + [1e-3, 2e-3, 3e-3],
            "wd": 0.1,
            "seed": [0, 1, 2, 0, 0, 0],
            "status": "ok",
            "top1_err": [10.0, 12.0, 14.0, 20.0, 21.0, 26.0],
        }
    )
    table = summary_table(frame, metric="final").set_index("optimizer")
    assert table["design"].to_dict() == {"adamw": "seeds", "sgd": "samples"}
    assert table.loc["adamw", ["n", "best", "median", "mean", "sd"]].tolist() == [3, 10.0, 12.0, 12.0, 2.0]
    assert table.loc["sgd", "mean"] == pytest.approx(67 / 3) and table.loc["sgd", "sd"] == pytest.approx(
        np.sqrt(31 / 3)
    )
    assert table.loc["adamw", ["dkw_eps_95", "bootstrap_eps_95"]].isna().all()
    assert table.loc["sgd", "dkw_eps_95"] == pytest.approx(np.sqrt(np.log(40) / 6), rel=1e-12)  # n = 3
    assert table.loc["sgd", "bootstrap_eps_95"] > 0


@pytest.mark.slow  # bootstraps good ranges and fits importance over a 400-trial sweep (~2 s)
def test_good_ranges_find_the_bowl_and_importance_finds_lr():
    trials = make_trials(models=("vit_p_tiny",), optimizers=("adamw",), n=300, diverge_share=0, seed=5)
    ranges = good_ranges(trials)
    assert ranges["metric"].iloc[0] == "paper = best (no trial used EMA)"
    assert ranges.loc["p2.5", "log10_lr"] < -3 < ranges.loc["p97.5", "log10_lr"]
    assert abs(ranges.loc["p50", "log10_lr"] + 3) < 0.3
    importance = hp_importance(trials)
    assert importance["lr"] > importance["wd"]  # the bowl is 4x steeper in lr


@pytest.mark.slow  # fits the fANOVA forest at 2,000 trials for three seeds, and at 400 at full depth (~25 s)
def test_importance_recovers_the_bowls_variance_split_and_the_bounded_forest_agrees_with_the_full_one(monkeypatch):
    """err = 8 (log10 lr + 3)^2 + 2 (log10 wd + 1)^2 + noise with log10 lr ~ U(-4, -2) and log10 wd ~ U(-2, 0):
    (x + 3)^2 for x + 3 ~ U(-1, 1) has variance 1/5 - 1/9 = 4/45, so lr's share of the explained variance is
    64 / (64 + 4) = 0.941, derived here, not read off a run. The bounded forest (IMPORTANCE_DEPTH) finds it at
    2,000 trials, and gives what Optuna's full-depth forest gives on the same trials."""
    for seed in range(3):
        trials = make_trials(models=("vit_p_tiny",), optimizers=("adamw",), n=2000, diverge_share=0, seed=seed)
        importance = hp_importance(trials, metric="final", seed=seed)
        assert abs(importance["lr"] - 64 / 68) < 0.02 and abs(importance["lr"] + importance["wd"] - 1) < 1e-9
    trials = make_trials(models=("vit_p_tiny",), optimizers=("adamw",), n=400, diverge_share=0, seed=0)
    bounded = hp_importance(trials, metric="final")["lr"]
    monkeypatch.setattr(stats, "IMPORTANCE_DEPTH", 64)  # Optuna's default
    assert abs(bounded - hp_importance(trials, metric="final")["lr"]) < 0.01


def _law_by_value(values, probs):
    """{value: probability} with tied values merged."""
    out = {}
    for v, p in zip(values.tolist(), probs.tolist()):
        out[v] = out.get(v, 0.0) + p
    return out


@pytest.mark.parametrize("sample", [[5.0, 1.0, 3.0, 2.0, 8.0], [3.0, 1.0, 3.0, 1.0, 2.0], [4.0, 4.0, 4.0], [7.0]])
def test_min_law_matches_enumerating_every_resample(sample):
    """The minimum of each of the n^n equally likely resamples, counted (ties merged by value)."""
    values, probs = min_law(np.array(sample))
    assert values.tolist() == sorted(sample) and probs.sum() == pytest.approx(1.0, abs=1e-15)
    minima = [min(draw) for draw in itertools.product(sample, repeat=len(sample))]
    expected = {v: minima.count(v) / len(minima) for v in set(minima)}
    law = _law_by_value(values, probs)
    assert law.keys() == expected.keys() | set(sample)
    for v, p in law.items():
        assert p == pytest.approx(expected.get(v, 0.0), abs=1e-15)


def test_min_law_keeps_the_tail_atoms_that_carry_mass():
    """n = 200: P(min* >= v_(i)) = ((201 - i) / 200)^200; only the TAIL + 1 smallest errors are kept,
    the last carrying what is left (less than e^-TAIL)."""
    errors = np.random.default_rng(7).normal(20.0, 2.0, 200)
    values, probs = min_law(errors)
    assert len(values) == len(probs) == TAIL + 1
    assert values.tolist() == np.sort(errors)[: TAIL + 1].tolist() and probs.sum() == pytest.approx(1.0, abs=1e-15)
    i = np.arange(1, TAIL + 1)
    assert probs[:-1] == pytest.approx(((201 - i) / 200) ** 200 - ((200 - i) / 200) ** 200, rel=1e-9)
    assert probs[-1] == pytest.approx((160 / 200) ** 200, rel=1e-9) and probs[-1] < np.exp(-TAIL)


def test_importance_leaves_optuna_logging_as_it_was():
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    try:
        hp_importance(make_trials(models=("cnn_tiny",), optimizers=("adamw",), n=12))
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(before)


@pytest.mark.parametrize("n,size", [(6, 1), (63, 15), (64, 16), (4, 1), (3, 1)])
def test_good_ranges_sample_size_is_pycls(n, size):
    """pycls get_filters: max(1, int(0.25 n)) per sample (round() would give 2 at n = 6, 16 at 63)."""
    trials = make_trials(models=("cnn_tiny",), optimizers=("adamw",), n=n, diverge_share=0, seed=n)
    ranges = good_ranges(trials, n_boot=500)
    assert ranges["sample_size"].iloc[0] == size and ranges["n"].iloc[0] == n
    if size == 1:  # each sample's best is one uniformly drawn trial: the range spans nearly all lrs
        lrs = np.log10(trials["lr"])
        assert ranges.loc["p2.5", "log10_lr"] <= np.quantile(lrs, 0.1)
        assert ranges.loc["p97.5", "log10_lr"] >= np.quantile(lrs, 0.9)


def test_ema_gain_per_model_is_pyclss():
    frame = _metric_frame()
    with pytest.warns(LeftOutWarning, match="ema_gain: left out 2 of 4 rows: 1 failed, 1 without"):
        gain = ema_gain(frame).iloc[0]
    # pycls: max(0, min raw - min EMA) per trial; the diverged trial gains 0 (both at chance)
    assert gain["n"] == 2 and gain["gain_mean"] == pytest.approx(0.5) and gain["gain_median"] == 0.5
    assert gain["best"] == 11.0 and gain["best_ema"] == 10.0 and gain["gain_of_best"] == 1.0
    assert gain["n_left_out"] == 2
    assert ema_gain(frame.drop(columns="best_ema_top1_err")).empty


def _backticked_names(path):
    """Dotted hpstudy names in backticks in a module's docstrings (module, class and function)."""
    tree = ast.parse(open(path).read())
    docs = [
        ast.get_docstring(node) or ""
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
    ]
    return set(re.findall(r"`(hpstudy\.(?:analysis|trainers|study)\.[A-Za-z_][\w.]*)`", "\n".join(docs)))


def test_analysis_docstrings_name_things_that_exist():
    names = set()
    for module in sorted(os.listdir(os.path.join(REPO, "analysis"))):
        if module.endswith(".py"):
            names |= _backticked_names(os.path.join(REPO, "analysis", module))
    assert "hpstudy.analysis.metric.usable" in names
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        for attr in parts[cut:]:
            assert hasattr(obj, attr), f"docstring names {name}, which does not exist"
            obj = getattr(obj, attr)
