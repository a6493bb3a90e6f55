"""Statistics on trial errors: EDF comparisons, expected best-of-k, good lr/wd ranges, importance.

Functions on arrays of errors leave out non-finite values (a failed trial's null error) and say how
many (`hpstudy.analysis.metric.finite`); functions on tables leave out failed rows and non-finite errors
under the chosen metric (`hpstudy.analysis.metric.usable`). Both report the count as `n_left_out`.
"""

import math
from typing import Dict, Iterable, Mapping, Sequence, Union

import numpy as np
import pandas as pd
from scipy.special import gammaln

from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, finite, usable
from hpstudy.trainers.errors import HpstudyError

ESTIMATORS = ("plugin", "unbiased")
# how a study samples a hyperparameter (hpstudy.study.spec.DISTRIBUTIONS; a spec record's `sampled`)
DISTRIBUTIONS = ("log_uniform", "uniform", "int", "choice")
Keys = Union[Sequence[str], Mapping[str, str]]  # hyperparameter names (log-uniform), or name -> distribution


class StatsError(HpstudyError, ValueError):
    """An estimator asked for what its sample cannot give, or an unknown estimator."""


# The fANOVA forest's tree depth. Optuna's default (64) grows every tree to its leaves, so the cost grows
# as about n^1.6 per cell (5 s at 200 trials, 39 s at 1,600 on 2 cores); at 8 levels (at most 256 leaves a
# tree) it stays at 1-6 s for 200-5,000 trials, and on a bowl with a known variance split (lr 0.941,
# wd 0.059) it gives the same importances as the default within 0.003 (tests/analysis/test_stats.py).
IMPORTANCE_DEPTH = 8
# importance_interval: bootstrap refits and evaluator seeds per cell (each refit is a forest: 0.3-1.6 s a cell of
# 24-1,600 trials on 2 cores, so intervals are asked for, `hpstudy importance`, not drawn in every report)
IMPORTANCE_RESAMPLES = 20
IMPORTANCE_SEEDS = 5
# a curve over budgets k = 1..n (expected best, best of k) is computed at every k up to BUDGET_DENSE and at about
# BUDGET_POINTS geometric steps from there to n: its weights are a (budgets x n) matrix, so every k of a cell of
# 8,000 trials was 0.5 GB and O(n^2) time; a log axis shows no more than these (docs/performance.md)
BUDGET_DENSE = 64
BUDGET_POINTS = 100


def budget_grid(n: int) -> np.ndarray:
    """The budgets k at which a curve over 1..n is computed: every k up to BUDGET_DENSE, then about BUDGET_POINTS
    geometrically spaced whole numbers up to n, n itself included (all of 1..n for n <= BUDGET_DENSE)."""
    dense = np.arange(1, min(n, BUDGET_DENSE) + 1)
    if n <= BUDGET_DENSE:
        return dense
    return np.union1d(dense, np.geomspace(BUDGET_DENSE, n, BUDGET_POINTS).round().astype(int))


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
    return _best_weights(n, ks, estimator) @ v


def best_of_k_win(ea: np.ndarray, eb: np.ndarray, ks: Iterable[int], estimator: str = "unbiased") -> np.ndarray:
    """For each k, the probability that the best of k random trials of a has a lower error than the best of k
    of b, ties counted half (Sivaprasad et al. 2020's question, in closed form from the order statistics).

    Each best is distributed as `expected_best` weighs it (unbiased: k of the n trials without replacement,
    so at k = n_a = n_b it compares the observed bests; plugin: k draws with replacement), a and b independently;
    at k = 1 both give the probability of improvement (Mann-Whitney U / n_a n_b). StatsError as
    expected_best for either sample, and for a k above the smaller n."""
    if estimator not in ESTIMATORS:
        raise StatsError(f"best_of_k_win: estimator: bad value {estimator!r}; allowed: {', '.join(ESTIMATORS)}")
    a = np.sort(finite(ea, "best_of_k_win")[0])[::-1]
    b = np.sort(finite(eb, "best_of_k_win")[0])  # best last: b's weights reversed below
    ks = np.asarray(list(ks), dtype=int)
    _check_budgets(ks, min(len(a), len(b)), "best_of_k_win")
    wa, wb = _best_weights(len(a), ks, estimator), _best_weights(len(b), ks, estimator)[:, ::-1]
    # for each value of a, the mass of b's best above it (a wins) and at it (a tie, half)
    below, above = np.searchsorted(b, a, side="left"), np.searchsorted(b, a, side="right")
    upto = np.concatenate([np.zeros((len(ks), 1)), np.cumsum(wb, axis=1)], axis=1)  # b's mass below index j
    beaten = upto[:, -1:] - upto[:, above] + (upto[:, above] - upto[:, below]) / 2
    return np.clip(np.sum(wa * beaten, axis=1), 0.0, 1.0)


