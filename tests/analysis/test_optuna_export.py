"""Stored trials into Optuna (analysis/optuna_export.py), checked with Optuna's own plots, importances
and storage."""

import contextlib
import hashlib
import os
import re
import sqlite3

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis import optuna_export
from hpstudy.analysis.optuna_export import ExportError, to_optuna
from tests.helpers import make_trials

CELL = ("vit_c_tiny", "adamw", 10)


@pytest.fixture(scope="module")
def table():
    """Two models' AdamW trials, some diverged (at chance) and some failed, with EMA errors."""
    trials = make_trials(models=("vit_c_tiny", "cnn_tiny"), optimizers=("adamw",), n=30, fail_share=0.1, ema=True)
    assert {"ok", "diverged", "failed"} <= set(trials.loc[trials["model"] == CELL[0], "status"])
    return trials.assign(study="gen", epochs=trials["epochs"].astype("int32"), seed=np.arange(len(trials)))


def test_every_row_of_the_cell_is_a_finished_trial_valued_by_the_paper_metric(table):
    import optuna
    from optuna.trial import TrialState

    study = to_optuna(table, cell=CELL)
    rows = table[table["model"] == CELL[0]].set_index("trial_key")
    by_key = {t.user_attrs["trial_key"]: t for t in study.trials}
    assert sorted(by_key) == sorted(rows.index) and study.study_name == "gen/vit_c_tiny/adamw/10"
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    for key, row in rows.iterrows():
        trial = by_key[key]
        assert trial.params == {"lr": row["lr"], "wd": row["wd"]}
        assert trial.user_attrs == {
            "model": "vit_c_tiny",
            "optimizer": "adamw",
            "epochs": 10,
            "seed": row["seed"],
            "trial_key": key,
            "status": row["status"],
        }
        # with EMA on, the paper metric is the EMA best; a diverged row keeps its chance error
        if row["status"] == "failed":
            assert trial.state == TrialState.FAIL and trial.value is None
        else:
            assert trial.state == TrialState.COMPLETE and trial.value == row["best_ema_top1_err"]
    lr = study.trials[0].distributions["lr"]
    assert (lr.log, lr.low, lr.high) == (True, rows["lr"].min(), rows["lr"].max())
    assert study.best_value == rows.loc[rows["status"] != "failed", "best_ema_top1_err"].min()
    assert study.user_attrs["metric"] == "paper = ema_best"


def test_optunas_edf_plot_draws_the_completed_values(table):
    import matplotlib
    import optuna

    matplotlib.use("Agg")
    study = to_optuna(table, cell=CELL, metric="final")
    finished = table[(table["model"] == CELL[0]) & (table["status"] != "failed")]
    line = optuna.visualization.matplotlib.plot_edf(study).lines[0]
    x, y = line.get_xdata(), line.get_ydata()
    assert (x.min(), x.max()) == pytest.approx((finished["top1_err"].min(), finished["top1_err"].max()))
    # at each plotted error, the share of completed trials at or below it
    expected = [(finished["top1_err"].to_numpy() <= value).mean() for value in x]
    assert y == pytest.approx(expected)


@pytest.mark.slow  # fANOVA's forest: seconds
def test_optunas_importance_finds_the_learning_rate_that_the_errors_depend_on_most():
    """make_trials' error is 8 (log lr + 3)^2 + 2 (log wd + 1)^2 over two decades each: lr's term
    varies 16 times as much as wd's."""
    import optuna

    trials = make_trials(models=("cnn_tiny",), optimizers=("sgd",), n=60, diverge_share=0.0)
    importance = optuna.importance.get_param_importances(
        to_optuna(trials), evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)
    )
    assert importance["lr"] > 0.8 > importance["wd"]


