"""Stored trials into Optuna: one (model, optimizer, epochs) cell as an `optuna.Study` of finished
trials, for Optuna's plots and importances and, saved to a storage, optuna-dashboard
(docs/analysis.md#into-optuna).

Each row becomes one trial: its value the `metric` error (minimized), its params the sampled values
with their distributions, its user attributes model, optimizer, epochs, seed, trial_key and status.
Diverged rows are COMPLETE at their stored chance error, as the EDFs, good ranges and importances of
the report count them (a diverged setting is a bad setting, not a missing one); failed rows, and rows
without a finite error under the metric, are FAIL (no value), as the report leaves them out.

A storage is written only where it is hpstudy's or Optuna's to write: a new SQLite file (in a folder
that exists), an existing Optuna storage (a database holding Optuna's tables and nothing else, the
way Optuna users keep their studies; hpstudy adds its study), an empty server database, or a storage
object the caller made. Anything else (a file that is not SQLite, an application's database, a
folder, a read-only or locked file) is refused before anything is written, read through a read-only
connection, and every failure of the storage is one ExportError line; an export that fails after
it began writing takes back what it wrote (its study, and the file if it made it)."""

import contextlib
import math
import os
import re
import sqlite3
import sys
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, usable
from hpstudy.analysis.metric_names import METRIC_COLUMNS, METRICS
from hpstudy.trainers.errors import HpstudyError, printable, shown
from hpstudy.trainers.schema import STATUSES

if TYPE_CHECKING:
    import optuna

CELL = ("model", "optimizer", "epochs")
LOG_SCALED = ("lr", "wd")  # sampled log-uniformly (hpstudy.study.sampling): log-uniform distributions
USER_ATTRS = ("model", "optimizer", "epochs", "seed", "trial_key", "status")
EXPORTED = "hpstudy_cell"  # the study attribute that marks a study written here (which a new export may replace)
ERROR_COLUMNS = (*METRIC_COLUMNS.values(), "ema_top1_err")  # the columns a metric reads
MAX_NAME = 512  # characters of a study name in Optuna's RDB storage
LOCK_WAIT_S = 5.0  # how long the read-only look at an SQLite storage waits for another connection's lock
OPTUNA_MARKS = ("studies", "trials", "version_info")  # tables every Optuna storage has (version_info: its schema)
STORAGE = (
    "None (in memory), a database URL such as sqlite:///study.db (a new file in an existing folder, or an "
    "Optuna storage), an empty server database, or an optuna storage object"
)


class ExportError(HpstudyError, ValueError):
    """Trials that do not make one Optuna study: no rows, several studies or cells without `cell`, an
    unknown cell or param, a bad argument; a storage that is not hpstudy's or Optuna's to write, or that
    fails; a storage's study of the same name that hpstudy did not write."""


def to_optuna(
    trials: pd.DataFrame,
    storage: Optional[Any] = None,
    study_name: Optional[str] = None,
    params: Union[Sequence[str], Mapping[str, Any]] = ("lr", "wd"),
    cell: Optional[Tuple[str, str, int]] = None,
    metric: str = DEFAULT_METRIC,
    epochs: Optional[pd.DataFrame] = None,
) -> "optuna.Study":
    """The trials of one (model, optimizer, epochs) `cell` (needed when `trials` hold several) as a
    minimizing Optuna study of finished trials, saved to `storage` (an Optuna storage or URL such as
    sqlite:///study.db: a new file or an Optuna storage, module docstring) when given; `epochs` (the
    study's epoch records) adds each trial's per-epoch top-1 error as its intermediate values."""
    import optuna

    _check_trials(trials)
    if not isinstance(metric, str):
        raise ExportError(f"metric: bad value {shown(metric)}; allowed: {', '.join(METRICS)}")
    rows, cell = _one_cell(trials, cell)
    labels = rows.index.tolist()  # the rows as messages name them (a table's labels may repeat)
    rows = rows.reset_index(drop=True)
    distributions = _distributions(rows, params)
    scored = usable(rows, metric)
    values = scored.kept[ERR]
    curves = _curves(epochs, rows) if epochs is not None else {}
    made = []
    for index, row in rows.iterrows():
        complete = index in values.index
        given = _given(distributions, row, labels[index], complete)
        made.append(
            optuna.trial.create_trial(
                state=optuna.trial.TrialState.COMPLETE if complete else optuna.trial.TrialState.FAIL,
                value=float(values[index]) if complete else None,
                params={name: _plain(row[name]) for name in given},
                distributions=given,
                user_attrs={name: _attr(row[name]) for name in USER_ATTRS if name in row},
                intermediate_values=curves.get(_attr(row.get("trial_key")), {}),
            )
        )
    name = _study_name(study_name, rows, cell)
    return _export(optuna, storage, name, cell, scored.metric, made)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value Optuna's storages take."""
    return value.item() if isinstance(value, np.generic) else value


