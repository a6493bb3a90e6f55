"""Optimizer gaps, training-length gaps, the EMA gain and the peak-performance table.

Each function takes the trial table and a metric (`hpstudy.analysis.metric`), leaves out failed rows and
non-finite errors itself, and reports how many per row of its result (`n_left_out`); a group whose
rows were all left out has no row, and the function's LeftOutWarning names it.
"""

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from hpstudy.analysis.inference import best_contrast
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, METRIC_COLUMNS, left_out_per, usable
from hpstudy.analysis.stats import expected_best
from hpstudy.trainers.schema import DIVERGED


def _keys(by: Sequence[str], key) -> dict:
    return dict(zip(by, key if isinstance(key, tuple) else (key,)))


def _finish(table: pd.DataFrame, rows, by: Sequence[str]) -> pd.DataFrame:
    """A result table with its `n_left_out` per `by` group and the metric used."""
    if table.empty:
        return table
    return table.assign(n_left_out=left_out_per(rows, by, table), metric=rows.metric)


def optimizer_gap(
    frame: pd.DataFrame,
    by: Sequence[str] = ("model", "epochs"),
    metric: str = DEFAULT_METRIC,
    budget: Optional[int] = None,
) -> pd.DataFrame:
    """Per (model, epochs): best SGD error - best AdamW error (positive = AdamW better), its p from the
    exact, calibrated bootstrap of the best (`inference.best_contrast`: its null is one distribution
    for both cells; it gives no interval), and the gap at an equal budget of k trials from the
    unbiased expected-best estimator (k = `budget`, default the smaller sample)."""
    by = list(by)
    rows = usable(frame, metric, "optimizer_gap", by)
    out = []
    for key, group in rows.kept.groupby(by, sort=True, observed=True):
        sgd = group.loc[group["optimizer"] == "sgd", ERR].to_numpy(float)
        adamw = group.loc[group["optimizer"] == "adamw", ERR].to_numpy(float)
        if not len(sgd) or not len(adamw):
            continue
        k = min(budget or min(len(sgd), len(adamw)), len(sgd), len(adamw))
        test = best_contrast([sgd, adamw], (1.0, -1.0))
        out.append(
            dict(
                _keys(by, key),
                best_sgd=sgd.min(),
                best_adamw=adamw.min(),
                gap=sgd.min() - adamw.min(),
                gap_p=test.p,
                n_sgd=len(sgd),
                n_adamw=len(adamw),
                budget_k=k,
                gap_at_k=expected_best(sgd, [k])[0] - expected_best(adamw, [k])[0],
            )
        )
    return _finish(pd.DataFrame(out), rows, by)


def length_gap(
    frame: pd.DataFrame, by: Sequence[str] = ("model", "optimizer"), metric: str = DEFAULT_METRIC
) -> pd.DataFrame:
    """Per model (and optimizer): error(E) - error(E_max) for each training length E.

    error(E) is the best trial at E; E_max the longest schedule with a trial that counts. Paper
    rule: if every run at E_max diverged, the reference is the best shorter schedule, and the row
    is flagged `reference_fallback`.
    """
    by = list(by)
    rows = usable(frame, metric, "length_gap", by + ["epochs"])
    out = []
    for key, group in rows.kept.groupby(by, sort=True, observed=True):
        per_epoch = group.groupby("epochs").agg(
            err=(ERR, "min"), all_diverged=("status", lambda s: (s == DIVERGED).all())
        )
        e_max = per_epoch.index.max()
        usable_epochs = per_epoch[~per_epoch["all_diverged"]]
        fallback = bool(per_epoch.loc[e_max, "all_diverged"]) and len(usable_epochs) > 0
        reference = usable_epochs["err"].min() if fallback else per_epoch.loc[e_max, "err"]
        ref_epochs = usable_epochs["err"].idxmin() if fallback else e_max
        for epochs, rec in per_epoch.iterrows():
            out.append(
                dict(
                    _keys(by, key),
                    epochs=epochs,
                    error=rec["err"],
                    diverged=bool(rec["all_diverged"]),
                    reference=reference,
                    reference_epochs=ref_epochs,
                    gap=rec["err"] - reference,
                    reference_fallback=fallback,
                )
            )
    return _finish(pd.DataFrame(out), rows, by + ["epochs"])


def ema_gain(frame: pd.DataFrame, by: Sequence[str] = ("model",)) -> pd.DataFrame:
    """Per group where EMA was on: pycls's EMA gain per trial, max(0, best - ema_best) (its mean and
    median), and the gain of the bests, min best - min ema_best. Diverged trials count (gain 0);
    failed rows and rows without a finite EMA error are left out (`n_left_out`)."""
    by = list(by)
    ema = METRIC_COLUMNS["ema_best"]
    if ema not in frame or not frame[ema].notna().any():
        return pd.DataFrame()
    with_ema = frame.groupby(by, observed=True)[ema].transform(lambda s: s.notna().any()).astype(bool)
    rows = usable(frame[with_ema], "ema_best", "ema_gain", by)
    raw = rows.kept[METRIC_COLUMNS["best"]].astype(float)
    kept = rows.kept.assign(_gain=(raw - rows.kept[ERR]).clip(lower=0), _raw=raw)
    table = (
        kept.groupby(by, sort=True, observed=True)
        .agg(
            n=(ERR, "size"),
            gain_mean=("_gain", "mean"),
            gain_median=("_gain", "median"),
            best=("_raw", "min"),
            best_ema=(ERR, "min"),
        )
        .reset_index()
    )
    return table.assign(gain_of_best=table["best"] - table["best_ema"], n_left_out=left_out_per(rows, by, table))


def peak_table(frame: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Best error per model with n, seeds and a noise floor (std over seeds of the same lr/wd/epochs
    config, pooled; NaN where no config ran with more than one seed). A model whose trials were all
    left out has no row; the LeftOutWarning names it."""
    rows = usable(frame, metric, "peak_table", ["model"])
    out = []
    for model, group in rows.kept.groupby("model", sort=True, observed=True):
        best = group.loc[group[ERR].idxmin()]
        repeats = group.groupby(["optimizer", "epochs", "lr", "wd"])[ERR]
        stds = repeats.std(ddof=1).dropna()
        out.append(
            {
                "model": model,
                "best_err": best[ERR],
                "optimizer": best["optimizer"],
                "epochs": best["epochs"],
                "lr": best["lr"],
                "wd": best["wd"],
                "n": len(group),
                "seeds": group["seed"].nunique(),
                "noise_floor": float(np.sqrt((stds**2).mean())) if len(stds) else np.nan,
            }
        )
    return _finish(pd.DataFrame(out), rows, ["model"])
