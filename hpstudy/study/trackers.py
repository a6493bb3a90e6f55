"""Experiment trackers: every stored trial (fused members and failed trials too) sent on to MLflow,
TensorBoard or W&B (offline) from the driver, right after the store has it (docs/trackers.md).

A tracker is any object with `log_trial(row, epochs)` and `close()`: `row` is the stored trial row
(a dict of hpstudy.trainers.schema's trial columns plus `study`), `epochs` its epoch records; one that
also has `logged_keys(study)` (the trial keys it holds as ok/diverged) is sent the study's rows stored
before the run too (`backfill`). `parse_track` turns the `--track KIND:DIR` form into one and
`check_trackers` creates and probes its folder before any trial; the libraries load only when a
tracker logs its first trial."""

import contextlib
import importlib
import json
import logging
import os
import uuid
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Protocol,
    Sequence,
    Set,
    Tuple,
    Union,
)

import pyarrow as pa

from hpstudy.trainers import schema
from hpstudy.trainers.errors import HpstudyError, shown
from hpstudy.trainers.zoo import did_you_mean

if TYPE_CHECKING:  # pyarrow: only when stored trials are sent
    from hpstudy.study.store.layout import StoreLike

logger = logging.getLogger(__name__)

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


class FolderTracker:
    """What the three trackers share: a local folder (absolute), named in messages as `kind:folder`, and
    the flag (or argument) it came from."""

    kind = ""

    def __init__(self, folder: str, flag: str = "--track"):
        self.folder = os.path.abspath(folder)
        self.flag = flag

    def __repr__(self) -> str:
        return f"{self.kind}:{self.folder}"

    def probe(self, keep: bool = True) -> None:
        """Create the folder (and its missing parents) and write and delete a file in it, or raise
        TrackerError naming the flag, the tracker and why; with `keep` False (a dry run) the folders
        it created are removed again."""
        made = []
        path = self.folder
        while not os.path.lexists(path) and os.path.dirname(path) != path:
            made.append(path)
            path = os.path.dirname(path)
        probe = os.path.join(self.folder, f".hpstudy-probe-{uuid.uuid4().hex}")
        failed = True
        try:
            os.makedirs(self.folder, exist_ok=True)
            with open(probe, "w") as f:
                f.write("hpstudy")
            os.remove(probe)
            failed = False
        except OSError as exc:
            raise TrackerError(
                f"{self.flag}: cannot write {shown(repr(self))} ({exc.strerror or type(exc).__name__}: "
                f"{exc.filename or self.folder}); allowed: {FOLDER_RULE}"
            ) from None
        finally:
            if failed or not keep:
                for folder in made:  # deepest first; only what this probe made, and only if empty
                    with contextlib.suppress(OSError):
                        os.rmdir(folder)


class MlflowTracker(FolderTracker):
    """One MLflow run per trial (run name = trial key) in the experiment named after the study, in
    a SQLite database `<folder>/mlflow.db` (no server; MLflow's file store is in maintenance mode)."""

    kind = "mlflow"

    def __init__(self, folder: str, flag: str = "--track"):
        super().__init__(folder, flag)
        self.uri = f"sqlite:///{os.path.join(self.folder, 'mlflow.db')}"
        self._client: Any = None
        self._experiments: Dict[str, str] = {}

    def logged_keys(self, study: str) -> Set[str]:
        """The trial keys of the study's runs that are FINISHED (ok or diverged; a failed trial's run is
        FAILED) in the database; none when it does not exist yet."""
        if not os.path.exists(os.path.join(self.folder, "mlflow.db")):
            return set()
        experiment = self._experiment(study)
        keys: Set[str] = set()
        token = None
        while True:
            runs = self._client.search_runs(
                [experiment], "attributes.status = 'FINISHED'", max_results=5000, page_token=token
            )
            keys.update(run.data.tags.get("trial_key", run.info.run_name) for run in runs)
            token = runs.token
            if not token:
                return keys

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


