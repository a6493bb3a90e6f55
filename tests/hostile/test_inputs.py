"""Hostile inputs at the edge: every bad spec value, flag or trial option is refused before any
trial runs, with exit code 2 and one line naming the field, the value and what is allowed."""

import importlib
import os
import re
import subprocess
import sys

import pytest
import yaml

import hpstudy.study.sampling
from hpstudy.cli import run_edf_main
from hpstudy.study.spec import SpecError, SpecLoader, load_spec
from hpstudy.study.store.layout import write_trial
from tests.helpers import spec_text, stored_row


def box(lr: str) -> str:
    return f"{{adamw: {{lr: {lr}, wd: [0.01, 0.1]}}}}"


def synthetic(**options) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in dict(name="synthetic", image_size=16, **options).items()) + "}"


# (changes to YAML_SPEC, exit code of `run_edf.py --dry-run`, a fragment of its stdout (0) or stderr (2))
SPEC_CASES = [
    # numbers: NaN and inf are refused by name, in boxes, resources and the recipe
    (dict(space=box("[1.0e-3, .inf]")), 2, "space.adamw.lr: bad value [0.001, inf]; allowed: finite numbers"),
    (dict(space=box("[.nan, 1.0e-2]")), 2, "space.adamw.lr: bad value [nan, 0.01]; allowed: finite numbers"),
    (dict(space=box("[1.0e-4, .nan]")), 2, "space.adamw.lr: bad value [0.0001, nan]; allowed: finite numbers"),
    (dict(resources="{cpu: .nan}"), 2, "resources.cpu: bad value nan; allowed: a finite number >= 0"),
    (dict(resources="{cpu: 1, gpu: .inf}"), 2, "resources.gpu: bad value inf; allowed: a finite number >= 0"),
    (dict(recipe="{warmup_epochs: .inf}"), 2, "recipe.warmup_epochs: bad value inf; allowed: >= 0 (a finite"),
    (dict(recipe="{label_smoothing: .nan}"), 2, "recipe.label_smoothing: bad value nan; allowed: in [0, 1)"),
    (dict(recipe="{divergence_loss: .inf}"), 2, "recipe.divergence_loss: bad value inf; allowed: > 0 (a finite"),
    (dict(recipe="{ema_decay: 1.5}"), 2, "recipe.ema_decay: bad value 1.5; allowed: null (off) or in (0, 1)"),
    (dict(recipe="{mixup: -1}"), 2, "recipe.mixup: bad value -1; allowed: >= 0"),
    # values that cannot train are refused up front, not in a worker
    (dict(recipe="{grad_clip: -1}"), 2, "recipe.grad_clip: bad value -1; allowed: null (off) or a finite max norm > 0"),
    (dict(recipe="{batch_size: 1}"), 2, "recipe.batch_size: bad value 1 for model cnn_tiny; allowed: >= 2"),
    (
        dict(recipe="{batch_size: 8, accum_steps: 8}"),
        2,
        "recipe.accum_steps: bad value 8 for model cnn_tiny; allowed: fewer micro-batches",
    ),
    (dict(recipe="{batch_size: -8}"), 2, "recipe.batch_size: bad value -8; allowed: an integer in [1, "),
    (dict(recipe="{reference_batch_size: -64}"), 2, "recipe.reference_batch_size: bad value -64; allowed: null"),
    (dict(dataset=synthetic(n_train=0)), 2, "dataset.n_train: bad value 0; allowed: an integer in [1, "),
    (dict(dataset=synthetic(n_val=0)), 2, "dataset.n_val: bad value 0; allowed: an integer in [1, "),
    (dict(dataset=synthetic(num_classes=1)), 2, "dataset.num_classes: bad value 1; allowed: an integer in [2, "),
    (dict(dataset=synthetic(n_train=1)), 2, "dataset.n_train: bad value 1 for model cnn_tiny; allowed: >= 2"),
    (dict(dataset="{name: digits, image_size: -4}"), 2, "dataset.image_size: bad value -4; allowed: null"),
    (dict(dataset="{name: digits, image_size: 5}"), 2, "dataset.image_size: bad value 5 for model vit_c_tiny"),
    # strings are checked, and a number written as a string is not taken for one
    (dict(recipe="{device: banana}"), 2, "recipe.device: bad value 'banana'; allowed: auto, cpu, cuda or cuda:N"),
    (dict(recipe="{dtype: float16}"), 2, "recipe.dtype: bad value 'float16'; allowed: float32 or float64"),
    (dict(recipe="{auto_augment: banana}"), 2, "recipe.auto_augment: bad value 'banana'; allowed: null (off)"),
    (dict(recipe="{amp: 'yes'}"), 2, "recipe.amp: bad value 'yes'; allowed: null (auto), true or false"),
    (dict(recipe='{warmup_epochs: "1"}'), 2, "recipe.warmup_epochs: bad value '1'; allowed: >= 0"),
    (dict(sampler_seed="abc"), 2, "sampler_seed: bad value 'abc'; allowed: an integer in [0, 2**63)"),
    (dict(dataset="5"), 2, "dataset: bad value 5; allowed: a dataset name or a mapping"),
    (dict(dataset="{name: digits, path: 7}"), 2, "dataset.path: bad value 7; allowed: null or a folder path"),
    (dict(epochs="[0]"), 2, "epochs: bad value 0; allowed: integers in [1, "),
    (dict(epochs="[a]"), 2, "epochs[0]: bad value 'a'; allowed: an integer"),
    (dict(models="[5]"), 2, "models[0]: bad value 5; allowed: a string"),
    # a YAML syntax error: one line with where (line, column) and what
    (
        dict(models="[vit_c_tiny"),
        2,
        "not valid YAML at line 5, column 11: while parsing a flow sequence, expected ',' or ']', but got ':'",
    ),
    (dict(samples="3: 4"), 2, "not valid YAML at line 7, column 11: mapping values are not allowed here"),
    (dict(seeds="[-1]"), 2, "seeds: bad value -1; allowed: integers in [0, 2**63)"),
    (dict(max_retries="1000"), 2, "max_retries: bad value 1000; allowed: an integer in [0, 100]"),
    # YAML 1.1 leaves 1e-4 a string; specs read it as the number it means
    (dict(space=box("[1e-4, 1e-2]")), 0, "[0.0001, 0.01]"),
    (dict(samples="1e7"), 2, "samples: bad value 10000000.0; allowed: an integer in [1, 100000]"),
    # bounded trial counts: a huge spec is refused at once instead of materialised
    (dict(samples="10000000"), 2, "samples: bad value 10000000; allowed: an integer in [1, 100000]"),
    (dict(samples="60000"), 2, "at most 100000 trials per study; this spec has 2 models x 1 optimizers"),
    # study names are folder names: no '.', '..' or path separators
    (dict(name='".."'), 2, "name: bad value '..'; allowed: 1 to 128 letters, digits"),
    (dict(name='"."'), 2, "name: bad value '.'"),
    (dict(name="a/b"), 2, "name: bad value 'a/b'"),
    (dict(name=".hidden"), 2, "name: bad value '.hidden'"),
]


