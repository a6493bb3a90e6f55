"""Known answers for the tests behind the report's verdicts (`hpstudy.analysis.inference`): Welch t
against scipy and a hand computation, Holm by hand, the raw bootstrap p of a contrast of minima
against brute-force enumeration, the calibrated p against its null studies, the Δ-EDF test against a
plain loop over every split, the Monte-Carlo p's interval and the seeds that decide, and the seeded
helpers."""

import itertools
import json
import math

import numpy as np
import pytest
import scipy

from hpstudy.analysis import inference, montecarlo
from hpstudy.analysis.inference import (
    ALPHA,
    CALIBRATION_BLOCK,
    CALIBRATION_STUDIES,
    area_interval,
    best_contrast,
    calibrated,
    data_rng,
    delta_detectable,
    delta_power,
    delta_test,
    design_of,
    holm,
    holm_interval,
    nearer_prob,
    null_raw_ps,
    raw_p,
    shift_estimate,
    trials_for_delta,
    welch,
    welch_detectable,
)
from hpstudy.analysis.montecarlo import MonteCarloP, sequential

SINGLE, PAIR = (1.0, -1.0), (1.0, -1.0, -1.0, 1.0)


# ---- welch ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_welch_of_two_groups_is_scipys_welch_t(alpha):
    rng = np.random.default_rng(1)
    a, b = rng.normal(10.0, 1.0, 7), rng.normal(11.0, 2.5, 5)
    test = welch([a, b], SINGLE, alpha=alpha)
    scipy_welch = scipy.stats.ttest_ind(a, b, equal_var=False)
    interval = scipy_welch.confidence_interval(1 - alpha)
    assert test.rule == "welch" and test.n == (7, 5) and test.level == pytest.approx(1 - alpha)
    assert test.estimate == pytest.approx(a.mean() - b.mean(), rel=1e-12)
    assert test.p == pytest.approx(scipy_welch.pvalue, rel=1e-10)
    assert test.df == pytest.approx(scipy_welch.df, rel=1e-12)
    assert test.ci == pytest.approx((interval.low, interval.high), rel=1e-10)
    assert welch([b, a], SINGLE, alpha=alpha).p == pytest.approx(test.p, rel=1e-12)  # two-sided


def test_a_four_group_welch_contrast_is_the_welch_satterthwaite_hand_computation():
    """Means 2, 4, 2, 3; variances 1, 4, 2, 20/3 over n = 3, 3, 2, 4: the contrast 2 - 4 - 2 + 3 = -1
    has variance 1/3 + 4/3 + 1 + 5/3 = 13/3 and Welch-Satterthwaite df
    (13/3)^2 / ((1/3)^2 / 2 + (4/3)^2 / 2 + 1^2 / 1 + (5/3)^2 / 3) = 1014/155."""
    groups = [np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0]), np.array([1.0, 3.0]), np.array([0.0, 2, 4, 6])]
    test = welch(groups, PAIR)
    df, se = 1014 / 155, math.sqrt(13 / 3)
    assert test.estimate == pytest.approx(-1.0) and test.n == (3, 3, 2, 4)
    assert test.df == pytest.approx(df, rel=1e-12)
    assert test.p == pytest.approx(2 * scipy.stats.t.sf(1 / se, df), rel=1e-10)
    half = scipy.stats.t.isf(0.025, df) * se
    assert test.ci == pytest.approx((-1 - half, -1 + half), rel=1e-10)
    assert test.level == pytest.approx(0.95) and not test.significant  # p about 0.65


def test_welch_cannot_test_seeds_that_agree_or_a_single_seed():
    same = welch([np.full(3, 5.0), np.full(4, 7.0)], SINGLE)
    assert same.p is None and same.ci is None and same.why_untestable == "the seeds gave identical errors"
    assert same.estimate == -2.0 and not same.decidable and not same.significant
    one = welch([np.array([5.0]), np.array([6.0, 7.0, 8.0])], SINGLE)
    assert one.p is None and one.why_untestable == "fewer than 2 seeds (n = 1/3)" and not one.significant


