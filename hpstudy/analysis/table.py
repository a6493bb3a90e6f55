"""Any results table as hpstudy's trial rows, so the whole analysis and its report run on it.

`from_table(frame, error=..., model=..., optimizer=..., lr=..., wd=...)` maps a pandas DataFrame's
columns onto the trial row (`hpstudy.trainers.schema`); `from_tune(grid, ...)` does the same for a
Ray Tune `ResultGrid` (or its `get_dataframe()`), whose errored trials become `failed` rows;
`table_report(trials, out)` writes the report of the rows either returns. Every field is a column
of the table or a fixed value: `model` and `optimizer` a column or a name, `lr`, `wd`, `epochs` and
`seed` a column or a number; `error`, `status` and `train_loss` are columns.

What the rows hold (documented defaults):
- `top1_err`: the `error` column in percent (`scale`: errors or accuracies, in percent or as
  fractions), so the metric is `final` (`paper` says it falls back to it);
- `status`: the `status` column (ok, diverged or failed), or else `ok` where the error is finite,
  `failed` where it is NaN or missing (no result: hpstudy's failed trial) and `diverged` where it is
  +-inf; a diverged trial counts at `chance` error (hpstudy's rule: its task's chance error, 100 (1 -
  1 / classes); 100 unless given), a failed one has no error;
- `family`: the catalogue's, or the model's own name for a model the catalogue does not know;
- `epochs` 1 and `seed` 0 unless given; `train_loss` where given; every other trial column null.
Nothing is guessed: a missing column, a column name two columns share, a value that is not a real
number (a bool, complex, bytes, a date, an int beyond a float's range; a number in text is read) or
is outside its range (epochs and seed: whole numbers up to 2**63 - 1, kept exactly), a status or
name that is not allowed, or an empty table is a TableError, one printable line naming the field,
the value and what is allowed. Nothing here imports Ray: a grid is read through its own methods.
"""

import decimal
import math
import numbers
import os
import re
import sys
from typing import Any, List, Optional, Union

import numpy as np
import pandas as pd

from hpstudy.analysis.catalogue import model_family
from hpstudy.analysis.metric import DEFAULT_METRIC
from hpstudy.trainers.errors import HpstudyError, printable, shown
from hpstudy.trainers.schema import DIVERGED, FAILED, OK, STATUSES, TRIAL_FIELDS

# scale: (factor to percent, whether the column is an accuracy) for each way a table may hold the error
SCALES = {
    "error_percent": (1.0, False),
    "error_fraction": (100.0, False),
    "accuracy_percent": (1.0, True),
    "accuracy_fraction": (100.0, True),
}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # model and optimizer names: they name report files
NAMES = "1-128 letters, digits, - _ . (first a letter or digit)"
NON_FINITE = "NaN or missing: a failed trial, +-inf: a diverged one"
POSITIVE = "numbers > 0 in every trial that did not fail (lr and wd are drawn on log axes)"
WHOLE_MAX = 2**63 - 1  # epochs and seed are stored as int64
NUMBER = "a column name or a real number (not a bool or complex, and within a float's range)"
LISTED = 12  # columns a message lists
Field = Union[str, float, int]


class TableError(HpstudyError, ValueError):
    """A table that cannot be read as trial rows: no rows, a missing column, a value that is not
    allowed."""


def _bad(field: str, column: Optional[str], value: Any, row: Any, allowed: str) -> TableError:
    """The error for a bad value of `field`: in a row of the column `column`, or the fixed value given."""
    where = f" (column {shown(column)})" if column else ""
    at = f" in row {shown(row)}" if column else ""
    value = value.item() if isinstance(value, np.generic) else value  # 2.5, not np.float64(2.5)
    return TableError(f"table: {field}{where}: bad value {shown(value)}{at}; allowed: {allowed}")