def _attr(value: Any) -> Any:
    """A value as a user attribute (JSON in an RDB storage): a missing value None, text or a number as
    itself, anything else as its text."""
    value = _plain(value)
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    return value if isinstance(value, (str, bool, int, float)) else str(value)


def _order(value: Any) -> Tuple:
    """A sort key for values of any type: numbers by value, then anything else by its text."""
    value = _plain(value)
    if isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and not math.isnan(value):
        return (0, value, "")
    return (1, 0, f"{type(value).__name__}:{value}")


def _distinct(rows: pd.DataFrame, column: str) -> List[Any]:
    """The distinct values of a column, missing ones left out, in `_order`; ExportError for values
    that cannot be told apart (lists, dicts)."""
    try:
        found = list(dict.fromkeys(_plain(v) for v in rows[column].dropna()))
    except TypeError:
        raise ExportError(
            f"trials: column {shown(column)}: values that are not names or numbers; allowed: text and numbers"
        ) from None
    return sorted(found, key=_order)


def _studies(rows: pd.DataFrame) -> list:
    """The study names of the rows (none when the table has no study column)."""
    return _distinct(rows, "study") if "study" in rows else []


def _check_trials(trials: Any) -> None:
    """ExportError unless `trials` is a trial table: rows, one column of each name, the cell's columns
    and status, and numbers in the error columns a metric reads."""
    if not isinstance(trials, pd.DataFrame):
        raise ExportError(
            f"trials: bad value {shown(type(trials).__name__)}; allowed: a trial table (a pandas DataFrame: "
            "hpstudy.load, from_table)"
        )
    if trials.empty:
        raise ExportError("trials: no rows; allowed: a study's trial table (hpstudy.load, load_trials)")
    twice = trials.columns[trials.columns.duplicated()]
    if len(twice):
        raise ExportError(
            f"trials: the table has {int((trials.columns == twice[0]).sum())} columns named {shown(twice[0])}; "
            "allowed: one column of each name"
        )
    for column in (*CELL, "status"):
        if column not in trials.columns:
            raise ExportError(
                f"trials: no column {shown(column)}; allowed: a trial table (hpstudy.load, from_table) with "
                "model, optimizer, epochs, status and the metric's error"
            )
    for index, status in trials["status"].items():
        if not isinstance(status, str) or status not in STATUSES:
            raise ExportError(
                f"trials: column status (row {shown(index)}): bad value {shown(_plain(status))}; "
                f"allowed: {', '.join(STATUSES)}"
            )
    for column in ERROR_COLUMNS:
        if column in trials.columns:
            _check_numbers(trials[column], column)


def _check_numbers(values: pd.Series, column: str) -> None:
    """ExportError naming the first value of an error column that is not a real number or missing."""
    dtype = values.dtype
    if pd.api.types.is_float_dtype(dtype) or pd.api.types.is_integer_dtype(dtype):
        return
    for index, value in values.items():
        value = _plain(value)
        number = isinstance(value, float) or isinstance(value, int) and abs(value) <= sys.float_info.max
        if not _missing(value) and (isinstance(value, bool) or not number):
            raise ExportError(
                f"trials: column {column} (row {shown(index)}): bad value {shown(value)}; allowed: numbers "
                "(an error in percent) or missing"
            )