@pytest.mark.slow  # Optuna's SQLite storage: a transaction per trial
def test_a_sqlite_storage_holds_the_study_and_a_new_export_replaces_only_its_own(table, tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    made = to_optuna(table, storage=storage, cell=("cnn_tiny", "adamw", 10))
    loaded = optuna.load_study(study_name="gen/cnn_tiny/adamw/10", storage=storage)
    fields = lambda study: [(t.state, t.value, t.params, t.user_attrs) for t in study.trials]
    assert fields(loaded) == fields(made) and len(loaded.trials) == 30
    to_optuna(table, storage=storage, cell=("cnn_tiny", "adamw", 10), metric="final")  # replaces it
    again = optuna.load_study(study_name="gen/cnn_tiny/adamw/10", storage=storage)
    assert len(again.trials) == 30 and again.user_attrs["metric"] == "final"
    optuna.create_study(study_name="mine", storage=storage)
    with pytest.raises(ExportError, match=r"^study_name: 'mine' is already in the storage and was not written"):
        to_optuna(table, storage=storage, study_name="mine", cell=CELL)
    assert optuna.load_study(study_name="mine", storage=storage).trials == []


def test_epoch_records_become_intermediate_values(table):
    rows = table[table["model"] == CELL[0]]
    keys = rows["trial_key"].iloc[:2].tolist()
    epochs = pd.DataFrame(
        {"trial_key": [keys[0], keys[0], keys[1]], "epoch": [1, 2, 1], "top1_err": [50.0, 40.0, np.nan]}
    )
    by_key = {t.user_attrs["trial_key"]: t for t in to_optuna(table, cell=CELL, epochs=epochs).trials}
    assert by_key[keys[0]].intermediate_values == {1: 50.0, 2: 40.0}
    assert by_key[keys[1]].intermediate_values == {}


def test_other_params_get_distributions_from_their_values_or_as_given(table):
    import optuna

    cell = table[table["model"] == CELL[0]].assign(
        batch_size=lambda t: np.where(t.index % 2, 64, 128), aug=lambda t: np.where(t.index % 3, "on", "off")
    )
    trial = to_optuna(cell, params=("lr", "batch_size", "aug")).trials[0]
    assert trial.distributions == {
        "lr": optuna.distributions.FloatDistribution(cell["lr"].min(), cell["lr"].max(), log=True),
        "batch_size": optuna.distributions.IntDistribution(64, 128),
        "aug": optuna.distributions.CategoricalDistribution(["off", "on"]),
    }
    box = optuna.distributions.FloatDistribution(1e-5, 1.0, log=True)
    assert to_optuna(cell, params={"wd": box}).trials[0].distributions == {"wd": box}


@pytest.mark.parametrize(
    "changes,message",
    [
        ({}, "cell: bad value None; allowed: one of the trials' (model, optimizer, epochs) cells [('cnn_tiny', "),
        ({"cell": ("vit_c_tiny", "sgd", 10)}, "cell: bad value ('vit_c_tiny', 'sgd', 10); allowed: one of"),
        ({"cell": CELL, "params": ("lr", "momentum")}, "params: unknown column 'momentum'; columns: study, "),
    ],
)
def test_a_table_that_makes_no_single_study_is_refused(table, changes, message):
    with pytest.raises(ExportError) as info:
        to_optuna(table, **changes)
    assert str(info.value).startswith(message)


def test_rows_of_several_studies_or_none_are_refused(table):
    with pytest.raises(ExportError, match=r"^trials: rows of several studies \['a', 'gen'\]; allowed: one study's"):
        to_optuna(pd.concat([table, table.assign(study="a")]), cell=CELL)
    with pytest.raises(ExportError, match=r"^trials: no rows"):
        to_optuna(table.iloc[:0])


# --- storages: only a new file or an Optuna storage is written ----------------------------------------


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sqlite(path, *statements) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        for statement in statements:
            db.execute(statement)
        db.commit()


def _study_names(storage) -> list:
    """The storage's study names (Optuna 3.1, the floor, has no get_all_study_names)."""
    import optuna

    return [summary.study_name for summary in optuna.get_all_study_summaries(storage, include_best_trial=False)]


def _optuna_storage(path) -> None:
    """An Optuna storage the user made, holding a study of their own with one trial."""
    import optuna

    study = optuna.create_study(study_name="mine", storage=f"sqlite:///{path}")
    x = optuna.distributions.FloatDistribution(0.0, 1.0)
    study.add_trial(optuna.trial.create_trial(value=1.0, params={"x": 0.5}, distributions={"x": x}))


NOT_OPTUNA = [
    # (what the file is, how to make it, what the refusal says it found)
    ("a text file", lambda p: p.write_text("my notes\n"), "is not an SQLite database"),
    ("an application's database", lambda p: _sqlite(p, "CREATE TABLE users (id, name)"), "holds tables Optuna does"),
    (
        "an application's database with Optuna's table names",  # Optuna's create_all would skip them, then fail
        lambda p: _sqlite(p, "CREATE TABLE studies (name)", "CREATE TABLE trials (id)"),
        "lacks Optuna's tables ['version_info']",
    ),
    (
        "an Optuna storage an application added a table to",
        lambda p: (_optuna_storage(p), _sqlite(p, "CREATE TABLE users (id)")),
        "holds tables Optuna does not make, ['users']",
    ),
    ("an empty file", lambda p: p.write_bytes(b""), "is an SQLite database with no tables, not an Optuna storage"),
    ("a read-only Optuna storage", lambda p: (_optuna_storage(p), p.chmod(0o444)), "is read-only"),
]


@pytest.mark.parametrize("what,make,found", NOT_OPTUNA, ids=[case[0] for case in NOT_OPTUNA])
def test_a_file_that_is_not_a_writable_optuna_storage_is_refused_and_left_byte_for_byte(
    table, tmp_path, what, make, found
):
    path = tmp_path / "app.db"
    make(path)
    before, listing = _sha256(path), sorted(os.listdir(tmp_path))
    with pytest.raises(ExportError) as refused:
        to_optuna(table, storage=f"sqlite:///{path}", cell=CELL)
    text = str(refused.value)
    assert text.startswith(f"storage: 'sqlite:///{path}': ") and found in text and text.isprintable(), text
    assert text.endswith("nothing was written")
    assert _sha256(path) == before and sorted(os.listdir(tmp_path)) == listing  # no journal either


def test_a_locked_storage_is_refused_without_waiting_long_and_left_as_it_was(table, tmp_path, monkeypatch):
    path = tmp_path / "optuna.db"
    _optuna_storage(path)
    before = _sha256(path)
    monkeypatch.setattr(optuna_export, "LOCK_WAIT_S", 0.1)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")  # another process writing
        with pytest.raises(ExportError, match=r"^storage: '.*': '.*optuna.db' is locked by another connection \("):
            to_optuna(table, storage=f"sqlite:///{path}", cell=CELL)
        other.execute("ROLLBACK")
    assert _sha256(path) == before


@pytest.mark.parametrize(
    "storage,found",
    [
        ("sqlite:///{dir}/nowhere/optuna.db", "the folder '{dir}/nowhere' does not exist"),
        ("sqlite:///{dir}/notes.txt/optuna.db", "the folder '{dir}/notes.txt' is not a folder"),
        ("sqlite:///{dir}", "'{dir}' is a folder"),
        ("sqlite:////proc/hpstudy-optuna.db", "cannot be written (unable to open database file)"),
        ("nosuchdb://host/db", "bad value 'nosuchdb://host/db': not a database URL (Can't load plugin"),
        ("a file name", "bad value 'a file name': not a database URL (Could not parse"),
        ("sqlite:///{{dir}}.db", "bad value 'sqlite:///{{dir}}.db': braces other than {{SCHEMA_VERSION}} ('dir')"),
        (
            "sqlite:///{{0}}.db",
            "bad value 'sqlite:///{{0}}.db': braces other than {{SCHEMA_VERSION}} (Replacement index",
        ),
        ("sqlite:///{dir}/\udcff.db", "bad value 'sqlite:///{dir}/\\udcff.db': not UTF-8 text"),
        (b"sqlite:///optuna.db", "bad value b'sqlite:///optuna.db'; allowed: None (in memory), a database URL"),
        (7, "bad value 7; allowed: None (in memory)"),
    ],
)
def test_every_storage_failure_is_one_export_error_line_and_leaves_nothing(table, tmp_path, storage, found):
    (tmp_path / "notes.txt").write_text("x")
    fill = lambda text: text.format(dir=tmp_path) if isinstance(text, str) else text
    with pytest.raises(ExportError) as refused:
        to_optuna(table, storage=fill(storage), cell=CELL)
    text = str(refused.value)
    assert text.startswith("storage: ") and fill(found) in text and text.isprintable(), text
    assert os.listdir(tmp_path) == ["notes.txt"] and not os.path.exists("/proc/hpstudy-optuna.db")


def test_a_server_database_that_cannot_be_reached_is_named_without_its_password(table):
    # no driver installed is one line too; with psycopg installed, the connection is refused
    with pytest.raises(ExportError) as refused:
        to_optuna(table, storage="postgresql://me:s3cret@127.0.0.1:1/optuna", cell=CELL)
    text = str(refused.value)
    assert text.startswith("storage: 'postgresql://me:***@127.0.0.1:1/optuna': ") and "s3cret" not in text
    assert text.isprintable()


def test_a_path_is_refused_with_the_url_it_means(table, tmp_path):
    with pytest.raises(ExportError, match=re.escape(f"(for a file: 'sqlite:///{tmp_path / 'a.db'}')")):
        to_optuna(table, storage=tmp_path / "a.db", cell=CELL)
    assert os.listdir(tmp_path) == []


@pytest.mark.slow  # Optuna's SQLite storage: a transaction per trial
def test_an_optuna_storage_the_user_made_gets_the_study_added_and_keeps_its_own(table, tmp_path):
    import optuna

    path = tmp_path / "optuna.db"
    _optuna_storage(path)
    storage = f"sqlite:///{path}"
    to_optuna(table, storage=storage, cell=CELL)
    assert sorted(_study_names(storage)) == ["gen/vit_c_tiny/adamw/10", "mine"]
    mine = optuna.load_study(study_name="mine", storage=storage)
    assert [(t.value, t.params) for t in mine.trials] == [(1.0, {"x": 0.5})] and mine.user_attrs == {}


def _failing_add_trials(self, trials):
    """Study.add_trials as on a full disk: the first trial written, then the storage fails."""
    from sqlalchemy.exc import OperationalError

    self.add_trial(trials[0])
    raise OperationalError("INSERT INTO trials", {}, sqlite3.OperationalError("database or disk is full"))


@pytest.mark.parametrize("existing", [False, True], ids=["new file", "the user's Optuna storage"])
def test_an_export_that_fails_while_writing_takes_back_what_it_wrote(table, tmp_path, monkeypatch, existing):
    import optuna

    path = tmp_path / "optuna.db"
    if existing:
        _optuna_storage(path)
    monkeypatch.setattr(optuna.Study, "add_trials", _failing_add_trials)
    with pytest.raises(ExportError) as failed:
        to_optuna(table, storage=f"sqlite:///{path}", cell=CELL)
    text = str(failed.value)
    assert text == (
        f"storage: 'sqlite:///{path}': cannot be written (database or disk is full); nothing of this export was kept"
    )
    if existing:  # the study it began is deleted; the user's study is as it was
        assert _study_names(f"sqlite:///{path}") == ["mine"]
        assert len(optuna.load_study(study_name="mine", storage=f"sqlite:///{path}").trials) == 1
    else:  # the file it made is removed
        assert os.listdir(tmp_path) == []


# --- arguments ---------------------------------------------------------------------------------------


def test_a_failed_trials_param_outside_its_distribution_is_left_off_a_finished_ones_is_refused(table):
    import optuna

    rows = table[table["model"] == CELL[0]].copy()
    failed = rows.index[rows["status"] == "failed"][0]
    rows.loc[failed, "lr"] = 0.0  # a failed trial may hold any lr (from_table checks only the others)
    trials = {t.user_attrs["trial_key"]: t for t in to_optuna(rows).trials}
    assert set(trials[rows.loc[failed, "trial_key"]].params) == {"wd"}
    assert all(set(t.params) == {"lr", "wd"} for key, t in trials.items() if key != rows.loc[failed, "trial_key"])
    finished = rows.index[rows["status"] == "ok"][0]
    rows.loc[finished, "lr"] = -1.0
    with pytest.raises(ExportError, match=rf"^params: lr \(row {finished}\): bad value -1.0; allowed: a value of "):
        to_optuna(rows)
    box = optuna.distributions.FloatDistribution(1e-9, 1e-8, log=True)  # a box the values are not in
    with pytest.raises(ExportError, match=r"^params: lr \(row \d+\): bad value .*; allowed: a value of Float"):
        to_optuna(table, cell=CELL, params={"lr": box})


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"params": "lr"}, "params: bad value 'lr'; allowed: a list of column names, or a mapping"),
        ({"params": {"lr": (0, 1)}}, "params: lr: bad value (0, 1); allowed: an optuna distribution"),
        ({"cell": "vit_c_tiny"}, "cell: bad value 'vit_c_tiny'; allowed: one of the trials'"),
        ({"cell": 5}, "cell: bad value 5; allowed: one of the trials'"),
        ({"study_name": ""}, "study_name: bad value ''; allowed: None or a text of 1-512 characters"),
        ({"study_name": "x" * 513}, "study_name: bad value 'xxxx"),
        ({"study_name": "\udcff"}, "study_name: bad value '\\udcff'; allowed: None or a text"),
        ({"metric": ["paper"]}, "metric: bad value ['paper']; allowed: final, best, ema_best, paper"),
        ({"epochs": "epochs.parquet"}, "epochs: bad value 'str'; allowed: None or the study's epoch records"),
    ],
)
def test_a_bad_argument_is_one_export_error_line_naming_it(table, changes, message):
    with pytest.raises(ExportError) as refused:
        to_optuna(table, **{"cell": CELL, **changes})
    assert str(refused.value).startswith(message) and str(refused.value).isprintable(), str(refused.value)


def test_rows_whose_labels_repeat_are_each_one_trial(table):
    """pd.concat without ignore_index repeats row labels: each row is still one trial, with its own value."""
    rows = table[table["model"] == CELL[0]]
    twice = pd.concat(
        [rows, rows.assign(trial_key=rows["trial_key"] + "-b", best_ema_top1_err=rows["best_ema_top1_err"] + 1)]
    )
    assert twice.index.duplicated().any()
    by_key = {t.user_attrs["trial_key"]: t for t in to_optuna(twice).trials}
    assert len(by_key) == 2 * len(rows)
    for key, row in rows.set_index("trial_key").iterrows():
        if row["status"] != "failed":
            assert (by_key[key].value, by_key[f"{key}-b"].value) == (
                row["best_ema_top1_err"],
                row["best_ema_top1_err"] + 1,
            )
