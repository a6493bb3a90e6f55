"""Trackers (study/trackers.py): every stored trial, fused members and failed ones too, handed on from
the store writer to MLflow, TensorBoard and W&B, read back with each library's own reader."""

import json
import os
import sys
from types import SimpleNamespace

import pytest

from hpstudy.study.runner import run_study
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store import StoreFault
from hpstudy.study.store_read import load_epochs, load_trials
from hpstudy.study.trackers import (
    KINDS,
    TensorBoardTracker,
    TrackerError,
    WandbTracker,
    parse_track,
    trackers_of,
)
from hpstudy.study.tune_store_writer import StoreWriter
from hpstudy.trainers.config import TrialConfig
from tests.helpers import epoch_row, planned_row, small_spec

STUDY = "tracked"
EPOCHS = (1, 2, 3)


class Recording:
    """A tracker that keeps what it was given."""

    def __init__(self):
        self.logged, self.closed = [], 0

    def log_trial(self, row, epochs):
        self.logged.append((row, list(epochs)))

    def close(self):
        self.closed += 1


class Raising(Recording):
    """A tracker whose every call fails."""

    def __repr__(self):
        return "raising-tracker"

    def log_trial(self, row, epochs):
        raise ConnectionError("tracker server gone\nsecond line")

    def close(self):
        raise OSError("cannot flush")


def _trials(n=4):
    return expand(parse_spec(small_spec(name=STUDY, models=["cnn_tiny"], optimizers=["adamw"], samples=n)))


def _member(trial, status, err):
    """The row a trainer reports for one member of a group: 3 epochs whose error falls to `err`."""
    epochs = [
        epoch_row(epoch=e, top1_err=err + 10.0 / e, train_loss=2.0 / e, lr=trial.config["lr"] / e, seconds=0.5)
        for e in EPOCHS
    ]
    row = planned_row(
        trial,
        status=status,
        top1_err=err,
        best_top1_err=err - 0.5,
        epochs_done=len(EPOCHS),
        wall_s=4.0,
        config_json=TrialConfig.from_dict(trial.config).to_json(),
    )
    return dict(row, epoch_log=epochs)


def _feed(writer, trials):
    """A fused group of the first three trials (one diverged) reports its rows; the last trial's group fails."""
    members = [_member(trials[0], "ok", 12.0), _member(trials[1], "ok", 15.5), _member(trials[2], "diverged", 90.0)]
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 0}), {"rows_json": json.dumps(members)})
    writer.on_trial_result(0, [], SimpleNamespace(config={"group": 1}), {"trial_error": "worker died"})
    return {m["trial_key"]: m for m in members}


def _writer(tmp_path, trials, trackers):
    keys = [t.key for t in trials]
    groups = [{"keys": keys[:3]}, {"keys": keys[3:]}]
    return StoreWriter(str(tmp_path / "store"), STUDY, trials, groups, trackers=trackers)


def test_every_stored_row_reaches_the_trackers_and_a_raising_one_costs_one_warning(tmp_path, capsys):
    trials = _trials()
    recording = Recording()
    members = _feed(_writer(tmp_path, trials, [Raising(), recording]), trials)
    stored = load_trials(str(tmp_path / "store"), STUDY).set_index("trial_key")
    assert sorted(stored.index) == sorted(t.key for t in trials)  # the store write was not stopped
    assert len(load_epochs(str(tmp_path / "store"), STUDY)) == 3 * len(EPOCHS)
    # every member of the fused group, then the failed trial, each with its study and epochs
    assert [row["trial_key"] for row, _ in recording.logged] == [*members, trials[3].key]
    for row, epochs in recording.logged[:3]:
        expected = {k: v for k, v in members[row["trial_key"]].items() if k != "epoch_log"}
        assert row == {**expected, "study": STUDY}
        assert epochs == members[row["trial_key"]]["epoch_log"]
    failed, epochs = recording.logged[3]
    assert (failed["status"], failed["error"], failed["study"], epochs) == ("failed", "worker died", STUDY, [])
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == [
        f"warning: tracker raising-tracker did not log trial {key}: ConnectionError: tracker server gone"
        for key in [*members, trials[3].key]
    ]