def _one_cell(trials: pd.DataFrame, cell: Optional[Tuple[str, str, int]]) -> Tuple[pd.DataFrame, Tuple]:
    """The rows of `cell`, or of the one cell the trials hold; ExportError otherwise."""
    if len(_studies(trials)) > 1:
        raise ExportError(f"trials: rows of several studies {shown(_studies(trials))}; allowed: one study's rows")
    # in Python, not pandas' groupby: its index would put text into Arrow, which takes no lone surrogate
    keys = list(zip(*([_plain(v) for v in trials[column].to_numpy(object)] for column in CELL)))
    try:
        cells = sorted({key for key in keys if not any(map(_missing, key))}, key=lambda c: tuple(map(_order, c)))
    except TypeError:  # a list in a cell column: no key
        raise ExportError(
            "trials: the model, optimizer and epochs columns hold values that are not names or numbers; "
            "allowed: text and numbers"
        ) from None
    scalar = lambda v: isinstance(v, (str, int, float, np.generic))
    if cell is None and len(cells) == 1:
        cell = cells[0]
    chosen = isinstance(cell, (tuple, list)) and len(cell) == len(CELL) and all(map(scalar, cell))
    if not chosen or tuple(cell) not in cells:  # type: ignore[arg-type]
        raise ExportError(
            f"cell: bad value {shown(cell)}; allowed: one of the trials' (model, optimizer, epochs) cells "
            f"{shown(cells)}"
        )
    assert cell is not None
    wanted = tuple(_plain(v) for v in cell)
    return trials[[not any(map(_missing, key)) and key == wanted for key in keys]], wanted


def _distributions(rows: pd.DataFrame, params: Union[Sequence[str], Mapping[str, Any]]) -> Dict[str, Any]:
    """Each param's Optuna distribution: given in a mapping, else from the rows' values (lr and wd
    log-uniform, other numbers uniform, anything else categorical) over their observed range (the
    finite values; lr and wd's > 0). A param with no such value has none (no trial gets it)."""
    from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

    listed = isinstance(params, (Mapping, list, tuple)) and all(isinstance(name, str) for name in params)
    if not listed:
        raise ExportError(
            f"params: bad value {shown(params)}; allowed: a list of column names, or a mapping "
            "{column name: optuna distribution}"
        )
    unknown = [name for name in params if name not in rows]
    if unknown:
        columns = ", ".join(printable(str(c)) for c in rows.columns)
        raise ExportError(f"params: unknown column {shown(unknown[0])}; columns: {columns}")
    if isinstance(params, Mapping):
        for name, distribution in params.items():
            if not isinstance(distribution, BaseDistribution):
                raise ExportError(
                    f"params: {name}: bad value {shown(distribution)}; allowed: an optuna distribution "
                    "(FloatDistribution, IntDistribution, CategoricalDistribution)"
                )
        return dict(params)
    made: Dict[str, Any] = {}
    for name in dict.fromkeys(params):
        values = rows[name].dropna()
        if (
            pd.api.types.is_bool_dtype(values)
            or pd.api.types.is_complex_dtype(values)
            or not pd.api.types.is_numeric_dtype(values)
        ):
            choices = _distinct(rows, name)
            for choice in choices:
                huge = isinstance(choice, int) and abs(choice) > sys.float_info.max
                if not isinstance(choice, (str, bool, int, float)) or huge:
                    raise ExportError(
                        f"params: {name}: bad value {shown(choice)}; allowed: text, numbers or booleans "
                        "(an optuna categorical choice)"
                    )
            if choices:
                made[name] = CategoricalDistribution(choices)
            continue
        numbers = values.astype(float)
        kept = values[np.isfinite(numbers) & ((numbers > 0) if name in LOG_SCALED else True)]
        if kept.empty:
            continue
        if pd.api.types.is_integer_dtype(values):
            made[name] = IntDistribution(int(kept.min()), int(kept.max()))
        else:
            made[name] = FloatDistribution(float(kept.min()), float(kept.max()), log=name in LOG_SCALED)
    return made


