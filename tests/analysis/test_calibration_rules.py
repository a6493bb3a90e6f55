"""The replaced rules that docs/calibration.md measures beside the report's own, on hand-made samples,
and the simulated nulls, checked to be what they say (fast: no rates; those are in test_calibration.py)."""

import math

import numpy as np
import pytest
import scipy

from hpstudy.analysis.calibration import CHANCE, GRIDS, HELD, NULLS, RULES_MEASURED, STEP_360, expected_best, measure
from hpstudy.analysis.inference import ALPHA

PLAIN_KS = RULES_MEASURED["plain_ks"][0]
SPREAD = np.linspace(0.0, 1.0, 20)  # 20 errors, 1 point from first to last


def test_plain_ks_takes_each_models_own_best_as_its_reference():
    """Samples of one shape 3 points apart have equal Δ-errors (error - own best): nothing to decide;
    a sample 3 times as wide has Δ-EDFs D = 2/3 apart (scipy: p far below α/2): decided."""
    assert not PLAIN_KS([SPREAD, SPREAD + 3.0], None)
    wide = 3.0 * SPREAD + 5.0
    assert scipy.stats.ks_2samp(SPREAD, wide - 5.0, alternative="greater").pvalue < ALPHA / 100
    assert PLAIN_KS([SPREAD, wide], None)


# ---- the nulls, as they are stated ------------------------------------------------------------------


@pytest.mark.parametrize("name", GRIDS + ("grid360_shifted",))
def test_a_grid_null_draws_whole_images_of_its_step(name):
    """Errors on a grid: every value is k steps (of 100/360, 0.1 or 1 point), k >= 0; the shifted grid's
    second model sits 7 steps higher."""
    step = {"grid01": 0.1, "grid1": 1.0}.get(name, STEP_360)
    rng = np.random.default_rng(0)
    for k in (0, 1):
        errors = NULLS[name](rng, 500, k)
        steps = errors / step
        assert np.allclose(steps, np.round(steps), atol=1e-9) and errors.min() >= 0
        assert len(np.unique(errors)) < 60  # ties: few distinct values among 500
    if name == "grid360_shifted":
        assert np.mean(NULLS[name](rng, 4000, 1)) - np.mean(NULLS[name](rng, 4000, 0)) == pytest.approx(
            7 * step, abs=0.05
        )


def test_the_diverged_null_puts_a_tenth_of_trials_at_chance():
    errors = NULLS["diverged"](np.random.default_rng(1), 20000, 0)
    assert np.mean(errors == CHANCE) == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize("n", (8, 24))
def test_the_equal_best_null_has_one_expected_best_and_unequal_spreads(n):
    """Groups 0 and 1: sd 1 and 2, the same expected best of n (by simulation, against the integral)."""
    rng = np.random.default_rng(2)
    narrow = np.array([NULLS["equal_best"](rng, n, 0).min() for _ in range(20000)])
    wide = np.array([NULLS["equal_best"](rng, n, 1) for _ in range(20000)])
    assert narrow.mean() == pytest.approx(expected_best(n), abs=0.02)
    assert wide.min(axis=1).mean() == pytest.approx(narrow.mean(), abs=0.04)
    assert wide.std() == pytest.approx(2.0, rel=0.05)


def test_measure_counts_decisions_with_the_rates_own_standard_error():
    got = measure("naive_best", 8, 200, null="normal", seed=3)
    assert got["rate"] * 200 == round(got["rate"] * 200) and 0 < got["rate"] < 1
    assert got["mc_se"] == pytest.approx(math.sqrt(got["rate"] * (1 - got["rate"]) / 200))
    assert set(HELD) == {"welch", "welch_pair", "best", "best_pair", "delta"}
    assert all(null in NULLS for nulls in HELD.values() for null in nulls)


@pytest.mark.parametrize("name", [n for n, (_, weights, _) in RULES_MEASURED.items() if len(weights) == 2])
def test_every_two_group_rule_decides_a_far_pair_and_not_a_sample_against_its_copy(name):
    """Each rule the calibration measures, on the same data in both orders: 30 trials 10 points apart (and
    spread unlike each other) decide; a sample against an exact copy of itself does not (a p of 1)."""
    rule, weights, _ = RULES_MEASURED[name]
    rng = np.random.default_rng(3)
    near = 10 + rng.exponential(1.0, 30)
    far = 20 + rng.exponential(4.0, 30)
    if name != "delta_oracle":  # the oracle is told the groups share a location: a shift is not its question
        assert rule([near, far], weights) and rule([far, near], weights)
    else:
        assert rule([near, 10 + (near - 10) * 6], weights)  # one location, another spread
    assert not rule([near, near.copy()], weights)
