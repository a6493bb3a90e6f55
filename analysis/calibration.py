"""Measured error rates: each verdict rule run on simulated studies, without and with an effect.

`measure` runs one rule (`RULES_MEASURED`) on `studies` simulated studies at n trials per group and
returns the share decided (the false-decision rate without an effect, the power with one) and its
Monte-Carlo standard error. Null studies draw every group from one distribution (`NULLS`); effect
studies shift (or, for the Δ-EDF test, widen) the first group. The rules are the report's own
functions (`hpstudy.analysis.inference`), plus the rules they replaced (`naive_*`: the 95% bootstrap
percentile interval of a difference of bests; `plain_ks`: scipy's KS test on Δ-errors, taking each
model's best as known), so the table in docs/calibration.md shows both. Seeds differ from the calibration's own
(`inference.CALIBRATION_SEED`).
"""

from typing import Any, Callable, Dict, Tuple

import numpy as np
from scipy import stats as sps

from hpstudy.analysis.inference import ALPHA, ContrastLaw, best_contrast, ks_pair, min_law, welch

PAIR, SINGLE = (1.0, -1.0, -1.0, 1.0), (1.0, -1.0)
NULLS: Dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "normal": lambda rng, n: rng.standard_normal(n),
    "skewed": lambda rng, n: rng.gamma(2.0, 1.0, n) / np.sqrt(2.0),  # sd 1, a long right tail
    "shifted": lambda rng, n: rng.standard_normal(n),  # the Δ-EDF null: one shape, group k moved by k x 3 sd
    "unequal": lambda rng, n: rng.standard_normal(n),  # equal means, sd 3 for groups 0 and 2, 1 for 1 and 3
}
LOCATION_SHIFT = 3.0


def _spread(null: str, k: int) -> float:
    """Group k's sd under the `unequal` null (a Welch null, and for four groups of bests the symmetric
    null: both models have the same SGD and the same AdamW law); 1 otherwise."""
    return 3.0 if null == "unequal" and k % 2 == 0 else 1.0


def _welch(groups, weights) -> bool:
    return welch(groups, weights).significant


def _best(groups, weights) -> bool:
    return best_contrast(groups, weights).significant


def _naive_best(groups, weights) -> bool:
    """The rule before: decided when the 95% bootstrap interval of the contrast of bests excludes 0."""
    return ContrastLaw([min_law(g) for g in groups], weights).raw_p() < ALPHA


def _plain_ks(groups, weights) -> bool:
    """The rule before for Δ-EDFs: scipy's one-sided KS tests on Δ-errors at α/2 each."""
    a, b = groups
    da, db = a - a.min(), b - b.min()
    return min(sps.ks_2samp(da, db, alternative=side).pvalue for side in ("greater", "less")) <= ALPHA / 2


def _ks(groups, weights) -> bool:
    """The Δ-EDF test with 999 permutations (the report uses N_PERM; a permutation p is valid at any number)."""
    return ks_pair(groups[0], groups[1], n_perm=999).test.significant


RULES_MEASURED: Dict[str, Tuple[Callable, Tuple[float, ...], str]] = {
    "welch": (_welch, SINGLE, "Welch t, difference of two seed means (gaps, peaks)"),
    "welch_pair": (_welch, PAIR, "Welch t, difference of two gaps (four seed means)"),
    "best": (_best, SINGLE, "calibrated exact bootstrap, difference of two bests"),
    "best_pair": (_best, PAIR, "calibrated exact bootstrap, difference of two gaps of bests"),
    "ks": (_ks, SINGLE, "Δ-EDFs, two one-sided KS tests at α/2"),
    "plain_ks": (_plain_ks, SINGLE, "before: Δ-EDFs, one-sided KS at α/2 with the references taken as known"),
    "naive_best": (_naive_best, SINGLE, "before: 95% bootstrap interval of a difference of bests"),
    "naive_best_pair": (_naive_best, PAIR, "before: 95% bootstrap interval of a difference of gaps"),
}
EFFECTS = {"shift": "the first group shifted by `effect` sd", "spread": "the first group's sd times `effect`"}


def measure(
    rule: str, n: int, studies: int = 2000, null: str = "normal", effect: float = 0.0, seed: int = 1
) -> Dict[str, Any]:
    """The share of `studies` simulated studies (n per group) that `rule` decides, with its Monte-Carlo
    standard error. effect = 0: every group from `null` (the false-decision rate); otherwise the first
    group shifted by `effect` sd (for the Δ-EDF rules: its spread multiplied by `effect`, as a shift
    leaves Δ-EDFs alone), which gives the power. The standard error is at alpha without an effect."""
    decide, weights, _ = RULES_MEASURED[rule]
    draw = NULLS[null]
    rng = np.random.default_rng([seed, n, len(weights), sorted(RULES_MEASURED).index(rule)])
    hits = 0
    for _ in range(studies):
        groups = [
            _spread(null, k) * draw(rng, n) + (LOCATION_SHIFT * k if null == "shifted" else 0.0)
            for k in range(len(weights))
        ]
        if effect and rule.endswith("ks"):
            groups[0] = groups[0] * effect
        elif effect:
            groups[0] = groups[0] + effect
        hits += bool(decide(groups, weights))
    rate = hits / studies
    return {
        "rule": rule,
        "n": n,
        "null": null,
        "effect": effect,
        "studies": studies,
        "rate": rate,
        "mc_se": float(np.sqrt((rate * (1 - rate) if effect else ALPHA * (1 - ALPHA)) / studies)),
    }
