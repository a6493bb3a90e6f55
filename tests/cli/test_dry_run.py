"""The dry run's plan (hpstudy.service.plan, printed by hpstudy.commands.print_plan, returned by hpstudy.plan):
trials to run per cell after a partial run, and their trial-hours by hand: to run x 3 x 2 x FLOPs x images x
epochs / FLOP/s / 3600."""

import math

import pytest

import hpstudy
from hpstudy.cli import run_edf_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.trainers.flops import model_profile
from tests.helpers import planned_row, small_spec, write_spec

RAW = small_spec(name="hours", models=["cnn_tiny"], optimizers=["sgd"], epochs=[1, 3], samples=2, seeds=[0, 1])
DIGITS_TRAIN = 1437  # sklearn's digits: 1797 images, 360 held out


def _plan(tmp_path, capsys, *flags):
    """The dry run's output lines for RAW on a store where one 3-epoch trial is ok and another failed."""
    store = str(tmp_path / "store")
    long = [t for t in expand(parse_spec(RAW)) if t.epochs == 3]
    for trial, status in zip(long, ("ok", "failed")):
        write_trial(store, "hours", planned_row(trial, status=status))
    assert run_edf_main(["--config", write_spec(tmp_path, RAW), "--store", store, "--dry-run", *flags]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_plan_counts_a_failed_row_as_still_to_run_and_prices_each_schedule(tmp_path, capsys):
    out = _plan(tmp_path, capsys, "--assume-tflops", "1e-6")
    assert out[0].startswith("study hours: 8 trials, 7 to run (1 already stored); sampler sobol")
    assert out[1] == (
        "model          optimizer epochs trials to run  lr box                 wd box                   GMACs  trial-h"
    )
    rows = {int(line.split()[2]): line.split() for line in out[2:4]}
    flops = model_profile("cnn_tiny", 10, 16)[0]
    hours = {e: todo * 6 * flops * DIGITS_TRAIN * e / 1e6 / 3600 for e, todo in ((1, 4), (3, 3))}
    for epochs, todo in ((1, 4), (3, 3)):
        assert rows[epochs][3:5] == ["4", str(todo)]  # trials of the cell, to run
        assert float(rows[epochs][-1]) == pytest.approx(hours[epochs], abs=0.006)
    assert min(hours.values()) > 1  # large enough for 2 decimals to tell a missing factor
    total = float(out[4].split()[4])
    assert out[4] == (
        f"estimated compute to run: {total:.2f} trial-hours (3 x forward FLOPs (2 per multiply-add) x "
        f"{DIGITS_TRAIN} images x epochs at 1e-06 effective TFLOP/s per trial)"
    )
    assert total == pytest.approx(hours[1] + hours[3], abs=0.006)


def _stored(tmp_path, statuses):
    """A store of RAW where the 3-epoch trials hold `statuses`, in order."""
    store = str(tmp_path / "store")
    long = [t for t in expand(parse_spec(RAW)) if t.epochs == 3]
    for trial, status in zip(long, statuses):
        write_trial(store, "hours", planned_row(trial, status=status))
    return store


@pytest.mark.parametrize("statuses", [(), ("ok",), ("failed",), ("ok", "diverged"), ("ok", "diverged", "ok", "ok")])
def test_the_apis_plan_is_the_dry_runs_numbers_and_counts_only_finished_rows_as_done(statuses, tmp_path, capsys):
    store = _stored(tmp_path, statuses)
    plan = hpstudy.plan(RAW, store, assume_tflops=1e-6)
    assert list(plan[["epochs", "trials"]].itertuples(index=False, name=None)) == [(1, 4), (3, 4)]
    done = sum(status in ("ok", "diverged") for status in statuses)
    assert plan.set_index("epochs")["to_run"].to_dict() == {1: 4, 3: 4 - done}
    macs = model_profile("cnn_tiny", 10, 16)[0]
    expected = [todo * 6 * macs * DIGITS_TRAIN * e / 1e6 / 3600 for e, todo in zip(plan["epochs"], plan["to_run"])]
    assert plan["trial_hours"].tolist() == pytest.approx(expected, rel=1e-12)
    assert plan["gmacs"].tolist() == pytest.approx([macs / 1e9] * 2, rel=1e-12)
    assert (
        run_edf_main(["--config", write_spec(tmp_path, RAW), "--store", store, "--dry-run", "--assume-tflops", "1e-6"])
        == 0
    )
    printed = capsys.readouterr().out.splitlines()
    rows = {int(line.split()[2]): line.split() for line in printed[2:4]}
    for row in plan.itertuples(index=False):
        assert rows[row.epochs][3:5] == [str(row.trials), str(row.to_run)]
        assert float(rows[row.epochs][-1]) == pytest.approx(row.trial_hours, abs=0.006)


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, True, "100"])
def test_a_tflops_that_is_no_positive_number_is_refused_before_any_model_is_counted(bad, tmp_path):
    with pytest.raises(SpecError, match=r"^--assume-tflops: bad value .*; allowed: a number of TFLOP/s > 0$"):
        hpstudy.plan(RAW, str(tmp_path / "store"), assume_tflops=bad)


