"""run_edf.py and hpstudy command lines that need no Ray: dry runs, bad flags, status, compact."""

import pytest

from study.cli import hpstudy_main, run_edf_main
from study.store import load_trials, write_spec_record, write_trial
from tests.helpers import small_spec, stored_row, write_spec


def test_dry_run_prints_the_plan(tmp_path, capsys):
    config = write_spec(tmp_path, small_spec(name="plan"))
    assert run_edf_main(["--config", config, "--store", str(tmp_path / "s"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "study plan: 12 trials, 12 to run" in out
    assert "vit_c_tiny     adamw" in out and "[0.0005, 0.005]" in out and "trial-hours" in out
    assert not (tmp_path / "s").exists()   # a dry run writes nothing


def test_bundled_default_dry_run(capsys):
    assert run_edf_main(["--dry-run", "--store", "/nonexistent-hpstudy-store"]) == 0
    assert "study demo_digits: 48 trials" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--max-concurrent", "0"], "--max-concurrent: bad value 0; allowed: an integer >= 1"),
    (["--config", "/no/such.yaml"], "--config: '/no/such.yaml' is not a file"),
    (["--num-cpus", "-1"], "--num-cpus: bad value -1"),
])
def test_bad_flags_fail_before_anything_runs(argv, message, capsys):
    assert run_edf_main(argv + ["--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_store_that_is_a_file_is_rejected(tmp_path, capsys):
    store = tmp_path / "file"
    store.write_text("x")
    assert run_edf_main(["--store", str(store), "--dry-run"]) == 2
    assert "--store" in capsys.readouterr().err


def test_hpstudy_status_and_compact(tmp_path, capsys):
    store = str(tmp_path)
    for i, status in enumerate(["ok", "ok", "diverged", "failed"]):
        write_trial(store, "s", stored_row(trial_key=f"k{i}", model="cnn_tiny", optimizer="sgd", status=status,
                                           top1_err=None if status == "failed" else 10.0 + i))
    write_spec_record(store, "s", {"name": "s"}, 4)
    assert hpstudy_main(["status", "--store", store, "--study", "s"]) == 0
    out = capsys.readouterr().out
    assert "cnn_tiny" in out and "10.00" in out and "11.00" in out   # best and median
    assert hpstudy_main(["compact", "--store", store, "--study", "s"]) == 0
    out = capsys.readouterr().out
    assert "trials: 4 files read; 3 rows of finished trials merged (3 files deleted); 1 unfinished trials" in out
    assert "epochs: 0 files read" in out
    assert len(load_trials(store, "s")) == 4
