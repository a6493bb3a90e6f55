"""Known answers for the tests behind the report's verdicts (`hpstudy.analysis.inference`): Welch t
against scipy and a hand computation, Holm by hand, the exact bootstrap law of a contrast of minima
against brute-force enumeration, the calibrated test's interval against its p, the Δ-EDF test's
permutation counts, and the seeded helpers."""

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from hpstudy.analysis import inference
from hpstudy.analysis.inference import (
    ALPHA,
    CALIBRATION_STUDIES,
    ContrastLaw,
    area_interval,
    best_contrast,
    calibrated_p,
    data_rng,
    design_of,
    holm,
    ks_pair,
    ks_power,
    min_law,
    null_raw_ps,
    welch,
    welch_detectable,
)

SINGLE, PAIR = (1.0, -1.0), (1.0, -1.0, -1.0, 1.0)


# ---- welch ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_welch_of_two_groups_is_scipys_welch_t(alpha):
    rng = np.random.default_rng(1)
    a, b = rng.normal(10.0, 1.0, 7), rng.normal(11.0, 2.5, 5)
    test = welch([a, b], SINGLE, alpha=alpha)
    scipy_welch = stats.ttest_ind(a, b, equal_var=False)
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
    assert test.p == pytest.approx(2 * stats.t.sf(1 / se, df), rel=1e-10)
    half = stats.t.isf(0.025, df) * se
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
    power = np.mean(stats.ttest_ind(a, b, axis=1, equal_var=False).pvalue <= ALPHA)
    assert power == pytest.approx(0.8, abs=0.025)
    assert welch_detectable([1.0, 1.0], [10, 1]) == float("inf")
    assert welch_detectable([0.0, 0.0], [10, 10]) == float("inf")


def test_welch_detectable_at_equal_n_and_sd_is_students_t_at_80_percent_power():
    """Equal n = 3 and sd 1: Welch-Satterthwaite's df is Student's n_a + n_b - 2 = 4, so Student's
    pooled t (whose power is exact here) finds the detectable difference 80% of the time."""
    delta = welch_detectable([1.0, 1.0], [3, 3])
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((4000, 3)), rng.standard_normal((4000, 3)) + delta
    power = np.mean(stats.ttest_ind(a, b, axis=1).pvalue <= ALPHA)
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


def test_a_test_decides_only_where_its_design_reaches_alpha():
    result = lambda p, floor=0.0: inference.Test("best", 1.0, (0.5, 1.5), 0.95, p, (3, 3), floor=floor)
    assert result(0.04, floor=0.01).significant and result(0.06, floor=0.01).decidable
    assert not result(0.06, floor=0.01).significant
    assert not result(0.04, floor=0.09).decidable and not result(0.04, floor=0.09).significant
    assert not result(None).decidable and not result(None).significant


# ---- best: the exact bootstrap law of a contrast of minima ---------------------------------------


def _resampled_minima(sample):
    """The minimum of each of the n^n equally likely resamples."""
    return np.array([min(draw) for draw in itertools.product(sample, repeat=len(sample))])


def _atoms(values, probs):
    """A discrete law as {value: probability}, equal values merged."""
    out = {}
    for v, p in zip(values, probs):
        out[float(v)] = out.get(float(v), 0.0) + float(p)
    return out


def test_contrast_law_matches_enumerating_every_resample_of_four_groups():
    """Four groups of 3 (ties within and across groups): T = min*_1 - min*_2 - min*_3 + min*_4 over
    all 27^4 equally likely resamples."""
    groups = [
        np.array([3.0, 1.0, 2.0]),
        np.array([2.0, 2.0, 5.0]),
        np.array([0.5, 4.0, 1.0]),
        np.array([1.0, 3.0, 3.0]),
    ]
    law = ContrastLaw([min_law(g) for g in groups], PAIR)
    minima = [w * _resampled_minima(g) for g, w in zip(groups, PAIR)]
    t = np.add.outer(np.add.outer(minima[0], minima[1]), np.add.outer(minima[2], minima[3])).ravel()
    atoms = np.unique(t)
    assert len(atoms) > 10
    points = np.concatenate([atoms, atoms[:-1] + np.diff(atoms) / 2, [atoms[0] - 1, atoms[-1] + 1]])
    for point in points:
        assert law.at_most(point) == pytest.approx(np.mean(t <= point), abs=1e-12)
        assert law.at_least(point) == pytest.approx(np.mean(t >= point), abs=1e-12)
    # 27^4 is odd: no q below lands exactly on a cumulative probability
    cumulative = np.array([np.mean(t <= a) for a in atoms])
    survival = np.array([np.mean(t >= a) for a in atoms])
    for q in (0.001, 0.01, 0.025, 0.1, 0.5, 0.9):
        assert law.lower(q) == atoms[np.argmax(cumulative >= q)]
        assert law.upper(q) == atoms[np.nonzero(survival >= q)[0][-1]]
    assert law.raw_p() == pytest.approx(min(1.0, 2 * min(np.mean(t <= 0), np.mean(t >= 0))), abs=1e-12)


