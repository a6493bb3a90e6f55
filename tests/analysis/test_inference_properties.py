"""Properties of the inference layer (hpstudy.analysis.inference, montecarlo), over generated samples and
levels (Hypothesis): every p lies in [0, 1] (a Monte-Carlo p inside its interval); a two-sided test asks
one question whichever group comes first; and a verdict is given only where the p, and its Monte-Carlo
interval, lie at or below alpha, for any alpha, so that a verdict at one alpha stays a verdict at any larger
one. Holm's adjustment is the step-down procedure, in any order of the family.

What tests/analysis/test_findings_properties.py already holds at the default alpha (Welch and the Δ-EDF
test symmetric in two groups, the Δ-EDF p settled, Holm's interval bounds) is not repeated here.
"""

import numpy as np
import pytest
import scipy
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis import inference
from hpstudy.analysis.inference import best_contrast, canonical, delta_test, holm, welch
from hpstudy.analysis.montecarlo import MonteCarloP

ALPHAS = st.sampled_from([0.001, 0.01, 0.05, 0.1, 0.2, 0.5])
# errors as stored: percentages kept to 2 decimals, with ties
ERRORS = st.floats(0.0, 50.0).map(lambda x: round(x, 2))
SEEDS = st.lists(ERRORS, min_size=2, max_size=6).map(np.array)  # a configuration repeated over seeds
BESTS = st.lists(ERRORS, min_size=1, max_size=6).map(np.array)  # random samples of one cell


def _decided_only_below_alpha(t: inference.Test) -> None:
    """The p in [0, 1] and inside its interval; a verdict only where the design reaches alpha and the p and
    its whole interval lie at or below it; a p above alpha never decides."""
    if t.p is None:
        assert not t.significant and t.why_untestable
        return
    assert 0 <= t.p <= 1 and 0 <= t.floor <= 1
    if t.mc is not None:
        assert 0 <= t.mc[0] <= t.p <= t.mc[1] <= 1
        assert t.borderline == (t.mc[0] < t.alpha < t.mc[1])
    if t.significant:
        assert t.floor <= t.alpha and t.p <= t.alpha and (t.mc is None or t.mc[1] <= t.alpha)
    else:
        assert t.p > t.alpha or t.floor > t.alpha or t.borderline


# ---- Welch ---------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Precision loss occurred:RuntimeWarning")  # scipy's, on near-equal seeds
@settings(max_examples=100)
@given(SEEDS, SEEDS, ALPHAS)
def test_welch_of_two_groups_is_scipys_and_its_interval_excludes_zero_exactly_when_it_decides(x, y, alpha):
    t = welch([x, y], (1.0, -1.0), alpha=alpha)
    _decided_only_below_alpha(t)
    if t.p is None:
        assert np.var(x) + np.var(y) == 0 or min(len(x), len(y)) < 2
        return
    scipy_p = scipy.stats.ttest_ind(x, y, equal_var=False).pvalue
    assert t.p == pytest.approx(scipy_p, rel=1e-9, abs=1e-300) and t.estimate == pytest.approx(x.mean() - y.mean())
    assert t.level == 1 - alpha and t.ci[0] <= t.estimate <= t.ci[1]
    if abs(t.p - alpha) > 1e-9:  # the interval is the test inverted: it holds 0 exactly where p > alpha
        assert t.significant == (not t.ci[0] <= 0 <= t.ci[1])


@settings(max_examples=100)
@given(st.lists(SEEDS, min_size=4, max_size=4), ALPHAS)
def test_a_welch_difference_of_gaps_has_one_p_in_any_order_of_its_models_and_cells(groups, alpha):
    """(a1 - a2) - (b1 - b2): listing model b first, or each model's cells the other way round, negates the
    estimate and its interval and keeps the p and the verdict."""
    weights = (1.0, -1.0, -1.0, 1.0)
    base = welch(groups, weights, alpha=alpha)
    _decided_only_below_alpha(base)
    for order in ([2, 3, 0, 1], [1, 0, 3, 2]):
        other = welch([groups[i] for i in order], weights, alpha=alpha)
        assert other.estimate == pytest.approx(-base.estimate, abs=1e-9)
        if base.p is None:
            assert other.p is None
            continue
        assert other.p == pytest.approx(base.p, rel=1e-9, abs=1e-300) and other.significant == base.significant
        assert other.ci == pytest.approx((-base.ci[1], -base.ci[0]), abs=1e-9)


# ---- the best rule --------------------------------------------------------------------------------------


@settings(max_examples=20)
@given(BESTS, BESTS, st.lists(ALPHAS, min_size=2, max_size=3, unique=True))
def test_the_best_rule_decides_only_below_alpha_and_at_every_larger_alpha(x, y, alphas):
    """A verdict at one alpha (p and interval below it) is a verdict at any larger alpha."""
    alphas = sorted(alphas)
    tests = [best_contrast([x, y], (1.0, -1.0), alpha=a) for a in alphas]
    for t in tests:
        _decided_only_below_alpha(t)
        assert t.estimate == x.min() - y.min() and t.n == (len(x), len(y))
    decided = [t.significant for t in tests]
    assert decided == sorted(decided)  # False ... False True ... True


