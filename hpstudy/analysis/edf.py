"""Error distribution functions: exact step EDFs per group, Δ-EDFs, bands and normalized weights.

Conventions (recorded in every output): F(e) = fraction of a group's trials with error <= e, a
right-continuous step function, on the error of the chosen metric (`hpstudy.analysis.metric`); diverged
trials count at chance error; failed trials and non-finite errors are left out here, and counted
(`hpstudy.analysis.metric.usable`, `hpstudy.analysis.metric.finite`).
"""

from typing import Dict, Optional, Sequence, Union

import numpy as np
import pandas as pd

from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, finite, left_out_per, usable, warn_left_out
from hpstudy.trainers.schema import DIVERGED

EDF_CONVENTION = "F(e) = #{trials with error <= e} / n (right-continuous step); diverged at chance error"


def edf_at(errors: np.ndarray, points: np.ndarray) -> np.ndarray:
    """F(points) for one sample: the fraction of its finite errors <= each point."""
    ordered = np.sort(finite(errors, "edf_at")[0])
    return np.searchsorted(ordered, np.asarray(points, dtype=float), side="right") / len(ordered)


def step_points(errors: np.ndarray):
    """The EDF's jump points and values after each jump (ties merged; finite errors): (x, F)."""
    x, counts = np.unique(finite(errors, "step_points")[0], return_counts=True)
    return x, np.cumsum(counts) / counts.sum()


def dkw_epsilon(n: Union[int, np.ndarray], alpha: float = 0.05):
    """Half-width of the DKW simultaneous (1 - alpha) band: sqrt(ln(2 / alpha) / (2 n))."""
    return np.sqrt(np.log(2.0 / alpha) / (2.0 * np.asarray(n, dtype=float)))


def bootstrap_band(errors: np.ndarray, alpha: float = 0.05, n_boot: int = 1000, seed: int = 0) -> float:
    """Half-width of a bootstrap simultaneous band of the finite errors' EDF: the (1 - alpha)
    quantile of sup|F* - F|."""
    errors, _ = finite(errors, "bootstrap_band")
    x, f = step_points(errors)
    n, m = len(errors), len(x)
    draws = np.random.default_rng(seed).integers(0, n, (n_boot, n))  # the indices rng.choice(errors, ...) draws
    # every resample's F* at the jump points at once: its count of each distinct error, cumulated
    cells = np.searchsorted(x, errors)[draws] + m * np.arange(n_boot)[:, None]
    f_star = np.bincount(cells.ravel(), minlength=n_boot * m).reshape(n_boot, m).cumsum(axis=1) / n
    return float(np.quantile(np.abs(f_star - f).max(axis=1), 1 - alpha))


def _reference(
    kept: pd.DataFrame,
    by: Sequence[str],
    reference: Union[str, float, Dict] = "min",
    match: Optional[Sequence[str]] = None,
):
    """Per-row reference error for Δ = error - reference, and a label saying what it is.

    reference: "min" (each group's own minimum), "matched" (the minimum over the rows that share
    the `match` columns, e.g. the best of all models of one size), a number, or a dict mapping a
    group key tuple to a number (a stated reference run).
    """
    if reference == "min":
        return kept.groupby(list(by), sort=False)[ERR].transform("min"), "group minimum"
    if reference == "matched":
        if not match:
            raise ValueError("reference='matched' needs `match` columns")
        return (
            kept.groupby(list(match), sort=False)[ERR].transform("min"),
            f"best of the group matched on {', '.join(match)}",
        )
    if isinstance(reference, (int, float)):
        return pd.Series(float(reference), index=kept.index), f"fixed reference {reference:g}"
    if isinstance(reference, dict):
        keys = list(zip(*(kept[c] for c in by)))
        missing = {k for k in keys if k not in reference}
        if missing:
            raise ValueError(f"reference runs missing for groups {sorted(missing)[:3]}")
        return pd.Series([reference[k] for k in keys], index=kept.index), "stated reference runs"
    raise ValueError(f"reference: bad value {reference!r}; allowed: 'min', 'matched', a number, a dict")