def _column(frame: pd.DataFrame, field: str, column: Any, allowed: str = "") -> pd.Series:
    """The table's column named `column` (a text, matched exactly); TableError naming `field` when the
    table has none, or several, of that name."""
    names = ", ".join(printable(str(c)) for c in frame.columns[:LISTED])
    names += ", ..." if len(frame.columns) > LISTED else ""
    if not isinstance(column, str):
        allowed = allowed or "the name (a text) of a column"
        raise TableError(f"table: {field}: bad value {shown(column)}; allowed: {allowed} ({names})")
    found = [i for i, name in enumerate(frame.columns) if isinstance(name, str) and name == column]
    if not found:
        raise TableError(f"table: {field}: no column {shown(column)}; allowed: a column of the table ({names})")
    if len(found) > 1:
        raise TableError(
            f"table: {field}: the table has {len(found)} columns named {shown(column)}; "
            f"allowed: a column whose name no other column has"
        )
    return frame.iloc[:, found[0]]


def _real(value: Any) -> Union[int, float, None]:
    """The real number a table cell or an argument holds: an int (exact) or a float, NaN for a missing
    value, None for anything that is not a real number (a bool, complex, bytes, a date, a list, an int
    beyond a float's range); a text is read as pandas reads a number in text ("12", "1e-3")."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value) if abs(int(value)) <= sys.float_info.max else None
    if isinstance(value, (float, np.floating)):
        return float(value)
    if value is None or value is pd.NA:
        return math.nan
    if isinstance(value, str):  # "nan" and "" are no numbers: a missing value is None or NaN
        try:
            read = _real(pd.to_numeric(value))
        except (ValueError, TypeError, OverflowError):
            return None
        return None if read is None or math.isnan(read) else read
    if isinstance(value, (decimal.Decimal, numbers.Real)):  # Decimal, Fraction
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError, ArithmeticError):
            return None
        finite = value.is_finite() if isinstance(value, decimal.Decimal) else math.isfinite(number)
        return None if finite and math.isinf(number) else number  # beyond a float's range
    return None


def _cells(values: pd.Series) -> List[Union[int, float, None]]:
    """`_real` of each of a column's values (a numeric column's at once)."""
    if pd.api.types.is_float_dtype(values.dtype):
        return values.to_numpy(float, na_value=np.nan).tolist()
    return [_real(v) for v in values.to_numpy(object)]


def _numbers(frame: pd.DataFrame, field: str, column: str) -> np.ndarray:
    """A column as floats (null: NaN); TableError naming the first value that is not a real number."""
    values = _column(frame, field, column)
    cells = _cells(values)
    ok = np.array([cell is not None for cell in cells], bool)
    _check(field, column, values.to_numpy(object), frame.index, ok, f"numbers ({NON_FINITE})")
    return np.array(cells, dtype=float)


def _fixed(field: str, spec: Any) -> Union[int, float]:
    """A field's fixed value given as a number; TableError for anything else."""
    number = None if isinstance(spec, str) else _real(spec)
    if number is None:
        raise TableError(f"table: {field}: bad value {shown(spec)}; allowed: {NUMBER}")
    return number


def _number_field(frame: pd.DataFrame, field: str, spec: Field, ok, allowed: str) -> np.ndarray:
    """A numeric field per row, a column's values or a fixed number for every row, where `ok(values)`
    holds in every row; else TableError naming the first row (or the number) where it does not."""
    if isinstance(spec, str):
        values, column = _numbers(frame, field, spec), spec
    else:
        values, column = np.full(len(frame), float(_fixed(field, spec))), None
    _check(field, column, values, frame.index, ok(values), allowed)
    return values


def _whole_field(frame: pd.DataFrame, field: str, spec: Field, low: int) -> np.ndarray:
    """A field of whole numbers in [low, 2**63 - 1] (epochs, seed) per row, exactly as given (a seed
    beyond 2**53 is not rounded through a float): a column's values or a fixed number; TableError for
    the first row (or the number) that is no such number."""
    if isinstance(spec, str):
        values = _column(frame, field, spec)
        cells, column, shown_values = _cells(values), spec, values.to_numpy(object)
    else:
        cells, column, shown_values = [_fixed(field, spec)], None, np.array([spec], dtype=object)
    whole = [_whole(cell, low) for cell in cells]
    ok = np.array([number is not None for number in whole], bool)
    _check(field, column, shown_values, frame.index, ok, f"whole numbers >= {low} (at most 2**63 - 1)")
    return np.array(whole * (len(frame) if column is None else 1), dtype=np.int64)


