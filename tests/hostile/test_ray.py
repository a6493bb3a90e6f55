"""Hostile runs end to end on a real local Ray (slow tier): an edited spec under an old name, a
disk that fills mid-run, a trial whose error repeats, an address no cluster answers at."""

import subprocess
import time

import pytest

from hpstudy.cli import hpstudy_main, run_edf_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import load_spec
from hpstudy.study.store.read import load_study, load_trials
from tests.helpers import free_port, run_edf, small_spec, write_spec

pytestmark = pytest.mark.slow

ONE_MODEL = dict(models=["vit_p_tiny"], optimizers=["adamw"], space={"adamw": {"lr": [5e-4, 5e-3], "wd": [0.01, 0.1]}})


def test_an_edited_spec_under_the_same_name_is_announced_and_never_mixed(tmp_path, capsys):
    store = str(tmp_path / "store")
    (tmp_path / "first").mkdir()
    first = write_spec(tmp_path / "first", small_spec(name="edit", samples=2, **ONE_MODEL))
    assert run_edf(first, store).returncode == 0
    narrowed = dict(ONE_MODEL, space={"adamw": {"lr": [1e-3, 2e-3], "wd": [0.01, 0.1]}})
    second = write_spec(tmp_path, small_spec(name="edit", samples=1, **narrowed))
    done = run_edf(second, store)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.index("note: study 'edit'") < out.index("1 trials, 0 already stored, 1 to run")  # up front
    assert "2 stored rows come from that earlier spec" in out
    assert "vit_p_tiny         1     1" in out  # the run's summary: n = 1
    with pytest.warns(UserWarning, match="2 rows from an earlier spec of study 'edit' are not in these figures"):
        trials, epochs, record = load_study(store, "edit")
    assert trials["trial_key"].tolist() == [expand(load_spec(second))[0].key]  # what the report gets
    assert set(epochs["trial_key"]) == set(trials["trial_key"]) and record["earlier_spec_rows"] == 2
    assert hpstudy_main(["status", "--store", store, "--study", "edit"]) == 0
    status = capsys.readouterr().out
    assert "1/1 trials of the spec stored as ok/diverged" in status
    assert "2 rows from an earlier spec of study 'edit'" in status
    assert len(load_trials(store, "edit")) == 3  # nothing was deleted


def test_a_disk_filling_mid_run_stops_cleanly_and_a_rerun_finishes_exactly_once(tmp_path, tmpfs):
    disk = tmpfs("24k")  # the spec record, the probe and one trial's files fit
    store = str(disk / "store")
    config = write_spec(tmp_path, small_spec(name="full", samples=3, **ONE_MODEL))
    full = run_edf(config, store)
    assert full.returncode == 3, full.stderr[-3000:]
    err = full.stderr.strip().splitlines()
    assert err[-1].startswith(f"error: store: cannot write {store}/") and "No space left on device" in err[-1]
    assert "of its 3 trials before that and stopped" in err[-1] and "rerun the same command to resume" in err[-1]
    assert "Traceback" not in full.stderr
    assert not [p for p in disk.rglob("*") if ".tmp-" in p.name]  # no temporary file left behind
    stored_before = len(load_trials(store, "full"))
    assert stored_before < 3
    subprocess.run(["mount", "-o", "remount,size=1m", str(disk)], check=True)  # space freed
    again = run_edf(config, store)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{stored_before} already stored, {3 - stored_before} to run" in again.stdout
    rows = load_trials(store, "full")
    assert len(rows) == 3 and rows["trial_key"].is_unique and set(rows["status"]) == {"ok"}


def test_a_trial_error_that_repeats_is_stored_failed_without_ray_retries(tmp_path):
    data = tmp_path / "folder"
    (data / "train").mkdir(parents=True)
    (data / "val").mkdir()  # the layout check passes; there are no class folders
    spec = small_spec(
        name="det",
        samples=1,
        max_retries=2,
        models=["cnn_tiny"],
        optimizers=["adamw"],
        dataset={"name": "imagefolder", "path": str(data), "image_size": 16},
        recipe={"batch_size": 8, "device": "cpu", "num_workers": 0},
    )
    done = run_edf(write_spec(tmp_path, spec), str(tmp_path / "store"))
    assert done.returncode == 1, done.stderr[-3000:]  # exit 1: a trial failed
    row = load_trials(str(tmp_path / "store"), "det").iloc[0]
    assert row["status"] == "failed" and "Couldn't find any class folder" in row["error"]
    # the worker tried it twice and saw the same error: stored at once, not handed to Ray's retries
    assert row["error"].startswith("raised twice in a row, so not retried")
    assert "1/1 done (ok 0, diverged 0, failed 1)" in done.stdout


def test_an_address_nothing_answers_at_stops_the_run_in_seconds_in_one_line(tmp_path, capsys):
    """Issue #37 item 7: ray.init retried such an address for 20 x 41 s, a warning every few seconds."""
    config = write_spec(tmp_path, small_spec(name="away", samples=1, **ONE_MODEL))
    address = f"127.0.0.1:{free_port()}"
    argv = ["--config", config, "--store", str(tmp_path / "store"), "--address", address, "--report", "none"]
    started = time.monotonic()
    assert run_edf_main(argv) == 3
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: --address {address}") and "no Ray cluster answers there (Connection" in err
    assert err.rstrip().endswith(
        "0 of the study's 1 trials were stored before this run; rerun the same command to resume"
    )
    assert run_edf_main(argv + ["--debug"]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("error: --address")