def test_best_contrast_of_3_vs_3_cannot_decide():
    """3 vs 3 samples fall fully apart in 2 of 20 orders: even then the calibrated p is about 0.1."""
    rng = np.random.default_rng(3)
    apart = best_contrast([np.array([10.0, 11.0, 12.0]), np.array([1.0, 2.0, 3.0])], SINGLE)
    assert apart.estimate == 9.0 and apart.floor > 0.05 and apart.p == apart.floor
    assert not apart.decidable and not apart.significant
    for _ in range(20):
        test = best_contrast([rng.normal(0, 1, 3), rng.normal(3, 1, 3)], SINGLE)
        assert test.floor > 0.05 and test.p >= test.floor and not test.significant


def test_best_contrast_of_24_vs_24_apart_is_significant():
    rng = np.random.default_rng(4)
    sgd, adamw = rng.normal(30.0, 1.0, 24), rng.normal(20.0, 1.0, 24)
    test = best_contrast([sgd, adamw], SINGLE)
    assert test.estimate == pytest.approx(sgd.min() - adamw.min())
    assert test.significant and test.p <= 2 / (CALIBRATION_STUDIES + 1)
    assert 0 < test.ci[0] <= test.estimate <= test.ci[1] and test.level > 0.95
    flipped = best_contrast([adamw, sgd], SINGLE)
    assert flipped.ci == pytest.approx((-test.ci[1], -test.ci[0])) and flipped.p == test.p


def test_best_interval_at_an_alpha_the_calibration_hits_exactly():
    """At alpha = 200/4001, p = (1 + null raw ps at most raw) / 4001 is at most alpha exactly when at
    most 199 of the 4,000 null raw ps are at most the raw p, i.e. the raw p is below the 200th
    smallest, null[199]: the interval is at level 1 - null[199] (24 vs 24: null[198] < null[199])."""
    rng = np.random.default_rng(8)
    groups = [rng.standard_normal(24) + 1.0, rng.standard_normal(24)]
    null = null_raw_ps((24, 24), SINGLE)
    alpha = 200 / (CALIBRATION_STUDIES + 1)
    assert null[198] < null[199]
    test = best_contrast(groups, SINGLE, alpha=alpha)
    assert test.level == pytest.approx(1 - null[199], abs=1e-15)
    assert best_contrast(groups, SINGLE).level == test.level  # alpha = 0.05 falls between 200/4001 and 201/4001


@pytest.mark.parametrize("rule", [best_contrast, welch], ids=["best", "welch"])
@pytest.mark.parametrize("weights", [SINGLE, PAIR], ids=["two groups", "four groups"])
@pytest.mark.parametrize("n", [5, pytest.param(8, marks=pytest.mark.slow), pytest.param(24, marks=pytest.mark.slow)])
def test_the_interval_excludes_0_exactly_when_p_is_at_most_alpha(rule, weights, n):
    rng = np.random.default_rng([5, n, len(weights)])
    decided = 0
    for _ in range(200):
        shift = rng.uniform(0, 2.5)
        groups = [rng.standard_normal(n) + (shift if k == 0 else 0.0) for k in range(len(weights))]
        test = rule(groups, weights)
        excludes = test.ci[0] > 0 or test.ci[1] < 0
        assert excludes == (test.p <= ALPHA), (test, groups)
        assert test.ci[0] <= test.estimate <= test.ci[1]
        decided += excludes
    assert 10 < decided < 190  # both outcomes occur


