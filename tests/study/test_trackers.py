"""Trackers (study/trackers.py): every stored trial, fused members and failed ones too, handed on from
the store writer to MLflow, TensorBoard and W&B, read back with each library's own reader."""

import json
import logging
import os
import sys
from types import SimpleNamespace

import pytest

from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import StoreFault, write_trial
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.study.trackers import (
    KINDS,
    TensorBoardTracker,
    TrackerError,
    WandbTracker,
    backfill,
    check_trackers,
    parse_track,
    run_folder,
    trackers_of,
)
from hpstudy.trainers.config import TrialConfig
from tests.helpers import epoch_row, logged, planned_row, small_spec

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


def _run(folder, trial) -> str:
    """The TensorBoard run folder of a planned trial (run_folder: model/optimizer-epochs-key prefix)."""
    row = {"model": trial.model, "optimizer": trial.optimizer, "epochs": trial.epochs, "trial_key": trial.key}
    return str(folder / STUDY / run_folder(row))


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
    from hpstudy.study.tune.store_writer import StoreWriter

    keys = [t.key for t in trials]
    groups = [{"keys": keys[:3]}, {"keys": keys[3:]}]
    return StoreWriter(str(tmp_path / "store"), STUDY, trials, groups, trackers=trackers)


def test_every_stored_row_reaches_the_trackers_and_a_raising_one_costs_one_warning(tmp_path, caplog):
    trials = _trials()
    recording = Recording()
    with caplog.at_level(logging.WARNING, logger="hpstudy"):
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
    assert logged(caplog, logging.WARNING) == [
        f"warning: tracker raising-tracker did not log trial {key}: ConnectionError: tracker server gone"
        for key in [*members, trials[3].key]
    ]


def test_trackers_are_closed_when_the_run_stops_at_a_bad_store(tmp_path, caplog):
    from hpstudy.study.runner import run_study

    store = tmp_path / "a-file"
    store.write_text("not a folder")
    recording = Recording()
    with pytest.raises(StoreFault), caplog.at_level(logging.WARNING, logger="hpstudy"):
        run_study(parse_spec(small_spec(name=STUDY)), str(store), trackers=[recording, Raising()])
    assert recording.closed == 1 and recording.logged == []
    assert logged(caplog, logging.WARNING) == ["warning: tracker raising-tracker did not close: OSError: cannot flush"]


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


# --track targets (issue #37 item 5): each kind refuses, before any trial and in one line naming the flag and the
# value, a target it could not write; a folder that is missing (parents too) is created.
BAD_TARGETS = {
    "a file": ("afile", "{tmp}/afile' is a file; allowed: a local folder"),
    "a path below a file": ("afile/sub/dir", "{tmp}/afile' is a file (so '{tmp}/afile/sub/dir' cannot be a folder)"),
    "an s3 URI": ("s3://bucket/runs", "'s3://' is a URI scheme {kind}:DIR does not support; allowed: a local folder"),
    "an http URI": ("http://127.0.0.1:5000", "'http://' is a URI scheme {kind}:DIR does not support"),
    "a sqlite URI": ("sqlite:///{tmp}/m.db", "'sqlite://' is a URI scheme {kind}:DIR does not support"),
    "a relative file URI": ("file://runs", "'file://' is a URI scheme {kind}:DIR does not support"),
}


