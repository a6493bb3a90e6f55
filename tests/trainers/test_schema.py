"""The stored trial row: integer widths that hold every value the config allows, and the rows a trainer may return."""

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpstudy.trainers.config import MAX_BATCH, MAX_EPOCHS
from hpstudy.trainers.data_spec import MAX_SEED
from hpstudy.trainers.errors import SchemaError
from hpstudy.trainers.schema import (
    DIVERGED,
    EPOCH_SCHEMA,
    FAILED,
    OK,
    TRAINER_FIELDS,
    TRIAL_COLUMNS,
    TRIAL_FIELDS,
    TRIAL_SCHEMA,
    check_keys,
    epoch_record,
    names,
    trainer_row,
)

# bytes per value each integer column needs, by hand: seeds up to 2**63 - 1 (8 bytes, signed),
# FLOPs of a 36 GF model at 224 px and parameter counts over 2**31 (8), epochs up to 100_000 and
# batches up to 2**20 (4)
WIDTHS = {"seed": 8, "flops": 8, "params": 8, "epochs": 4, "batch_size": 4, "epochs_done": 4}


def _row(**values):
    """A complete trainer row (what a finished trial returns), nulls where a value does not matter."""
    return {**dict.fromkeys(TRAINER_FIELDS), "status": OK, **values}


@pytest.mark.parametrize("name,width", sorted(WIDTHS.items()))
def test_integer_columns_are_signed_and_as_wide_as_their_largest_value(name, width):
    kind = TRIAL_SCHEMA.field(name).type
    assert pa.types.is_signed_integer(kind) and kind.bit_width == 8 * width


@pytest.mark.parametrize(
    "values",
    [
        {"seed": MAX_SEED, "epochs": MAX_EPOCHS, "batch_size": MAX_BATCH, "epochs_done": MAX_EPOCHS},
        {"seed": 2**31, "flops": 36 * 10**9, "params": 2**31 + 1},
        {"seed": 2**32 + 5, "status": DIVERGED},
    ],
)
def test_the_largest_allowed_values_are_stored_exactly(values):
    row = dict(_row(**values), finished_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
    table = pa.Table.from_pylist([{**dict.fromkeys(TRIAL_FIELDS), **row}], schema=TRIAL_SCHEMA)
    assert {k: table.column(k)[0].as_py() for k in values} == values


def test_a_seed_past_63_bits_does_not_fit_the_column():
    """The config refuses seeds >= 2**63; the column would too (no silent wrap-around)."""
    assert MAX_SEED == 2**63 - 1
    with pytest.raises(OverflowError):
        pa.array([MAX_SEED + 1], TRIAL_SCHEMA.field("seed").type)


@pytest.mark.parametrize("status", [OK, DIVERGED])
def test_a_trainer_returns_finished_rows_with_exactly_its_columns(status):
    assert trainer_row(**_row(status=status))["status"] == status
    assert not {"trial_key", "node", "error"} & set(TRAINER_FIELDS)


def test_a_failed_row_or_a_wrong_key_is_refused_by_name():
    with pytest.raises(SchemaError, match="^trial row: status 'failed'; a trainer returns ok or diverged$"):
        trainer_row(**_row(status=FAILED))
    with pytest.raises(SchemaError, match="^trial row: unknown key 'error'"):
        trainer_row(**_row(error="boom"))
    with pytest.raises(SchemaError, match="^trial row: missing key 'seed'$"):
        trainer_row(**{k: v for k, v in _row().items() if k != "seed"})


def test_an_epoch_record_holds_exactly_the_epoch_columns():
    fields = [f.name for f in EPOCH_SCHEMA][3:]  # after trial_key, model, optimizer
    record = epoch_record(**dict.fromkeys(fields, 1))
    assert list(record) == fields
    with pytest.raises(SchemaError, match="^epoch record: missing key 'seconds'$"):
        epoch_record(**dict.fromkeys(fields[:-1], 1))


def test_an_unknown_key_is_refused_with_the_allowed_keys_listed_comma_separated():
    with pytest.raises(SchemaError, match=r"^row: unknown key 'c'; allowed: a, b$"):
        check_keys({"a": 1, "c": 2}, ("a", "b"), "row")


@given(st.sets(st.sampled_from(sorted({c.kind for c in TRIAL_COLUMNS}) + ["no such kind"])), st.booleans())
def test_column_names_are_every_columns_or_those_of_the_kinds_asked_in_schema_order(kinds, as_list):
    every = [c.name for c in TRIAL_COLUMNS]
    assert names(TRIAL_COLUMNS) == tuple(every) == TRIAL_FIELDS
    picked = names(TRIAL_COLUMNS, sorted(kinds) if as_list else iter(kinds))
    assert picked == tuple(c.name for c in TRIAL_COLUMNS if c.kind in kinds)
