"""Every verdict rule the report uses holds its error rate at the n users run (slow: 2,000 simulated
studies per rule and n), and detects a real effect; the rules it replaced do not hold theirs."""

import math

import pytest

from hpstudy.analysis.calibration import measure
from hpstudy.analysis.inference import ALPHA

STUDIES = 2000
LIMIT = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / STUDIES)  # alpha + 3 Monte-Carlo standard errors
USED = ("welch", "welch_pair", "best", "best_pair", "ks")


NULLS = [(rule, "normal") for rule in USED] + [("ks", "shifted"), ("welch", "unequal"), ("welch_pair", "unequal")]


@pytest.mark.slow
@pytest.mark.parametrize("n", (3, 8, 24, 64))
@pytest.mark.parametrize("rule,null", NULLS)
def test_a_rule_decides_at_most_alpha_of_null_studies(rule, null, n):
    """normal: every group from one distribution; shifted (the Δ-EDF null): one shape, the models 3 sd
    apart; unequal (Welch's null): equal means, sds 3 and 1."""
    got = measure(rule, n, STUDIES, null=null, seed=7)
    assert got["rate"] <= LIMIT, got


@pytest.mark.slow
@pytest.mark.parametrize(
    "rule,effect", (("welch", 2.0), ("welch_pair", 2.0), ("best", 1.0), ("best_pair", 1.0), ("ks", 2.0))
)
def test_a_rule_detects_a_real_effect_at_24(rule, effect):
    null, real = measure(rule, 24, 400, seed=8), measure(rule, 24, 400, effect=effect, seed=8)
    assert real["rate"] > null["rate"] + 3 * real["mc_se"], (null, real)


@pytest.mark.slow
@pytest.mark.parametrize("rule", ("naive_best", "plain_ks"))
def test_the_rules_replaced_decided_too_often(rule):
    assert measure(rule, 24, STUDIES, seed=7)["rate"] > LIMIT
