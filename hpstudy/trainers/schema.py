"""The one definition of what hpstudy stores: the trial row, the epoch record and the statuses.

Importable without torch. The store's Arrow schemas, the trainers' rows, the study's failed row and
the report's columns all derive from the column lists here, so adding a column is one edit here
plus the code that produces its value (see docs/architecture.md).

Each trial column has a `kind` that says who fills it in:
- `config`: from the trial config (`TrialConfig.row_fields`), known before training;
- `result`: measured by training; null in a failed row;
- `run`: where and with what it ran (`hpstudy.trainers.provenance.run_info`);
- `study`: added by the study runner (`trial_key`, `node`, `error`).
"""

from dataclasses import dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

import pyarrow as pa

from hpstudy.trainers.errors import SchemaError

OK, DIVERGED, FAILED = "ok", "diverged", "failed"
STATUSES = (OK, DIVERGED, FAILED)
FINISHED = (OK, DIVERGED)  # stored as done: resume skips these; FAILED runs again


@dataclass(frozen=True)
class Column:
    """One stored column: its name, Arrow type, who fills it in, and what it means."""

    name: str
    type: pa.DataType
    kind: str
    doc: str


TRIAL_COLUMNS: Tuple[Column, ...] = (
    Column("trial_key", pa.string(), "study", "hash of the canonical trial config: the idempotency key"),
    Column("model", pa.string(), "config", "registered model name"),
    Column(
        "family",
        pa.string(),
        "config",
        "model family: the catalogue's (vit_p, vit_c, cnn, ...); a timm: model's as its spec gives it, else its name",
    ),
    Column("flops", pa.int64(), "result", "multiply-adds of one forward pass on one image"),
    Column("params", pa.int64(), "result", "parameter count"),
    Column("optimizer", pa.string(), "config", "adamw or sgd"),
    Column("epochs", pa.int32(), "config", "scheduled training epochs"),
    Column("lr", pa.float64(), "config", "learning rate (for reference_batch_size)"),
    Column("wd", pa.float64(), "config", "weight decay"),
    Column("seed", pa.int64(), "config", "init and data-order seed"),
    Column("dataset", pa.string(), "config", "dataset name"),
    Column("batch_size", pa.int32(), "config", "training batch size"),
    Column("init_sha256", pa.string(), "config", "sha256 of the checkpoint fine-tuned from (null: from scratch)"),
    Column("status", pa.string(), "result", "ok, diverged or failed"),
    Column("top1_err", pa.float64(), "result", "top-1 error (%) after the last epoch; chance if diverged"),
    Column("top5_err", pa.float64(), "result", "top-5 error (%) after the last epoch; chance if diverged"),
    Column("best_top1_err", pa.float64(), "result", "lowest top-1 error (%) over epochs"),
    Column("ema_top1_err", pa.float64(), "result", "top-1 error (%) of the EMA weights (null without EMA)"),
    Column(
        "best_ema_top1_err",
        pa.float64(),
        "result",
        "lowest top-1 error (%) of the EMA weights over epochs (null without EMA; chance if diverged)",
    ),
    Column("train_loss", pa.float64(), "result", "mean training loss of the last completed epoch"),
    Column("epochs_done", pa.int32(), "result", "epochs completed"),
    Column("wall_s", pa.float64(), "result", "seconds of training (a fused group's wall time)"),
    Column(
        "head_reinit",
        pa.bool_(),
        "result",
        "fine-tuned with the head re-initialised (the checkpoint's class count differs); null from scratch",
    ),
    Column("device", pa.string(), "run", "torch device the trial trained on"),
    Column("hostname", pa.string(), "run", "host name of the worker"),
    Column("node", pa.string(), "study", "Ray node id of the worker"),
    Column("versions", pa.string(), "run", "JSON: torch, timm, ray, hpstudy versions and git sha"),
    Column("config_json", pa.string(), "config", "the canonical trial config as JSON"),
    Column("error", pa.string(), "study", "error text of a failed trial"),
    Column("finished_at", pa.timestamp("ms", tz="UTC"), "run", "when the row was made (UTC)"),
)

EPOCH_KEY_COLUMNS: Tuple[Column, ...] = (
    Column("trial_key", pa.string(), "study", "the trial this epoch belongs to"),
    Column("model", pa.string(), "config", "registered model name"),
    Column("optimizer", pa.string(), "config", "adamw or sgd"),
)
EPOCH_COLUMNS: Tuple[Column, ...] = (  # the epoch record a trainer reports after each epoch
    Column("epoch", pa.int32(), "result", "1-based epoch number"),
    Column("train_loss", pa.float64(), "result", "mean training loss of the epoch"),
    Column("train_top1_err", pa.float64(), "result", "training top-1 error (%) (null when fused)"),
    Column("top1_err", pa.float64(), "result", "validation top-1 error (%)"),
    Column("top5_err", pa.float64(), "result", "validation top-5 error (%)"),
    Column("ema_top1_err", pa.float64(), "result", "validation top-1 error (%) of the EMA weights"),
    Column("lr", pa.float64(), "result", "learning rate at the epoch's last step"),
    Column("seconds", pa.float64(), "result", "wall seconds of the epoch (training and evaluation)"),
)


def names(columns: Iterable[Column], kinds: Optional[Iterable[str]] = None) -> Tuple[str, ...]:
    """Column names, optionally only those of the given kinds."""
    kinds = None if kinds is None else set(kinds)
    return tuple(c.name for c in columns if kinds is None or c.kind in kinds)


def arrow_schema(columns: Iterable[Column]) -> pa.Schema:
    """The Arrow schema of a column list."""
    return pa.schema([(c.name, c.type) for c in columns])


TRIAL_SCHEMA = arrow_schema(TRIAL_COLUMNS)
EPOCH_SCHEMA = arrow_schema(EPOCH_KEY_COLUMNS + EPOCH_COLUMNS)
TRIAL_FIELDS = names(TRIAL_COLUMNS)
TRAINER_FIELDS = names(TRIAL_COLUMNS, ("config", "result", "run"))  # what a trainer's row holds
RESULT_FIELDS = names(TRIAL_COLUMNS, ("result",))
EPOCH_FIELDS = names(EPOCH_COLUMNS)


def check_keys(row: Mapping[str, Any], expected: Iterable[str], what: str) -> None:
    """Raise SchemaError naming the first unknown or missing key of `row`."""
    expected = tuple(expected)
    unknown = [k for k in row if k not in expected]
    if unknown:
        raise SchemaError(f"{what}: unknown key {unknown[0]!r}; allowed: {', '.join(expected)}")
    missing = [k for k in expected if k not in row]
    if missing:
        raise SchemaError(f"{what}: missing key {missing[0]!r}")


def epoch_record(**values: Any) -> Dict[str, Any]:
    """An epoch record with exactly the EPOCH_COLUMNS keys."""
    check_keys(values, EPOCH_FIELDS, "epoch record")
    return values


def trainer_row(**values: Any) -> Dict[str, Any]:
    """A trial row as a trainer returns it: every column but the study's (key, node, error)."""
    check_keys(values, TRAINER_FIELDS, "trial row")
    if values["status"] not in FINISHED:
        raise SchemaError(f"trial row: status {values['status']!r}; a trainer returns {' or '.join(FINISHED)}")
    return values
