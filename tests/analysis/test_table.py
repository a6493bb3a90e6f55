"""Any results table, and a real Ray Tune ResultGrid, as hpstudy's trial rows: EDFs, figures, reports."""

import json
import os

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis.edf import edf_table
from hpstudy.analysis.metric import LeftOutWarning
from hpstudy.analysis.table import TableError, from_table, from_tune, table_report
from hpstudy.trainers.errors import HpstudyError
from hpstudy.trainers.schema import TRIAL_FIELDS

MODELS = ("mine_a", "mine_b")  # not in hpstudy's catalogue


def _accuracies(n: int = 8, seed: int = 0) -> pd.DataFrame:
    """A user's own table: validation accuracy (a fraction) of two made-up models over sampled lr/wd;
    the first row of each model never finished (NaN) and the second blew up (-inf, as a logger writes a
    diverged run's accuracy)."""
    rng = np.random.default_rng(seed)
    parts = []
    for offset, model in enumerate(MODELS):
        lr, wd = 10 ** rng.uniform(-4, -2, n), 10 ** rng.uniform(-3, -1, n)
        acc = 0.9 - 0.05 * offset - 0.05 * (np.log10(lr) + 3) ** 2 - rng.uniform(0, 0.02, n)
        acc[0], acc[1] = np.nan, -np.inf
        parts.append(pd.DataFrame({"arch": model, "learning_rate": lr, "weight_decay": wd, "val_acc": acc}))
    return pd.concat(parts, ignore_index=True).assign(loss=lambda t: 1.5 - t["val_acc"])


def _rows(table: pd.DataFrame, **changes) -> pd.DataFrame:
    mapping = dict(error="val_acc", model="arch", optimizer="adamw", lr="learning_rate", wd="weight_decay")
    return from_table(table, **{**mapping, "scale": "accuracy_fraction", "chance": 90.0, **changes})


def test_a_table_of_accuracies_becomes_trial_rows_with_errors_in_percent_and_statuses():
    table = _accuracies()
    rows = _rows(table, train_loss="loss", study="mine")
    assert list(rows.columns) == ["study", *TRIAL_FIELDS] and len(rows) == len(table)
    finite = np.isfinite(table["val_acc"])
    expected_status = np.where(table["val_acc"].isna(), "failed", np.where(finite, "ok", "diverged"))
    assert rows["status"].tolist() == expected_status.tolist()
    np.testing.assert_allclose(rows.loc[finite, "top1_err"], 100 * (1 - table.loc[finite, "val_acc"]))
    assert (rows.loc[rows["status"] == "diverged", "top1_err"] == 90.0).all()  # at the chance error given
    assert rows.loc[rows["status"] == "failed", "top1_err"].isna().all()
    assert rows["model"].tolist() == table["arch"].tolist() and rows["family"].tolist() == table["arch"].tolist()
    assert set(rows["optimizer"]) == {"adamw"} and set(rows["epochs"]) == {1} and set(rows["seed"]) == {0}
    assert rows["lr"].tolist() == table["learning_rate"].tolist() and set(rows["study"]) == {"mine"}
    np.testing.assert_array_equal(rows["train_loss"], table["loss"])
    assert rows["best_top1_err"].isna().all()


def test_every_scale_gives_the_same_percent_error():
    errors = np.array([0.0, 12.5, 100.0, np.nan])
    frame = pd.DataFrame({"m": "mine_a", "lr": 1e-3, "wd": 0.1, "e": errors})
    as_given = {
        "error_percent": errors,
        "error_fraction": errors / 100,
        "accuracy_percent": 100 - errors,
        "accuracy_fraction": 1 - errors / 100,
    }
    for scale, column in as_given.items():
        rows = from_table(frame.assign(e=column), error="e", model="m", optimizer="sgd", scale=scale)
        np.testing.assert_allclose(rows["top1_err"], errors, err_msg=scale)


def test_a_status_column_is_taken_as_given_and_its_diverged_rows_count_at_chance():
    frame = pd.DataFrame(
        {
            "m": "mine_a",
            "lr": [1e-3, 2e-3, 3e-3],
            "wd": 0.1,
            "e": [10.0, np.inf, 20.0],
            "s": ["ok", "diverged", "failed"],
        }
    )
    rows = from_table(frame, error="e", model="m", optimizer="sgd", status="s", chance=75.0)
    assert rows["status"].tolist() == ["ok", "diverged", "failed"]
    np.testing.assert_array_equal(rows["top1_err"], [10.0, 75.0, np.nan])


