"""Error distribution functions: exact step EDFs per group, Δ-EDFs, bands and normalized weights.

Conventions (recorded in every output): F(e) = fraction of a group's trials with error <= e, a
right-continuous step function; diverged trials are in the table at chance error and count;
failed trials are excluded by the caller (and counted by `analysis.report.split_failed`).
"""

from typing import Dict, Optional, Sequence, Union

import numpy as np
import pandas as pd

from trainers.schema import DIVERGED

EDF_CONVENTION = "F(e) = #{trials with error <= e} / n (right-continuous step); diverged at chance error"


def edf_at(errors: np.ndarray, points: np.ndarray) -> np.ndarray:
    """F(points) for one sample: the fraction of errors <= each point."""
    ordered = np.sort(np.asarray(errors, dtype=float))
    return np.searchsorted(ordered, np.asarray(points, dtype=float), side="right") / len(ordered)


def step_points(errors: np.ndarray):
    """The EDF's jump points and values after each jump (ties merged): (x, F)."""
    x, counts = np.unique(np.asarray(errors, dtype=float), return_counts=True)
    return x, np.cumsum(counts) / counts.sum()


def dkw_epsilon(n: Union[int, np.ndarray], alpha: float = 0.05):
    """Half-width of the DKW simultaneous (1 - alpha) band: sqrt(ln(2 / alpha) / (2 n))."""
    return np.sqrt(np.log(2.0 / alpha) / (2.0 * np.asarray(n, dtype=float)))


def bootstrap_band(errors: np.ndarray, alpha: float = 0.05, n_boot: int = 1000, seed: int = 0) -> float:
    """Half-width of a bootstrap simultaneous band: the (1 - alpha) quantile of sup|F* - F|."""
    errors = np.asarray(errors, dtype=float)
    x, f = step_points(errors)
    rng = np.random.default_rng(seed)
    draws = rng.choice(errors, size=(n_boot, len(errors)), replace=True)
    draws.sort(axis=1)
    f_star = np.stack([np.searchsorted(d, x, side="right") for d in draws]) / len(errors)
    return float(np.quantile(np.abs(f_star - f).max(axis=1), 1 - alpha))


def resolve_reference(frame: pd.DataFrame, by: Sequence[str], error: str,
                      reference: Union[str, float, Dict] = "min", match: Optional[Sequence[str]] = None):
    """Per-row reference error for Δ = error - reference, and a label saying what it is.

    reference: "min" (each group's own minimum), "matched" (the minimum over the rows that share
    the `match` columns, e.g. the best of all models of one size), a number, or a dict mapping a
    group key tuple to a number (a stated reference run).
    """
    if reference == "min":
        return frame.groupby(list(by), sort=False)[error].transform("min"), "group minimum"
    if reference == "matched":
        if not match:
            raise ValueError("reference='matched' needs `match` columns")
        return (frame.groupby(list(match), sort=False)[error].transform("min"),
                f"best of the group matched on {', '.join(match)}")
    if isinstance(reference, (int, float)):
        return pd.Series(float(reference), index=frame.index), f"fixed reference {reference:g}"
    if isinstance(reference, dict):
        keys = list(zip(*(frame[c] for c in by)))
        missing = {k for k in keys if k not in reference}
        if missing:
            raise ValueError(f"reference runs missing for groups {sorted(missing)[:3]}")
        return pd.Series([reference[k] for k in keys], index=frame.index), "stated reference runs"
    raise ValueError(f"reference: bad value {reference!r}; allowed: 'min', 'matched', a number, a dict")


def edf_table(frame: pd.DataFrame, by: Sequence[str] = ("model",), error: str = "top1_err",
              reference: Union[str, float, Dict] = "min", match: Optional[Sequence[str]] = None,
              alpha: float = 0.05) -> pd.DataFrame:
    """Step points of every group's EDF and Δ-EDF, vectorised over groups (one sort).

    Returns one row per trial in order of error within its group, with columns: the group keys,
    `error` (x), `delta` (x - reference), `F` (EDF value after this step, ties merged), `n`,
    `dkw_eps`, `diverged_share`, `reference` and `reference_kind`.
    """
    by = list(by)
    data = frame[by + [error, "status"]].copy()
    data["reference"], kind = resolve_reference(frame, by, error, reference, match)
    data = data.sort_values(by + [error], kind="stable")
    grouped = data.groupby(by, sort=False)
    n = grouped[error].transform("size").to_numpy()
    # rank of the last tied value within the group = count of errors <= this one
    data["F"] = grouped[error].rank(method="max").to_numpy() / n
    data["n"] = n
    data["dkw_eps"] = dkw_epsilon(n, alpha)
    data["diverged_share"] = grouped["status"].transform(lambda s: (s == DIVERGED).mean())
    data["delta"] = data[error] - data["reference"]
    data["reference_kind"] = kind
    return data.drop(columns="status").rename(columns={error: "error"}).reset_index(drop=True)


def normalized_weights(covariate: np.ndarray, bins: int = 3) -> np.ndarray:
    """Weights that make a covariate (e.g. FLOPs) uniform over `bins` log-spaced bins.

    Radosavovic et al. 2019: each non-empty bin gets equal total weight, split evenly among its
    trials; weights sum to 1. Use with `weighted_edf_at`.
    """
    values = np.log(np.asarray(covariate, dtype=float))
    edges = np.linspace(values.min(), values.max(), bins + 1)
    which = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    occupied = (counts > 0).sum()
    return 1.0 / (occupied * counts[which])


def effective_sample_size(weights: np.ndarray) -> float:
    """Kish's effective sample size of normalised weights: 1 / sum(w^2)."""
    w = np.asarray(weights, dtype=float)
    return float(w.sum() ** 2 / (w ** 2).sum())


def weighted_edf_at(errors: np.ndarray, weights: np.ndarray, points: np.ndarray) -> np.ndarray:
    """A weighted EDF: the total weight of trials with error <= each point."""
    order = np.argsort(errors, kind="stable")
    cum = np.cumsum(np.asarray(weights, dtype=float)[order])
    idx = np.searchsorted(np.asarray(errors, dtype=float)[order], points, side="right")
    return np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0) / cum[-1]
