"""Hostile values through the analysis API: `from_table` (and `from_tune`, `table_report`), `to_optuna`
and the query filter, each argument given values of every wrong type and size (huge ints, complex,
bytes, NaN and inf, bools where numbers go, text that is not UTF-8 or spans lines, containers,
frames with duplicated, non-text or missing columns, empty frames). Each call returns a correct
result or raises exactly its module's HpstudyError subclass, whose message is one printable line that
names the field."""

import decimal
import fractions
import logging
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis.metric import MetricError
from hpstudy.analysis.optuna_export import ExportError, to_optuna
from hpstudy.analysis.query import QueryError, filter_rows
from hpstudy.analysis.table import TableError, from_table, from_tune, table_report
from hpstudy.trainers.errors import HpstudyError
from hpstudy.trainers.schema import STATUSES
from tests.helpers import hostile_values, make_trials

TEXT, NUMBERS, ODD = hostile_values()
HOSTILE = st.one_of(NUMBERS, TEXT, ODD)


def _one_line(error: BaseException, start: str) -> str:
    """The error's message, checked: one printable line that starts by naming the field."""
    text = str(error)
    assert text.isprintable(), repr(text)  # no line break, no surrogate: any stream can write it
    assert text.startswith(start), (start, text)
    return text


def _real(value) -> "int | float | None":
    """What a cell or an argument holds as a real number, by this test's own rule: None if it is not
    one (bools, complex, bytes, containers, an int beyond a float's range, text that is no number)."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (complex, np.complexfloating)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value) if abs(int(value)) < 1.7e308 else None  # exact: 2**53 + 1 is no float
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (decimal.Decimal, fractions.Fraction)):
        number = float(value)
        return (
            None if math.isinf(number) and not (isinstance(value, decimal.Decimal) and value.is_infinite()) else number
        )
    return None


# --- from_table --------------------------------------------------------------------------------------

FRAME = pd.DataFrame({"e": [10.0, np.nan, np.inf], "lr": [1e-3, 2e-3, 3e-3], "m": ["mine_a", "mine_b", "mine_a"]})
MAPPING = dict(error="e", model="m", optimizer="adamw", lr="lr", wd=0.1)
ARGUMENTS = [
    "error",
    "model",
    "optimizer",
    "lr",
    "wd",
    "epochs",
    "seed",
    "status",
    "train_loss",
    "scale",
    "chance",
    "study",
]


@given(field=st.sampled_from(ARGUMENTS), value=HOSTILE)
def test_every_argument_of_from_table_gives_rows_or_one_table_error_naming_it(field, value):
    try:
        rows = from_table(FRAME, **{**MAPPING, field: value})
    except TableError as error:
        _one_line(error, f"table: {field}")
        return
    assert len(rows) == len(FRAME) and set(rows["status"]) <= set(STATUSES)
    if field in ("epochs", "seed", "lr", "wd", "chance") and not isinstance(value, str):  # the number given, exactly
        number = _real(value)
        assert number is not None, value
        column = {"chance": "top1_err"}.get(field, field)
        if field in ("epochs", "seed"):
            assert rows[field].dtype == np.int64 and (rows[field] == int(value)).all()
        elif field == "chance":
            assert rows.loc[rows["status"] == "diverged", column].tolist() == [number]
        else:
            assert (rows[column] == number).all()


@given(cells=st.lists(st.one_of(NUMBERS, TEXT, ODD), min_size=1, max_size=4), field=st.sampled_from(["e", "lr", "s"]))
def test_every_cell_of_a_number_column_is_read_as_the_number_it_is_or_refused(cells, field):
    frame = pd.DataFrame({"e": 50.0, "lr": 1e-3, "s": 0, "m": "mine_a"}, index=range(len(cells)))
    frame[field] = pd.Series(cells, dtype=object)
    name = {"e": "error", "lr": "lr", "s": "seed"}[field]
    try:
        rows = from_table(frame, error="e", model="m", optimizer="adamw", lr="lr", wd=0.1, seed="s")
    except TableError as error:
        _one_line(error, f"table: {name}")
        return
    for cell, got in zip(cells, rows[{"e": "top1_err", "s": "seed"}.get(field, field)]):
        number = _real(cell) if not isinstance(cell, str) else float(cell)  # text is read as a number
        if cell is None or cell is pd.NA or number is not None and math.isnan(number):
            assert field == "e" or field == "lr", cell  # missing: a failed trial, whose lr may be anything
            continue
        assert number is not None, cell  # 7+3j, b"2.5", a list, True: never read as a number
        if field == "s":
            assert got == int(number) == number and 0 <= got < 2**63
        elif field == "e" and math.isinf(number):
            assert got == 100.0  # diverged: at chance
        else:
            assert got == float(number)  # errors and lr are floats


def _frame(columns: list, rows: int, value: float) -> "pd.DataFrame | None":
    """A frame of `rows` rows of `value` under `columns`; None where pandas cannot make one (pandas 3
    keeps an empty frame's text column names in Arrow, which takes no lone surrogate)."""
    try:
        return pd.DataFrame([[value] * len(columns)] * rows, columns=columns)
    except UnicodeEncodeError:
        return None


@given(
    columns=st.lists(st.one_of(st.sampled_from(["e", "m", "lr"]), st.integers(-2, 2), TEXT), min_size=0, max_size=4),
    rows=st.integers(0, 2),
)
def test_frames_with_duplicated_non_text_or_missing_columns_and_empty_frames(columns, rows):
    frame = _frame(columns, rows, 1.0)
    if frame is None:
        return
    try:
        result = from_table(frame, error="e", model="mine_a", optimizer="adamw", lr=1e-3, wd=0.1)
    except TableError as error:
        text = _one_line(error, "table: ")
        if columns.count("e") > 1:
            assert "columns named 'e'" in text or "no rows" in text
        return
    assert columns.count("e") == 1 and rows and len(result) == rows


@given(value=HOSTILE)
def test_from_tune_and_table_report_refuse_what_they_cannot_read(value):
    with pytest.raises(TableError) as refused:
        from_tune(value, error="e", model="mine_a", optimizer="adamw")
    start = "table: " if isinstance(value, pd.DataFrame) else "from_tune: bad value"
    _one_line(refused.value, start)
    with pytest.raises(TableError) as refused:
        table_report(value, "unused")
    _one_line(refused.value, "table_report: trials")


def test_epochs_beyond_int64_and_complex_or_huge_errors_are_refused_not_stored_wrong():
    """The cases of issue #37: epochs 10**30 was stored as -2**63, an error 7+3j as 7.0, 10**400 raised
    OverflowError, two columns of one name a pandas TypeError."""
    frame = pd.DataFrame({"e": [10.0, 20.0]})
    with pytest.raises(TableError, match=r"^table: epochs: bad value 10{30}; allowed: whole numbers >= 1 \(at most"):
        from_table(frame, error="e", model="mine_a", optimizer="adamw", lr=1e-3, wd=0.1, epochs=10**30)
    for cell in (7 + 3j, 10**400):
        with pytest.raises(TableError, match=r"^table: error \(column 'e'\): bad value .* in row 0; allowed: numbers"):
            from_table(
                pd.DataFrame({"e": pd.Series([cell, 2.0], dtype=object)}), **{**MAPPING, "lr": 1e-3, "model": "x"}
            )
    with pytest.raises(TableError, match=r"^table: error: the table has 2 columns named 'e'; allowed: a column whose"):
        from_table(pd.DataFrame([[1.0, 2.0]], columns=["e", "e"]), **{**MAPPING, "lr": 1e-3, "model": "x"})
    seed = 2**60 + 1  # beyond a float's 53 bits: kept exactly
    rows = from_table(frame.assign(s=seed), error="e", model="x", optimizer="adamw", lr=1e-3, wd=0.1, seed="s")
    assert rows["seed"].tolist() == [seed, seed]


# --- to_optuna ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def optuna():
    """Optuna, quiet below warnings (a line per study otherwise): imported by the tests that export, not at
    collection."""
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    return optuna


@pytest.fixture(scope="module")
def trials():
    return make_trials(models=("cnn_tiny",), optimizers=("adamw",), n=6, fail_share=0.2).assign(study="gen")


@pytest.fixture(scope="module")
def workdir():
    """A folder of its own as the working directory: a storage URL Hypothesis makes up is written there."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(here)


EXPORT_ARGUMENTS = ["storage", "study_name", "params", "cell", "metric", "epochs"]
STORAGES = st.sampled_from(
    ["sqlite://", "sqlite:///made.db", "sqlite:///", "sqlite:///./", "sqlite:///nope/x.db", "nosuch://x", "::", "{}"]
)


@settings(max_examples=150)
@given(field=st.sampled_from(EXPORT_ARGUMENTS), value=st.one_of(HOSTILE, STORAGES))
def test_every_argument_of_to_optuna_gives_a_study_or_one_export_error_naming_it(optuna, trials, workdir, field, value):
    try:
        study = to_optuna(trials, **{field: value})
    except (ExportError, MetricError) as error:
        assert type(error) is ExportError or field == "metric" and type(error) is MetricError, type(error)
        _one_line(error, field)
        return
    assert isinstance(study, optuna.Study) and len(study.trials) == len(trials)
    if field == "study_name" and value is not None:
        assert study.study_name == value


@given(
    table=st.sampled_from(["odd", "columns", "cells"]),
    value=HOSTILE,
    column=st.sampled_from(["model", "epochs", "lr", "top1_err", "status", "study"]),
)
def test_a_trial_table_of_hostile_values_gives_a_study_or_one_export_error(optuna, trials, table, value, column):
    if table == "odd":
        given_trials = value
    elif table == "columns":  # a column renamed to the hostile value (a duplicate, a number, a surrogate)
        try:
            given_trials = trials.rename(columns={column: value}) if _hashable(value) else trials
        except (UnicodeEncodeError, OverflowError):  # pandas cannot build that frame: pandas 3 keeps text
            return  # column names in Arrow (no lone surrogate); pandas 2.0 (the floor) no int beyond 64 bits
    else:  # one cell of the column holds the hostile value
        given_trials = trials.astype({column: object})
        try:
            given_trials.iat[0, given_trials.columns.get_loc(column)] = value
        except (ValueError, TypeError):  # pandas cannot hold it in a cell (a frame, an array)
            return
    try:
        study = to_optuna(given_trials, params=("lr", "wd"))
    except HpstudyError as error:
        assert type(error) in (ExportError, MetricError), type(error)
        _one_line(error, "")
        assert str(error).split(":")[0] in ("trials", "cell", "params", "study_name", "metric paper", "metric")
        return
    assert isinstance(study, optuna.Study)


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


# --- the query filter --------------------------------------------------------------------------------

QUERY_FRAME = pd.DataFrame({"lr": [1e-3, 2e-2], "model": ["a", "b"], "ema": [True, False]})


@given(
    expr=st.one_of(
        HOSTILE,
        st.lists(st.sampled_from(["lr", "<", "1", "\udcff", "\x00", "and", "'", "10**400", "\n"]), max_size=6).map(
            " ".join
        ),
    )
)
def test_every_filter_gives_rows_or_one_query_error(expr):
    try:
        rows = filter_rows(QUERY_FRAME, expr)
    except QueryError as error:
        _one_line(error, "query")
        return
    assert isinstance(expr, str) and set(rows.index) <= set(QUERY_FRAME.index)


@given(
    columns=st.lists(st.one_of(st.sampled_from(["lr", "model"]), st.integers(0, 2), TEXT), max_size=4),
    rows=st.integers(0, 2),
)
def test_a_filter_over_frames_with_duplicated_or_odd_columns(columns, rows):
    frame = _frame(columns, rows, 0.5)
    if frame is None:
        return
    try:
        got = filter_rows(frame, "lr > 0.1")
    except QueryError as error:
        text = _one_line(error, "query 'lr > 0.1': ")
        assert ("unknown column" in text) == ("lr" not in columns)
        return
    assert columns.count("lr") == 1 and len(got) == rows


def test_a_non_utf8_filter_is_a_query_error():
    """The case of issue #37: `hpstudy query $'\\xff'` ended in a UnicodeEncodeError from ast.parse."""
    with pytest.raises(QueryError) as refused:
        filter_rows(QUERY_FRAME, "model == '\udcff'")
    assert _one_line(refused.value, "query \"model == '\\udcff'\": not UTF-8 text (character 11")


@pytest.mark.parametrize("command", ["status", "query"])
def test_a_store_path_that_is_not_utf8_is_one_error_line(command, tmp_path):
    """A store named by bytes that are not UTF-8 (a surrogate once decoded): exit 2, one line naming --store."""
    argv = [sys.executable, "-m", "hpstudy", command, "--store", os.fsencode(str(tmp_path)) + b"/\xff"]
    if command == "query":
        argv.append(b"lr > 0")
    done = subprocess.run(argv, capture_output=True, timeout=120)
    err = done.stderr.decode("utf-8", "backslashreplace").strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: --store: bad value") and "UTF-8" in err
