"""Stored trials into Optuna (analysis/optuna_export.py), checked with Optuna's own plots, importances
and storage."""

import matplotlib
import numpy as np
import optuna
import pandas as pd
import pytest

from hpstudy.analysis.optuna_export import ExportError, to_optuna
from tests.helpers import make_trials

matplotlib.use("Agg")
CELL = ("vit_c_tiny", "adamw", 10)
COMPLETE, FAIL = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL


@pytest.fixture(scope="module")
def table():
    """Two models' AdamW trials, some diverged (at chance) and some failed, with EMA errors."""
    trials = make_trials(models=("vit_c_tiny", "cnn_tiny"), optimizers=("adamw",), n=30, fail_share=0.1, ema=True)
    assert {"ok", "diverged", "failed"} <= set(trials.loc[trials["model"] == CELL[0], "status"])
    return trials.assign(study="gen", epochs=trials["epochs"].astype("int32"), seed=np.arange(len(trials)))


def test_every_row_of_the_cell_is_a_finished_trial_valued_by_the_paper_metric(table):
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
            assert trial.state == FAIL and trial.value is None
        else:
            assert trial.state == COMPLETE and trial.value == row["best_ema_top1_err"]
    lr = study.trials[0].distributions["lr"]
    assert (lr.log, lr.low, lr.high) == (True, rows["lr"].min(), rows["lr"].max())
    assert study.best_value == rows.loc[rows["status"] != "failed", "best_ema_top1_err"].min()
    assert study.user_attrs["metric"] == "paper = ema_best"


def test_optunas_edf_plot_draws_the_completed_values(table):
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
    trials = make_trials(models=("cnn_tiny",), optimizers=("sgd",), n=60, diverge_share=0.0)
    importance = optuna.importance.get_param_importances(
        to_optuna(trials), evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)
    )
    assert importance["lr"] > 0.8 > importance["wd"]


@pytest.mark.slow  # Optuna's SQLite storage: a transaction per trial
def test_a_sqlite_storage_holds_the_study_and_a_new_export_replaces_only_its_own(table, tmp_path):
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
