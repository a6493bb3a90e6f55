"""Properties of the EDFs and Δ-EDFs (hpstudy.analysis.edf, and the Δ-EDF distances and test of
hpstudy.analysis.inference), over generated errors (Hypothesis): on a grid of k of 360 images (float32, as
stored), a 0.1-point grid, or continuous to 3 decimals, with ties and diverged trials at chance.

1. An EDF is a distribution function: non-decreasing, in [0, 1], 0 below the smallest error and 1 from
   the largest on, and at each point the share of errors at most that point; so for a weighted EDF and for
   every group of `edf_table`.
2. A Δ-EDF does not move when all errors of its group move by one constant, and the other groups' rows
   do not move at all.
3. The one-sided Δ-EDF distances are the sups of F_a - F_b and F_b - F_a of the Δs; swapping the groups
   swaps them. Swapping the two models of a Δ-EDF test swaps its direction, its distances and its shift,
   and keeps its p and verdict.

The p of the Δ-EDF test, its estimate, its symmetry and its location invariance are in
tests/analysis/test_findings_properties.py.
"""

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hpstudy.analysis.edf import edf_at, edf_table, step_points, weighted_edf_at
from hpstudy.analysis.inference import delta_ks, delta_test

pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")

CHANCE = 90.0  # a diverged trial's error
GRIDS = {
    "grid360": st.integers(0, 60).map(lambda k: float(np.float32(100 * k / 360))),
    "grid01": st.integers(0, 200).map(lambda k: k / 10),
    "continuous": st.floats(0.0, 40.0).map(lambda x: round(x, 3)),
}
KINDS = st.sampled_from(sorted(GRIDS))
STEPS = {"grid360": 3.6, "grid01": 10.0, "continuous": 1000.0}  # a grid's steps per point


def errors(kind: str, min_size: int = 1, max_size: int = 12) -> st.SearchStrategy:
    """One sample's errors on one kind of grid, some diverged at chance."""
    value = GRIDS[kind]
    return st.lists(st.one_of(value, value, value, st.just(CHANCE)), min_size=min_size, max_size=max_size).map(np.array)


@st.composite
def samples(draw, min_size: int = 1, max_size: int = 12):
    return draw(errors(draw(KINDS), min_size, max_size))


@st.composite
def pairs(draw, max_size: int = 8):
    """Two samples of 2-`max_size` errors on one kind of grid, and the grid's steps per point."""
    kind = draw(KINDS)
    return draw(errors(kind, 2, max_size)), draw(errors(kind, 2, max_size)), STEPS[kind]


def _is_distribution_function(points: np.ndarray, f: np.ndarray, sample: np.ndarray) -> None:
    order = np.argsort(points, kind="stable")
    assert np.all(np.diff(f[order]) >= 0) and np.all((0 <= f) & (f <= 1))
    assert np.all(f[points < sample.min()] == 0) and np.all(f[points >= sample.max()] == 1)


@settings(max_examples=100)
@given(samples(), st.lists(st.floats(-10.0, 100.0), max_size=20), st.integers(0, 2))
def test_an_edf_is_a_distribution_function_at_any_points(sample, points, failed):
    """With NaN errors of failed trials among the sample (left out, counted): F(x) is the share of the finite
    errors <= x, whether x is an error, between two, below all or above all."""
    pts = np.concatenate([np.array(points), sample, [sample.min() - 1, sample.max() + 1]])
    f = edf_at(np.concatenate([sample, [np.nan] * failed]), pts)
    _is_distribution_function(pts, f, sample)
    assert f.tolist() == [np.mean(sample <= x) for x in pts]
    x, steps = step_points(sample)
    assert np.all(np.diff(x) > 0) and np.all(np.diff(steps) > 0) and steps[-1] == 1
    assert steps.tolist() == edf_at(sample, x).tolist()  # the value after each jump, ties merged
    assert set(x.tolist()) == set(sample.tolist())


@settings(max_examples=100)
@given(samples(), st.data())
def test_a_weighted_edf_is_a_distribution_function_and_equal_weights_give_the_edf(sample, data):
    weights = np.array(data.draw(st.lists(st.floats(1e-3, 1e3), min_size=len(sample), max_size=len(sample))))
    pts = np.concatenate([sample, sample + 0.05, sample - 0.05, [sample.min() - 1]])
    f = weighted_edf_at(sample, weights, pts)
    _is_distribution_function(pts, f, sample)
    assert f == pytest.approx([weights[sample <= x].sum() / weights.sum() for x in pts], abs=1e-12)
    assert weighted_edf_at(sample, np.full(len(sample), 0.25), pts) == pytest.approx(edf_at(sample, pts), abs=1e-12)


@st.composite
def studies(draw) -> pd.DataFrame:
    """Trial rows of 1-3 models on one grid: ok, diverged (at chance) and failed (no error)."""
    kind = draw(KINDS)
    rows = []
    for model in draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)):
        for e in draw(errors(kind, 1, 10)):
            status = draw(st.sampled_from(["ok", "ok", "failed"])) if e != CHANCE else "diverged"
            rows.append({"model": model, "status": status, "top1_err": np.nan if status == "failed" else e})
    frame = pd.DataFrame(rows)
    return frame.iloc[draw(st.permutations(range(len(frame))))].reset_index(drop=True)


def _counted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] != "failed"]


