import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.edf import (dkw_epsilon, edf_at, edf_table, effective_sample_size, normalized_weights,
                          step_points, weighted_edf_at)
from analysis.gaps import length_gap, optimizer_gap, peak_table
from analysis.report import split_failed
from analysis.stats import (ad_compare, area_between, effect_sizes, expected_best, good_ranges,
                            hp_importance, ks_compare, min_detectable_d, trials_for_dkw, trials_for_ks)
from tests.helpers import make_trials


def test_edf_is_the_exact_right_continuous_step():
    errors = np.array([3.0, 1.0, 2.0, 2.0, 5.0])
    assert edf_at(errors, [0.5, 1.0, 1.5, 2.0, 4.99, 5.0, 9.0]).tolist() == [0, .2, .2, .6, .8, 1, 1]
    x, f = step_points(errors)
    assert x.tolist() == [1, 2, 3, 5] and f.tolist() == [.2, .6, .8, 1.0]


def test_edf_table_per_group_and_delta_references():
    frame = pd.DataFrame({"model": ["a"] * 4 + ["b"] * 3, "optimizer": "adamw", "status": "ok",
                          "top1_err": [4.0, 2.0, 3.0, 2.0, 7.0, 5.0, 6.0]})
    table = edf_table(frame, by=["model"])
    a = table[table["model"] == "a"]
    assert a["error"].tolist() == [2, 2, 3, 4] and a["F"].tolist() == [.5, .5, .75, 1.0]
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
    assert below_chance == pytest.approx(1 - share)     # the plateau before chance error
    assert table["F"].max() == 1.0 and table["diverged_share"].iloc[0] == pytest.approx(share)


def test_failed_trials_are_excluded_and_counted():
    trials = make_trials(n=50, fail_share=0.2, seed=2)
    usable, failed = split_failed(trials)
    assert (usable["status"] != "failed").all()
    assert failed["failed"].sum() == (trials["status"] == "failed").sum() > 0
    assert set(failed.columns) == {"model", "optimizer", "epochs", "failed"}


def test_dkw_epsilon_and_planner():
    assert dkw_epsilon(100, 0.05) == pytest.approx(np.sqrt(np.log(40) / 200))
    n = trials_for_dkw(0.1, 0.05)
    assert dkw_epsilon(n, 0.05) <= 0.1 < dkw_epsilon(n - 1, 0.05)
    # DKW band coverage in simulation is at least 95%
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 1, 201)
    cover = np.mean([np.abs(edf_at(rng.random(50), grid) - grid).max() <= dkw_epsilon(50) for _ in range(400)])
    assert cover >= 0.95


def test_ks_and_ad_agree_with_scipy():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 40), rng.normal(0.8, 1, 50)
    res = ks_compare(a, b)
    ref = stats.ks_2samp(a, b)
    assert res["ks_d"] == pytest.approx(ref.statistic) and res["ks_p"] == pytest.approx(ref.pvalue)
    assert res["ks_p_a_better"] == pytest.approx(stats.ks_2samp(a, b, alternative="greater").pvalue)
    assert res["ks_p_a_better"] < 0.05 < ks_compare(b, a)["ks_p_a_better"]  # a has lower errors
    ad = ad_compare([a, b], n_resamples=499)
    assert ad["ad_stat"] == pytest.approx(stats.anderson_ksamp([a, b], variant="midrank").statistic)
    assert ad["ad_p"] < 0.05
    same = ad_compare([rng.normal(0, 1, 40), rng.normal(0, 1, 40)], n_resamples=499)
    assert same["ad_p"] > 0.05


def test_min_detectable_d_is_the_ks_critical_value():
    for n, m in ((30, 30), (64, 100)):
        d = min_detectable_d(n, m, 0.05)
        # the asymptotic Kolmogorov distribution puts 5% above c(alpha)
        assert stats.kstwobign.sf(d * np.sqrt(n * m / (n + m))) == pytest.approx(0.05, rel=1e-4)
    n = trials_for_ks(0.3, 0.05)
    assert min_detectable_d(n, n) <= 0.3 < min_detectable_d(n - 1, n - 1)


def test_effect_sizes():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0])
    assert area_between(a, b) == pytest.approx(1.0)  # shifted by one point everywhere
    eff = effect_sizes(a, b, n_boot=200)
    assert eff["within1_a"] == pytest.approx(2 / 3) and eff["within1_b"] == pytest.approx(1 / 3)
    assert eff["within4_b"] == 1.0 and eff["area_lo"] <= 1.0 <= eff["area_hi"]


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
    with pytest.raises(ValueError, match=r"k must be in \[1, 6\]"):
        expected_best(v, [7], "unbiased")