@pytest.mark.parametrize("target", sorted(BAD_TARGETS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_refuses_a_target_it_cannot_be_a_folder_at_before_writing_anything(kind, target, tmp_path):
    (tmp_path / "afile").write_text("x")
    folder, message = (text.format(tmp=tmp_path, kind=kind) for text in BAD_TARGETS[target])
    value = f"{kind}:{folder}" if "://" in folder else f"{kind}:{tmp_path / folder}"
    with pytest.raises(TrackerError) as info:
        parse_track(value)
    assert str(info.value).startswith(f"--track: bad value {value!r}: ") and message in str(info.value)
    assert "\n" not in str(info.value)
    assert sorted(os.listdir(tmp_path)) == ["afile"]  # nothing written


def _tracker(kind, folder):
    """A tracker of `kind` on `folder` without importing its library (W&B need not be installed here)."""
    return KINDS[kind][0](str(folder), "--track")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_creates_a_missing_folder_and_its_parents_and_leaves_nothing_else(kind, tmp_path):
    tracker = _tracker(kind, tmp_path / "a" / "b" / "runs")
    check_trackers([tracker, Recording()], keep=False)  # a dry run: made and probed, then removed
    assert os.listdir(tmp_path) == []
    check_trackers([tracker])
    assert os.listdir(tmp_path / "a" / "b" / "runs") == []  # the probe file is gone


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_refuses_a_folder_it_cannot_write_and_leaves_no_folder_it_made(kind, tmp_path, tmpfs):
    for folder in ("/proc/hpstudy-runs", "/proc/hpstudy-runs/a/b"):
        with pytest.raises(TrackerError) as info:
            check_trackers([_tracker(kind, folder)])
        assert str(info.value) == (
            f"--track: cannot write '{kind}:{folder}' (No such file or directory: /proc/hpstudy-runs); allowed: "
            f"a local folder, new or existing, that can be written (missing parents are created)"
        )
    disk = tmpfs("64k", "ro")
    for folder in (disk, disk / "new" / "runs"):
        with pytest.raises(TrackerError, match=f"^--track: cannot write '{kind}:{folder}' \\(Read-only file system: "):
            check_trackers([_tracker(kind, folder)])
    assert os.listdir(disk) == []


def test_a_track_value_reads_home_and_file_uris_as_local_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_track("tensorboard:~/tb").folder == str(tmp_path / "tb")
    assert parse_track(f"mlflow:file://{tmp_path}/m").folder == str(tmp_path / "m")
    with pytest.raises(
        TrackerError, match="allowed: mlflow:DIR, tensorboard:DIR, wandb:DIR \\(repeatable\\); did you mean 'mlflow'"
    ):
        parse_track("mlfow:runs")


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
    by_key = {t.key: t for t in trials}
    assert sorted(os.listdir(tmp_path / "tb" / STUDY / "cnn_tiny")) == sorted(
        f"adamw-{t.epochs}ep-{t.key[:8]}" for t in trials
    )
    for key, member in members.items():
        scalars, hparams = _tensorboard(_run(tmp_path / "tb", by_key[key]))
        curve = scalars["epoch/top1_err"]  # TensorBoard keeps float32
        assert [step for step, _ in curve] == [e["epoch"] for e in member["epoch_log"]]
        assert [value for _, value in curve] == pytest.approx([e["top1_err"] for e in member["epoch_log"]], rel=1e-6)
        assert scalars["top1_err"] == [(len(EPOCHS), pytest.approx(member["top1_err"], rel=1e-6))]
        assert hparams["status"] == member["status"]
        for name, value in _hyperparameters(member).items():
            assert hparams[name] == pytest.approx(value) if not isinstance(value, str) else hparams[name] == value
    scalars, hparams = _tensorboard(_run(tmp_path / "tb", trials[3]))
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

    from hpstudy.study.runner import run_study

    spec = parse_spec(small_spec(name=STUDY, models=["cnn_tiny"], optimizers=["adamw"], samples=4, fuse=2))
    store = str(tmp_path / "store")
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
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
    assert TensorBoardTracker(str(tmp_path / "tb")).logged_keys(STUDY) == set(stored.index)
    for key, row in stored.iterrows():
        run = {"model": row["model"], "optimizer": row["optimizer"], "epochs": row["epochs"], "trial_key": key}
        scalars, hparams = _tensorboard(str(tmp_path / "tb" / STUDY / run_folder(run)))
        assert scalars["top1_err"] == [(1, pytest.approx(row["top1_err"], rel=1e-6))]
        assert hparams["lr"] == pytest.approx(row["lr"])


def _held(kind, folder):
    """{trial key: final top1_err} of the ok/diverged trials a tracker's folder holds, read with the
    library's own reader (W&B, which has none, from its offline runs' folder names)."""
    if kind == "mlflow":
        import mlflow

        client = mlflow.MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name(STUDY).experiment_id])
        return {r.info.run_name: r.data.metrics["top1_err"] for r in runs if r.info.status == "FINISHED"}
    if kind == "tensorboard":
        held = {}
        for trial in _trials():
            if os.path.isdir(_run(folder, trial)):
                scalars, hparams = _tensorboard(_run(folder, trial))
                if hparams["status"] != "failed":
                    held[trial.key] = pytest.approx(scalars["top1_err"][-1][1], rel=1e-6)
        return held
    return {name.split("-")[3]: None for name in os.listdir(folder / "wandb") if name.startswith("offline-run-")}


BACKFILL_KINDS = [
    pytest.param("mlflow", marks=pytest.mark.slow),  # MLflow creates its SQLite database (~2 s)
    "tensorboard",
    pytest.param("wandb", marks=pytest.mark.slow),  # W&B starts its service (~2 s a run)
]