def _check_budgets(ks: np.ndarray, n: int, caller: str = "expected_best") -> None:
    """StatsError (naming `caller`) unless there are n >= 1 finite errors and one or more budgets k, each in
    [1, n]."""
    if not n:
        raise StatsError(
            f"{caller}: errors: no finite error (n = 0 trials); allowed: at least one trial with a finite error"
        )
    allowed = (
        f"k must be in [1, {n}] for n = {n} trials (finite errors): the best of k is not "
        f"extrapolated beyond the trials observed"
    )
    if not len(ks):
        raise StatsError(f"{caller}: ks: bad value [] (no k); {allowed}")
    if ks.min() < 1 or ks.max() > n:
        raise StatsError(f"{caller}: ks: bad value {ks.min()}..{ks.max()}; {allowed}")


def expected_best_band(
    errors: np.ndarray,
    ks: Iterable[int],
    estimator: str = "unbiased",
    n_boot: int = 500,
    seed: int = 0,
    alpha: float = 0.05,
):
    """Pointwise bootstrap (1 - alpha) band of the expected-best curve of the finite errors:
    (low, high) arrays. All n_boot resamples at once, the same ones (in the same order) as drawing
    them one by one from `default_rng(seed)`."""
    errors, _ = finite(errors, "expected_best_band")
    ks = np.asarray(list(ks), dtype=int)
    expected_best(errors, ks, estimator)  # StatsError for the estimator, the sample or the budgets
    resamples = np.sort(np.random.default_rng(seed).choice(errors, (n_boot, len(errors))), axis=1)[:, ::-1]
    curves = resamples @ _best_weights(len(errors), ks, estimator).T
    return np.quantile(curves, alpha / 2, axis=0), np.quantile(curves, 1 - alpha / 2, axis=0)


def _best_weights(n: int, ks: np.ndarray, estimator: str) -> np.ndarray:
    """The weights (len(ks), n) of `expected_best`: its value for each k is this matrix times the
    errors sorted from worst to best."""
    i = np.arange(1, n + 1, dtype=float)
    if estimator == "plugin":
        return (i[None, :] / n) ** ks[:, None] - ((i[None, :] - 1) / n) ** ks[:, None]
    k = ks[:, None].astype(float)
    log_w = (gammaln(i) - gammaln(k) - gammaln(i - k + 1)) - (gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1))
    return np.where(i[None, :] >= k, np.exp(log_w), 0.0)


def hp_kinds(keys: Keys) -> Dict[str, str]:
    """Sampled hyperparameters as name -> distribution; a name given alone is log-uniform (lr, wd)."""
    kinds = dict(keys) if isinstance(keys, Mapping) else {name: "log_uniform" for name in keys}
    for name, kind in kinds.items():
        if kind not in DISTRIBUTIONS:
            raise StatsError(f"keys: {name}: bad distribution {kind!r}; allowed: {', '.join(DISTRIBUTIONS)}")
    return kinds


