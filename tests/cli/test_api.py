"""The Python API (hpstudy/api.py, exposed lazily by `import hpstudy`): the command line's validation and
errors, data instead of printed text, nothing heavy loaded by `import hpstudy`; and the notebook example
(examples/python_api.py), run whole on a local Ray."""

import json
import logging
import os
import runpy
import subprocess
import sys
import warnings

import pytest
import yaml

import hpstudy
from hpstudy.cli import hpstudy_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.study.store.layout import StoreError, write_trial
from hpstudy.study.store.spec_record import write_spec_record
from hpstudy.trainers.errors import HpstudyError
from hpstudy.trainers.schema import FINISHED, TRIAL_FIELDS
from tests.helpers import REPO, planned_row, small_spec, stored_row, write_spec


def _cli_error(capsys, argv) -> str:
    """The message of the one `error:` line `hpstudy <argv>` prints as it exits with code 2."""
    assert hpstudy_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err[len("error: ") : -1]


@pytest.mark.parametrize(
    "changes,kwargs,flags",
    [
        ({"samples": 0}, {}, []),
        ({"models": ["vit_c_tiny", "resnet_9000"]}, {}, []),
        ({"learning_rate": 0.1}, {}, []),
        ({"recipe": {"batch_size": 0, "device": "cpu"}}, {}, []),
        ({"resources": {"cpu": 100_000}}, {}, []),  # more CPUs than a local Ray has
        ({}, {"num_cpus": 0}, ["--num-cpus", "0"]),
        ({}, {"max_concurrent": -1}, ["--max-concurrent", "-1"]),
    ],
)
def test_a_bad_spec_dict_or_argument_raises_the_error_the_command_line_prints(changes, kwargs, flags, tmp_path, capsys):
    raw, store = small_spec(**changes), str(tmp_path / "store")
    expected = _cli_error(capsys, ["run", "--config", write_spec(tmp_path, raw), "--store", store, *flags])
    with pytest.raises(SpecError) as caught:
        hpstudy.run(raw, store, **kwargs)
    assert str(caught.value) == expected
    assert not os.path.exists(store)  # nothing ran, nothing was written


def test_a_spec_path_or_bundled_name_is_read_as_config_is(tmp_path, capsys):
    missing = str(tmp_path / "nope.yaml")
    expected = _cli_error(capsys, ["run", "--config", missing, "--store", str(tmp_path)])
    with pytest.raises(SpecError, match="^--config: ") as caught:
        hpstudy.run(missing, tmp_path)  # a path object too
    assert str(caught.value) == expected
    # the bundled demo_digits is found by name: its report folder, which holds a user's file, is refused
    (tmp_path / "reports" / "demo_digits").mkdir(parents=True)
    (tmp_path / "reports" / "demo_digits" / "notes.txt").write_text("mine")
    expected = _cli_error(capsys, ["run", "--config", "demo_digits", "--store", str(tmp_path)])
    with pytest.raises(HpstudyError) as caught:
        hpstudy.run("demo_digits", tmp_path)
    assert str(caught.value) == expected and "reports/demo_digits" in expected, expected
    assert os.listdir(tmp_path) == ["reports"]  # nothing ran
    with pytest.raises(SpecError, match=r"^spec: bad value 42; allowed: a YAML path, a bundled spec's name or a dict$"):
        hpstudy.run(42)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"progress": "bars"}, "progress: bad value 'bars'; allowed: 'auto', 'bar', 'lines', 'off', True (= 'auto') "),
        ({"resume": "yes"}, "resume: bad value 'yes'; allowed: True or False"),
        ({"report": None}, "report: bad value None; allowed: True or False"),
        ({"wait": "yes"}, "wait: bad value 'yes'; allowed: True or False"),
        ({"trackers": "neptune:runs"}, "trackers: bad value 'neptune:runs'; allowed: "),
    ],
)
def test_the_apis_own_arguments_are_checked_before_anything_runs(kwargs, message, tmp_path):
    with pytest.raises(HpstudyError) as caught:  # SpecError; TrackerError for a tracker
        hpstudy.run(small_spec(), tmp_path / "store", **kwargs)
    assert str(caught.value).startswith(message)
    assert not (tmp_path / "store").exists()


