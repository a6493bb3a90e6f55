"""What `hpstudy <command> --help` promises: every flag explained with its default, the program's name
in usage and errors, and the defaults the commands then get (--resume, prepare's sizes)."""

import argparse
import os
import sys

import pytest

from hpstudy.cli import hpstudy_main, parser, run_edf_main
from hpstudy.study.trackers import KINDS


def _commands() -> dict:
    """{'hpstudy': the main parser, 'run': its run subparser, ...}."""
    main = parser()
    sub = next(a for a in main._actions if isinstance(a, argparse._SubParsersAction))
    return {"hpstudy": main, **sub.choices}


COMMANDS = _commands()


def _flags(name):
    """The flags of a command (not -h), as argparse actions."""
    return [a for a in COMMANDS[name]._actions if a.option_strings and a.dest != "help"]


def _help(name, flag) -> str:
    return next(a.help for a in _flags(name) if flag in a.option_strings)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_of_every_command_has_a_help(name):
    for action in _flags(name):
        assert isinstance(action.help, str) and action.help.strip(), action.option_strings


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_flag_with_a_default_names_it_in_its_help(name):
    """A default other than unset (None) or off (False) is spelled out as `default: <value>`."""
    for action in _flags(name):
        if action.default in (None, False) or action.dest == "version":
            continue
        shown = f"{action.default:g}" if isinstance(action.default, float) else str(action.default)
        assert f"default: {shown}" in action.help, action.option_strings


@pytest.mark.parametrize(
    "name,flag,text",
    [
        ("run", "--gpu-memory-gb", "GPU memory for the dry run's memory plan (default: 40, the A100s of cluster.yaml)"),
        (
            "prepare",
            "--out",
            "output folder (local disk of the node): missing, empty or an earlier preparation (replaced)",
        ),
        ("prepare", "--image-size", "the trials' image size (validation images are stored at it; default: 224)"),
        ("suggest", "--model", "only this model (repeatable)"),
        ("suggest", "--optimizer", "only this optimizer (repeatable)"),
    ],
)
def test_the_help_of_a_flag_reads(name, flag, text):
    assert _help(name, flag) == text


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_commands_that_act_on_one_study_require_it(name):
    """compact, suggest and importance act on one study, report and findings on one or more: without --study they
    stop at parsing (exit 2)."""
    study = next((a for a in _flags(name) if "--study" in a.option_strings), None)
    assert (study is not None and study.required) == (
        name in {"report", "compact", "suggest", "findings", "importance"}
    )


def test_the_importance_flags_say_the_libraries_defaults():
    """--resamples and --seeds default to None (the parser does not import the analysis) and their help says
    the values the command then takes from hpstudy.analysis.stats."""
    from hpstudy.analysis.stats import IMPORTANCE_RESAMPLES, IMPORTANCE_SEEDS

    assert _help("importance", "--resamples").endswith(f"(default: {IMPORTANCE_RESAMPLES})")
    assert _help("importance", "--seeds").endswith(f"(default: {IMPORTANCE_SEEDS})")


@pytest.mark.parametrize(
    "name,what",
    [("report", "the error every number is built on: "), ("suggest", "the error the good ranges are built on: ")],
)
def test_the_metric_help_says_what_the_metric_is_used_for(name, what):
    assert _help(name, "--metric").startswith(what)


def test_usage_and_errors_name_the_program(capsys):
    with pytest.raises(SystemExit):
        hpstudy_main(["--help"])
    assert capsys.readouterr().out.startswith("usage: hpstudy [-h] [--version] COMMAND ...\n")
    with pytest.raises(SystemExit):
        run_edf_main(["--help"])
    assert capsys.readouterr().out.startswith("usage: run_edf.py [-h] [--config CONFIG]")
    with pytest.raises(SystemExit) as done:
        hpstudy_main(["run", "--max-concurrent", "x"])
    assert done.value.code == 2
    assert capsys.readouterr().err.splitlines() == [  # one line, as every input error
        "hpstudy run: error: argument --max-concurrent: invalid int value: 'x'; see hpstudy run --help"
    ]


@pytest.mark.parametrize("flags,fresh", [([], False), (["--resume"], False), (["--fresh"], True)])
def test_a_run_resumes_unless_told_fresh(flags, fresh):
    """--resume is the default: only --fresh deletes the study's stored rows."""
    assert parser().parse_args(["run", *flags]).fresh is fresh


def test_resume_and_fresh_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["run", "--fresh", "--resume"])
    assert "argument --resume: not allowed with argument --fresh" in capsys.readouterr().err


def test_prepare_stores_256_px_training_squares_for_224_px_trials_on_every_cpu():
    """The defaults of ImageNet training: random 224 px crops of 256 px squares."""
    args = parser().parse_args(["prepare", "--data", "d", "--out", "o"])
    assert (args.train_size, args.image_size, args.workers) == (256, 224, os.cpu_count())


def test_track_is_repeatable_off_by_default_and_its_help_names_every_tracker():
    assert parser().parse_args(["run"]).track is None
    assert parser().parse_args(["run", "--track", "a", "--track", "b"]).track == ["a", "b"]
    assert all(f"{kind}:DIR" in _help("run", "--track") for kind in KINDS)


@pytest.mark.parametrize(
    "value,message",
    [
        ("neptune:runs", "--track: bad value 'neptune:runs'; allowed: mlflow:DIR, tensorboard:DIR, wandb:DIR"),
        ("wandb:runs", "--track: bad value 'wandb:runs': wandb cannot be imported ("),
    ],
)
def test_a_bad_track_exits_2_with_one_line_before_any_trial_runs(value, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if wandb were not installed
    store = tmp_path / "store"
    assert hpstudy_main(["run", "--store", str(store), "--track", value, "--report", "none"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {message}") and not store.exists()
