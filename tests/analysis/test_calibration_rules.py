"""The replaced rules that docs/calibration.md measures beside the report's own, on hand-made samples
(fast: one call of a rule, no simulated studies; the error rates are in test_calibration.py)."""

import numpy as np
from scipy import stats

from hpstudy.analysis.calibration import RULES_MEASURED
from hpstudy.analysis.inference import ALPHA

PLAIN_KS = RULES_MEASURED["plain_ks"][0]
SPREAD = np.linspace(0.0, 1.0, 20)  # 20 errors, 1 point from first to last


def test_plain_ks_takes_each_models_own_best_as_its_reference():
    """Samples of one shape 3 points apart have equal Δ-errors (error - own best): nothing to decide;
    a sample 3 times as wide has Δ-EDFs D = 2/3 apart (scipy: p far below α/2): decided."""
    assert not PLAIN_KS([SPREAD, SPREAD + 3.0], None)
    wide = 3.0 * SPREAD + 5.0
    assert stats.ks_2samp(SPREAD, wide - 5.0, alternative="greater").pvalue < ALPHA / 100
    assert PLAIN_KS([SPREAD, wide], None)