@pytest.mark.parametrize("changes,code,fragment", SPEC_CASES, ids=[f"{'-'.join(c)}:{f[:40]}" for c, _, f in SPEC_CASES])
def test_spec_cases_exit_with_code_and_message(changes, code, fragment, tmp_path, capsys):
    config = tmp_path / "spec.yaml"
    config.write_text(spec_text(**changes))
    assert run_edf_main(["--config", str(config), "--store", str(tmp_path / "store"), "--dry-run"]) == code
    out, err = capsys.readouterr()
    assert fragment in (out if code == 0 else err), (out, err)
    if code:
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "store").exists()


TRAIN = ["--model", "cnn_tiny", "--optimizer", "adamw", "--epochs", "1", "--wd", "0"]
RUN = ["--config", "{config}", "--store", "{dir}/store"]

# the entry points as module:function, imported as a case runs (the one-trial trainer's imports torch)
HPSTUDY, RUN_EDF, TRAINER = "hpstudy.cli:hpstudy_main", "hpstudy.cli:run_edf_main", "hpstudy.trainers.train:main"
# (entry point, argv, exit code, stderr fragment); {dir} is a temporary folder holding a_file and
# {config}, a valid spec
COMMAND_CASES = [
    (RUN_EDF, RUN + ["--report", "{dir}/a_file"], 2, "--report: '{dir}/a_file' is a file"),
    (
        RUN_EDF,
        RUN + ["--report", "{dir}/a_file/sub"],
        2,
        "--report: cannot write '{dir}/a_file/sub' (Not a directory",
    ),
    (
        HPSTUDY,
        ["report", "--store", "{dir}/store", "--study", "x", "--out", "{dir}/a_file"],
        2,
        "--out: '{dir}/a_file' is a file",
    ),
    (HPSTUDY, ["status", "--store", "{dir}", "--study", ".."], 2, "--study: bad value '..'"),
    (HPSTUDY, ["compact", "--store", "{dir}", "--study", "../x"], 2, "--study: bad value '../x'"),
    (HPSTUDY, ["report", "--store", "{dir}", "--study", ".."], 2, "--study: bad value '..'"),
    # python -m hpstudy.trainers.train goes through the same validator (TrialConfig.validate)
    (TRAINER, TRAIN + ["--lr", "inf"], 2, "lr: bad value inf; allowed: > 0"),
    (TRAINER, TRAIN + ["--lr", "nan"], 2, "lr: bad value nan; allowed: > 0"),
    (TRAINER, TRAIN + ["--lr", "1e-3", "--device", "banana"], 2, "device: bad value 'banana'"),
    (TRAINER, TRAIN + ["--lr", "1e-3", "--grad-clip", "-1"], 2, "grad_clip: bad value -1.0"),
    (TRAINER, TRAIN + ["--lr", "1e-3", "--batch-size", "1"], 2, "batch_size: bad value 1 for model cnn_tiny"),
    (TRAINER, TRAIN + ["--lr", "1e-3", "--warmup-epochs", "inf"], 2, "warmup_epochs: bad value inf"),
    (TRAINER, TRAIN + ["--lr", "1e-3", "--data-image-size", "-4"], 2, "dataset.image_size: bad value -4"),
    # an unwritable store stops before Ray starts, naming it, with exit code 3
    (
        RUN_EDF,
        ["--config", "{config}", "--store", "/proc/hpstudy-store"],
        3,
        "cannot write /proc/hpstudy-store/.probe-",
    ),
]