def edf_table(
    frame: pd.DataFrame,
    by: Sequence[str] = ("model",),
    metric: str = DEFAULT_METRIC,
    reference: Union[str, float, Dict] = "min",
    match: Optional[Sequence[str]] = None,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Step points of every group's EDF and Δ-EDF of the `metric` error, vectorised over groups.

    Failed rows and non-finite errors are left out; a group with none left has no rows, and the
    LeftOutWarning names it. Returns one row per counted trial in order of error within its group,
    with columns: the group keys, `error` (x), `delta` (x - reference), `F` (EDF value after this
    step, ties merged), `n`, `n_left_out`, `dkw_eps`, `diverged_share`, `reference`,
    `reference_kind` and `metric`.
    """
    by = list(by)
    rows = usable(frame, metric, "edf_table", by)
    data = rows.kept[by + [ERR, "status"]].copy()
    data["reference"], kind = _reference(rows.kept, by, reference, match)
    data = data.sort_values(by + [ERR], kind="stable")
    grouped = data.groupby(by, sort=False, observed=True)
    n = grouped[ERR].transform("size").to_numpy()
    # rank of the last tied value within the group = count of errors <= this one
    data["F"] = grouped[ERR].rank(method="max").to_numpy() / n
    data["n"] = n
    data["n_left_out"] = left_out_per(rows, by, data)
    data["dkw_eps"] = dkw_epsilon(n, alpha)
    data["diverged_share"] = grouped["status"].transform(lambda s: (s == DIVERGED).mean())
    data["delta"] = data[ERR] - data["reference"]
    data["reference_kind"] = kind
    data["metric"] = rows.metric
    return data.drop(columns="status").rename(columns={ERR: "error"}).reset_index(drop=True)


def _bin_weights(covariate: np.ndarray, bins: int) -> np.ndarray:
    """Equal total weight per non-empty log-spaced bin of the covariate, split evenly within a bin."""
    values = np.log(covariate)
    edges = np.linspace(values.min(), values.max(), bins + 1)
    which = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    occupied = (counts > 0).sum()
    return 1.0 / (occupied * counts[which])


def normalized_weights(
    frame: pd.DataFrame, covariate: str = "flops", bins: int = 3, metric: str = DEFAULT_METRIC
) -> pd.DataFrame:
    """Weights that make a covariate (e.g. FLOPs) uniform over `bins` log-spaced bins.

    Radosavovic et al. 2019: each non-empty bin gets equal total weight, split evenly among its
    trials; weights sum to 1. Over the trials that count under `metric` (failed rows and
    non-finite errors left out); one row per trial (the frame's index) with `error`, `weight`,
    `n_left_out` and `metric`. Use with `weighted_edf_at` and `effective_sample_size`.
    """
    rows = usable(frame, metric, "normalized_weights")
    values = rows.kept[covariate].astype(float).to_numpy()
    if not (np.isfinite(values) & (values > 0)).all():
        raise ValueError(
            f"normalized_weights: covariate {covariate!r} must be finite and > 0 in every trial that counts"
        )
    return pd.DataFrame(
        {
            "error": rows.kept[ERR],
            "weight": _bin_weights(values, bins),
            "n_left_out": len(rows.left_out),
            "metric": rows.metric,
        },
        index=rows.kept.index,
    )


def effective_sample_size(weights: np.ndarray) -> float:
    """Kish's effective sample size of normalised weights: 1 / sum(w^2)."""
    w = np.asarray(weights, dtype=float)
    return float(w.sum() ** 2 / (w**2).sum())


def weighted_edf_at(errors: np.ndarray, weights: np.ndarray, points: np.ndarray) -> np.ndarray:
    """A weighted EDF: the share of the total weight on trials with error <= each point (pairs
    with a non-finite error or weight left out)."""
    errors, weights = np.asarray(errors, dtype=float), np.asarray(weights, dtype=float)
    keep = np.isfinite(errors) & np.isfinite(weights)
    if not keep.all():
        warn_left_out("weighted_edf_at", int((~keep).sum()), len(keep), "pairs whose error or weight is not finite")
    errors, weights = errors[keep], weights[keep]
    order = np.argsort(errors, kind="stable")
    cum = np.cumsum(weights[order])
    idx = np.searchsorted(errors[order], points, side="right")
    return np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0) / cum[-1]