def test_the_edf_and_the_delta_edf_figure_of_models_the_catalogue_does_not_know():
    from hpstudy.analysis.figures import delta_edf_figure, delta_edf_table

    rows = _rows(_accuracies())
    with pytest.warns(LeftOutWarning, match="left out 2 of 16 rows: 2 failed"):
        edf = edf_table(rows)
    for model in MODELS:
        counted = np.sort(rows.loc[(rows["model"] == model) & (rows["status"] != "failed"), "top1_err"].to_numpy())
        got = edf[edf["model"] == model]
        np.testing.assert_allclose(got["error"], counted)
        np.testing.assert_allclose(got["F"], np.arange(1, len(counted) + 1) / len(counted))  # no ties
        np.testing.assert_allclose(got["delta"], counted - counted[0])
    with pytest.warns(LeftOutWarning):
        plot = delta_edf_figure(delta_edf_table(rows))
    labels = [line.get_label() for ax in plot.fig.axes for line in ax.get_lines()]
    assert [label.split(" (")[0] for label in labels if label.startswith("mine_")] == list(MODELS)
    assert len(plot.data) == (rows["status"] != "failed").sum()


def test_a_tune_dataframe_is_read_as_from_tune_names_its_columns():
    frame = pd.DataFrame(
        {"val_err": [0.2, 0.3, np.nan], "config/lr": [1e-3, 1e-2, 3e-3], "config/wd": 0.01, "config/model": "mine_b"}
    )
    rows = from_tune(frame, error="val_err", model="config/model", optimizer="adamw", scale="error_fraction")
    np.testing.assert_allclose(rows["top1_err"], [20.0, 30.0, np.nan])
    assert rows["status"].tolist() == ["ok", "ok", "failed"] and rows["lr"].tolist() == [1e-3, 1e-2, 3e-3]
    assert set(rows["study"]) == {"tune"} and set(rows["model"]) == {"mine_b"}


TUNE = pd.DataFrame({"config/lr": [1e-3, 1e-2], "config/wd": [0.1, 0.2], "val_err": [12.0, 20.0], "m": "mine_a"})
BAD = [
    # (from_table's mapping changes, table changes, the message's start)
    ({"error": "val_loss"}, {}, "table: error: no column 'val_loss'; allowed: a column of the table (config/lr, "),
    ({"lr": "lr"}, {}, "table: lr: no column 'lr'; allowed: a column of the table"),  # Tune's names are config/...
    ({"model": "config/model"}, {}, "table: model: no column 'config/model'"),
    ({}, {"val_err": ["12", "n/a"]}, "table: error (column 'val_err'): bad value 'n/a' in row 1; allowed: numbers"),
    ({}, {"val_err": [12.0, True]}, "table: error (column 'val_err'): bad value True in row 1; allowed: numbers"),
    (
        {},
        {"val_err": [12.0, 120.0]},
        "table: error (column 'val_err'): bad value 120.0 in row 1; allowed: errors in [0, 100]",
    ),
    (
        {},
        {"val_err": [-1.0, 12.0]},
        "table: error (column 'val_err'): bad value -1.0 in row 0; allowed: errors in [0, 100]",
    ),
    (
        {"scale": "accuracy_fraction"},
        {"val_err": [0.5, 87.5]},
        "table: error (column 'val_err'): bad value 87.5 in row 1; allowed: accuracies in [0, 1] (scale accuracy_",
    ),
    ({"scale": "percent"}, {}, "table: scale: bad value 'percent'; allowed: error_percent, error_fraction, accuracy_"),
    (
        {"status": "s"},
        {"s": ["ok", "done"]},
        "table: status (column 's'): bad value 'done' in row 1; allowed: ok, diverged, failed",
    ),
    ({}, {"config/lr": [1e-3, 0.0]}, "table: lr (column 'config/lr'): bad value 0.0 in row 1; allowed: numbers > 0"),
    ({"wd": -0.1}, {}, "table: wd: bad value -0.1; allowed: numbers > 0"),
    (
        {"epochs": "e"},
        {"e": [10, 2.5]},
        "table: epochs (column 'e'): bad value 2.5 in row 1; allowed: whole numbers >= 1",
    ),
    ({"seed": "x"}, {}, "table: seed: no column 'x'"),
    (
        {"model": "m"},
        {"m": ["mine_a", 3]},
        "table: model (column 'm'): bad value 3 in row 1; allowed: names of 1-128",
    ),
    ({"optimizer": "../x"}, {}, "table: optimizer: no column '../x'"),
    ({"chance": 0}, {}, "table: chance: bad value 0; allowed: an error in (0, 100]"),
]


