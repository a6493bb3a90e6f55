"""Which error a number is built on (the metric), and which rows count.

Every public analysis function takes its rows through `usable` (tables) or `finite` (arrays of
errors): failed trials and rows whose error under the metric is not finite are left out, and the
function says how many (a `LeftOutWarning`, plus an `n_left_out` column or key where its result
has room for one). Diverged trials count, at chance error.

Metrics (top-1 error in percent):
- `final`: `top1_err`, the last epoch's error of the raw weights;
- `best`: `best_top1_err`, the lowest error over epochs of the raw weights;
- `ema_best`: `best_ema_top1_err`, the lowest error over epochs of the EMA weights (null without
  EMA, so rows without EMA are left out);
- `paper` (the default): `ema_best` where EMA was on, else `best`. This is pycls's
  `test_ema_epoch.min_top1_err`, the error behind the paper's EDFs, good ranges and bests. A row
  where EMA ran (a finite `ema_top1_err`) but `best_ema_top1_err` is null was stored before that
  column existed: in a table where other rows have it, such a row has no `paper` error (its raw best
  is not pycls's number) and is left out, the label saying how many; a table where no row has it
  falls back to `best` as a whole, the label saying why.
"""

import warnings
from typing import List, NamedTuple, Sequence, Tuple

import numpy as np
import pandas as pd

from hpstudy.analysis.metric_names import DEFAULT_METRIC, METRIC_COLUMNS, METRIC_DOCS, METRICS
from hpstudy.trainers.errors import HpstudyError, shown
from hpstudy.trainers.schema import FAILED

ERR = "metric_err"  # the column `usable` adds to the rows it keeps: their error under the metric
UNRECORDED = "stored before best_ema_top1_err existed: EMA best not recorded"
NAMED = 5  # groups named per warning


class MetricError(HpstudyError, ValueError):
    """A metric that is unknown, or for which the table holds no value."""


class LeftOutWarning(UserWarning):
    """An analysis function left out rows or values: failed trials or non-finite errors."""


class Rows(NamedTuple):
    """A table split by `usable`."""

    kept: pd.DataFrame  # the rows that count, with their error under the metric in column ERR
    left_out: pd.DataFrame  # failed rows and rows whose error under the metric is not finite
    metric: str  # what was used, naming any fallback (e.g. "paper = best (...)")


def _values(frame: pd.DataFrame, column: str, metric: str) -> np.ndarray:
    if column not in frame:
        raise MetricError(f"metric {metric}: the table has no column {column!r}")
    return frame[column].astype(float).to_numpy()


def _any_finite(frame: pd.DataFrame, column: str, rows: np.ndarray) -> bool:
    return column in frame and bool(np.isfinite(frame[column].astype(float).to_numpy()[rows]).any())


def _paper_values(frame: pd.DataFrame, finished: np.ndarray):
    """`paper`'s error per row, which rows took it from ema_best, which were left without one (EMA
    ran but best_ema_top1_err was not recorded, while other rows have it), and the fallback used."""
    base = "best" if _any_finite(frame, METRIC_COLUMNS["best"], finished) else "final"
    values = _values(frame, METRIC_COLUMNS[base], "paper")
    from_ema = unrecorded = np.zeros(len(frame), dtype=bool)
    if METRIC_COLUMNS["ema_best"] in frame:
        ema = _values(frame, METRIC_COLUMNS["ema_best"], "paper")
        from_ema = ~np.isnan(ema)  # EMA was on (an infinite EMA error is then left out)
        if (finished & from_ema).any() and "ema_top1_err" in frame:
            unrecorded = finished & np.isnan(ema) & np.isfinite(_values(frame, "ema_top1_err", "paper"))
        values = np.where(from_ema, ema, np.where(unrecorded, np.nan, values))
    return values, from_ema, unrecorded, base


def _paper_fallback(frame: pd.DataFrame, keep: np.ndarray, from_ema: np.ndarray, base: str) -> str:
    """What `paper` used on the kept rows, naming the fallback and why."""
    n_ema, n_base = int((keep & from_ema).sum()), int((keep & ~from_ema).sum())
    if not n_base:
        return "paper = ema_best" if n_ema else "paper"
    if base == "final":
        base = "final (the table has no best_top1_err)"
    if n_ema:
        return f"paper = ema_best for {n_ema} trials with EMA, {base} for {n_base} without"
    if _any_finite(frame, "ema_top1_err", keep):
        why = "EMA ran but best_ema_top1_err is missing: a store written before that column existed"
    else:
        why = "no trial used EMA"
    return f"paper = {base} ({why})"