@pytest.mark.parametrize(
    "entry,argv,code,fragment", COMMAND_CASES, ids=[f"{e.split(':')[0]}:{f[:40]}" for e, _, _, f in COMMAND_CASES]
)
def test_command_cases_exit_with_code_and_message(entry, argv, code, fragment, tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "h.yaml").write_text(spec_text())
    fill = lambda text: text.format(dir=tmp_path, config=tmp_path / "h.yaml")
    module, name = entry.split(":")
    assert getattr(importlib.import_module(module), name)([fill(a) for a in argv]) == code
    err = capsys.readouterr().err
    assert fill(fragment) in err and err.startswith("error: ") and "Traceback" not in err, err


def test_unwritable_store_says_nothing_ran_and_debug_shows_the_traceback(tmp_path, capsys):
    config = tmp_path / "h.yaml"
    config.write_text(spec_text())
    argv = ["--config", str(config), "--store", "/proc/hpstudy-store"]
    assert run_edf_main(argv) == 3
    err = capsys.readouterr().err
    assert "no trial was run" in err and "rerun the same command" in err and "Traceback" not in err
    assert run_edf_main(argv + ["--debug"]) == 3
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize(
    "argv,message",
    [
        ([b"\xff"], "error: query '\\udcff': not UTF-8 text (character 1,"),
        ([b"model == 'vit\xfe\xff'"], "error: query \"model == 'vit\\udcfe\\udcff'\": not UTF-8 text (character 14,"),
        ([b"--columns", b"model,\xff", b"lr > 0"], "error: --columns: unknown column '\\udcff'; columns: "),
        ([b"--study", b"\xff", b"lr > 0"], "error: --study: bad value '\\udcff'; allowed: "),
    ],
)
def test_query_arguments_that_are_not_utf8_exit_2_in_one_line(argv, message, tmp_path):
    """A command line is bytes: one that is not UTF-8 reaches Python as lone surrogates (surrogateescape),
    which ast.parse and a UTF-8 stdout cannot encode (a UnicodeEncodeError traceback before)."""
    store = str(tmp_path / "store")
    write_trial(store, "s", stored_row(trial_key="a", model="vit_c_tiny", optimizer="adamw", status="ok", lr=1e-3))
    command = [sys.executable, "-m", "hpstudy", "query", "--store", os.fsencode(store), *argv]
    done = subprocess.run(command, capture_output=True, timeout=120, env={**os.environ, "LC_ALL": "C.UTF-8"})
    err = done.stderr.decode("utf-8")
    assert (done.returncode, done.stdout, len(err.splitlines())) == (2, b"", 1), err
    assert err.startswith(message) and "Traceback" not in err, err