def _given(distributions: Dict[str, Any], row: pd.Series, index: Any, complete: bool) -> Dict[str, Any]:
    """The distributions of the params a row gives: not missing, and inside its distribution. A value
    outside it is an ExportError in a COMPLETE trial (its value would be read against a setting the
    study cannot hold) and is left off a FAIL trial (lr 0 in a trial that failed)."""
    given = {}
    for name, distribution in distributions.items():
        value = _plain(row[name])
        if _missing(value):
            continue
        try:  # the check create_trial makes
            inside = distribution._contains(distribution.to_internal_repr(value))
        except (ValueError, TypeError, OverflowError):
            inside = False
        if inside:
            given[name] = distribution
        elif complete:
            log = " (finite numbers > 0: log-uniform)" if getattr(distribution, "log", False) else ""
            raise ExportError(
                f"params: {name} (row {shown(index)}): bad value {shown(value)}; allowed: a value of "
                f"{printable(str(distribution))}{log}"
            )
    return given


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def _curves(epochs: Any, rows: pd.DataFrame) -> Dict[Any, Dict[int, float]]:
    """{trial_key: {epoch: top-1 error}} of the finite epoch errors of the rows' trials; ExportError for
    epoch records that are not a table of trial_key, epoch and top1_err, or an epoch that is not a whole
    number >= 0."""
    if not isinstance(epochs, pd.DataFrame) or not {"trial_key", "epoch", "top1_err"} <= set(epochs.columns):
        what = shown(type(epochs).__name__) if not isinstance(epochs, pd.DataFrame) else "a table without them"
        raise ExportError(
            f"epochs: bad value {what}; allowed: None or the study's epoch records (a DataFrame with trial_key, "
            "epoch and top1_err: hpstudy.study.store.read.load_study)"
        )
    if "trial_key" not in rows:
        raise ExportError("epochs: the trials have no trial_key column to match epoch records by; allowed: None")
    keys = {_attr(key) for key in rows["trial_key"]} - {None}
    mine = epochs[[_attr(key) in keys for key in epochs["trial_key"]]]
    errors = pd.to_numeric(mine["top1_err"], errors="coerce")
    curves: Dict[Any, Dict[int, float]] = {}
    for (index, key, epoch), err in zip(mine[["trial_key", "epoch"]].itertuples(), errors):
        if not np.isfinite(err):
            continue
        step = _plain(epoch)
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ExportError(
                f"epochs: column epoch (row {shown(index)}): bad value {shown(step)}; allowed: whole numbers >= 0"
            )
        curves.setdefault(_attr(key), {})[step] = float(err)
    return curves


def _study_name(given: Any, rows: pd.DataFrame, cell: Tuple) -> str:
    """The study's name: `study_name`, else <study>/<model>/<optimizer>/<epochs>; ExportError for a name
    an Optuna storage cannot hold."""
    name = given if given is not None else "/".join(str(part) for part in (*_studies(rows)[:1], *cell))
    fits = isinstance(name, str) and 1 <= len(name) <= MAX_NAME
    try:
        fits = fits and bool(name.encode("utf-8"))
    except UnicodeEncodeError:
        fits = False
    if not fits:
        source = "" if given is not None else " (made of the trials' study and cell)"
        raise ExportError(
            f"study_name: bad value {shown(name)}{source}; allowed: None or a text of 1-{MAX_NAME} characters (UTF-8)"
        )
    return name


# --- storage --------------------------------------------------------------------------------------


def _export(optuna: Any, storage: Any, name: str, cell: Tuple, metric: str, made: list) -> "optuna.Study":
    """The study of `made` in `storage` (module docstring): checked before anything is written; a
    failure after writing began takes back the study begun and a file this call made."""
    from sqlalchemy.exc import SQLAlchemyError

    faults = (SQLAlchemyError, optuna.exceptions.OptunaError, sqlite3.Error, OSError, ImportError, RuntimeError)
    shown_storage, url, new_files = _check_storage(optuna, storage)
    begun = False
    opened = storage
    try:
        if url is not None:
            opened = optuna.storages.RDBStorage(url)
        if opened is not None:
            _replace_export(optuna, opened, name)
        study = optuna.create_study(storage=opened, study_name=name, direction="minimize")
        begun = True
        study.set_user_attr(EXPORTED, list(cell))
        study.set_user_attr("metric", metric)
        study.add_trials(made)
        return study
    except BaseException as exc:
        _take_back(optuna, opened if begun else None, name, new_files)
        if isinstance(exc, ExportError) or not isinstance(exc, faults):
            raise
        raise ExportError(
            f"storage: {shown_storage}: cannot be written ({_reason(exc)}); nothing of this export was kept"
        ) from None


