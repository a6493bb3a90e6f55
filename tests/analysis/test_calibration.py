"""Every verdict rule the report uses holds its error rate at the n users run, under every null it
claims (`calibration.HELD`: continuous errors, errors on grids of validation images, diverged trials,
models at different locations), and detects a real effect; the rules it replaced do not hold theirs.

A guard, sized for CI (slow tier): the cheap rules (Welch's) at 2,000 simulated studies per rule, null
and n; the costly ones (the bests' resampling tests, the Δ-EDF test) at fewer studies and the n users
run, against a limit that widens with fewer studies. The full measurement, 2,000 studies per cell, is
`python -m bench.calibration` (hours on 2 cores), its tables in docs/calibration.md."""

import math

import pytest

from hpstudy.analysis.calibration import HELD, measure
from hpstudy.analysis.inference import ALPHA

# simulated studies per cell, and the n each rule is checked at: every n for Welch's (milliseconds a
# cell), the n users run for the rest (the bests' rules resample: ~0.1 s a study on one core)
STUDIES = {"welch": 2000, "welch_pair": 2000, "best": 150, "best_pair": 150, "delta": 300}
NS = {"welch": (3, 8, 24, 64), "welch_pair": (3, 8, 24, 64), "best": (24,), "best_pair": (24,), "delta": (8, 24)}


def limit(studies: int) -> float:
    """alpha + 3 Monte-Carlo standard errors at alpha."""
    return ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / studies)


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule,null,n", [(rule, null, n) for rule, nulls in HELD.items() for null in nulls for n in NS[rule]]
)
def test_a_rule_decides_at_most_alpha_of_null_studies(rule, null, n):
    got = measure(rule, n, STUDIES[rule], null=null, seed=7)
    assert got["rate"] <= limit(STUDIES[rule]), got


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule,effect", (("welch", 2.0), ("welch_pair", 2.0), ("best", 1.0), ("best_pair", 1.0), ("delta", 2.0))
)
def test_a_rule_detects_a_real_effect_at_24(rule, effect):
    studies = min(400, 2 * STUDIES[rule])
    null, real = measure(rule, 24, studies, seed=8), measure(rule, 24, studies, effect=effect, seed=8)
    assert real["rate"] > null["rate"] + 3 * real["mc_se"], (null, real)


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule,null", (("naive_best", "normal"), ("plain_ks", "normal"), ("median_ks", "grid360_narrow"))
)
def test_the_rules_replaced_decided_too_often(rule, null):
    assert measure(rule, 24, 2000, null=null, seed=7)["rate"] > limit(2000)


@pytest.mark.slow
def test_the_best_rule_decides_equal_expected_bests_with_unequal_spreads_so_its_sentence_does_not_claim_the_best():
    """Its null is one distribution: two cells with one expected best of n and spreads 1 and 2 are decided
    far more often than alpha, nearly always for the narrow cell; the sentence says `lowest errors`."""
    got = measure("best", 24, 300, null="equal_best", seed=7)
    assert got["rate"] > limit(300), got