@pytest.mark.parametrize("kind", BACKFILL_KINDS)
def test_a_tracker_added_later_is_sent_the_stored_trials_it_lacks_once(kind, tmp_path):
    """--track on a study stored without it (issue #37 item 5): the ok/diverged rows stored for the spec go to
    the tracker, with their epochs, once; a failed row does not (a run tries it again)."""
    if kind == "wandb":
        pytest.importorskip("wandb")
    trials, store = _trials(), str(tmp_path / "store")
    members = _feed(_writer(tmp_path, trials, []), trials)  # stored without a tracker
    keys = {t.key for t in trials}
    tracker = _tracker(kind, tmp_path / kind)
    check_trackers([tracker])
    assert backfill([tracker], store, STUDY, keys) == [
        f"tracker {tracker!r}: sent the 3 trials stored before this run that it did not hold"
    ]
    assert tracker.logged_keys(STUDY) == set(members)
    assert backfill([tracker], store, STUDY, keys) == []  # it holds them: nothing is sent twice
    tracker.close()
    held = _held(kind, tmp_path / kind)
    if kind == "wandb":
        assert set(held) == set(members)
    else:
        assert held == {key: member["top1_err"] for key, member in members.items()}
    if kind == "tensorboard":  # the curves came from the stored epochs
        scalars, _ = _tensorboard(_run(tmp_path / kind, trials[0]))
        assert [step for step, _ in scalars["epoch/top1_err"]] == list(EPOCHS)


@pytest.mark.parametrize("kind", BACKFILL_KINDS)
def test_a_trial_a_tracker_holds_as_failed_is_sent_again_once_it_is_stored_ok(kind, tmp_path):
    if kind == "wandb":
        pytest.importorskip("wandb")
    trials, store = _trials(), str(tmp_path / "store")
    tracker = _tracker(kind, tmp_path / kind)
    members = _feed(_writer(tmp_path, trials, [tracker]), trials)  # tracked as the run stored them
    keys = {t.key for t in trials}
    assert tracker.logged_keys(STUDY) == set(members)  # not the failed trial
    assert backfill([tracker], store, STUDY, keys) == []
    # a later run without --track stored the failed trial ok
    again = _member(trials[3], "ok", 20.0)
    write_trial(store, STUDY, {k: v for k, v in again.items() if k != "epoch_log"}, again["epoch_log"])
    assert backfill([tracker], store, STUDY, keys) == [
        f"tracker {tracker!r}: sent the 1 trials stored before this run that it did not hold"
    ]
    assert tracker.logged_keys(STUDY) == keys
    tracker.close()


def test_backfill_says_in_one_line_what_a_tracker_without_logged_keys_is_not_sent(tmp_path, caplog):
    trials, store = _trials(), str(tmp_path / "store")
    _feed(_writer(tmp_path, trials, []), trials)
    keys = {t.key for t in trials}
    recording = Recording()
    lines = backfill([recording, Raising()], store, STUDY, keys)
    assert recording.logged == [] and lines == [
        f"note: tracker {recording!r} gets only the trials this run stores; the 4 stored before are not sent to "
        f"it (it has no logged_keys(study) to tell which it holds)",
        "note: tracker raising-tracker gets only the trials this run stores; the 4 stored before are not sent to "
        "it (it has no logged_keys(study) to tell which it holds)",
    ]

    class Listing(Recording):
        def __init__(self, fail):
            super().__init__()
            self.fail = fail

        def logged_keys(self, study):
            return {trials[0].key}

        def log_trial(self, row, epochs):
            if self.fail:
                raise ConnectionError("gone")
            super().log_trial(row, epochs)

    listing, failing = Listing(False), Listing(True)
    with caplog.at_level(logging.WARNING, logger="hpstudy"):
        sent = backfill([listing, failing], store, STUDY, keys)
    assert sent == [f"tracker {listing!r}: sent the 2 trials stored before this run that it did not hold"]
    assert sorted(row["trial_key"] for row, _ in listing.logged) == sorted(t.key for t in trials[1:3])
    assert all(row["study"] == STUDY and len(epochs) == len(EPOCHS) for row, epochs in listing.logged)
    err = logged(caplog, logging.WARNING)  # the failing one: one warning, then no more tries
    assert len(err) == 1 and err[0].startswith(f"warning: tracker {failing!r} did not log stored trial ")
    assert backfill([listing], store, STUDY, set()) == [] and backfill([], store, STUDY, keys) == []