def value_label(value) -> str:
    """A choice's value as a column name and a tick label say it: null for a missing value."""
    return "null" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def choice_values(column: pd.Series) -> list:
    """A sampled choice's distinct values in a column, sorted (by label where they do not compare), null as None."""
    distinct = list(dict.fromkeys(_plain(column, "choice")))
    try:
        return sorted(distinct)
    except TypeError:  # e.g. None among numbers or strings
        return sorted(distinct, key=value_label)


def good_ranges(
    frame: pd.DataFrame,
    metric: str = DEFAULT_METRIC,
    n_boot: int = 2500,
    frac: float = 0.25,
    seed: int = 0,
    keys: Keys = ("lr", "wd"),
) -> pd.DataFrame:
    """pycls/RegNet good ranges (`get_filters`): n_boot bootstrap samples of max(1, int(frac * n))
    trials drawn with replacement (`default_rng(seed).integers(0, n, (n_boot, size))`), the best
    trial of each (first on ties), and the 2.5/50/97.5 percentiles (rows) of its value of each sampled
    hyperparameter (`keys`, see hp_kinds; columns): `log10_<name>` for a log-uniform one, `<name>` for a
    uniform or int one, and log10 lr*wd (`log10_lr_wd`) when lr and wd are both log-uniform; a choice
    gets a column `<name>=<value>` per value, the share of the bootstrap's best trials with it (the
    same in each row). n counts the trials left under `metric` (failed rows and non-finite errors
    left out); the columns `n`, `sample_size`, `n_left_out` and `metric` say so."""
    rows = usable(frame, metric, "good_ranges")
    n = len(rows.kept)
    if not n:
        raise ValueError("good_ranges: no trial counts (all failed or without a finite error)")
    size = max(1, int(frac * n))
    draws = np.random.default_rng(seed).integers(0, n, size=(n_boot, size))
    best = draws[np.arange(n_boot), np.argmin(rows.kept[ERR].to_numpy()[draws], axis=1)]
    values: Dict[str, np.ndarray] = {}
    shares: Dict[str, float] = {}
    for name, kind in hp_kinds(keys).items():
        if kind == "choice":
            labels = np.array([value_label(v) for v in rows.kept[name]])
            for label in map(value_label, choice_values(rows.kept[name])):
                shares[f"{name}={label}"] = float(np.mean(labels[best] == label))
            continue
        column = rows.kept[name].to_numpy(float)
        if kind == "log_uniform":
            values[f"log10_{name}"] = np.log10(column)
        else:
            values[name] = column
        if {"log10_lr", "log10_wd"} <= set(values) and name in ("lr", "wd"):
            values["log10_lr_wd"] = values["log10_lr"] + values["log10_wd"]
    table = pd.DataFrame(
        {name: np.percentile(column[best], [2.5, 50, 97.5]) for name, column in values.items()},
        index=["p2.5", "p50", "p97.5"],
    )
    return table.assign(**shares, n=n, sample_size=size, n_left_out=len(rows.left_out), metric=rows.metric)


def hp_importance(frame: pd.DataFrame, metric: str = DEFAULT_METRIC, seed: int = 0, keys: Keys = ("lr", "wd")) -> Dict:
    """fANOVA importance of each sampled hyperparameter (`keys`, see hp_kinds; optuna's evaluator fed with
    the trials as a finished study), on the `metric` error; failed rows and non-finite errors left out
    (`n_left_out`)."""
    import optuna

    rows = usable(frame, metric, "hp_importance")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one "trial added" line per row otherwise
    try:
        importance = _fanova(optuna, rows.kept, seed, hp_kinds(keys))
    finally:
        optuna.logging.set_verbosity(verbosity)
    return {**importance, "n_left_out": len(rows.left_out), "metric": rows.metric}


