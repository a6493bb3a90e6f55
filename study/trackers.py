"""Experiment trackers: every stored trial (fused members and failed trials too) sent on to MLflow,
TensorBoard or W&B (offline) from the driver, right after the store has it (docs/trackers.md).

A tracker is any object with `log_trial(row, epochs)` and `close()`: `row` is the stored trial row
(a dict of hpstudy.trainers.schema's trial columns plus `study`), `epochs` its epoch records.
`parse_track` turns the `--track KIND:DIR` form into one; the libraries load only when a tracker
logs its first trial."""

import contextlib
import importlib
import json
import os
import sys
from datetime import datetime
from typing import Any, Callable, Dict, Iterator, List, Mapping, Protocol, Sequence, Tuple, Union

import pyarrow as pa

from hpstudy.trainers import schema
from hpstudy.trainers.errors import HpstudyError, shown

# the row's numbers a tracker logs as final metrics, and the epoch records' as curves (step = epoch)
FINAL_METRICS = tuple(
    c.name
    for c in schema.TRIAL_COLUMNS
    if c.kind == "result" and (pa.types.is_floating(c.type) or pa.types.is_integer(c.type))
)
CURVES = tuple(name for name in schema.EPOCH_FIELDS if name != "epoch")
CURVE_PREFIX = "epoch/"


class TrackerError(HpstudyError):
    """A `--track` value that names no tracker, no folder, or a library that is not installed."""


class Tracker(Protocol):
    """What the store writer calls: once per stored trial row, and once at the end of the run."""

    def log_trial(self, row: Mapping[str, Any], epochs: Sequence[Mapping[str, Any]]) -> None: ...

    def close(self) -> None: ...