class TensorBoardTracker(FolderTracker):
    """One TensorBoard run folder per trial, named for a reader: `<folder>/<study>/<model>/<optimizer>-<epochs>ep-<the
    key's first 8 digits>` (run_folder): the epoch curves as scalars (step = epoch), the final metrics and the
    hyperparameters for the HParams tab (tensorboardX, which Ray Tune installs). Each event file's name ends in
    the trial's key and status (events.out.tfevents.<time>.<host>.<key>.ok), which logged_keys reads."""

    kind = "tensorboard"

    def logged_keys(self, study: str) -> Set[str]:
        """The keys of the study's trials whose event file is not a failed trial's; a folder of an earlier
        hpstudy (`<study>/<key>/`, its event file named by the status alone, or by nothing) is that key's."""
        root = os.path.join(self.folder, study)
        keys = set()
        for folder, _, files in os.walk(root):
            for name in files:
                if _held_event_file(name):
                    parts = name.rsplit(".", 2)
                    nested = os.path.dirname(os.path.relpath(folder, root)) != ""
                    keys.add(parts[1] if nested and len(parts) == 3 else os.path.basename(folder))
        return keys

    def log_trial(self, row: Mapping[str, Any], epochs: Sequence[Mapping[str, Any]]) -> None:
        """Write the trial's event file: curves, final metrics and its hparams session."""
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        finals = final_metrics(row)
        logdir = os.path.join(self.folder, row["study"], run_folder(row))
        suffix = f".{row['trial_key']}.{row['status']}"
        with SummaryWriter(logdir=logdir, filename_suffix=suffix) as writer:
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


def run_folder(row: Mapping[str, Any]) -> str:
    """A trial's TensorBoard run, below its study: `<model>/<optimizer>-<epochs>ep-<the key's first 8 digits>`
    (a timm: model's colon or slash kept out of the path: timm-resnet18)."""
    model = str(row["model"]).replace(":", "-").replace("/", "-")
    return os.path.join(model, f"{row['optimizer']}-{row['epochs']}ep-{str(row['trial_key'])[:8]}")


def _held_event_file(name: str) -> bool:
    """Whether a TensorBoard trial folder's file is an event file of an ok or diverged trial (or of an
    hpstudy that did not name the status)."""
    return name.startswith("events.out.tfevents.") and not name.endswith(f".{schema.FAILED}")


