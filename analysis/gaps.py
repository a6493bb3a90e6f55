"""Optimizer gaps, training-length gaps and the peak-performance table."""

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from analysis.stats import expected_best
from trainers.schema import DIVERGED


def bootstrap_min(errors: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Bootstrap draws of the best (minimum) error of n trials resampled with replacement.

    Sampled exactly from its distribution instead of by resampling (O(n log n), not O(n_boot n)):
    with v sorted ascending, P(min* >= v_(i)) = ((n - i + 1) / n)^n.
    """
    v = np.sort(np.asarray(errors, dtype=float))
    n = len(v)
    survival = ((n - np.arange(n)) / n) ** n          # P(min* >= v_(i)), i = 1..n
    cdf = 1.0 - np.append(survival[1:], 0.0)          # P(min* <= v_(i))
    return v[np.searchsorted(cdf, rng.random(n_boot), side="left").clip(0, n - 1)]


def optimizer_gap(frame: pd.DataFrame, by: Sequence[str] = ("model", "epochs"), error: str = "top1_err",
                  n_boot: int = 1000, seed: int = 0, budget: Optional[int] = None) -> pd.DataFrame:
    """Per (model, epochs): best SGD error - best AdamW error (positive = AdamW better), a bootstrap
    95% CI, and the gap at an equal budget of k trials from the unbiased expected-best estimator
    (k = `budget`, default the smaller sample)."""
    rng = np.random.default_rng(seed)
    rows = []
    for key, group in frame.groupby(list(by), sort=True):
        sgd = group.loc[group["optimizer"] == "sgd", error].to_numpy(float)
        adamw = group.loc[group["optimizer"] == "adamw", error].to_numpy(float)
        if not len(sgd) or not len(adamw):
            continue
        k = min(budget or min(len(sgd), len(adamw)), len(sgd), len(adamw))
        draws = bootstrap_min(sgd, rng, n_boot) - bootstrap_min(adamw, rng, n_boot)
        rows.append(dict(zip(by, key if isinstance(key, tuple) else (key,)),
                         best_sgd=sgd.min(), best_adamw=adamw.min(), gap=sgd.min() - adamw.min(),
                         gap_lo=np.quantile(draws, 0.025), gap_hi=np.quantile(draws, 0.975),
                         n_sgd=len(sgd), n_adamw=len(adamw), budget_k=k,
                         gap_at_k=expected_best(sgd, [k])[0] - expected_best(adamw, [k])[0]))
    return pd.DataFrame(rows)


def length_gap(frame: pd.DataFrame, by: Sequence[str] = ("model", "optimizer"),
               error: str = "top1_err") -> pd.DataFrame:
    """Per model (and optimizer): error(E) - error(E_max) for each training length E.

    error(E) is the best trial at E. Paper rule: if every run at E_max diverged, the reference is
    the best shorter schedule, and the row is flagged `reference_fallback`.
    """
    rows = []
    for key, group in frame.groupby(list(by), sort=True):
        per_epoch = group.groupby("epochs").agg(err=(error, "min"),
                                                all_diverged=("status", lambda s: (s == DIVERGED).all()))
        e_max = per_epoch.index.max()
        usable = per_epoch[~per_epoch["all_diverged"]]
        fallback = bool(per_epoch.loc[e_max, "all_diverged"]) and len(usable) > 0
        reference = usable["err"].min() if fallback else per_epoch.loc[e_max, "err"]
        ref_epochs = usable["err"].idxmin() if fallback else e_max
        for epochs, rec in per_epoch.iterrows():
            rows.append(dict(zip(by, key if isinstance(key, tuple) else (key,)), epochs=epochs,
                             error=rec["err"], diverged=bool(rec["all_diverged"]),
                             reference=reference, reference_epochs=ref_epochs,
                             gap=rec["err"] - reference, reference_fallback=fallback))
    return pd.DataFrame(rows)


def peak_table(frame: pd.DataFrame, error: str = "top1_err") -> pd.DataFrame:
    """Best error per model with n, seeds and a noise floor (std over seeds of the same lr/wd/epochs
    config, pooled; NaN where no config ran with more than one seed)."""
    rows = []
    for model, group in frame.groupby("model", sort=True):
        best = group.loc[group[error].idxmin()]
        repeats = group.groupby(["optimizer", "epochs", "lr", "wd"])[error]
        stds = repeats.std(ddof=1).dropna()
        rows.append({"model": model, "best_err": best[error], "optimizer": best["optimizer"],
                     "epochs": best["epochs"], "lr": best["lr"], "wd": best["wd"], "n": len(group),
                     "seeds": group["seed"].nunique(),
                     "noise_floor": float(np.sqrt((stds ** 2).mean())) if len(stds) else np.nan})
    return pd.DataFrame(rows)