# ---- the Δ-EDF test -------------------------------------------------------------------------------------


GRID = st.integers(0, 40).map(lambda k: float(np.float32(100 * k / 360)))  # k of 360 images, as stored
DELTA_SAMPLES = st.lists(st.one_of(GRID, ERRORS), min_size=2, max_size=7).map(np.array)


@settings(max_examples=25)
@given(DELTA_SAMPLES, DELTA_SAMPLES, st.lists(ALPHAS, min_size=2, max_size=3, unique=True))
def test_the_delta_edf_test_decides_only_below_alpha_and_at_every_larger_alpha(ea, eb, alphas):
    alphas = sorted(alphas)
    results = [delta_test(ea, eb, alpha=a) for a in alphas]
    for r in results:
        _decided_only_below_alpha(r.test)
        assert 0 <= r.test.estimate <= 1
        assert r.test.p == results[0].test.p  # every split enumerated: one exact p, whatever alpha
    decided = [r.test.significant for r in results]
    assert decided == sorted(decided)


# ---- Monte-Carlo p-values -------------------------------------------------------------------------------


@settings(max_examples=200)
@given(st.integers(1, 320_000).flatmap(lambda d: st.tuples(st.integers(0, d), st.just(d))), st.booleans())
def test_a_monte_carlo_p_lies_in_its_interval_and_is_settled_only_outside_it(hits_draws, exact):
    hits, draws = hits_draws
    mc = MonteCarloP(hits, draws, exact=exact)
    assert 0 < mc.p <= 1 or (exact and hits == 0)
    if exact:
        assert mc.p == hits / draws and mc.interval is None and mc.settled([mc.p, 0.05])
        return
    low, high = mc.interval
    assert 0 <= low <= hits / draws <= high <= 1 and low <= mc.p <= high
    for alpha in (0.001, 0.01, 0.05):
        assert mc.settled([alpha]) == (not low < alpha < high)


# ---- Holm ------------------------------------------------------------------------------------------------


def _step_down(ps, alpha: float) -> set:
    """Holm's procedure as Holm (1979) states it: with the p's ascending, reject while p_(k) <= alpha / (m - k)
    (k from 0), stop at the first that is not."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    rejected = set()
    for k, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - k):
            break
        rejected.add(i)
    return rejected


P_VALUES = st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.01, 0.0125, 0.025, 0.05, 1.0]))


@settings(max_examples=200)
@given(st.lists(P_VALUES, min_size=1, max_size=10), st.randoms(use_true_random=False))
def test_holm_is_the_step_down_procedure_in_any_order_of_the_family(ps, rng):
    adjusted = holm(ps)
    assert np.all((np.array(ps) <= adjusted) & (adjusted <= 1))
    for i in range(len(ps)):
        for j in range(len(ps)):
            if ps[i] <= ps[j]:
                assert adjusted[i] <= adjusted[j]  # the order of the p's kept
    for alpha in (0.01, 0.05, 0.1):
        # exactly at a boundary the float product m * p may land on either side: those alphas are not asked
        if all(abs(a - alpha) > 1e-12 for a in adjusted):
            assert {i for i, a in enumerate(adjusted) if a <= alpha} == _step_down(ps, alpha)
    order = list(range(len(ps)))
    rng.shuffle(order)
    assert holm([ps[i] for i in order]).tolist() == adjusted[order].tolist()


@pytest.mark.parametrize(
    "rule,groups,why",
    [
        (welch, [[10.0], [12.0, 13.0]], "fewer than 2 seeds (n = 1/2)"),
        (welch, [[10.0, 10.0], [10.0, 10.0]], "the seeds gave identical errors"),
        (best_contrast, [[], [12.0, 13.0]], "no trial"),
        (best_contrast, [[10.0, 11.0], [], [1.0], [2.0]], "no trial"),
    ],
)
def test_a_test_without_a_p_says_why(rule, groups, why):
    """Every rule, on data it cannot test: no p, no verdict, and the reason the finding's sentence shows."""
    weights = (1.0, -1.0) if len(groups) == 2 else (1.0, -1.0, -1.0, 1.0)
    t = rule([np.asarray(g, float) for g in groups], weights)
    assert t.p is None and not t.significant and t.why_untestable == why


@given(st.lists(st.integers(0, 360), min_size=1, max_size=12), st.lists(st.integers(0, 360), min_size=1, max_size=12))
def test_two_samples_are_put_in_one_order_whatever_their_dtype(a, b):
    """canonical orders two samples by their values, so integer counts and the same numbers as floats (and
    float32 errors of whole points) draw the same splits."""
    as_float = canonical(np.array(a, float), np.array(b, float))[2]
    for dtype in (np.int64, np.int32, np.float32):
        assert canonical(np.array(a, dtype), np.array(b, dtype))[2] == as_float