def test_a_run_of_a_study_another_driver_writes_raises_studybusy_naming_it(tmp_path):
    from hpstudy.study.store.lease import StudyBusy, hold_lease

    store = str(tmp_path / "store")
    with hold_lease(store, "e2e", "hpstudy run"):
        with pytest.raises(StudyBusy) as caught:
            hpstudy.run(small_spec(), store, report=False)
    message = str(caught.value)
    assert message.startswith(f"study 'e2e' in {store} is being written by hpstudy run on host ")
    assert f", pid {os.getpid()}, " in message and "; wait for it to end, or pass wait=True" in message
    assert sorted(os.listdir(store)) == ["leases"]  # nothing of the study written


@pytest.fixture
def store(tmp_path):
    """Study `s`: 4 trials of cnn_tiny and 4 of vit_c_tiny (adamw), lr 10^-4 .. 10^-1, error lowest at
    lr 10^-2 (10^-3 for vit_c_tiny); the spec record names all but an earlier spec's 9th row."""
    keys = []
    for model, best in (("cnn_tiny", -2), ("vit_c_tiny", -3)):
        for log_lr in (-4, -3, -2, -1):
            keys.append(f"{model}{log_lr}")
            write_trial(
                str(tmp_path),
                "s",
                stored_row(
                    trial_key=keys[-1],
                    model=model,
                    family=model.split("_tiny")[0],
                    optimizer="adamw",
                    epochs=1,
                    lr=10.0**log_lr,
                    wd=0.05,
                    status="ok",
                    top1_err=10.0 + 5 * abs(log_lr - best),
                    best_top1_err=10.0 + 5 * abs(log_lr - best),
                ),
            )
    write_trial(str(tmp_path), "s", stored_row(trial_key="earlier", model="cnn_tiny", status="ok", top1_err=1.0))
    write_spec_record(str(tmp_path), "s", {"name": "s"}, len(keys), keys)
    return str(tmp_path), keys


def test_load_returns_every_column_of_the_rows_of_the_recorded_spec(store):
    root, keys = store
    with pytest.warns(UserWarning, match="1 rows from an earlier spec of study 's'"):
        trials = hpstudy.load(root, "s")
    assert sorted(trials["trial_key"]) == sorted(keys)
    assert set(trials.columns) == {*TRIAL_FIELDS, "study"}
    assert trials.set_index("trial_key").loc["cnn_tiny-2", "top1_err"] == 10.0


@pytest.mark.parametrize("where,study", [("store", "nope"), ("store", "S"), ("nowhere", "s")])
def test_a_missing_store_or_study_raises_the_command_lines_error_naming_the_argument(store, capsys, where, study):
    root, _ = store
    root = root if where == "store" else os.path.join(root, "nowhere")
    argv = ["--store", root, "--study", study]
    for call, command in ((hpstudy.load, "report"), (hpstudy.report, "report"), (hpstudy.suggest, "suggest")):
        expected = _cli_error(capsys, [command, *argv])
        with pytest.raises(StoreError) as caught:
            call(root, study)
        assert expected.startswith("--") and str(caught.value) == expected[2:]  # `study:`, not `--study:`
    assert _cli_error(capsys, ["query", *argv, "top1_err < 5"]) == expected
    assert _cli_error(capsys, ["status", *argv]) == expected


def test_suggest_returns_the_points_and_the_lines_hpstudy_suggest_prints(store, capsys):
    root, _ = store
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the earlier spec's row, left out
        assert hpstudy_main(["suggest", "--store", root, "--study", "s"]) == 0
        printed = capsys.readouterr().out
        both = hpstudy.suggest(root, "s")
        one = hpstudy.suggest(root, "s", models="cnn_tiny")  # a name, not a list of its letters
    assert both["space"] + "\n" == printed
    by_model = {p["model"]: p for p in both["points"]}
    assert list(by_model) == ["vit_c_tiny", "cnn_tiny"]  # catalogue order, as printed
    space = yaml.safe_load(printed)["space"]
    for model, point in by_model.items():
        assert (point["optimizer"], point["epochs"], point["n"], point["n_left_out"]) == ("adamw", 1, 4, 0)
        assert 1e-4 <= point["lr"] <= 0.1 and point["wd"] == pytest.approx(0.05)
        assert space[model]["adamw"] == {"lr": float(f"{point['lr']:.3g}"), "wd": 0.05}
    assert [p["model"] for p in one["points"]] == ["cnn_tiny"] and one["points"][0] == by_model["cnn_tiny"]


