"""The effect sizes (hpstudy.analysis.effects): the probability of improvement and the IQM equal their peers'
formulas (rliable's, on scipy) on every sample, the vectorised bootstrap equals resampling one by one, the table
compares every pair within its cell only, and the page shows the table's numbers."""

import math

import numpy as np
import pandas as pd
import pytest
import scipy
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis import effects
from hpstudy.analysis.effects import effects_table, iqm, pair_effects, probability_of_improvement
from hpstudy.analysis.report_page import effects_rows
from tests.helpers import make_trials

# errors as users have them: continuous, on a grid of whole images (ties), with diverged trials at chance
errors = st.lists(
    st.one_of(
        st.floats(0, 100, allow_nan=False, width=32),
        st.integers(0, 360).map(lambda k: 100 * k / 360),
        st.just(90.0),
    ),
    min_size=1,
    max_size=40,
).map(np.array)


def rliable_probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable's formula (scores, higher better): Mann-Whitney U of x over y, over n_x n_y."""
    u = scipy.stats.mannwhitneyu(scores_x, scores_y, alternative="greater").statistic
    return u / (len(scores_x) * len(scores_y))


@settings(max_examples=200)
@given(errors, errors)
def test_the_probability_of_improvement_is_rliables_on_scores_and_its_complement_is_the_swapped_pair(a, b):
    p = probability_of_improvement(a, b)
    assert p == pytest.approx(rliable_probability_of_improvement(-a, -b), abs=1e-12)  # lower error is better
    assert p + probability_of_improvement(b, a) == pytest.approx(1.0, abs=1e-12)
    assert probability_of_improvement(2 * a, 2 * b) == p  # only the order counts (doubling keeps it exactly)


@settings(max_examples=200)
@given(errors)
def test_the_iqm_is_scipys_trimmed_mean_at_a_quarter(a):
    assert iqm(a) == pytest.approx(scipy.stats.trim_mean(a, 0.25), rel=1e-12, abs=1e-12)


@settings(max_examples=50)
@given(errors, errors, st.integers(0, 2**32 - 1))
def test_the_vectorised_bootstrap_equals_resampling_one_by_one(a, b, seed):
    """Each resample's estimate from counts over the sorted values equals the estimate of the resample built
    value by value (np.repeat of the counts)."""
    a, b = np.sort(a), np.sort(b)
    rng = np.random.default_rng(seed)
    ca, cb = effects._resample_counts(len(a), 7, rng), effects._resample_counts(len(b), 7, rng)
    assert (ca.sum(axis=1) == len(a)).all() and (cb.sum(axis=1) == len(b)).all()
    improvements, trimmed = effects._improvements(a, b, ca, cb), effects._trimmed(a, ca)
    for row in range(7):
        ra, rb = np.repeat(a, ca[row].astype(int)), np.repeat(b, cb[row].astype(int))
        assert improvements[row] == pytest.approx(probability_of_improvement(ra, rb), abs=1e-12)
        assert trimmed[row] == pytest.approx(scipy.stats.trim_mean(ra, 0.25), rel=1e-12, abs=1e-12)


@settings(max_examples=30)
@given(errors, errors)
def test_intervals_are_ordered_given_from_eight_trials_and_the_same_for_the_same_seed(a, b):
    found = pair_effects(a, b)
    assert found == pair_effects(a, b) or any(math.isnan(v) for v in found.values())  # NaN != NaN
    for name in ("p_a_better", "iqm_a", "iqm_b"):
        low, high = found[f"{name}_low"], found[f"{name}_high"]
        if min(len(a), len(b)) < effects.INTERVAL_FROM:
            assert math.isnan(low) and math.isnan(high)
        else:
            assert low <= high
            bounds = (0.0, 1.0) if name == "p_a_better" else (min(a.min(), b.min()), max(a.max(), b.max()))
            assert bounds[0] - 1e-9 <= low and high <= bounds[1] + 1e-9