def hyperparameters(row: Mapping[str, Any]) -> Dict[str, Any]:
    """A row's trial config as flat params: its config columns and every field of config_json
    (nested ones as `dataset.name`), nulls left out."""
    config_columns = schema.names(schema.TRIAL_COLUMNS, ("config",))
    flat = {name: row.get(name) for name in config_columns if name != "config_json"}

    def add(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                add(f"{prefix}.{key}" if prefix else key, item)
        else:
            flat[prefix] = value

    add("", json.loads(row.get("config_json") or "{}"))
    return {name: value for name, value in flat.items() if value is not None}


def final_metrics(row: Mapping[str, Any]) -> Dict[str, float]:
    """The row's FINAL_METRICS that are not null (a failed row has none)."""
    return {name: float(row[name]) for name in FINAL_METRICS if row.get(name) is not None}


def curves(epochs: Sequence[Mapping[str, Any]]) -> List[tuple]:
    """(epoch, {`epoch/<name>`: value}) per epoch record, nulls left out."""
    return [
        (int(e["epoch"]), {CURVE_PREFIX + name: float(e[name]) for name in CURVES if e.get(name) is not None})
        for e in epochs
    ]


def _finished_ms(row: Mapping[str, Any]) -> int:
    """When the row was made, in ms since the epoch (the store keeps an ISO text or a datetime)."""
    when = row.get("finished_at")
    when = datetime.fromisoformat(when) if isinstance(when, str) else when
    return int(when.timestamp() * 1000) if when is not None else 0


class MlflowTracker:
    """One MLflow run per trial (run name = trial key) in the experiment named after the study, in
    a SQLite database `<folder>/mlflow.db` (no server; MLflow's file store is in maintenance mode)."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)
        self.uri = f"sqlite:///{os.path.join(self.folder, 'mlflow.db')}"
        self._client: Any = None
        self._experiments: Dict[str, str] = {}

    def __repr__(self) -> str:
        return f"mlflow:{self.folder}"

    def _experiment(self, study: str) -> str:
        """The id of the study's experiment, made at its first trial (and the client at the first of all)."""
        if self._client is None:
            import mlflow

            os.makedirs(self.folder, exist_ok=True)
            self._client = mlflow.MlflowClient(tracking_uri=self.uri)
        if study not in self._experiments:
            found = self._client.get_experiment_by_name(study)
            artifacts = f"file://{os.path.join(self.folder, 'artifacts')}"  # not ./mlruns of the cwd
            self._experiments[study] = (
                found.experiment_id if found else self._client.create_experiment(study, artifacts)
            )
        return self._experiments[study]

    def log_trial(self, row: Mapping[str, Any], epochs: Sequence[Mapping[str, Any]]) -> None:
        """One finished MLflow run: params, final metrics and per-epoch curves, tags study/status/trial_key."""
        from mlflow.entities import Metric, Param

        end = _finished_ms(row)
        start = end - int(1000 * (row.get("wall_s") or 0.0))
        tags = {"study": row["study"], "status": row["status"], "trial_key": row["trial_key"]}
        if row.get("error"):
            tags["error"] = row["error"]
        experiment = self._experiment(row["study"])
        run = self._client.create_run(experiment, start_time=start, tags=tags, run_name=row["trial_key"])
        metrics = [
            Metric(name, value, end, int(row.get("epochs_done") or 0)) for name, value in final_metrics(row).items()
        ]
        metrics += [
            Metric(name, value, end, epoch) for epoch, values in curves(epochs) for name, value in values.items()
        ]
        params = [Param(name, str(value)) for name, value in hyperparameters(row).items()]
        self._client.log_batch(run.info.run_id, metrics=metrics, params=params, tags=[])
        status = "FAILED" if row["status"] == schema.FAILED else "FINISHED"
        self._client.set_terminated(run.info.run_id, status=status, end_time=end)

    def close(self) -> None:
        """Drop the client (and with it the database connection)."""
        self._client, self._experiments = None, {}


class TensorBoardTracker:
    """One TensorBoard run folder per trial, `<folder>/<study>/<trial key>`: the epoch curves as
    scalars (step = epoch), the final metrics and the hyperparameters for the HParams tab (tensorboardX,
    which Ray Tune installs)."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)

    def __repr__(self) -> str:
        return f"tensorboard:{self.folder}"

    def log_trial(self, row: Mapping[str, Any], epochs: Sequence[Mapping[str, Any]]) -> None:
        """Write the trial's event file: curves, final metrics and its hparams session."""
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        finals = final_metrics(row)
        with SummaryWriter(logdir=os.path.join(self.folder, row["study"], row["trial_key"])) as writer:
            for epoch, values in curves(epochs):
                for name, value in values.items():
                    writer.add_scalar(name, value, epoch)
            # the HParams tab pairs these tags with the hyperparameters; the session is written
            # into the trial's own folder (add_hparams would start a sub-run)
            for summary in hparams({**hyperparameters(row), "status": row["status"]}, finals):
                writer.file_writer.add_summary(summary)
            for name, value in finals.items():
                writer.add_scalar(name, value, int(row.get("epochs_done") or 0))

    def close(self) -> None:
        """Nothing to release: each trial's writer is closed when it is written."""


class WandbTracker:
    """One offline W&B run per trial (project = study, name = trial key, group = its cell) under
    `<folder>/wandb/`; `wandb sync` uploads them later."""

    def __init__(self, folder: str):
        self.folder = os.path.abspath(folder)

    def __repr__(self) -> str:
        return f"wandb:{self.folder}"

    def log_trial(self, row: Mapping[str, Any], epochs: Sequence[Mapping[str, Any]]) -> None:
        """An offline run: config = hyperparameters, history = epoch curves, summary = final metrics."""
        import wandb

        os.makedirs(self.folder, exist_ok=True)
        run = wandb.init(
            project=row["study"],
            name=row["trial_key"],
            group=f"{row['model']}/{row['optimizer']}/{row['epochs']}",
            tags=[row["status"]],
            config=hyperparameters(row),
            dir=self.folder,
            mode="offline",
            reinit="create_new",
            settings=wandb.Settings(silent=True, console="off"),
        )
        try:
            for epoch, values in curves(epochs):
                run.log(values, step=epoch)
            run.summary.update({**final_metrics(row), "status": row["status"]})
        finally:
            run.finish(exit_code=1 if row["status"] == schema.FAILED else 0)

    def close(self) -> None:
        """Nothing to release: each trial's run is finished when it is logged."""


# kind -> (class, the module it needs, what to pip install for it)
KINDS: Dict[str, Tuple[Callable[[str], Tracker], str, str]] = {
    "mlflow": (MlflowTracker, "mlflow", "mlflow-skinny"),
    "tensorboard": (TensorBoardTracker, "tensorboardX", "tensorboardX"),
    "wandb": (WandbTracker, "wandb", "wandb"),
}
ALLOWED = ", ".join(f"{kind}:DIR" for kind in KINDS)


def parse_track(value: str, flag: str = "--track") -> Tracker:
    """The tracker of a `KIND:DIR` value (KIND one of KINDS); TrackerError naming `flag`, the value and
    what is allowed when the kind is unknown, DIR is missing or a file, or its library is not installed."""
    kind, _, folder = value.partition(":")
    bad = f"{flag}: bad value {shown(value)}"
    if kind not in KINDS or not folder:
        raise TrackerError(f"{bad}; allowed: {ALLOWED} (repeatable)")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise TrackerError(f"{bad}: {shown(folder)} is a file; allowed: a folder, new or existing")
    cls, module, package = KINDS[kind]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise TrackerError(f"{bad}: {module} cannot be imported ({exc}); install it: pip install {package}") from None
    return cls(folder)


def trackers_of(values: Sequence[Union[str, Tracker]], flag: str = "trackers") -> List[Tracker]:
    """`values` as trackers: a `KIND:DIR` text is parsed (parse_track, its errors naming `flag`), any
    other object used as it is."""
    return [parse_track(v, flag) if isinstance(v, str) else v for v in values]


def warn(tracker: Tracker, what: str, exc: Exception) -> None:
    """One warning line on stderr: which tracker failed to do what, and the first line of why."""
    reason = (str(exc).strip().splitlines() or [""])[0]
    print(f"warning: tracker {tracker!r} {what}: {type(exc).__name__}: {reason}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def close_all(trackers: Sequence[Tracker]) -> Iterator[None]:
    """Close every tracker when the block ends, however it ends (an interrupted run too); a tracker
    that fails to close costs one warning line."""
    try:
        yield
    finally:
        for tracker in trackers:
            try:
                tracker.close()
            except Exception as exc:
                warn(tracker, "did not close", exc)