def _paper_label(frame: pd.DataFrame, keep: np.ndarray, from_ema: np.ndarray, unrecorded: np.ndarray, base: str) -> str:
    """`_paper_fallback`, plus how many rows with EMA were left out for want of their EMA best."""
    label = _paper_fallback(frame, keep, from_ema, base)
    if unrecorded.any():
        label += f"; left out: {int(unrecorded.sum())} with EMA {UNRECORDED}"
    return label


def _vanished(rows: Rows, by: Sequence[str]) -> List[str]:
    """'<group>: all n trials left out' for each `by` group whose rows were all left out."""
    if not by or rows.left_out.empty:
        return []
    by = list(by)
    left = rows.left_out.groupby(by, observed=True).size()
    gone = left[~left.index.isin(rows.kept.groupby(by, observed=True).size().index)]
    keys = [key if isinstance(key, tuple) else (key,) for key in gone.index]
    names = [
        f"{', '.join(f'{c} {v}' for c, v in zip(by, key))}: all {n} trial{'s' * (n != 1)} left out"
        for key, n in zip(keys, gone)
    ]
    more = [f"+{len(names) - NAMED} more groups"] if len(names) > NAMED else []
    return names[:NAMED] + more


def usable(frame: pd.DataFrame, metric: str = DEFAULT_METRIC, what: str = "", by: Sequence[str] = ()) -> Rows:
    """Split `frame` into the rows that count under `metric` and the rows left out (failed, or a
    non-finite error); with `what` (the caller's name), warn how many were left out, naming each
    `by` group that lost all its rows (it has no row in the caller's result).

    MetricError for an unknown metric, or one with no value in any row that is not failed.
    """
    if not isinstance(metric, str) or metric not in METRICS:
        raise MetricError(f"metric: bad value {shown(metric)}; allowed: {', '.join(METRICS)}")
    finished = (frame["status"] != FAILED).to_numpy()
    if metric == "paper":
        values, from_ema, unrecorded, base = _paper_values(frame, finished)
    else:
        values, unrecorded = _values(frame, METRIC_COLUMNS[metric], metric), np.zeros(len(frame), dtype=bool)
    keep = finished & np.isfinite(values)
    if finished.any() and not keep.any():
        raise MetricError(
            f"metric {metric}: no trial has a value ({METRIC_DOCS[metric]}); "
            f"allowed here: another of {', '.join(METRICS)}"
        )
    label = _paper_label(frame, keep, from_ema, unrecorded, base) if metric == "paper" else metric
    rows = Rows(frame[keep].assign(**{ERR: values[keep]}), frame[~keep], label)
    if what and len(rows.left_out):
        warn_left_out(what, len(rows.left_out), len(frame), _left_out_detail(rows, metric, unrecorded, by))
    return rows


def _left_out_detail(rows: Rows, metric: str, unrecorded: np.ndarray, by: Sequence[str]) -> str:
    """Why rows were left out (failed, no finite error, EMA best not recorded), and the `by` groups
    left without a row."""
    n_failed = int((rows.left_out["status"] == FAILED).sum())
    why = f" ({int(unrecorded.sum())} of them with EMA {UNRECORDED})" if unrecorded.any() else ""
    detail = f"rows: {n_failed} failed, {len(rows.left_out) - n_failed} without a finite {metric} error{why}"
    return "; ".join([detail, *_vanished(rows, by)])


def warn_left_out(what: str, n_left_out: int, n_total: int, detail: str) -> None:
    """Say (as a LeftOutWarning) that `what` left out n_left_out of n_total rows or values."""
    warnings.warn(f"{what}: left out {n_left_out} of {n_total} {detail}", LeftOutWarning, stacklevel=3)


def finite(values, what: str) -> Tuple[np.ndarray, int]:
    """(the finite values of a sample as floats, how many were left out); warns if any were.

    A failed trial's error is null, i.e. NaN in an array: this is how array functions leave it out.
    """
    values = np.asarray(values, dtype=float)
    keep = np.isfinite(values)
    n_left_out = int((~keep).sum())
    if n_left_out:
        warn_left_out(what, n_left_out, len(values), "values that are not finite (failed trials)")
    return values[keep], n_left_out


def finite_samples(samples: Sequence, what: str) -> Tuple[List[np.ndarray], int]:
    """`finite` on each sample: (the finite samples, how many values were left out in all)."""
    cleaned = [finite(s, what) for s in samples]
    return [values for values, _ in cleaned], sum(n for _, n in cleaned)


def left_out_per(rows: Rows, by: Sequence[str], keys: pd.DataFrame) -> np.ndarray:
    """How many rows of each key's group (`by` columns of `keys`) were left out, aligned with `keys`."""
    by = list(by)
    counts = rows.left_out.groupby(by, observed=True).size().rename("_left_out").reset_index()
    merged = keys[by].merge(counts, how="left", on=by)
    return merged["_left_out"].fillna(0).astype(int).to_numpy()
