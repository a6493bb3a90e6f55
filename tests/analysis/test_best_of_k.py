"""The best-of-k win probability (hpstudy.analysis.stats.best_of_k_win, Sivaprasad et al. 2020's question in
closed form): it equals enumerating every pair of k-subsets (without replacement, Tang et al.'s sampling) or of
k-tuples (with replacement, Dodge et al.'s), is rliable's probability of improvement at k = 1 and compares the
observed bests at k = n; the table holds each pair of its cell only, and the report draws it."""

import itertools
import math

import numpy as np
import pytest
import scipy
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis.stats import (
    BUDGET_DENSE,
    BUDGET_POINTS,
    StatsError,
    best_of_k_win,
    budget_grid,
    expected_best,
)
from tests.helpers import make_trials

# small samples as users have them: errors on a grid of whole images (many ties), some at chance (diverged)
small = st.lists(st.one_of(st.integers(0, 6).map(lambda k: 100 * k / 360), st.just(90.0)), min_size=1, max_size=4).map(
    np.array
)


def enumerated(a: np.ndarray, b: np.ndarray, k: int, replace: bool) -> float:
    """P(min of k of a < min of k of b) + P(tie) / 2 by listing every equally likely pair of draws."""
    draws = itertools.product if replace else itertools.combinations
    best_a = [min(a[list(i)]) for i in (draws(range(len(a)), repeat=k) if replace else draws(range(len(a)), k))]
    best_b = [min(b[list(i)]) for i in (draws(range(len(b)), repeat=k) if replace else draws(range(len(b)), k))]
    wins = sum((x < y) + (x == y) / 2 for x in best_a for y in best_b)
    return wins / (len(best_a) * len(best_b))