@pytest.mark.parametrize("mapping,changes,message", BAD)
def test_a_table_that_cannot_be_mapped_is_one_line_naming_the_field_the_value_and_what_is_allowed(
    mapping, changes, message
):
    with pytest.raises(TableError) as caught:
        from_table(
            TUNE.assign(**changes),
            **{
                "error": "val_err",
                "model": "mine_a",
                "optimizer": "adamw",
                "lr": "config/lr",
                "wd": "config/wd",
                **mapping,
            },
        )
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert isinstance(caught.value, HpstudyError)  # the command line's exit 2


def test_an_empty_table_or_one_that_is_not_a_table_is_refused():
    with pytest.raises(TableError, match="^table: no rows; allowed: a table with one row per trial$"):
        from_table(TUNE.iloc[:0], error="val_err", model="mine_a", optimizer="adamw", lr="config/lr", wd="config/wd")
    with pytest.raises(TableError, match="^from_tune: bad value 'dict'; allowed: a Ray Tune ResultGrid"):
        from_tune({"val_err": [1.0]}, error="val_err", model="mine_a", optimizer="adamw")
    with pytest.raises(TableError, match="^table_report: trials: no column 'study'; allowed: the rows from_table"):
        table_report(TUNE, "unused")


@pytest.mark.slow
def test_a_hand_made_table_gets_its_report(tmp_path):
    rows = _rows(_accuracies(), train_loss="loss", study="mine")
    page = table_report(rows, str(tmp_path / "report"))
    assert page == str(tmp_path / "report" / "index.html") and os.path.isfile(page)
    record = json.load(open(tmp_path / "report" / "report.json"))
    assert record["study"] == "mine" and record["metric"]["used"].startswith("paper = final")
    summary = {row["model"]: row for row in record["tables"]["summary"]}
    counted = rows[rows["status"] != "failed"].groupby("model")["top1_err"]
    assert {m: (s["n"], s["best"]) for m, s in summary.items()} == {
        m: (len(errors), pytest.approx(errors.min())) for m, errors in counted
    }
    assert os.path.isfile(tmp_path / "report" / "delta_edf_adamw_1ep.svg")
    assert "mine_a" in open(page).read()


def _trainable(config):
    """A Tune trainable: val_err is a bowl in log lr and log wd; model mine_c reports once, then fails."""
    from ray import tune

    err = _bowl(config["lr"], config["wd"], config["model"])
    tune.report({"val_err": err, "train_loss": err / 50})
    if config["model"] == "mine_c":
        raise RuntimeError("mine_c broke after its first report")


def _bowl(lr, wd, model):
    return 10 + 5 * (np.log10(lr) + 2.5) ** 2 + (np.log10(wd) + 2) ** 2 + 3 * ("mine_b" == model)


@pytest.mark.slow
def test_a_real_tune_result_grid_gets_an_edf_report(tmp_path):
    import ray
    from ray import tune

    ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="WARNING")
    try:
        grid = tune.Tuner(
            _trainable,
            param_space={
                "model": tune.grid_search(["mine_a", "mine_b", "mine_c"]),
                "lr": tune.loguniform(1e-4, 1e-1),
                "wd": tune.loguniform(1e-4, 1e-1),
            },
            tune_config=tune.TuneConfig(num_samples=2),
            run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), verbose=0),
        ).fit()
    finally:
        ray.shutdown()
    assert len(grid) == 6 and len(grid.errors) == 2
    rows = from_tune(grid, error="val_err", model="config/model", optimizer="adamw")  # no train loss mapped
    assert sorted(rows["model"]) == ["mine_a", "mine_a", "mine_b", "mine_b", "mine_c", "mine_c"]
    broke = rows["model"] == "mine_c"  # reported, then failed: failed, with Tune's error text
    assert (rows.loc[broke, "status"] == "failed").all() and rows.loc[broke, "top1_err"].isna().all()
    assert rows.loc[broke, "error"].str.contains("mine_c broke after its first report").all()
    ok = rows[~broke]
    assert (ok["status"] == "ok").all() and ok["error"].isna().all()
    np.testing.assert_allclose(ok["top1_err"], [_bowl(*r) for r in ok[["lr", "wd", "model"]].itertuples(index=False)])
    page = table_report(rows, str(tmp_path / "report"))
    record = json.load(open(os.path.join(os.path.dirname(page), "report.json")))
    assert record["study"] == "tune" and record["n_failed"] == 2 and record["n_finished"] == 4
    assert {row["model"] for row in record["tables"]["summary"]} == {"mine_a", "mine_b", "mine_c"}
    assert os.path.isfile(tmp_path / "report" / "delta_edf_adamw_1ep.svg")
    # two families (each unknown model its own) and no train losses: no generalization figure
    assert not os.path.exists(tmp_path / "report" / "generalization.svg") and "mine_b" in open(page).read()
