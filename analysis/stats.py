"""Statistics on trial errors: EDF comparisons, expected best-of-k, good lr/wd ranges, importance.

Functions on arrays of errors leave out non-finite values (a failed trial's null error) and say how
many (`hpstudy.analysis.metric.finite`); functions on tables leave out failed rows and non-finite errors
under the chosen metric (`hpstudy.analysis.metric.usable`). Both report the count as `n_left_out`.
"""

import math
from typing import Dict, Iterable

import numpy as np
import pandas as pd
from scipy.special import gammaln

from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, finite, usable
from hpstudy.trainers.errors import HpstudyError

ESTIMATORS = ("plugin", "unbiased")


class StatsError(HpstudyError, ValueError):
    """An estimator asked for what its sample cannot give, or an unknown estimator."""


def expected_best(errors: np.ndarray, ks: Iterable[int], estimator: str = "unbiased") -> np.ndarray:
    """Expected minimum error over k random trials from the n observed (finite errors), for each k.

    plugin (Dodge et al. 2019), k draws with replacement: sum_i v_(i) [(i/n)^k - ((i-1)/n)^k];
    unbiased (Tang et al. 2020), k draws without replacement: sum_i v_(i) C(i-1, k-1) / C(n, k).
    Here v_(1) >= ... >= v_(n) are the errors from worst to best, so both give the expected *best*.
    StatsError for an unknown estimator, no finite error, no k, or a k outside [1, n] (naming n):
    neither estimator extrapolates beyond the trials run.
    """
    if estimator not in ESTIMATORS:
        raise StatsError(f"expected_best: estimator: bad value {estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    v = np.sort(finite(errors, "expected_best")[0])[::-1]
    n = len(v)
    ks = np.asarray(list(ks), dtype=int)
    _check_budgets(ks, n)
    i = np.arange(1, n + 1, dtype=float)
    if estimator == "plugin":
        weights = (i[None, :] / n) ** ks[:, None] - ((i[None, :] - 1) / n) ** ks[:, None]
    else:
        k = ks[:, None].astype(float)
        log_w = (gammaln(i) - gammaln(k) - gammaln(i - k + 1)) - (gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1))
        weights = np.where(i[None, :] >= k, np.exp(log_w), 0.0)
    return weights @ v


def _check_budgets(ks: np.ndarray, n: int) -> None:
    """StatsError unless there are n >= 1 finite errors and one or more budgets k, each in [1, n]."""
    if not n:
        raise StatsError(
            "expected_best: errors: no finite error (n = 0 trials); allowed: at least one trial with a finite error"
        )
    allowed = (
        f"k must be in [1, {n}] for n = {n} trials (finite errors): the expected best is not "
        f"extrapolated beyond the trials observed"
    )
    if not len(ks):
        raise StatsError(f"expected_best: ks: bad value [] (no k); {allowed}")
    if ks.min() < 1 or ks.max() > n:
        raise StatsError(f"expected_best: ks: bad value {ks.min()}..{ks.max()}; {allowed}")


def expected_best_band(
    errors: np.ndarray,
    ks: Iterable[int],
    estimator: str = "unbiased",
    n_boot: int = 500,
    seed: int = 0,
    alpha: float = 0.05,
):
    """Pointwise bootstrap (1 - alpha) band of the expected-best curve of the finite errors:
    (low, high) arrays."""
    errors, _ = finite(errors, "expected_best_band")
    rng = np.random.default_rng(seed)
    curves = np.stack([expected_best(rng.choice(errors, len(errors)), ks, estimator) for _ in range(n_boot)])
    return np.quantile(curves, alpha / 2, axis=0), np.quantile(curves, 1 - alpha / 2, axis=0)


def good_ranges(
    frame: pd.DataFrame, metric: str = DEFAULT_METRIC, n_boot: int = 2500, frac: float = 0.25, seed: int = 0
) -> pd.DataFrame:
    """pycls/RegNet good ranges (`get_filters`): n_boot bootstrap samples of max(1, int(frac * n))
    trials drawn with replacement (`default_rng(seed).integers(0, n, (n_boot, size))`), the best
    trial of each (first on ties), and the 2.5/50/97.5 percentiles of its log10 lr, log10 wd and
    log10 lr*wd (rows). n counts the trials left under `metric` (failed rows and non-finite errors
    left out); the columns `n`, `sample_size`, `n_left_out` and `metric` say so."""
    rows = usable(frame, metric, "good_ranges")
    n = len(rows.kept)
    if not n:
        raise ValueError("good_ranges: no trial counts (all failed or without a finite error)")
    size = max(1, int(frac * n))
    draws = np.random.default_rng(seed).integers(0, n, size=(n_boot, size))
    best = draws[np.arange(n_boot), np.argmin(rows.kept[ERR].to_numpy()[draws], axis=1)]
    logs = {
        "log10_lr": np.log10(rows.kept["lr"].to_numpy(float)),
        "log10_wd": np.log10(rows.kept["wd"].to_numpy(float)),
    }
    logs["log10_lr_wd"] = logs["log10_lr"] + logs["log10_wd"]
    table = pd.DataFrame(
        {name: np.percentile(values[best], [2.5, 50, 97.5]) for name, values in logs.items()},
        index=["p2.5", "p50", "p97.5"],
    )
    return table.assign(n=n, sample_size=size, n_left_out=len(rows.left_out), metric=rows.metric)


def hp_importance(frame: pd.DataFrame, metric: str = DEFAULT_METRIC, seed: int = 0) -> Dict:
    """fANOVA importance of lr and wd (optuna's evaluator fed with the trials as a finished study),
    on the `metric` error; failed rows and non-finite errors left out (`n_left_out`)."""
    import optuna

    rows = usable(frame, metric, "hp_importance")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one "trial added" line per row otherwise
    try:
        importance = _fanova(optuna, rows.kept, seed)
    finally:
        optuna.logging.set_verbosity(verbosity)
    return {**importance, "n_left_out": len(rows.left_out), "metric": rows.metric}


def _fanova(optuna, kept: pd.DataFrame, seed: int) -> Dict[str, float]:
    distributions = {
        name: optuna.distributions.FloatDistribution(kept[name].min(), kept[name].max(), log=True)
        for name in ("lr", "wd")
    }
    study = optuna.create_study(direction="minimize")
    for lr, wd, value in kept[["lr", "wd", ERR]].itertuples(index=False):
        study.add_trial(
            optuna.trial.create_trial(params={"lr": lr, "wd": wd}, distributions=distributions, value=value)
        )
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True))


def trials_for_dkw(half_width: float, alpha: float = 0.05) -> int:
    """Trials per model for a DKW band of the given half-width: ceil(ln(2/alpha) / (2 eps^2))."""
    return math.ceil(math.log(2.0 / alpha) / (2.0 * half_width**2))