def test_dry_run_counts_trials_without_materialising_them(tmp_path, capsys, monkeypatch):
    made = []
    planned = hpstudy.study.sampling._planned
    monkeypatch.setattr(hpstudy.study.sampling, "_planned", lambda *a: made.append(a) or planned(*a))
    config = tmp_path / "big.yaml"
    config.write_text(spec_text(models="[vit_p_tiny]", samples="100000"))
    store = str(tmp_path / "store")
    assert run_edf_main(["--config", str(config), "--store", store, "--dry-run"]) == 0
    assert "100000 trials, 100000 to run" in capsys.readouterr().out
    assert made == []  # counted from the spec: no trial config was built
    # with rows stored, the plan matches keys cell by cell
    small = tmp_path / "small.yaml"
    small.write_text(spec_text(models="[vit_p_tiny]"))
    key = hpstudy.study.sampling.expand(load_spec(str(small)))[0].key
    write_trial(store, "h", stored_row(trial_key=key, model="vit_p_tiny", optimizer="adamw", status="ok"))
    assert run_edf_main(["--config", str(small), "--store", store, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "3 trials, 2 to run (1 already stored)" in out
    assert "note: study 'h'" not in out  # no spec recorded yet: nothing to compare with


@pytest.mark.parametrize(
    "text,value",
    [
        ("1e-4", 1e-4),
        ("1E+3", 1000.0),
        ("-2.5e-3", -2.5e-3),
        (".5e1", 5.0),
        ("1.0e-4", 1e-4),
        ("3", 3),
        ("0x1f", 31),
        (".nan", None),
        ("e5", "e5"),
        ("1e", "1e"),
        ("1e-4x", "1e-4x"),
        ("'1e-4'", "1e-4"),
    ],
)
def test_spec_loader_reads_exponent_floats_as_numbers(text, value):
    loaded = yaml.load(f"v: {text}", Loader=SpecLoader)["v"]
    if value is None:
        assert loaded != loaded  # NaN
    else:
        assert loaded == value and type(loaded) is type(value)


@pytest.mark.parametrize(
    "text,holds", [("[1, 2]", "a list"), ("", "nothing (null)"), ("7", "an integer"), ("just words", "a string")]
)
def test_a_spec_file_that_is_not_a_mapping_says_what_it_holds(tmp_path, text, holds):
    config = tmp_path / "spec.yaml"
    config.write_text(text)
    with pytest.raises(SpecError, match=rf"^spec: the file holds {re.escape(holds)}; allowed: a YAML mapping"):
        load_spec(str(config))


def test_pyyamls_safe_loader_is_left_as_it_was():
    assert yaml.safe_load("v: 1e-4")["v"] == "1e-4"  # YAML 1.1 needs a dot: a string