@settings(max_examples=50)
@given(studies())
def test_every_group_of_the_edf_table_is_a_distribution_function_of_its_errors(frame):
    from hypothesis import assume

    assume(len(_counted(frame)))
    table = edf_table(frame, metric="final")
    for model, group in table.groupby("model"):
        errors_ = _counted(frame[frame["model"] == model])["top1_err"].to_numpy()
        assert len(group) == len(errors_) == group["n"].iloc[0]
        assert sorted(group["error"]) == group["error"].tolist() == sorted(errors_)
        _is_distribution_function(group["error"].to_numpy(), group["F"].to_numpy(), errors_)
        assert group["F"].iloc[-1] == 1 and group["F"].tolist() == edf_at(errors_, group["error"]).tolist()
        assert group["delta"].min() == 0 and np.all(group["delta"] >= 0)


@settings(max_examples=50)
@given(studies(), st.sampled_from([0.25, 3.7, -7.5, 41.0]), st.data())
def test_moving_one_groups_errors_moves_none_of_its_delta_edf(frame, shift, data):
    """Δ = error - the group's best: adding a constant to every error of one model leaves that model's Δs and
    EDF values where they were (up to a rounding of the errors), and every other model's rows as they were."""
    from hypothesis import assume

    assume(len(_counted(frame)))
    model = data.draw(st.sampled_from(sorted(frame["model"].unique())))
    moved = frame.assign(top1_err=np.where(frame["model"] == model, frame["top1_err"] + shift, frame["top1_err"]))
    before, after = edf_table(frame, metric="final"), edf_table(moved, metric="final")
    assert len(before) == len(after)
    mine = (before["model"] == model).to_numpy()
    assert after[~mine].reset_index(drop=True).equals(before[~mine].reset_index(drop=True))
    a, b = after[mine], before[mine]
    assert a["F"].tolist() == b["F"].tolist()
    assert a["delta"].to_numpy() == pytest.approx(b["delta"].to_numpy(), abs=1e-9)
    assert a["error"].to_numpy() == pytest.approx(b["error"].to_numpy() + shift, abs=1e-9)


def _sup_distances(ea: np.ndarray, eb: np.ndarray, per_point: float):
    """sup (F_a - F_b) and sup (F_b - F_a) of the Δ-EDFs (Δ = error - own best), from edf_at, at every Δ;
    each Δ in whole steps of the errors' grid, as differences of stored errors are equal only up to float
    noise."""
    da, db = (np.round((e - e.min()) * per_point) for e in (ea, eb))
    at = np.concatenate([da, db])
    gap = edf_at(da, at) - edf_at(db, at)
    return max(0.0, gap.max()), max(0.0, (-gap).max())


@settings(max_examples=100)
@given(pairs(max_size=12))
def test_the_delta_edf_distances_are_the_sups_and_swap_with_the_groups(pair):
    ea, eb, per_point = pair
    values = np.concatenate([ea, eb])
    is_a = (np.arange(len(values)) < len(ea))[None, :]
    a_above, b_above = (float(d[0]) for d in delta_ks(values, is_a, len(ea)))
    assert (a_above, b_above) == pytest.approx(_sup_distances(ea, eb, per_point), abs=1e-12)
    assert 0 <= a_above <= 1 and 0 <= b_above <= 1
    swapped = tuple(float(d[0]) for d in delta_ks(np.concatenate([eb, ea]), ~is_a[:, ::-1], len(eb)))
    assert swapped == pytest.approx((b_above, a_above), abs=1e-12)
    relabelled = tuple(float(d[0]) for d in delta_ks(values, ~is_a, len(eb)))  # the same values, labels swapped
    assert relabelled == pytest.approx((b_above, a_above), abs=1e-12)


@settings(max_examples=30)
@given(pairs(), st.sampled_from([0.5, 3.7, 41.0]))
def test_swapping_the_models_of_a_delta_edf_test_swaps_its_direction_and_keeps_its_verdict(pair, shift):
    """(a, b) and (b, a) are one question: the estimate becomes 1 - estimate (a nearer its best becomes b
    farther from its own), the distances and the shift swap, the p, its interval, the floor and the verdict
    stay."""
    ea, eb, _ = pair
    ab, ba = delta_test(ea, eb), delta_test(eb, ea)
    assert ba.test.n == ab.test.n[::-1]
    assert np.sign(ba.test.estimate - 0.5) == -np.sign(ab.test.estimate - 0.5)
    assert (ba.d_a_above, ba.d_b_above) == pytest.approx((ab.d_b_above, ab.d_a_above), abs=1e-12)
    assert ba.shift == pytest.approx(-ab.shift, abs=1e-9)
    assert (ba.test.p, ba.test.floor, ba.test.mc) == (ab.test.p, ab.test.floor, ab.test.mc)
    assert (ba.test.significant, ba.test.decidable, ba.test.borderline) == (
        ab.test.significant,
        ab.test.decidable,
        ab.test.borderline,
    )


@settings(max_examples=30)
@given(pairs(), st.sampled_from([0.5, 3.7, 41.0]))
@example((np.array([0.0, 0.1]), np.array([0.0, 2.2]), 10.0), 41.0)  # shift 2.1, and 41.0 (not 43.1) moved by 41
@example((np.array([0.031, 0.052, 0.027, 0.022]), np.array([0.003, 0.027]), 1000.0), 41.0)  # p 1.0, and 0.733
def test_moving_one_models_errors_moves_the_shift_by_as_much_and_nothing_else(pair, shift):
    """The Δs do not move with the errors: b's errors moved by a constant move the Hodges-Lehmann shift by as
    much, and leave the estimate, the p and the distances of the Δ-EDF test where they were."""
    ea, eb, _ = pair
    base, moved = delta_test(ea, eb), delta_test(ea, eb + shift)
    assert moved.shift == pytest.approx(base.shift + shift, abs=1e-9)
    assert (moved.test.estimate, moved.test.p) == pytest.approx((base.test.estimate, base.test.p), abs=1e-12)
    assert (moved.d_a_above, moved.d_b_above) == pytest.approx((base.d_a_above, base.d_b_above), abs=1e-12)