def test_trackers_are_closed_when_the_run_stops_at_a_bad_store(tmp_path, capsys):
    store = tmp_path / "a-file"
    store.write_text("not a folder")
    recording = Recording()
    with pytest.raises(StoreFault):
        run_study(parse_spec(small_spec(name=STUDY)), str(store), trackers=[recording, Raising()])
    assert recording.closed == 1 and recording.logged == []
    assert capsys.readouterr().err.splitlines() == [
        "warning: tracker raising-tracker did not close: OSError: cannot flush"
    ]


@pytest.mark.parametrize(
    "value,message",
    [
        ("neptune:runs", "--track: bad value 'neptune:runs'; allowed: mlflow:DIR, tensorboard:DIR, wandb:DIR"),
        ("mlflow", "--track: bad value 'mlflow'; allowed: mlflow:DIR, tensorboard:DIR, wandb:DIR (repeatable)"),
        ("tensorboard:", "--track: bad value 'tensorboard:'; allowed: mlflow:DIR, tensorboard:DIR, wandb:DIR"),
    ],
)
def test_a_bad_track_value_names_the_flag_the_value_and_the_kinds(value, message):
    with pytest.raises(TrackerError) as info:
        parse_track(value)
    assert str(info.value).startswith(message)


def test_a_track_folder_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(TrackerError, match=r"is a file; allowed: a folder, new or existing$"):
        parse_track(f"tensorboard:{tmp_path / 'f'}")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_tracker_whose_library_is_missing_says_what_to_install(kind, monkeypatch, tmp_path):
    _, module, package = KINDS[kind]
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(TrackerError) as info:
        parse_track(f"{kind}:{tmp_path}")
    message = str(info.value)
    assert message.startswith(f"--track: bad value '{kind}:{tmp_path}': {module} cannot be imported (")
    assert message.endswith(f"; install it: pip install {package}") and "\n" not in message


def test_the_api_takes_track_texts_and_tracker_objects_and_names_its_argument(tmp_path):
    recording = Recording()
    made = trackers_of([f"tensorboard:{tmp_path / 'tb'}", recording])
    assert isinstance(made[0], TensorBoardTracker) and made[0].folder == str(tmp_path / "tb")
    assert made[1] is recording
    with pytest.raises(TrackerError, match=r"^trackers: bad value 'tb'"):
        trackers_of(["tb"])
    assert not (tmp_path / "tb").exists()  # a tracker writes nothing before its first trial


def _hyperparameters(member):
    """What a tracker must report of a row's config: lr, wd and the recipe's values."""
    config = json.loads(member["config_json"])
    return {
        "lr": member["lr"],
        "wd": member["wd"],
        "model": "cnn_tiny",
        "optimizer": "adamw",
        "seed": member["seed"],
        "batch_size": config["batch_size"],
        "warmup_epochs": config["warmup_epochs"],
        "dataset.name": "digits",
    }


@pytest.mark.slow  # MLflow creates its SQLite database (~2 s)
def test_mlflow_holds_one_run_per_trial_with_params_metrics_and_curves(tmp_path):
    import mlflow

    trials = _trials()
    tracker = parse_track(f"mlflow:{tmp_path / 'mlflow'}")
    members = _feed(_writer(tmp_path, trials, [tracker]), trials)
    tracker.close()
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(STUDY)
    runs = {run.info.run_name: run for run in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == sorted(t.key for t in trials)
    for key, member in members.items():
        run = runs[key]
        for name, value in _hyperparameters(member).items():
            assert run.data.params[name] == str(value), name
        assert run.data.metrics["top1_err"] == member["top1_err"]
        assert run.data.metrics["best_top1_err"] == member["best_top1_err"]
        assert run.data.tags["study"] == STUDY and run.data.tags["status"] == member["status"]
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "epoch/top1_err")
        assert [(m.step, m.value) for m in history] == [(e["epoch"], e["top1_err"]) for e in member["epoch_log"]]
    failed = runs[trials[3].key]
    assert failed.info.status == "FAILED" and failed.data.tags["error"] == "worker died"
    assert failed.data.metrics == {} and failed.data.params["lr"] == str(trials[3].config["lr"])