def test_unbiased_estimator_is_unbiased_in_simulation():
    rng = np.random.default_rng(4)
    k, n, reps = 4, 12, 4000
    # the best of k iid Exp(1) draws has expectation 1/k
    unbiased = np.mean([expected_best(rng.exponential(1.0, n), [k], "unbiased")[0] for _ in range(reps)])
    plugin = np.mean([expected_best(rng.exponential(1.0, n), [k], "plugin")[0] for _ in range(reps)])
    stderr = 1.0 / k / np.sqrt(reps)
    assert abs(unbiased - 1 / k) < 4 * stderr
    assert plugin - 1 / k > 4 * stderr   # drawing with replacement overstates the best error


def test_normalized_weights_sum_to_one_and_equalise_bins():
    flops = np.array([1e6] * 10 + [1e7] * 3 + [1e8] * 1)
    w = normalized_weights(flops, bins=3)
    assert w.sum() == pytest.approx(1.0)
    for value in (1e6, 1e7, 1e8):
        assert w[flops == value].sum() == pytest.approx(1 / 3)
    assert effective_sample_size(w) == pytest.approx(1 / (w ** 2).sum())
    assert 1 < effective_sample_size(w) < len(w)
    errors = np.arange(14, dtype=float)
    assert weighted_edf_at(errors, w, [13.0])[0] == pytest.approx(1.0)
    assert weighted_edf_at(errors, w, [9.0])[0] == pytest.approx(1 / 3)


def test_optimizer_and_length_gaps_on_a_hand_made_table():
    frame = pd.DataFrame({
        "model": ["m"] * 8, "status": ["ok"] * 6 + ["diverged"] * 2,
        "optimizer": ["adamw", "adamw", "sgd", "sgd", "adamw", "adamw", "adamw", "adamw"],
        "epochs": [50, 50, 50, 50, 100, 200, 400, 400],
        "top1_err": [20.0, 22.0, 25.0, 21.5, 18.0, 17.0, 90.0, 90.0],
        "lr": 1e-3, "wd": 0.1, "seed": 0})
    gap = optimizer_gap(frame, n_boot=200)
    assert len(gap) == 1 and gap.loc[0, "gap"] == pytest.approx(1.5)
    assert gap.loc[0, "best_sgd"] == 21.5 and gap.loc[0, "best_adamw"] == 20.0
    assert gap.loc[0, "gap_at_k"] == pytest.approx(min(25, 21.5) - min(20, 22))  # k = 2: all trials
    lengths = length_gap(frame[frame["optimizer"] == "adamw"]).set_index("epochs")
    # every 400-epoch run diverged: the reference is the best shorter schedule (200 epochs), flagged
    assert lengths["reference_fallback"].all() and (lengths["reference_epochs"] == 200).all()
    assert lengths.loc[50, "gap"] == pytest.approx(3.0) and lengths.loc[200, "gap"] == 0.0
    assert lengths.loc[400, "diverged"]


def test_peak_table_reports_noise_floor_from_seeds():
    frame = pd.DataFrame({"model": "m", "optimizer": "adamw", "epochs": 10, "lr": [1e-3, 1e-3, 2e-3],
                          "wd": 0.1, "seed": [0, 1, 0], "top1_err": [10.0, 12.0, 15.0], "status": "ok"})
    peak = peak_table(frame).iloc[0]
    assert peak["best_err"] == 10.0 and peak["n"] == 3 and peak["seeds"] == 2
    assert peak["noise_floor"] == pytest.approx(np.std([10.0, 12.0], ddof=1))


def test_good_ranges_find_the_bowl_and_importance_finds_lr():
    trials = make_trials(models=("vit_p_tiny",), optimizers=("adamw",), n=300, diverge_share=0, seed=5)
    ranges = good_ranges(trials)
    assert ranges.loc["p2.5", "log10_lr"] < -3 < ranges.loc["p97.5", "log10_lr"]
    assert abs(ranges.loc["p50", "log10_lr"] + 3) < 0.3
    importance = hp_importance(trials)
    assert importance["lr"] > importance["wd"]   # the bowl is 4x steeper in lr


def test_bootstrap_min_matches_resampling():
    from analysis.gaps import bootstrap_min
    v = np.array([5.0, 1.0, 3.0, 2.0, 8.0])
    rng = np.random.default_rng(0)
    exact = bootstrap_min(v, rng, 200_000)
    resampled = v[rng.integers(0, 5, size=(200_000, 5))].min(axis=1)
    for value in v:
        assert np.mean(exact == value) == pytest.approx(np.mean(resampled == value), abs=0.005)


def test_importance_leaves_optuna_logging_as_it_was():
    import optuna
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.DEBUG)
    try:
        hp_importance(make_trials(models=("cnn_tiny",), optimizers=("adamw",), n=12))
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(before)