def _take_back(optuna: Any, storage: Any, name: str, new_files: List[str]) -> None:
    """Undo a failed export, as far as the storage lets it: delete the study it began, and the files of
    a new SQLite storage it made."""
    if storage is not None:
        with contextlib.suppress(Exception):  # best effort: the storage may be what failed
            optuna.delete_study(study_name=name, storage=storage)
    for path in new_files:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _reason(exc: BaseException) -> str:
    """An exception's first line, printable and short."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    if text.startswith("(") and ") " in text:  # SQLAlchemy's "(sqlite3.OperationalError) database is locked"
        text = text.split(") ", 1)[1]
    return printable(text)[:200]


def _hidden(text: str) -> str:
    """A URL for a message, its password (if any) masked."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", text)


def _check_storage(optuna: Any, storage: Any) -> Tuple[str, Optional[str], List[str]]:
    """(the storage as messages show it, the URL to open or None for a storage object, the files a new
    SQLite storage will make); ExportError for a storage hpstudy may not write, before anything is."""
    if storage is None or isinstance(storage, optuna.storages.BaseStorage):
        return shown(type(storage).__name__), None, []
    if not isinstance(storage, str):
        hint = f" (for a file: 'sqlite:///{printable(os.fspath(storage))}')" if isinstance(storage, os.PathLike) else ""
        raise ExportError(f"storage: bad value {shown(storage)}{hint}; allowed: {STORAGE}")
    from optuna.storages._rdb import models
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    display = shown(_hidden(storage))
    try:
        storage.encode("utf-8")
        url_text = storage.format(SCHEMA_VERSION=models.SCHEMA_VERSION)  # as Optuna's RDBStorage fills it
    except UnicodeEncodeError:
        raise ExportError(f"storage: bad value {display}: not UTF-8 text; allowed: {STORAGE}") from None
    except (KeyError, IndexError, ValueError) as exc:
        raise ExportError(
            f"storage: bad value {display}: braces other than {{SCHEMA_VERSION}} ({_reason(exc)}); allowed: {STORAGE}"
        ) from None
    try:
        url = make_url(url_text)
        url.get_dialect()
    except ArgumentError as exc:  # NoSuchModuleError too: an unknown scheme
        raise ExportError(
            f"storage: bad value {display}: not a database URL ({_reason(exc)}); allowed: {STORAGE}"
        ) from None
    except ImportError as exc:
        raise ExportError(f"storage: {display}: its database driver is not installed ({_reason(exc)})") from None
    tables = set(models.BaseModel.metadata.tables) | {"alembic_version"}
    if url.get_backend_name() == "sqlite":
        return display, storage, _check_sqlite(display, _sqlite_path(url), tables)
    _check_server(display, url, tables)
    return display, storage, []


def _sqlite_path(url: Any) -> Optional[str]:
    """The file of an SQLite URL; None for an in-memory database."""
    database = url.database or ""
    if str(url.query.get("uri", "")).lower() in ("true", "1"):  # sqlite:///file:path?mode=...&uri=true
        split = urllib.parse.urlsplit(database)
        if split.scheme == "file":
            database = urllib.parse.unquote(split.path)
        if "memory" in str(url.query.get("mode", "")):
            return None
    return None if database in ("", ":memory:") else os.path.abspath(database)