def _whole(number: Union[int, float, None], low: int) -> Optional[int]:
    """`number` as an int when it is a whole number in [low, WHOLE_MAX]; else None."""
    if number is None or isinstance(number, float) and not (math.isfinite(number) and number.is_integer()):
        return None
    return int(number) if low <= int(number) <= WHOLE_MAX else None


def _name_field(frame: pd.DataFrame, field: str, spec: str) -> np.ndarray:
    """A name per row (model, optimizer): a column's values, or `spec` itself when the table has no
    such column and it is a name."""
    if isinstance(spec, str) and spec not in _text_columns(frame) and NAME.fullmatch(spec):
        return np.full(len(frame), spec, dtype=object)
    values = _column(frame, field, spec, f"a column name or a name of {NAMES}").to_numpy(object)
    ok = np.array([isinstance(v, str) and NAME.fullmatch(v) is not None for v in values], bool)
    _check(field, spec, values, frame.index, ok, f"names of {NAMES}")
    return values


def _text_columns(frame: pd.DataFrame) -> set:
    return {name for name in frame.columns if isinstance(name, str)}


def _check(field: str, column: Optional[str], values: np.ndarray, rows: pd.Index, ok: np.ndarray, allowed: str) -> None:
    """TableError naming the first row (label `rows[i]`) whose value is not `ok`."""
    if not ok.all():
        first = int(np.argmin(ok))
        raise _bad(field, column, values[first], rows[first], allowed)


def _percent(frame: pd.DataFrame, error: str, scale: str) -> np.ndarray:
    """The error column in percent (accuracies turned into errors), range-checked; NaN and +-inf kept."""
    if not isinstance(scale, str) or scale not in SCALES:
        raise TableError(f"table: scale: bad value {shown(scale)}; allowed: {', '.join(SCALES)}")
    factor, accuracy = SCALES[scale]
    values = _numbers(frame, "error", error)
    top = 100.0 / factor
    finite = np.isfinite(values)
    what = f"{'accuracies' if accuracy else 'errors'} in [0, {top:g}] (scale {scale}; {NON_FINITE})"
    _check("error", error, values, frame.index, ~finite | ((values >= 0) & (values <= top)), what)
    percent = values * factor
    return np.where(finite, 100.0 - percent, values) if accuracy else percent


def _statuses(frame: pd.DataFrame, status: Optional[str], err: np.ndarray) -> np.ndarray:
    """The status column, checked, or ok / failed (NaN error) / diverged (+-inf) from the error."""
    if status is None:
        return np.where(np.isnan(err), FAILED, np.where(np.isinf(err), DIVERGED, OK)).astype(object)
    values = _column(frame, "status", status, "None (from the error) or a column name").to_numpy(object)
    ok = np.array([isinstance(v, str) and v in STATUSES for v in values], bool)
    _check("status", status, values, frame.index, ok, ", ".join(STATUSES))
    return values