class WandbTracker(FolderTracker):
    """One offline W&B run per trial (project = study, name = trial key, group = its cell, run id
    `<trial key>-<status>-<random>`) under `<folder>/wandb/`; `wandb sync` uploads them later."""

    kind = "wandb"

    def logged_keys(self, study: str) -> Set[str]:
        """The trial keys of the offline runs (`offline-run-<time>-<key>-<status>-<random>`) of an ok or
        diverged trial; the study is not in the folder's name, so any study's trial with the key counts
        (keys are hashes of whole trial configs: one key, one trial)."""
        root = os.path.join(self.folder, "wandb")
        if not os.path.isdir(root):
            return set()
        keys = set()
        for name in os.listdir(root):
            parts = name.split("-")
            if name.startswith("offline-run-") and len(parts) == 6 and parts[4] in schema.FINISHED:
                keys.add(parts[3])
        return keys

    def log_trial(self, row: Mapping[str, Any], epochs: Sequence[Mapping[str, Any]]) -> None:
        """An offline run: config = hyperparameters, history = epoch curves, summary = final metrics."""
        import wandb

        os.makedirs(self.folder, exist_ok=True)
        run = wandb.init(
            project=row["study"],
            id=f"{row['trial_key']}-{row['status']}-{uuid.uuid4().hex[:8]}",
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
KINDS: Dict[str, Tuple[Callable[[str, str], Tracker], str, str]] = {
    "mlflow": (MlflowTracker, "mlflow", "mlflow-skinny"),
    "tensorboard": (TensorBoardTracker, "tensorboardX", "tensorboardX"),
    "wandb": (WandbTracker, "wandb", "wandb"),
}
ALLOWED = ", ".join(f"{kind}:DIR" for kind in KINDS)
FOLDER_RULE = "a local folder, new or existing, that can be written (missing parents are created)"


def parse_track(value: str, flag: str = "--track") -> Tracker:
    """The tracker of a `KIND:DIR` value (KIND one of KINDS; DIR a local folder, `~` expanded, a `file://`
    URI read as its path); TrackerError naming `flag`, the value and what is allowed when the kind is
    unknown, DIR is missing, a URI of another scheme, a file or below one, or its library is not
    installed. Nothing is written: check_trackers creates and probes the folder."""
    kind, _, folder = value.partition(":")
    bad = f"{flag}: bad value {shown(value)}"
    if kind not in KINDS or not folder:
        raise TrackerError(f"{bad}; allowed: {ALLOWED} (repeatable){did_you_mean(kind, KINDS)}")
    if "://" in folder:
        scheme, _, path = folder.partition("://")
        if scheme.lower() != "file" or not path.startswith("/"):
            raise TrackerError(
                f"{bad}: {shown(scheme + '://')} is a URI scheme {kind}:DIR does not support; allowed: {FOLDER_RULE} "
                f"(or file:///absolute/path)"
            )
        folder = path
    folder = os.path.expanduser(folder)
    above = _first_existing(os.path.abspath(folder))
    if not os.path.isdir(above):
        what = "a file" if os.path.isfile(above) else "not a folder"
        where = "" if above == os.path.abspath(folder) else f" (so {shown(folder)} cannot be a folder)"
        raise TrackerError(f"{bad}: {shown(above)} is {what}{where}; allowed: {FOLDER_RULE}")
    cls, module, package = KINDS[kind]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise TrackerError(f"{bad}: {module} cannot be imported ({exc}); install it: pip install {package}") from None
    return cls(folder, flag)


def _first_existing(path: str) -> str:
    """`path`, or the nearest of its parents that exists (a file too)."""
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def check_trackers(trackers: Sequence[Tracker], keep: bool = True) -> None:
    """Before any trial: create each tracker's folder and write and delete a file in it (FolderTracker.probe),
    so a target that cannot be written stops the run now (TrackerError, exit 2) instead of costing every
    trial a warning. `keep` False (a dry run) removes the folders it made. Other trackers (objects of the
    Python API) are the caller's to check."""
    for tracker in trackers:
        if isinstance(tracker, FolderTracker):
            tracker.probe(keep)


def trackers_of(values: Sequence[Union[str, Tracker]], flag: str = "trackers") -> List[Tracker]:
    """`values` as trackers: a `KIND:DIR` text is parsed (parse_track, its errors naming `flag`), any
    other object used as it is."""
    return [parse_track(v, flag) if isinstance(v, str) else v for v in values]


def backfill(trackers: Sequence[Tracker], store: "StoreLike", study: str, keys: Iterable[str]) -> List[str]:
    """Send each tracker the study's stored ok/diverged trials among `keys` (those this run will not
    store again) that it does not hold yet: a run with --track on a study stored without it, or
    stopped before, fills the tracker in. A tracker without `logged_keys` (a Python object) is not
    sent them. Returns one line per tracker that was sent rows or was not, to print. A tracker that
    fails costs one warning and is sent no more of them."""
    keys = set(keys)
    if not trackers or not keys:
        return []
    lines, wanted = [], {}
    for tracker in trackers:
        holds = getattr(tracker, "logged_keys", None)
        if holds is None:
            lines.append(
                f"note: tracker {tracker!r} gets only the trials this run stores; the {len(keys)} stored before "
                f"are not sent to it (it has no logged_keys(study) to tell which it holds)"
            )
            continue
        try:
            missing = keys - set(holds(study))
        except Exception as exc:
            warn(tracker, "could not list the trials it holds", exc)
            continue
        if missing:
            wanted[id(tracker)] = (tracker, missing)
    if wanted:
        from hpstudy.study.store.read import load_epochs, load_trials  # pandas, only when some are sent

        needed = set().union(*(missing for _, missing in wanted.values()))
        rows = {
            row["trial_key"]: row
            for row in _records(load_trials(store, study))
            if row["trial_key"] in needed and row["status"] in schema.FINISHED
        }
        epochs: Dict[str, List[Dict[str, Any]]] = {}
        for record in _records(load_epochs(store, study)):
            if record["trial_key"] in rows:
                epochs.setdefault(record["trial_key"], []).append(
                    {name: record.get(name) for name in schema.EPOCH_FIELDS}
                )
        for tracker, missing in wanted.values():
            sent = 0
            for key in sorted(missing & set(rows), key=lambda k: str(rows[k].get("finished_at"))):
                row = {name: rows[key].get(name) for name in schema.TRIAL_FIELDS}
                try:
                    tracker.log_trial({**row, "study": study}, sorted(epochs.get(key, []), key=lambda e: e["epoch"]))
                except Exception as exc:
                    warn(tracker, f"did not log stored trial {key} (the stored trials after it are not sent)", exc)
                    break
                sent += 1
            if sent:
                lines.append(f"tracker {tracker!r}: sent the {sent} trials stored before this run that it did not hold")
    return lines


def _records(frame) -> List[Dict[str, Any]]:
    """A DataFrame's rows as dicts of Python values, a missing value as None (not NaN or NaT)."""
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def warn(tracker: Tracker, what: str, exc: Exception) -> None:
    """One warning line (this module's logger; stderr in a terminal): which tracker failed to do what, and the
    first line of why."""
    reason = (str(exc).strip().splitlines() or [""])[0]
    logger.warning("warning: tracker %r %s: %s: %s", tracker, what, type(exc).__name__, reason)


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