def test_welch_detectable_difference_is_found_80_percent_of_the_time():
    delta = welch_detectable([1.0, 1.0], [10, 10])
    assert 1.0 < delta < 2.0  # about 2.8 standard errors (sqrt(2/10) = 0.45)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((4000, 10)), rng.standard_normal((4000, 10)) + delta
    power = np.mean(scipy.stats.ttest_ind(a, b, axis=1, equal_var=False).pvalue <= ALPHA)
    assert power == pytest.approx(0.8, abs=0.025)
    assert welch_detectable([1.0, 1.0], [10, 1]) == float("inf")
    assert welch_detectable([0.0, 0.0], [10, 10]) == float("inf")


def test_welch_detectable_at_equal_n_and_sd_is_students_t_at_80_percent_power():
    """Equal n = 3 and sd 1: Welch-Satterthwaite's df is Student's n_a + n_b - 2 = 4, so Student's
    pooled t (whose power is exact here) finds the detectable difference 80% of the time."""
    delta = welch_detectable([1.0, 1.0], [3, 3])
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((4000, 3)), rng.standard_normal((4000, 3)) + delta
    power = np.mean(scipy.stats.ttest_ind(a, b, axis=1).pvalue <= ALPHA)
    assert power == pytest.approx(0.8, abs=0.02)


# ---- holm, design, Test ---------------------------------------------------------------------------


def test_holm_by_hand():
    """Sorted 0.01, 0.03, 0.04, 0.2 times 4, 3, 2, 1: 0.04, 0.09, 0.08 -> 0.09 (monotone), 0.2."""
    assert holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert holm([0.5, 0.6]).tolist() == [1.0, 1.0]  # capped at 1
    assert holm([0.03]).tolist() == [0.03]


def test_design_is_seeds_only_for_one_configuration():
    assert design_of(np.array([1e-3, 1e-3]), np.array([0.1, 0.1])) == "seeds"
    assert design_of(np.array([1e-3]), np.array([0.1])) == "seeds"
    assert design_of(np.array([1e-3, 1e-3]), np.array([0.1, 0.2])) == "samples"
    assert design_of(np.array([1e-3, 2e-3]), np.array([0.1, 0.1])) == "samples"
    # at one lr and wd, the rows' configs decide: a sampled recipe field is samples, the seed alone is not
    lr, wd = np.array([1e-3] * 3), np.array([0.1] * 3)
    config = {"lr": 1e-3, "wd": 0.1, "dataset": {"name": "digits", "seed": 0}, "label_smoothing": 0.0}
    seeds = [json.dumps(dict(config, seed=s)) for s in range(3)]
    assert design_of(lr, wd, seeds) == "seeds"
    assert design_of(lr, wd, [*seeds[:2], json.dumps(dict(config, seed=2, label_smoothing=0.1))]) == "samples"
    assert design_of(lr, wd, [seeds[0], None, "[1, 2", "[]", seeds[1]]) == "seeds"  # configs unread say nothing


def test_a_test_decides_only_where_its_design_reaches_alpha_and_its_p_is_settled():
    result = lambda p, floor=0.0, mc=None: inference.Test("best", 1.0, None, None, p, (3, 3), floor=floor, mc=mc)
    assert result(0.04, floor=0.01).significant and result(0.06, floor=0.01).decidable
    assert not result(0.06, floor=0.01).significant
    assert not result(0.04, floor=0.09).decidable and not result(0.04, floor=0.09).significant
    assert not result(None).decidable and not result(None).significant
    # a Monte-Carlo p whose interval holds alpha is borderline, decided neither way
    assert result(0.049, mc=(0.045, 0.053)).borderline and not result(0.049, mc=(0.045, 0.053)).significant
    assert result(0.049, mc=(0.045, 0.0499)).significant and not result(0.049, mc=(0.045, 0.0499)).borderline
    assert not result(0.06, mc=(0.0501, 0.07)).borderline and not result(0.06, mc=(0.0501, 0.07)).significant


# ---- Monte-Carlo p-values ---------------------------------------------------------------------------


def test_a_monte_carlo_p_and_its_interval():
    mc = MonteCarloP(hits=4, draws=999)
    assert mc.p == 5 / 1000 and not mc.exact
    lo, hi = mc.interval
    ci = scipy.stats.binomtest(4, 999).proportion_ci(0.999, method="exact")
    assert (lo, hi) == pytest.approx((ci.low, ci.high)) and lo < 4 / 999 < hi
    assert mc.settled([0.05]) and not mc.settled([0.005])
    exact = MonteCarloP(hits=3, draws=70, exact=True)
    assert exact.p == 3 / 70 and exact.interval is None and exact.settled([3 / 70, 0.05])