def from_table(
    frame: pd.DataFrame,
    *,
    error: str,
    model: str,
    optimizer: str,
    lr: Field = "lr",
    wd: Field = "wd",
    epochs: Field = 1,
    seed: Field = 0,
    status: Optional[str] = None,
    train_loss: Optional[str] = None,
    scale: str = "error_percent",
    chance: float = 100.0,
    study: str = "table",
) -> pd.DataFrame:
    """The trial rows (`hpstudy.trainers.schema`, plus `study`) of a table with one row per trial,
    under a mapping of its columns (module docstring); TableError for what cannot be mapped."""
    if not isinstance(frame, pd.DataFrame):
        raise TableError(f"table: bad value {shown(type(frame).__name__)}; allowed: a pandas DataFrame")
    if frame.empty:
        raise TableError("table: no rows; allowed: a table with one row per trial")
    if not isinstance(study, str) or not NAME.fullmatch(study):
        raise TableError(f"table: study: bad value {shown(study)}; allowed: a name of {NAMES}")
    err = _percent(frame, error, scale)
    statuses = _statuses(frame, status, err)
    given_chance = _real(chance) if not isinstance(chance, str) else None
    if given_chance is None or not 0 < given_chance <= 100:
        raise TableError(f"table: chance: bad value {shown(chance)}; allowed: an error in (0, 100] (percent)")
    counted = statuses != FAILED
    err = np.where(counted, np.where((statuses == DIVERGED) & ~np.isfinite(err), float(given_chance), err), np.nan)
    lrs, wds = (
        _number_field(frame, name, spec, lambda v: ~counted | (np.isfinite(v) & (v > 0)), POSITIVE)
        for name, spec in (("lr", lr), ("wd", wd))
    )
    whole = {
        name: _whole_field(frame, name, spec, low) for name, spec, low in (("epochs", epochs, 1), ("seed", seed, 0))
    }
    models = _name_field(frame, "model", model)
    rows = pd.DataFrame(
        {
            "study": study,
            "model": models,
            "family": pd.Series(models).map({m: model_family(m) for m in set(models.tolist())}),
            "optimizer": _name_field(frame, "optimizer", optimizer),
            "lr": lrs,
            "wd": wds,
            **whole,
            "status": statuses,
            "top1_err": err,
            "train_loss": np.nan if train_loss is None else _numbers(frame, "train_loss", train_loss),
        }
    )
    return rows.reindex(columns=["study", *TRIAL_FIELDS])


def from_tune(grid, *, lr: Field = "config/lr", wd: Field = "config/wd", study: str = "tune", **fields) -> pd.DataFrame:
    """The trial rows of a Ray Tune run, mapped as `from_table` maps a table (`fields`: its `error`,
    `model`, `optimizer`, ...; lr and wd default to Tune's `config/lr` and `config/wd`): of a
    `ResultGrid` (each trial's last reported metrics and its config as `grid.get_dataframe()` names
    them, `config/<name>`; a trial that ended in an error is `failed`, with its error text) or of a
    DataFrame from `get_dataframe()`."""
    if isinstance(grid, pd.DataFrame):
        return from_table(grid, lr=lr, wd=wd, study=study, **fields)
    if not callable(getattr(grid, "get_dataframe", None)):
        raise TableError(
            f"from_tune: bad value {shown(type(grid).__name__)}; allowed: a Ray Tune ResultGrid or its get_dataframe()"
        )
    results = list(grid)
    # each result's last metrics with its config flattened as get_dataframe() flattens it (config/<name>)
    frame = pd.json_normalize([dict(r.metrics or {}, config=r.config or {}) for r in results], sep="/")
    rows = from_table(frame, lr=lr, wd=wd, study=study, **fields)
    errored = np.array([r.error is not None for r in results], dtype=bool)
    rows.loc[errored, ["status", "top1_err"]] = [FAILED, np.nan]
    rows["error"] = [None if r.error is None else str(r.error) for r in results]
    return rows


def table_report(trials: pd.DataFrame, out: Union[str, "os.PathLike[str]"], metric: str = DEFAULT_METRIC) -> str:
    """Write the report (figures, tables, index.html: `hpstudy.analysis.report.build_report`) of the
    trial rows `from_table` or `from_tune` returned into the folder `out`; returns index.html's path."""
    if not isinstance(trials, pd.DataFrame):
        raise TableError(
            f"table_report: trials: bad value {shown(type(trials).__name__)}; "
            "allowed: the rows from_table or from_tune returns"
        )
    folder = os.fspath(out) if isinstance(out, os.PathLike) else out
    if not isinstance(folder, str):
        raise TableError(f"table_report: out: bad value {shown(out)}; allowed: a folder path (a text)")
    missing = [c for c in ("study", *TRIAL_FIELDS) if c not in trials.columns]
    if missing:
        raise TableError(
            f"table_report: trials: no column {missing[0]!r}; allowed: the rows from_table or from_tune returns"
        )
    from hpstudy.analysis.report import build_report  # matplotlib: only when a report is written

    return build_report(trials, pd.DataFrame(), None, folder, metric)