def _check_sqlite(display: str, path: Optional[str], optuna_tables: set) -> List[str]:
    """The files a new SQLite storage at `path` will make (none for one that exists); ExportError for a
    path that is not a new file in an existing, writable folder or a writable Optuna storage."""
    if path is None:
        return []
    refuse = lambda found: ExportError(f"storage: {display}: {found}; allowed: {STORAGE}; nothing was written")
    if os.path.isdir(path):
        raise refuse(f"{shown(path)} is a folder")
    if os.path.lexists(path) and not os.path.exists(path):
        raise refuse(f"{shown(path)} is a link to nothing")
    if not os.path.exists(path):
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            raise refuse(
                f"the folder {shown(folder)} {'is not a folder' if os.path.exists(folder) else 'does not exist'}"
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            raise refuse(f"the folder {shown(folder)} is not writable")
        return [path + suffix for suffix in ("", "-journal", "-wal", "-shm") if not os.path.lexists(path + suffix)]
    if not os.path.isfile(path):
        raise refuse(f"{shown(path)} is not a regular file")
    if not os.stat(path).st_mode & 0o222 or not os.access(path, os.W_OK):
        raise refuse(f"{shown(path)} is read-only")
    _check_tables(display, f"the SQLite file {shown(path)}", _sqlite_tables(path, refuse), optuna_tables, True)
    return []


def _sqlite_tables(path: str, refuse: Callable[[str], ExportError]) -> List[str]:
    """The tables and views of the SQLite file `path`, read through a read-only connection (nothing is
    written: no journal either); ExportError for a file that is not SQLite, locked or unreadable."""
    uri = "file:" + urllib.parse.quote(os.fsencode(path)) + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=LOCK_WAIT_S)) as db:
            found = db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
    except sqlite3.DatabaseError as exc:
        reason = _reason(exc)
        if "locked" in reason or "busy" in reason:
            raise refuse(f"{shown(path)} is locked by another connection ({reason})") from None
        if "not a database" in reason or "encrypted" in reason:
            raise refuse(f"{shown(path)} is not an SQLite database") from None
        raise refuse(f"{shown(path)} cannot be read as an SQLite database ({reason})") from None
    return [str(name) for (name,) in found]


def _check_server(display: str, url: Any, optuna_tables: set) -> None:
    """ExportError for a server database that cannot be reached or holds tables that are not Optuna's
    (an empty one is Optuna's to fill: hpstudy cannot have made it, and it holds nothing to harm)."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url)
    except ImportError as exc:
        raise ExportError(f"storage: {display}: its database driver is not installed ({_reason(exc)})") from None
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise ExportError(f"storage: {display}: cannot be used ({_reason(exc)}); allowed: {STORAGE}") from None
    try:
        with engine.connect() as connection:
            inspector = sqlalchemy.inspect(connection)
            found = [*inspector.get_table_names(), *inspector.get_view_names()]
    except (sqlalchemy.exc.SQLAlchemyError, OSError) as exc:
        raise ExportError(f"storage: {display}: cannot be reached ({_reason(exc)}); nothing was written") from None
    finally:
        engine.dispose()
    _check_tables(display, "the database", found, optuna_tables, False)


def _check_tables(display: str, where: str, found: List[str], optuna_tables: set, file: bool) -> None:
    """ExportError unless the tables `found` are an Optuna storage's (Optuna's tables, its version
    table among them, and no other), or none in a server database."""
    tables = sorted(name for name in found if not name.startswith("sqlite_"))
    others = [name for name in tables if name not in optuna_tables]
    lacking = [name for name in OPTUNA_MARKS if name not in tables]
    if not tables and not file:
        return
    if not tables:
        found_text = f"{where} is an SQLite database with no tables, not an Optuna storage"
    elif others:
        found_text = f"{where} is not an Optuna storage: it holds tables Optuna does not make, {shown(others)}"
    elif lacking:
        found_text = f"{where} is not an Optuna storage: it lacks Optuna's tables {shown(lacking)}"
    else:
        return
    raise ExportError(f"storage: {display}: {found_text}; allowed: {STORAGE}; nothing was written")


def _replace_export(optuna: Any, storage: Any, name: str) -> None:
    """Delete the storage's study `name` if an earlier export wrote it; ExportError if someone else did."""
    try:
        storage.get_study_id_from_name(name)  # Optuna 3.1 (the floor) has no get_all_study_names
    except KeyError:
        return
    if EXPORTED not in optuna.load_study(study_name=name, storage=storage).user_attrs:
        raise ExportError(
            f"study_name: {shown(name)} is already in the storage and was not written by hpstudy; "
            f"allowed: a new name, or one an earlier export wrote (replaced)"
        )
    optuna.delete_study(study_name=name, storage=storage)