def test_calibrated_p_counts_the_null_studies_at_most_as_extreme():
    null = np.array([0.0, 0.1, 0.2, 0.2, 0.5])
    assert calibrated_p(0.2, null) == pytest.approx(5 / 6)  # 4 at most 0.2, plus the study itself
    assert calibrated_p(0.0, null) == pytest.approx(2 / 6)
    assert calibrated_p(-1.0, null) == pytest.approx(1 / 6) and calibrated_p(1.0, null) == 1.0
    ps = null_raw_ps((5, 5), SINGLE)
    assert len(ps) == CALIBRATION_STUDIES and (np.diff(ps) >= 0).all() and 0 <= ps[0] and ps[-1] <= 1
    assert np.array_equal(ps, null_raw_ps.__wrapped__((5, 5), SINGLE))  # a constant, not a draw
    # two samples of 5 fall fully apart in 2 of 252 orders: then the raw p is 0
    assert np.mean(ps == 0) == pytest.approx(2 / 252, abs=0.005)
    test = best_contrast([np.arange(5.0), np.arange(5.0) + 10], SINGLE)
    assert test.p == calibrated_p(0.0, ps) == test.floor


# ---- ks: the Δ-EDF permutation test ----------------------------------------------------------------


def _brute_delta_p(a, b):
    """The one-sided permutation p of the Δ-EDF test by a plain loop: centre each sample on its median,
    pool, and over every split compare sup (F_first - F_second) of the re-referenced Δ-EDFs."""
    pooled = np.concatenate([a - np.median(a), b - np.median(b)])

    def above(x, y):
        dx, dy = x - x.min(), y - y.min()
        return max(np.mean(dx <= t) - np.mean(dy <= t) for t in np.concatenate([dx, dy]))

    observed, hits, total = above(a, b), 0, 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        mask = np.zeros(len(pooled), bool)
        mask[list(chosen)] = True
        hits += above(pooled[mask], pooled[~mask]) >= observed - 1e-12
        total += 1
    return hits / total


def test_delta_edf_test_counts_permutations_exactly():
    """4 vs 4 (70 splits, enumerated): each one-sided p is the share of splits at least as extreme,
    computed here by a plain loop."""
    a, b = np.array([0.0, 1.0, 2.0, 3.0]), np.array([0.0, 4.0, 8.0, 12.0])
    result = ks_pair(a, b)
    assert (result.d_a_better, result.d_b_better) == (0.75, 0.0)
    assert result.p_a_better == pytest.approx(_brute_delta_p(a, b)) and result.p_b_better == 1.0
    assert result.test.p == pytest.approx(min(1.0, 2 * result.p_a_better)) and result.test.estimate == 0.75
    assert result.test.floor == pytest.approx(2 / 70)
    rng = np.random.default_rng(4)
    for _ in range(3):
        x, y = rng.normal(0, 1, 4), rng.normal(3, 2, 5)
        got = ks_pair(x, y)
        assert (got.p_a_better, got.p_b_better) == pytest.approx((_brute_delta_p(x, y), _brute_delta_p(y, x)))
    # a shift leaves the Δ-EDFs (errors minus their own best) the same: nothing to find
    shifted = ks_pair(np.array([1.0, 2.0, 3.0, 4.0]), np.array([5.0, 6.0, 7.0, 8.0]))
    assert shifted.test.estimate == 0.0 and shifted.test.p == 1.0
    # 3 vs 3: 2 of C(6, 3) = 20 splits at best, both directions: the design cannot reach 5%
    assert ks_pair(np.arange(3.0), np.arange(3.0) * 5).test.floor == pytest.approx(0.1)


def test_ks_power_is_the_share_of_simulated_studies_decided():
    """A power is a probability: b's errors 20 times as spread as a's (D = 0.95) at 10 vs 10 are
    decided in most of 100 studies, and in no more than all of them."""
    power = ks_power(0.95, (10, 10), n_sim=100)
    assert 0.5 < power <= 1.0 and power * 100 == round(power * 100)


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
