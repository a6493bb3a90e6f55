"""Store write -> read round trip (hpstudy.study.store.layout.write_trial, then hpstudy.study.store.read.load_trials
and load_epochs), over generated rows (Hypothesis): any value the schema's Arrow type holds (NaN, +-inf,
-0.0, subnormals, the ends of int32 and int64, any Unicode text beyond the BMP, NUL, empty text, null in
every column not in REQUIRED) reads back as the value written, row by row, in a study of several trials.

How pandas holds a null is part of what users read: a null float is NaN, a null int makes its column float
(checked exactly where it can be: each int column read alone has its own dtype), a null text or bool is
None."""

import math
import tempfile
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.study.store.layout import REQUIRED, write_trial
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.trainers.schema import EPOCH_COLUMNS, TRIAL_COLUMNS
from tests.helpers import stored_row

TEXT = st.text(st.characters(codec="utf-8"), max_size=12)  # every code point UTF-8 encodes: beyond the BMP, NUL
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324, -5e-324, 1.7976931348623157e308, 2.0**-1022]),
)
WHEN = st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1), timezones=st.just(timezone.utc)).map(
    lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)  # the column holds milliseconds
)


def _ints(bits: int) -> st.SearchStrategy:
    """Any integer of the width, and its ends (and 2**53 + 1, the first a float64 cannot hold, in int64)."""
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.one_of(st.integers(low, high), st.sampled_from([low, high, 0, -1] + [2**53 + 1] * (bits > 53)))


def _values(column) -> st.SearchStrategy:
    """Any value of the column's Arrow type; null too where the column is not one every row has."""
    kind = column.type
    if pa.types.is_string(kind):
        value = TEXT
    elif pa.types.is_floating(kind):
        value = FLOATS
    elif pa.types.is_integer(kind):
        value = _ints(kind.bit_width)
    elif pa.types.is_boolean(kind):
        value = st.booleans()
    elif pa.types.is_timestamp(kind):
        value = WHEN
    else:
        raise AssertionError(f"a column of a type this test does not generate: {column.name} {kind}")
    return value if column.name in REQUIRED["trials"] + REQUIRED["epochs"] else st.one_of(st.none(), value)


KEYS = st.from_regex(r"[0-9a-f]{20}", fullmatch=True)  # a trial key names its file


@st.composite
def trials(draw):
    """1-4 trial rows of one study (distinct keys), each with 0-3 epoch records (distinct epochs)."""
    keys = draw(st.lists(KEYS, min_size=1, max_size=4, unique=True))
    out = []
    for key in keys:
        row = {c.name: draw(_values(c), label=c.name) for c in TRIAL_COLUMNS if c.name != "trial_key"}
        epochs = draw(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3, unique=True))
        records = [
            {c.name: n if c.name == "epoch" else draw(_values(c), label=c.name) for c in EPOCH_COLUMNS} for n in epochs
        ]
        out.append((dict(row, trial_key=key), records))
    return out


def same(written, read) -> bool:
    """`read` (as pandas gives it) is `written`: NaN for NaN, the sign of a zero, null as pandas holds it."""
    if written is None:
        return read is None or (isinstance(read, float) and math.isnan(read)) or read is pd.NaT
    if isinstance(written, float):
        return (math.isnan(written) and math.isnan(read)) or (
            written == read and math.copysign(1, written) == math.copysign(1, read)
        )
    if isinstance(written, datetime):
        return pd.Timestamp(read) == pd.Timestamp(written)
    if isinstance(written, bool):
        return read is not None and bool(read) == written
    if isinstance(written, int) and isinstance(read, float):  # its column holds a null: pandas' float column
        return read == float(written)  # exact below 2**53; above, test_an_int64_beside_a_null_keeps_its_value
    return read == written


def _study_frame(frame: pd.DataFrame, key_columns) -> dict:
    return {tuple(r[c] for c in key_columns): r for r in frame.to_dict("records")}