@pytest.mark.slow  # two fresh interpreters (~1.4 s)
def test_import_hpstudy_loads_nothing_heavy_and_load_no_torch_or_ray():
    probe = (
        "import json, sys\nimport hpstudy\n"
        "heavy = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'timm', 'ray', 'pandas'})\n"
        "first = heavy()\nhpstudy.load\nprint(json.dumps([first, heavy(), 'load' in dir(hpstudy)]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == [[], ["pandas"], True]
    with pytest.raises(AttributeError, match="has no attribute 'runn'"):
        hpstudy.runn


@pytest.mark.slow  # a 6-trial study on a local Ray, its report and suggestion (about 1 minute on 2 cores)
def test_the_notebook_example_runs_a_study_and_reads_it_back(capsys):
    cells = runpy.run_path(os.path.join(REPO, "examples", "python_api.py"))
    spec, store, trials = parse_spec(cells["SPEC"]), cells["store"], cells["trials"]
    planned = {t.key: t for t in expand(spec)}
    assert sorted(trials["trial_key"]) == sorted(planned) and len(planned) == 6
    assert set(trials.columns) == {*TRIAL_FIELDS, "study"}
    assert trials["status"].isin(FINISHED).all() and trials["top1_err"].between(0, 100).all()
    for key, lr in zip(trials["trial_key"], trials["lr"]):
        assert lr == planned[key].config["lr"]
    out = capsys.readouterr().out
    assert "] 6/6 done (ok " in out  # not a notebook: the status lines, shown (the example turns show_output on)
    assert os.path.isfile(os.path.join(cells["folder"], "index.html"))
    assert cells["folder"] == os.path.join(store, "reports", spec.name)
    points = cells["suggestion"]["points"]
    assert [(p["model"], p["optimizer"]) for p in points] == [("vit_c_tiny", "adamw"), ("cnn_tiny", "adamw")]
    for p in points:  # the median of bootstrap winners lies within the cell's trials
        cell = trials[trials["model"] == p["model"]]
        assert cell["lr"].min() <= p["lr"] <= cell["lr"].max() and cell["wd"].min() <= p["wd"] <= cell["wd"].max()
    exported = cells["optuna_study"].trials  # hpstudy.analysis.optuna_export is part of this tree
    assert sorted(t.params["lr"] for t in exported) == sorted(trials.loc[trials["model"] == "cnn_tiny", "lr"])


def _stored_study(tmp_path, name="quiet"):
    """A spec (dict) of 12 trials, every one already stored ok: a run plans, compacts and returns without Ray."""
    raw = small_spec(name=name)
    root = str(tmp_path / "store")
    for t in expand(parse_spec(raw)):
        write_trial(root, name, planned_row(t, status="ok", top1_err=10.0, best_top1_err=10.0))
    return raw, root


def test_the_api_prints_nothing_until_show_output_and_then_the_lines_of_the_command(tmp_path, capsys, caplog):
    raw, root = _stored_study(tmp_path)
    plan = f"study quiet: 12 trials, 12 already stored, 0 to run; store {root}"
    assert len(hpstudy.run(raw, root, report=False, progress="lines")) == 12
    assert capsys.readouterr() == ("", "")  # quiet by default: the plan line went to logging only
    hpstudy.show_output(True)
    hpstudy.show_output(True)  # once: a second call adds no second handler
    assert len(hpstudy.run(raw, root, report=False)) == 12
    assert capsys.readouterr() == (f"{plan}\n", "")
    # the command line prints the same line (then its summary)
    assert hpstudy_main(["run", "--config", write_spec(tmp_path, raw), "--store", root, "--report", "none"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == plan
    hpstudy.show_output(False)
    with caplog.at_level(logging.INFO):  # a user's own logging configuration gets the lines, none printed
        hpstudy.run(raw, root, report=False)
    assert capsys.readouterr() == ("", "")
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [("hpstudy.study.runner", "INFO", plan)]
    with pytest.raises(HpstudyError, match=r"^show_output: bad value 'yes'; allowed: True or False$"):
        hpstudy.show_output("yes")


def test_show_output_is_undone_by_turning_it_off(capsys):
    hpstudy_logger = logging.getLogger("hpstudy")
    before = (list(hpstudy_logger.handlers), hpstudy_logger.level, hpstudy_logger.propagate)
    hpstudy.show_output(True)
    logging.getLogger("hpstudy.study.store.lease").info("waiting for the lease")
    logging.getLogger("hpstudy.study.trackers").warning("warning: tracker t did not close: OSError: x")
    hpstudy.show_output(False)
    assert (hpstudy_logger.handlers, hpstudy_logger.level, hpstudy_logger.propagate) == before
    assert capsys.readouterr() == ("waiting for the lease\n", "warning: tracker t did not close: OSError: x\n")