def _tensorboard(folder):
    """(scalars {tag: [(step, value)]}, hparams {name: value}) of one TensorBoard run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(folder)
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    start = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    hparams = {
        name: value.WhichOneof("kind") and getattr(value, value.WhichOneof("kind"))
        for name, value in start.hparams.items()
    }
    return scalars, hparams


def test_tensorboard_holds_one_run_folder_per_trial_with_curves_and_hparams(tmp_path):
    trials = _trials()
    tracker = parse_track(f"tensorboard:{tmp_path / 'tb'}")
    members = _feed(_writer(tmp_path, trials, [tracker]), trials)
    assert sorted(os.listdir(tmp_path / "tb" / STUDY)) == sorted(t.key for t in trials)
    for key, member in members.items():
        scalars, hparams = _tensorboard(str(tmp_path / "tb" / STUDY / key))
        curve = scalars["epoch/top1_err"]  # TensorBoard keeps float32
        assert [step for step, _ in curve] == [e["epoch"] for e in member["epoch_log"]]
        assert [value for _, value in curve] == pytest.approx([e["top1_err"] for e in member["epoch_log"]], rel=1e-6)
        assert scalars["top1_err"] == [(len(EPOCHS), pytest.approx(member["top1_err"], rel=1e-6))]
        assert hparams["status"] == member["status"]
        for name, value in _hyperparameters(member).items():
            assert hparams[name] == pytest.approx(value) if not isinstance(value, str) else hparams[name] == value
    scalars, hparams = _tensorboard(str(tmp_path / "tb" / STUDY / trials[3].key))
    assert scalars == {} and hparams["status"] == "failed" and hparams["lr"] == pytest.approx(trials[3].config["lr"])


@pytest.mark.slow  # W&B starts its service (~2 s a run)
def test_wandb_writes_one_offline_run_per_trial(tmp_path):
    pytest.importorskip("wandb")
    trials = _trials()
    _feed(_writer(tmp_path, trials, [WandbTracker(str(tmp_path / "wandb"))]), trials)
    # W&B has no reader of offline runs; each run's transaction log names its trial and its curves
    logs = [path.read_bytes() for path in (tmp_path / "wandb" / "wandb").glob("offline-run-*/*.wandb")]
    named = sorted(key for log in logs for key in (t.key for t in trials) if key.encode() in log)
    assert named == sorted(t.key for t in trials)
    assert sum(b"epoch/top1_err" in log for log in logs) == 3  # the failed trial has no epochs


@pytest.mark.slow  # a tiny study on a local Ray: ~30 s
def test_a_study_on_ray_logs_every_trial_of_its_fused_groups_to_mlflow_and_tensorboard(tmp_path):
    import mlflow
    import ray

    spec = parse_spec(small_spec(name=STUDY, models=["cnn_tiny"], optimizers=["adamw"], samples=4, fuse=2))
    store = str(tmp_path / "store")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        run_study(spec, store, trackers=[f"mlflow:{tmp_path / 'mlflow'}", f"tensorboard:{tmp_path / 'tb'}"])
    finally:
        ray.shutdown()
    stored = load_trials(store, STUDY).set_index("trial_key")
    assert len(stored) == 4 and set(stored["status"]) == {"ok"}
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(STUDY).experiment_id])
    assert sorted(run.info.run_name for run in runs) == sorted(stored.index)
    for run in runs:
        row = stored.loc[run.info.run_name]
        assert (run.data.params["lr"], run.data.params["wd"]) == (str(row["lr"]), str(row["wd"]))
        assert run.data.metrics["top1_err"] == row["top1_err"]
        history = client.get_metric_history(run.info.run_id, "epoch/top1_err")
        assert [(m.step, m.value) for m in history] == [(1, row["top1_err"])]
    assert sorted(os.listdir(tmp_path / "tb" / STUDY)) == sorted(stored.index)
    for key, row in stored.iterrows():
        scalars, hparams = _tensorboard(str(tmp_path / "tb" / STUDY / key))
        assert scalars["top1_err"] == [(1, pytest.approx(row["top1_err"], rel=1e-6))]
        assert hparams["lr"] == pytest.approx(row["lr"])
