"""--track where a run uses it (issue #37 item 5): its targets are checked before any trial, in a dry run too,
and a run on a study already stored sends the stored trials to a tracker that lacks them."""

import logging
import os

import pytest

from hpstudy.cli import run_edf_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.trackers import TrackerError
from tests.helpers import epoch_row, logged, planned_row, small_spec, spec_text


@pytest.mark.parametrize(
    "kind,dry_run,target,message",
    [
        ("mlflow", True, "afile", "{tmp}/afile' is a file; allowed: a local folder"),
        ("tensorboard", True, "afile/sub", "{tmp}/afile' is a file (so 'afile/sub' cannot be a folder)"),
        ("mlflow", False, "afile/sub", "{tmp}/afile' is a file (so 'afile/sub' cannot be a folder)"),
        ("tensorboard", True, "s3://bucket/tb", "'s3://' is a URI scheme tensorboard:DIR does not support"),
        ("mlflow", True, "/proc/hpstudy/tb", "cannot write 'mlflow:/proc/hpstudy/tb' (No such file or directory: "),
        ("tensorboard", False, "/proc/tb", "cannot write 'tensorboard:/proc/tb' (No such file or directory: /proc/tb)"),
    ],
)
def test_a_track_target_that_cannot_be_written_stops_a_run_and_a_dry_run_in_one_line(
    kind, dry_run, target, message, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "h.yaml").write_text(spec_text())
    argv = ["--config", "h.yaml", "--store", "store", "--track", f"{kind}:{target}"] + ["--dry-run"] * dry_run
    assert run_edf_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --track: ") and len(err.splitlines()) == 1, err
    assert message.format(tmp=tmp_path, kind=kind) in err, err
    assert sorted(os.listdir(tmp_path)) == ["afile", "h.yaml"]  # no store, no trial, no folder


def test_a_dry_run_probes_a_new_track_folder_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.yaml").write_text(spec_text())
    assert run_edf_main(["--config", "h.yaml", "--store", "store", "--track", "tensorboard:a/b/tb", "--dry-run"]) == 0
    assert "trials, 6 to run" in capsys.readouterr().out and sorted(os.listdir(tmp_path)) == ["h.yaml"]


def test_track_on_a_study_already_stored_sends_its_rows_and_trains_nothing(tmp_path, caplog):
    from hpstudy.study.runner import run_study

    spec = parse_spec(small_spec(name="done", models=["cnn_tiny"], optimizers=["adamw"], samples=3))
    store, tb = str(tmp_path / "store"), tmp_path / "tb"
    for i, trial in enumerate(expand(spec)):
        row = planned_row(trial, status="ok", top1_err=10.0 + i, epochs_done=1, config_json="{}")
        write_trial(store, "done", row, [epoch_row(epoch=1, top1_err=10.0 + i)])
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        stored = run_study(spec, store, trackers=[f"tensorboard:{tb}"])  # no Ray: nothing to run
    assert len(stored) == 3
    assert f"tracker tensorboard:{tb}: sent the 3 trials stored before this run that it did not hold" in logged(caplog)
    # one event file per trial, its key and status ending the file's name (<study>/<model>/<run>/)
    events = [name for _, _, files in os.walk(tb / "done") for name in files]
    assert sorted(name.rsplit(".", 2)[1] for name in events) == sorted(t.key for t in expand(spec))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        run_study(spec, store, trackers=[f"tensorboard:{tb}"])
    assert logged(caplog) == [f"study done: 3 trials, 3 already stored, 0 to run; store {store}"]  # not sent twice
    with pytest.raises(TrackerError, match="^trackers: cannot write 'mlflow:/proc/x'"):
        run_study(spec, store, trackers=["mlflow:/proc/x"])