@settings(max_examples=150, deadline=None)
@given(small, small, st.sampled_from(["unbiased", "plugin"]))
def test_the_closed_form_equals_every_draw_listed_with_and_without_replacement(a, b, estimator):
    ks = range(1, min(len(a), len(b)) + 1)
    got = best_of_k_win(a, b, ks, estimator)
    want = [enumerated(a, b, k, replace=estimator == "plugin") for k in ks]
    np.testing.assert_allclose(got, want, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(small, small)
def test_k_1_is_rliables_probability_of_improvement_and_the_swapped_pair_is_its_complement(a, b):
    ks = np.arange(1, min(len(a), len(b)) + 1)
    for estimator in ("unbiased", "plugin"):
        p, swapped = best_of_k_win(a, b, ks, estimator), best_of_k_win(b, a, ks, estimator)
        np.testing.assert_allclose(p + swapped, 1.0, atol=1e-12)  # ties counted half on both sides
        u = scipy.stats.mannwhitneyu(-a, -b, alternative="greater").statistic  # rliable: scores, higher better
        assert p[0] == pytest.approx(u / (len(a) * len(b)), abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(small, small)
def test_at_k_n_without_replacement_it_compares_the_observed_bests(a, b):
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    want = 1.0 if a.min() < b.min() else 0.0 if a.min() > b.min() else 0.5
    assert best_of_k_win(a, b, [n])[0] == pytest.approx(want, abs=1e-12)


def test_on_continuous_errors_k_1_counts_the_pairs_a_wins_and_a_best_of_k_follows_the_order_statistics():
    """Two normal samples (no ties): at k = 1 the share of (a, b) pairs a wins, at k = n whether a's best is
    lower; against a constant b, the chance that a's best of k is below it is C(#a above, k) / C(n, k) away
    from 1, the weights of the expected best."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 1, 40), rng.normal(10.5, 1, 40)
    p = best_of_k_win(a, b, range(1, 41))
    assert p[0] == pytest.approx(np.mean(a[:, None] < b[None, :]), abs=1e-12)  # continuous: no ties
    assert p[-1] == float(a.min() < b.min()) and p[0] > 0.5
    # a one-value b: P(a's best of k < v) = 1 - C(#a >= v, k) / C(n, k), the expected best's weights at work
    v = np.sort(a)[10]
    above = int((a > v).sum())
    for k in (1, 5, 20):
        assert best_of_k_win(a, np.full(40, v), [k])[0] == pytest.approx(
            1
            - math.comb(above, k) / math.comb(40, k)
            - 0.5 * (math.comb(above + 1, k) - math.comb(above, k)) / math.comb(40, k)
        )
    assert expected_best(a, [40])[0] == a.min()


@pytest.mark.parametrize(
    "ks, estimator, message",
    [
        ([4], "unbiased", "best_of_k_win: ks: bad value 4..4; k must be in [1, 3] for n = 3 trials"),
        ([0, 1], "plugin", "best_of_k_win: ks: bad value 0..1; k must be in [1, 3]"),
        ([], "unbiased", "best_of_k_win: ks: bad value [] (no k)"),
        ([1], "mean", "best_of_k_win: estimator: bad value 'mean'; allowed: plugin, unbiased"),
    ],
)
def test_a_budget_beyond_the_smaller_sample_or_an_unknown_estimator_is_one_line_naming_it(ks, estimator, message):
    with pytest.raises(StatsError) as info:
        best_of_k_win(np.arange(3.0), np.arange(5.0), ks, estimator)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_the_table_holds_each_pair_within_its_cell_and_the_figure_one_comparison():
    from hpstudy.analysis.figures import best_of_k_figure, best_of_k_table

    trials = make_trials(["vit_p_tiny", "vit_c_tiny", "cnn_tiny"], ["adamw", "sgd"], n=6, epochs=(6, 16), seed=1)
    table = best_of_k_table(trials, "final")
    counts = trials[trials["status"] != "failed"].groupby(["model", "optimizer", "epochs"]).size()
    for (kind, model, opt, epochs, a, b), curve in table.groupby(
        ["compared", "model", "optimizer", "epochs", "a", "b"], dropna=False
    ):
        cell = {"model": model, "optimizer": opt, "epochs": epochs}
        field = {"models": "model", "optimizers": "optimizer", "lengths": "epochs"}[kind]
        assert cell[field] is None or (isinstance(cell[field], float) and math.isnan(cell[field]))
        group = lambda level: trials[  # noqa: E731
            (trials["status"] != "failed")
            & np.logical_and.reduce([trials[f] == (level if f == field else cell[f]) for f in cell])
        ]["top1_err"].to_numpy(float)
        ea, eb = group(a), group(b)
        assert (curve["n_a"].iloc[0], curve["n_b"].iloc[0]) == (len(ea), len(eb))
        assert curve["k"].tolist() == list(range(1, min(len(ea), len(eb)) + 1))
        np.testing.assert_allclose(curve["p_a_wins"], best_of_k_win(ea, eb, curve["k"]))
    assert set(table["compared"]) == {"models", "optimizers", "lengths"} and counts.min() >= 1
    with pytest.raises(ValueError, match="3 comparisons .*allowed: one per figure"):
        best_of_k_figure(table)
    for compared in ("models", "optimizers", "lengths"):  # no two lines of a panel look alike in grayscale
        for ax in best_of_k_figure(best_of_k_table(trials, "final", compared)).fig.axes:
            lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
            assert len(lines) == len({(line.get_linestyle(), line.get_marker()) for line in lines}) > 0
    plot = best_of_k_figure(best_of_k_table(trials, "final", "optimizers"))
    assert [ax.get_title() for ax in plot.fig.axes] == ["6 epochs", "16 epochs"]
    assert "ViT-P tiny: AdamW vs SGD" in [t.get_text() for t in plot.fig.legends[0].get_texts()]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200_000))
def test_the_budget_grid_is_every_k_up_to_64_then_at_most_100_more_up_to_n(n):
    grid = budget_grid(n)
    assert grid.dtype.kind == "i" and grid[0] == 1 and grid[-1] == n and (np.diff(grid) > 0).all()
    dense = min(n, BUDGET_DENSE)
    assert grid[:dense].tolist() == list(range(1, dense + 1))
    assert len(grid) <= BUDGET_DENSE + BUDGET_POINTS


@pytest.mark.parametrize("n", [BUDGET_DENSE - 1, BUDGET_DENSE, BUDGET_DENSE + 1, 300])
def test_curves_over_budgets_are_the_every_k_curves_read_at_the_grid(n):
    """expected_best_table and best_of_k_table hold every k of a cell up to 64 trials and the grid's ks beyond,
    each value what the curve over every k = 1..n gives at that k."""
    from hpstudy.analysis.figures import best_of_k_table, expected_best_table

    trials = make_trials(models=("vit_p_tiny", "vit_c_tiny"), optimizers=("adamw",), n=n, diverge_share=0.2)
    trials["wall_s"] = 10.0
    curves = expected_best_table(trials)
    for (model,), cell in curves.groupby(["model"]):
        errors = trials.loc[(trials["model"] == model), "best_top1_err"].to_numpy(float)
        assert cell["k"].tolist() == budget_grid(n).tolist()
        every_k = expected_best(errors, np.arange(1, n + 1))
        np.testing.assert_allclose(cell["expected_best"], every_k[cell["k"] - 1], rtol=1e-12)
    wins = best_of_k_table(trials, compared="models")
    assert wins["k"].tolist() == budget_grid(n).tolist()
    a, b = (trials.loc[trials["model"] == m, "best_top1_err"].to_numpy(float) for m in wins[["a", "b"]].iloc[0])
    np.testing.assert_allclose(wins["p_a_wins"], best_of_k_win(a, b, np.arange(1, n + 1))[wins["k"] - 1], rtol=1e-12)