def test_a_clear_improvement_has_an_interval_above_one_half_and_a_null_one_holds_one_half():
    rng = np.random.default_rng(0)
    a, b = rng.normal(10, 1, 64), rng.normal(12, 1, 64)
    clear = pair_effects(a, b)
    assert 0.5 < clear["p_a_better_low"] <= clear["p_a_better"] <= clear["p_a_better_high"]
    same = pair_effects(a, rng.normal(10, 1, 64))
    assert same["p_a_better_low"] < 0.5 < same["p_a_better_high"]


def test_the_table_compares_every_pair_within_its_cell_and_never_pools_cells():
    trials = make_trials(epochs=(6, 16), n=12, seed=3, diverge_share=0.2, fail_share=0.1)
    table = effects_table(trials, metric="final")
    ended = trials[trials["status"] != "failed"]
    sizes = ended.groupby(["model", "optimizer", "epochs"]).size()
    assert table["compared"].value_counts().to_dict() == {"models": 3 * 4, "optimizers": 3 * 2, "lengths": 3 * 2}
    for row in table.itertuples(index=False):
        cell = {"model": row.model, "optimizer": row.optimizer, "epochs": row.epochs}
        field = effects.COMPARED[row.compared]
        for level, n in ((row.a, row.n_a), (row.b, row.n_b)):
            key = tuple(level if f == field else cell[f] for f in ("model", "optimizer", "epochs"))
            assert n == sizes[key], (row, key)
            got = ended.set_index(["model", "optimizer", "epochs"]).loc[key, "top1_err"].to_numpy(float)
            assert (row.iqm_a if level == row.a else row.iqm_b) == pytest.approx(iqm(got))
    # a group's IQM interval is one, whichever pair shows it
    intervals: dict = {}
    for row in table.itertuples(index=False):
        field = effects.COMPARED[row.compared]
        for level, ci in ((row.a, (row.iqm_a_low, row.iqm_a_high)), (row.b, (row.iqm_b_low, row.iqm_b_high))):
            cell = tuple(level if f == field else getattr(row, f) for f in ("model", "optimizer", "epochs"))
            assert intervals.setdefault(cell, ci) == ci, cell
    assert len(intervals) == 3 * 2 * 2


def test_the_page_shows_the_tables_numbers():
    table = effects_table(make_trials(epochs=(6, 16), n=10, seed=1), metric="final")
    for compared in effects.COMPARED:
        mine = table[table["compared"] == compared].reset_index(drop=True)
        shown = effects_rows(table, compared)
        assert len(shown) == len(mine)
        for row, text in zip(mine.itertuples(index=False), shown.itertuples(index=False)):
            assert text[1].count(" vs ") == 1 and text[2] == f"{row.n_a} vs {row.n_b}"
            p = f"{row.p_a_better:.2f} [{row.p_a_better_low:.2f}, {row.p_a_better_high:.2f}]"
            assert text[3] == p
            assert text[4] == f"{row.iqm_a:.2f} [{row.iqm_a_low:.2f}, {row.iqm_a_high:.2f}]"
            assert text[5] == f"{row.iqm_b:.2f} [{row.iqm_b_low:.2f}, {row.iqm_b_high:.2f}]"


def test_the_page_leaves_out_intervals_below_eight_trials():
    table = effects_table(make_trials(models=("vit_p_tiny", "vit_c_tiny"), optimizers=("adamw",), n=5), "final")
    shown = effects_rows(table, "models")
    assert list(shown["P(a better)"]) == [f"{table['p_a_better'].iloc[0]:.2f}"]
    assert "[" not in shown["IQM a"].iloc[0] and pd.isna(table["iqm_a_low"].iloc[0])


@pytest.mark.slow
@pytest.mark.parametrize("null", ["normal", "grid360", "diverged"])
def test_the_intervals_cover_the_truth_near_their_level_at_24(null):
    from bench.effects import coverage

    got = coverage(null, 24, 300, seed=5)
    for key in ("p_a_better", "iqm_a"):
        rate = got[key]["coverage"]
        assert 0.95 - 3 * math.sqrt(0.95 * 0.05 / 300) <= rate <= 1.0, got