def importance_interval(
    frame: pd.DataFrame,
    metric: str = DEFAULT_METRIC,
    keys: Keys = ("lr", "wd"),
    resamples: int = IMPORTANCE_RESAMPLES,
    seeds: int = IMPORTANCE_SEEDS,
    seed: int = 0,
) -> pd.DataFrame:
    """hp_importance with its run-to-run variation, a row per hyperparameter: the importance on all trials
    (evaluator seed `seed`), its bootstrap interval (`low`-`high`: 2.5-97.5% of `resamples` refits, refit r on the
    trials drawn with replacement by numpy's default_rng([seed, r]) and with evaluator seed seed + r, so the
    interval holds the seed's variation too) and the seed's own effect (`seed_low`-`seed_high`: the range over
    evaluator seeds seed .. seed + seeds - 1 on all trials). A resample whose errors are all equal has no variance
    to attribute and is left out (`refits`: the refits made). StatsError below 2 counted trials of different
    errors, or a count below 1."""
    kept = usable(frame, metric, "importance_interval")
    errors = kept.kept[ERR].to_numpy(float)
    if len(errors) < 2 or np.ptp(errors) == 0 or resamples < 1 or seeds < 1:
        raise StatsError(
            f"importance_interval: bad value n = {len(errors)} ({len(np.unique(errors))} distinct errors), resamples "
            f"= {resamples}, seeds = {seeds}; allowed: 2 or more counted trials of different errors, resamples >= 1 "
            "and seeds >= 1"
        )
    fit = lambda rows, s: hp_importance(rows, metric, s, keys)
    by_seed = pd.DataFrame([fit(kept.kept, seed + s) for s in range(seeds)])
    n = len(errors)
    drawn = [np.random.default_rng([seed, r]).integers(0, n, n) for r in range(resamples)]
    refits = pd.DataFrame([fit(kept.kept.iloc[i], seed + r) for r, i in enumerate(drawn) if np.ptp(errors[i]) > 0])
    if refits.empty:
        raise StatsError(
            f"importance_interval: resamples: bad value {resamples}, no resample of the {n} trials has two different "
            "errors; allowed: more resamples or more trials"
        )
    params = list(hp_kinds(keys))
    return pd.DataFrame(
        {
            "param": params,
            "importance": by_seed.loc[0, params].to_numpy(float),
            "low": refits[params].quantile(0.025).to_numpy(float),
            "high": refits[params].quantile(0.975).to_numpy(float),
            "seed_low": by_seed[params].min().to_numpy(float),
            "seed_high": by_seed[params].max().to_numpy(float),
            "n": n,
            "resamples": resamples,
            "refits": len(refits),
            "seeds": seeds,
            "n_left_out": len(kept.left_out),
            "metric": kept.metric,
        }
    )


def _plain(column: pd.Series, kind: str) -> list:
    """A column as the plain values optuna takes: floats, ints, or a choice's values (None for a missing one)."""
    if kind == "choice":
        return [None if value_label(v) == "null" else v for v in column.astype(object)]
    return column.astype(int if kind == "int" else float).tolist()


def _optuna_distribution(optuna, kind: str, values: list):
    """The optuna distribution spanning the values a study took of a hyperparameter sampled from `kind`."""
    if kind == "choice":
        return optuna.distributions.CategoricalDistribution(list(dict.fromkeys(values)))
    if kind == "int":
        return optuna.distributions.IntDistribution(min(values), max(values))
    return optuna.distributions.FloatDistribution(min(values), max(values), log=kind == "log_uniform")


def _fanova(optuna, kept: pd.DataFrame, seed: int, kinds: Dict[str, str]) -> Dict[str, float]:
    params = {name: _plain(kept[name], kind) for name, kind in kinds.items()}
    distributions = {name: _optuna_distribution(optuna, kind, params[name]) for name, kind in kinds.items()}
    study = optuna.create_study(direction="minimize")
    for i, value in enumerate(kept[ERR].tolist()):
        study.add_trial(
            optuna.trial.create_trial(
                params={name: params[name][i] for name in kinds}, distributions=distributions, value=value
            )
        )
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed, max_depth=IMPORTANCE_DEPTH)
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True))


def trials_for_dkw(half_width: float, alpha: float = 0.05) -> int:
    """Trials per model for a DKW band of the given half-width: ceil(ln(2/alpha) / (2 eps^2))."""
    return math.ceil(math.log(2.0 / alpha) / (2.0 * half_width**2))