@pytest.mark.parametrize("true_p", [0.01, 0.03, 0.0499, 0.05, 0.07, 0.3])
def test_sequential_draws_until_the_threshold_is_outside_the_interval_or_the_cap(true_p):
    """Draws from a known p: the same draws for the same start (whatever the batches), the total doubles,
    and it stops once alpha is outside the interval, or at the cap (then borderline)."""
    calls = []

    def count_more(start, k):
        calls.append((start, k))
        return int(np.sum(np.random.default_rng([7, start, k]).random(k) < true_p))

    mc = sequential(count_more, [0.05], 1000)
    assert calls[0] == (0, 1000) and all(start == sum(k for _, k in calls[:i]) for i, (start, _) in enumerate(calls))
    assert [k for _, k in calls] == [1000 * 2 ** max(0, i - 1) for i in range(len(calls))]  # 1000, 1000, 2000, ...
    capped = mc.draws == 1000 << montecarlo.DOUBLINGS
    assert mc.settled([0.05]) or capped
    assert mc.settled([0.05]) or mc.interval[0] < 0.05 < mc.interval[1]
    if abs(true_p - 0.05) > 0.015:
        assert mc.draws <= 4000  # far from alpha: a few thousand draws settle it


# ---- best: the exact bootstrap of the minimum, calibrated --------------------------------------------


def _resampled_minima(sample):
    """The minimum of each of the n^n equally likely resamples."""
    return np.array([min(draw) for draw in itertools.product(sample, repeat=len(sample))])


def test_the_raw_p_of_four_groups_matches_enumerating_every_resample():
    """Four groups of 3 (ties within and across groups): T = min*_1 - min*_2 - min*_3 + min*_4 over
    all 27^4 equally likely resamples; the raw p is 2 min(P(T <= 0), P(T >= 0))."""
    groups = [
        np.array([3.0, 1.0, 2.0]),
        np.array([2.0, 2.0, 5.0]),
        np.array([0.5, 4.0, 1.0]),
        np.array([1.0, 3.0, 3.0]),
    ]
    minima = [w * _resampled_minima(g) for g, w in zip(groups, PAIR)]
    t = np.add.outer(np.add.outer(minima[0], minima[1]), np.add.outer(minima[2], minima[3])).ravel()
    assert len(np.unique(t)) > 10
    assert raw_p(groups, PAIR) == pytest.approx(min(1.0, 2 * min(np.mean(t <= 0), np.mean(t >= 0))), abs=1e-12)
    for shift in (-2.0, -0.5, 0.5, 1.0):  # other contrasts: the 4th group moved
        moved, tm = [*groups[:3], groups[3] + shift], t + shift
        assert raw_p(moved, PAIR) == pytest.approx(min(1.0, 2 * min(np.mean(tm <= 0), np.mean(tm >= 0))), abs=1e-12)


def test_best_contrast_of_3_vs_3_cannot_decide():
    """3 vs 3 samples fall fully apart in 2 of 20 orders: even then the calibrated p is about 0.1."""
    rng = np.random.default_rng(3)
    apart = best_contrast([np.array([10.0, 11.0, 12.0]), np.array([1.0, 2.0, 3.0])], SINGLE)
    assert apart.estimate == 9.0 and apart.floor > 0.05 and apart.p == apart.floor
    assert not apart.decidable and not apart.significant
    for _ in range(20):
        test = best_contrast([rng.normal(0, 1, 3), rng.normal(3, 1, 3)], SINGLE)
        assert test.floor > 0.05 and test.p >= test.floor and not test.significant


def test_best_contrast_of_24_vs_24_apart_is_significant_and_has_no_interval():
    rng = np.random.default_rng(4)
    sgd, adamw = rng.normal(30.0, 1.0, 24), rng.normal(20.0, 1.0, 24)
    test = best_contrast([sgd, adamw], SINGLE)
    assert test.estimate == pytest.approx(sgd.min() - adamw.min())
    assert test.significant and test.p <= 2 / (CALIBRATION_STUDIES + 1)
    assert test.ci is None and test.level is None  # a bootstrapped minimum's interval ends on the estimate
    flipped = best_contrast([adamw, sgd], SINGLE)
    assert flipped.estimate == -test.estimate and flipped.p == test.p