def test_a_cpu_trial_is_priced_at_0_02_tflops_by_default(tmp_path, capsys):
    out = _plan(tmp_path, capsys)
    assert out[4].endswith(
        f" trial-hours (3 x forward FLOPs (2 per multiply-add) x {DIGITS_TRAIN} images x epochs at 0.02 effective "
        "TFLOP/s per trial)"
    )


def test_the_memory_plan_budgets_the_given_gpu_memory_times_the_trials_share(tmp_path, capsys):
    raw = small_spec(name="half", models=["cnn_tiny"], resources={"cpu": 1, "gpu": 0.5})
    raw["recipe"] = {k: v for k, v in raw["recipe"].items() if k != "device"}
    argv = ["--config", write_spec(tmp_path, raw), "--store", str(tmp_path / "s"), "--dry-run", "--gpu-memory-gb", "80"]
    assert run_edf_main(argv) == 0
    assert "memory per trial (estimate; budget 40.0 GB = 80 GB GPU x 0.5 share):" in capsys.readouterr().out


def test_the_plan_names_the_recipe_fields_each_box_samples_and_why_its_trials_do_not_fuse(tmp_path, capsys):
    raw = small_spec(name="recipe", models=["vit_c_tiny", "cnn_tiny"], optimizers=["adamw"], epochs=[2, 3])
    raw["space"]["adamw"] = dict(raw["space"]["adamw"], label_smoothing={"uniform": [0.0, 0.3]})
    raw["space"]["cnn"] = {"adamw": {"lr": 1e-3, "wd": 0.05, "warmup_epochs": {"choice": [0, 1]}}}
    raw["fuse"] = "auto"
    raw["recipe"] = {k: v for k, v in raw["recipe"].items() if k != "warmup_epochs"}  # sampled instead
    assert run_edf_main(["--config", write_spec(tmp_path, raw), "--store", str(tmp_path / "s"), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if " also samples " in line] == [  # once per (model, optimizer), not per schedule
        f"{'vit_c_tiny':<14} {'adamw':<9} also samples label_smoothing uniform [0.0, 0.3]",
        f"{'cnn_tiny':<14} {'adamw':<9} also samples label_smoothing uniform [0.0, 0.3], warmup_epochs choice [0, 1]",
    ]
    assert [line for line in out if line.startswith("fuse:")] == [
        "fuse: off for cell vit_c_tiny adamw: label_smoothing is sampled and fused trials share it",
        "fuse: off for cell cnn_tiny adamw: label_smoothing, warmup_epochs are sampled and fused trials share them",
    ]


def test_the_plan_s_model_column_fits_a_timm_model_s_long_name(tmp_path, capsys):
    raw = small_spec(name="wide", models=["cnn_tiny", "timm:test_resnet"], optimizers=["sgd"], epochs=[1])
    assert run_edf_main(["--config", write_spec(tmp_path, raw), "--store", str(tmp_path / "s"), "--dry-run"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()[1:4]
    assert {row.index(" sgd ") for row in rows} == {header.index(" optimizer")} == {len("timm:test_resnet")}