@settings(max_examples=25)
@given(trials(), st.sampled_from(["s", "Study-1.v2", "x" * 128]))
def test_every_row_the_schema_allows_reads_back_as_written(rows, study):
    with tempfile.TemporaryDirectory() as root:
        for row, records in rows:
            write_trial(root, study, row, records)
        stored = _study_frame(load_trials(root, study), ["trial_key"])
        epochs = _study_frame(load_epochs(root, study), ["trial_key", "epoch"])
        assert sorted(stored) == sorted((row["trial_key"],) for row, _ in rows)
        assert sorted(epochs) == sorted((row["trial_key"], r["epoch"]) for row, records in rows for r in records)
        for row, records in rows:
            got = stored[(row["trial_key"],)]
            assert got["study"] == study
            for name, value in row.items():
                assert same(value, got[name]), (name, value, got[name])
            for record in records:
                got = epochs[(row["trial_key"], record["epoch"])]
                expected = dict(record, trial_key=row["trial_key"], model=row["model"], optimizer=row["optimizer"])
                for name, value in expected.items():
                    assert same(value, got[name]), (name, value, got[name])


INT_COLUMNS = [c.name for c in TRIAL_COLUMNS if pa.types.is_integer(c.type)]
INT64_COLUMNS = [c.name for c in TRIAL_COLUMNS if c.type == pa.int64()]


@settings(max_examples=25)
@given(trials(), st.sampled_from(INT_COLUMNS))
def test_an_integer_column_read_alone_keeps_every_integer_exactly(rows, name):
    """Where no row of the study holds a null, an int column reads back as ints; with a null it is pandas'
    float64 with NaN, or nullable Int64 where a value is beyond float64's integers. Either way every
    integer is exact to the last unit (2**63 - 1 and 2**53 + 1 included) and every null is missing."""
    with tempfile.TemporaryDirectory() as root:
        for row, records in rows:
            write_trial(root, "s", row, records)
        frame = load_trials(root, "s", columns=[name])
        got = dict(zip(frame["trial_key"], frame[name].tolist()))
        written = {row["trial_key"]: row[name] for row, _ in rows}
        if all(v is not None for v in written.values()):
            assert pd.api.types.is_integer_dtype(frame[name]) and got == written
        else:
            assert all(pd.isna(got[k]) for k, v in written.items() if v is None)
            assert all(int(got[k]) == v for k, v in written.items() if v is not None)


@settings(max_examples=10)
@given(
    st.sampled_from(INT64_COLUMNS), st.integers(2**52, 2**62 - 1).map(lambda n: 2 * n + 1)
)  # odd, beyond 2**53: float64 rounds each
def test_an_int64_beside_a_null_keeps_its_value(name, big):
    """Two trials of one study, one without a value in an int64 column (a failed trial has no flops), the
    other with an integer a float64 cannot hold: the integer reads back exactly."""
    rows = [stored_row(trial_key="a" * 20, **{name: None}), stored_row(trial_key="b" * 20, **{name: big})]
    with tempfile.TemporaryDirectory() as root:
        for row in rows:
            write_trial(root, "s", dict(row, model="m", optimizer="o", epochs=1, lr=0.1, wd=0.1, status="ok"))
        got = load_trials(root, "s").set_index("trial_key")[name].astype(object)["b" * 20]
        assert isinstance(got, (int, np.integer)) and int(got) == big  # numpy's == would round big to the float


@settings(max_examples=15)
@given(trials())
def test_rewriting_a_trial_replaces_every_value(rows):
    """A trial written twice (say, failed and then retried) reads back as its second row, whatever the
    first held."""
    with tempfile.TemporaryDirectory() as root:
        (first, records), *others = rows
        write_trial(root, "s", first, records)
        for row, rs in others:
            write_trial(root, "s", dict(row, trial_key=first["trial_key"]), rs)
        last = dict(others[-1][0], trial_key=first["trial_key"]) if others else first
        got = _study_frame(load_trials(root, "s"), ["trial_key"])
        assert list(got) == [(first["trial_key"],)]
        for name, value in last.items():
            assert same(value, got[(first["trial_key"],)][name]), name