def test_the_calibrated_p_counts_the_null_studies_at_most_as_extreme():
    """Four groups: p = (1 + null studies whose raw p is at most the observed one) / (1 + null studies),
    over blocks of seeded null studies that are the same however they are batched."""
    n = (5, 5, 5, 5)
    blocks = [null_raw_ps(n, PAIR, b) for b in range(CALIBRATION_STUDIES // CALIBRATION_BLOCK)]
    null = np.concatenate(blocks)
    assert all(len(b) == CALIBRATION_BLOCK and (np.diff(b) >= 0).all() for b in blocks)
    assert 0 <= null.min() and null.max() <= 1
    assert np.array_equal(blocks[0], null_raw_ps.__wrapped__(n, PAIR, 0))  # a constant, not a draw
    assert not np.array_equal(blocks[0], blocks[1])
    for raw in (0.0, 0.01, 0.1, 0.5, 1.0):
        got = calibrated(raw, n, PAIR, ())  # no threshold: the first look only
        assert got.draws == CALIBRATION_STUDIES and got.p == (1 + np.sum(null <= raw)) / (1 + len(null))
    groups = [np.arange(5.0) + 30, np.arange(5.0), np.arange(5.0) + 10, np.arange(5.0) + 20]
    test = best_contrast(groups, PAIR)
    assert (
        test.p == calibrated(raw_p(groups, PAIR), n, PAIR, (ALPHA,)).p and test.floor == calibrated(0.0, n, PAIR, ()).p
    )


def _brute_best_p(a, b):
    """The two-group best rule's permutation p by a plain loop: the share of splits of the pooled errors
    whose raw bootstrap p is at most the data's."""
    pooled, observed = np.concatenate([a, b]), raw_p([a, b], SINGLE)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        mask = np.zeros(len(pooled), bool)
        mask[list(chosen)] = True
        hits += raw_p([pooled[mask], pooled[~mask]], SINGLE) <= observed + 1e-12
        total += 1
    return hits / total


def test_two_groups_of_bests_are_a_permutation_test_exact_under_ties():
    """Every split enumerated (5 vs 5: 252): the share whose raw p is at most the data's, continuous or
    tied errors alike; fully apart (2 of 252 splits either way) is the smallest p."""
    rng = np.random.default_rng(12)
    for ties in (False, True):
        for _ in range(3):
            a, b = rng.normal(0, 1, 5), rng.normal(0.8, 1, 5)
            a, b = (np.round(a * 2) / 2, np.round(b * 2) / 2) if ties else (a, b)
            test = best_contrast([a, b], SINGLE)
            assert test.p == pytest.approx(_brute_best_p(a, b)) and test.mc is None
    apart = best_contrast([np.arange(5.0), np.arange(5.0) + 10], SINGLE)
    assert apart.p == pytest.approx(2 / 252) == apart.floor and apart.estimate == -10.0


def test_a_calibrated_p_near_alpha_draws_more_null_studies_until_settled():
    """Raw ps whose calibrated p lands near alpha: more null studies are drawn until alpha is outside the
    interval, or the verdict is borderline with its interval around alpha."""
    n = (24, 24, 24, 24)
    null = np.sort(np.concatenate([null_raw_ps(n, PAIR, b) for b in range(4)]))
    raw = float(null[int(0.05 * len(null))])  # the first look's p is right at alpha
    got = calibrated(raw, n, PAIR, (ALPHA,))
    assert got.draws > CALIBRATION_STUDIES
    assert got.settled((ALPHA,)) or got.draws == CALIBRATION_STUDIES << montecarlo.DOUBLINGS


# ---- delta: the Δ-EDF test --------------------------------------------------------------------------


def _brute_shift(a, b):
    differences = np.sort([y - x for x in a for y in b])
    return differences[(len(differences) - 1) // 2]


def _brute_nearer(a, b):
    """P(a random trial of a is nearer a's best than one of b is of b's), ties half, by a plain loop."""
    da, db = a - a.min(), b - b.min()
    return np.mean([(x < y) + 0.5 * (x == y) for x in da for y in db])


def _ordered(a, b):
    """The two samples in the test's order: the one whose sorted Δs, in ticks of a billionth of the larger Δ
    range, come first in bytes leads."""
    shapes = [np.sort(np.asarray(e, float) - np.min(e)) for e in (a, b)]
    scale = max(float(s[-1]) for s in shapes) or 1.0
    ticks_a, ticks_b = (np.round(s / scale * 1e9).tobytes() for s in shapes)
    return (b, a) if ticks_b < ticks_a else (a, b)


def _brute_delta_p(a, b):
    """The two-sided permutation p of the Δ-EDF test by a plain loop over every split of the errors,
    the second sample shifted back by the Hodges-Lehmann shift."""
    a, b = _ordered(a, b)
    pooled = np.round(np.concatenate([a, b - _brute_shift(a, b)]), 9)
    observed = abs(_brute_nearer(pooled[: len(a)], pooled[len(a) :]) - 0.5)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        mask = np.zeros(len(pooled), bool)
        mask[list(chosen)] = True
        hits += abs(_brute_nearer(pooled[mask], pooled[~mask]) - 0.5) >= observed - 1e-9
        total += 1
    return hits / total


def test_the_shift_is_the_lower_median_of_every_difference_and_moves_with_either_sample():
    rng = np.random.default_rng(9)
    step = 100 / 360  # samples of one value each, whose difference b - (b - a) is not a in floating point
    for k in range(1, 50):
        a, b = np.full(3, 3 * step), np.full(3, (3 + k) * step)
        assert shift_estimate(a, b) == _brute_shift(a, b)
    for _ in range(200):
        na, nb = rng.integers(1, 30, 2)
        grid = rng.random() < 0.5
        a, b = rng.normal(0, 2, na), rng.normal(1, 3, nb)
        a, b = (np.round(a), np.round(b)) if grid else (a, b)
        assert shift_estimate(a, b) == _brute_shift(a, b)
        assert shift_estimate(a + 4.0, b) == pytest.approx(_brute_shift(a, b) - 4.0, abs=1e-9)


def test_the_delta_test_counts_every_split_like_a_plain_loop():
    """4 vs 4 (70 splits) and 4 vs 5 (126), enumerated: the share of splits at least as far from 1/2."""
    rng = np.random.default_rng(4)
    for _ in range(4):
        a, b = rng.normal(0, 1, 4), rng.normal(3, 2, 5)
        got = delta_test(a, b)
        assert got.test.estimate == pytest.approx(_brute_nearer(a, b))
        assert got.test.p == pytest.approx(_brute_delta_p(a, b)) and got.test.mc is None
        x, _ = _ordered(a, b)
        assert got.shift == (_brute_shift(a, b) if x is a else -_brute_shift(b, a))
    grid_a, grid_b = np.array([1.0, 1.0, 2.0, 3.0]), np.array([4.0, 5.0, 5.0, 9.0])  # ties within and across
    assert delta_test(grid_a, grid_b).test.p == pytest.approx(_brute_delta_p(grid_a, grid_b))
    # a shift leaves the Δs (errors minus their own best) the same: nothing to find
    same = delta_test(np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 6.0, 7.0, 8.0]))
    assert same.test.estimate == 0.5 and same.test.p == 1.0 and same.shift == 4.0
    # 3 vs 3: at best 2 of C(6, 3) = 20 splits: the design cannot reach 5%
    assert delta_test(np.arange(3.0), np.arange(3.0) * 5).test.floor == pytest.approx(0.1)


def test_errors_on_a_grid_keep_their_ties_after_the_shift():
    """k of 360 images stored as float32 percentages: b shifted back by a difference of two stored errors
    lands on a's values exactly, so tied errors stay tied across the models."""
    step = np.float32(100 / 360)
    a = (np.array([2, 2, 3, 4, 4, 4, 5, 7]) * step).astype(np.float32).astype(float)
    b = (np.array([9, 9, 10, 11, 11, 11, 12, 14]) * step).astype(np.float32).astype(float)
    got = delta_test(a, b)
    assert got.test.estimate == 0.5 and got.test.p == 1.0 and got.d_a_above == got.d_b_above == 0.0
    values = np.concatenate([a, b - got.shift])
    assert nearer_prob(values, (np.arange(16) < 8)[None, :], 8)[0] == 0.5


def test_random_splits_are_seeded_by_the_data_and_the_same_however_batched():
    """The first k splits are the same whatever the total drawn: the hits among 1,000, 2,000 and 4,000
    splits never decrease, and a copy of the data (or a re-run) draws the same splits."""
    rng = np.random.default_rng(2)
    other_seed = []
    for _ in range(5):
        a, b = rng.normal(0, 1, 20), rng.normal(0, 1.2, 20)  # ps far from 0: the splits matter
        hits = [
            round(delta_test(a, b, thresholds=(), draws=draws).test.p * (draws + 1)) - 1 for draws in (1000, 2000, 4000)
        ]
        assert hits[0] <= hits[1] <= hits[2] and hits[2] - hits[0] <= 3000
        first = delta_test(a, b, thresholds=())
        assert first.test.mc is not None and first.test.p == delta_test(a.copy(), b.copy(), thresholds=()).test.p
        other_seed.append(delta_test(a, b, thresholds=(), seed=7).test.p != first.test.p)
    assert any(other_seed)  # another seed, other splits


def test_the_delta_planners_agree_with_each_other_and_never_plan_fewer_than_needed():
    for n in (8, 24, 64):
        detectable = delta_detectable((n, n))
        assert delta_power(detectable, (n, n)) == pytest.approx(0.8, abs=1e-9)
        assert delta_power(detectable + 0.01, (n, n)) > 0.8
    for effect in (0.6, 0.7, 0.9, 0.2):
        n = trials_for_delta(effect)
        assert delta_power(effect, (n, n)) >= 0.8 > delta_power(effect, (n - 1, n - 1))
    assert not np.isfinite(delta_detectable((2, 2)))
    for bad in (0.5, -0.1, 1.2):
        with pytest.raises(inference.StatsError, match="trials_for_delta: effect: bad value"):
            trials_for_delta(bad)


def test_holm_interval_bounds_holm_for_every_p_inside_the_intervals():
    rng = np.random.default_rng(11)
    for _ in range(200):
        m = int(rng.integers(1, 8))
        centre = rng.random(m) * 0.1
        width = rng.random(m) * 0.02
        intervals = list(zip(np.clip(centre - width, 0, 1), np.clip(centre + width, 0, 1)))
        low, high = holm_interval(intervals)
        inside = [lo + rng.random() * (hi - lo) for lo, hi in intervals]
        assert np.all(low <= holm(inside) + 1e-15) and np.all(holm(inside) <= high + 1e-15)


# ---- the seeded helpers ----------------------------------------------------------------------------


def test_data_rng_is_seeded_by_the_data():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0])
    draws = data_rng(0, a, b).random(5)
    assert np.array_equal(draws, data_rng(0, a.copy(), b.copy()).random(5))
    assert not np.array_equal(draws, data_rng(0, a, b + 1e-9).random(5))
    assert not np.array_equal(draws, data_rng(1, a, b).random(5))
    assert not np.array_equal(draws, data_rng(0, b, a).random(5))


def test_area_interval_recomputes_the_references():
    """The signed area is mean Δ of b - mean Δ of a; its interval resamples each sample and takes
    each resample's own best: two samples of one shape, wherever they sit, give an interval around 0,
    and a wider b a positive one. Seeded by the data: the same samples, the same interval."""
    rng = np.random.default_rng(6)
    a, b = rng.normal(0, 1, 40), rng.normal(50, 1, 40)
    lo, hi = area_interval(a, b)
    assert lo < 0 < hi and (lo, hi) == area_interval(a, b)
    wide = rng.normal(0, 4, 40)
    lo, hi = area_interval(a, wide)
    point = (wide.mean() - wide.min()) - (a.mean() - a.min())
    assert 0 < lo < point < hi
    # by hand: 1,000 resamples with the references recomputed, against the function's 4,000
    ra, rw = (x[rng.integers(0, 40, (1000, 40))] for x in (a, wide))
    draws = (rw.mean(1) - rw.min(1)) - (ra.mean(1) - ra.min(1))
    assert np.quantile(draws, 0.025) == pytest.approx(lo, abs=0.6)
    assert np.quantile(draws, 0.975) == pytest.approx(hi, abs=0.6)
