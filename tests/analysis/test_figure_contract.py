"""Every figure is a pair (analysis/figures.py): `<name>_table(trials, ..., metric)` computes the numbers
it plots, `<name>_figure(table, ...)` draws them from that table only. The tables are checked against
plain pandas on a small hand-made study; the renderers against an edited table."""

import inspect
from math import comb

import numpy as np
import pandas as pd
import pytest

from hpstudy.analysis import figures
from hpstudy.analysis.figures import (
    delta_edf_figure,
    delta_edf_table,
    delta_error_vs_epochs_figure,
    delta_error_vs_epochs_table,
    error_vs_epochs_figure,
    error_vs_epochs_table,
    expected_best_figure,
    expected_best_table,
    generalization_figure,
    generalization_table,
    hp_scatter_figure,
    hp_scatter_table,
)
from hpstudy.analysis.metric import LeftOutWarning

CELL = ["model", "optimizer", "epochs"]
pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")  # the failed trial


def _study() -> pd.DataFrame:
    """Two models of two families, AdamW and SGD, 5 and 10 epochs, 4 trials a cell with distinct errors;
    the last AdamW trial of each cell diverged, one trial failed, and every cnn_tiny SGD run at 5 epochs
    diverged."""
    rows = []
    for m, (model, family) in enumerate([("vit_c_tiny", "vit_c"), ("cnn_tiny", "cnn")]):
        for o, opt in enumerate(["adamw", "sgd"]):
            for epochs in (5, 10):
                for i in range(4):
                    diverged = (opt == "adamw" and i == 3) or (model, opt, epochs) == ("cnn_tiny", "sgd", 5)
                    failed = (model, opt, epochs, i) == ("vit_c_tiny", "sgd", 10, 1)
                    err = np.nan if failed else 90.0 if diverged else 10 + 3 * m + 2 * o + 20 / epochs + 1.7 * i**1.5
                    rows.append(
                        {
                            "study": "s",
                            "trial_key": f"{model}-{opt}-{epochs}-{i}",
                            "model": model,
                            "family": family,
                            "optimizer": opt,
                            "epochs": epochs,
                            "lr": 10 ** (-3 + 0.5 * i),
                            "wd": 10 ** (-2 + 0.3 * i),
                            "seed": i,
                            "status": "failed" if failed else "diverged" if diverged else "ok",
                            "top1_err": err,
                            "train_loss": np.nan if failed or diverged else err / 20,
                        }
                    )
    return pd.DataFrame(rows)


STUDY = _study()
COUNTED = STUDY[STUDY["status"] != "failed"]  # the metric `final` is top1_err, finite where not failed
ADAMW_10 = STUDY[(STUDY["optimizer"] == "adamw") & (STUDY["epochs"] == 10)]

# figure name: (its table of the study, its renderer with the options the report gives, a column it draws)
FIGURES = {
    "delta_edf": (lambda: delta_edf_table(ADAMW_10, "final"), delta_edf_figure, "delta"),
    "hp_scatter": (
        lambda: hp_scatter_table(STUDY, "final"),
        lambda table, **kw: hp_scatter_figure(table, {}, **kw),
        "error",
    ),
    "error_vs_epochs": (lambda: error_vs_epochs_table(STUDY, "final"), error_vs_epochs_figure, "error"),
    "delta_error_vs_epochs": (lambda: delta_error_vs_epochs_table(STUDY, "final"), delta_error_vs_epochs_figure, "gap"),
    "expected_best": (lambda: expected_best_table(STUDY, "final", n_boot=20), expected_best_figure, "expected_best"),
    "generalization": (lambda: generalization_table(STUDY, "final"), generalization_figure, "error"),
}


def _pairs():
    """{name: (table function, renderer)} of every `<name>_table` analysis/figures.py defines."""
    tables = {
        name[: -len("_table")]: fn
        for name, fn in vars(figures).items()
        if name.endswith("_table") and callable(fn) and fn.__module__ == figures.__name__
    }
    return {name: (fn, getattr(figures, f"{name}_figure")) for name, fn in tables.items()}


def test_every_figure_is_a_table_function_and_a_renderer_of_that_table():
    pairs = _pairs()
    assert set(pairs) == set(FIGURES)
    for name, (table, figure) in pairs.items():
        computes, draws = inspect.signature(table).parameters, inspect.signature(figure).parameters
        assert list(computes)[0] == "trials" and "metric" in computes, name
        assert list(draws)[0] == "table" and not {"trials", "metric"} & set(draws), name


def _drawn(fig) -> np.ndarray:
    """Every number a figure draws: its lines' points, its markers' positions, its filled areas' outlines."""
    collections = [c for ax in fig.axes for c in ax.collections]
    arrays = (
        [line.get_xydata() for ax in fig.axes for line in ax.get_lines()]
        + [c.get_offsets() for c in collections]
        + [p.vertices for c in collections for p in c.get_paths()]
    )
    return np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays])


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_a_renderer_draws_the_numbers_and_the_metric_of_its_table(name):
    make, figure, column = FIGURES[name]
    table = make()
    edited = table.copy()
    edited.loc[edited.index[0], column] += 0.0123
    new = edited[column].iloc[0]
    assert not np.isclose(_drawn(figure(table)), new).any()
    assert np.isclose(_drawn(figure(edited)), new).any()
    assert figure(table.assign(metric="as the table says")).fig.get_suptitle().endswith("metric: as the table says")


def _sorted(frame: pd.DataFrame, by) -> pd.DataFrame:
    return frame.sort_values(by).reset_index(drop=True)


def test_delta_edf_table_is_each_model_s_edf_of_its_distance_to_its_best():
    table = delta_edf_table(ADAMW_10, "final")
    for model, group in ADAMW_10.groupby("model"):
        errors = np.sort(group["top1_err"].to_numpy())
        n = len(errors)
        got = table[table["model"] == model]
        np.testing.assert_allclose(got["delta"], errors - errors.min())
        np.testing.assert_allclose(got["F"], [(errors <= e).sum() / n for e in errors])
        assert set(got["n"]) == {n}
        np.testing.assert_allclose(got["dkw_eps"], np.sqrt(np.log(2 / 0.05) / (2 * n)))
    assert set(table["metric"]) == {"final"}


def test_hp_scatter_table_is_every_counted_trial():
    table = hp_scatter_table(STUDY, "final")
    expected = COUNTED[CELL + ["lr", "wd", "top1_err", "status"]].rename(columns={"top1_err": "error"})
    pd.testing.assert_frame_equal(table.drop(columns="metric").reset_index(drop=True), expected.reset_index(drop=True))
    assert set(table["metric"]) == {"final"}


def test_error_vs_epochs_table_is_the_best_trial_per_cell_and_whether_all_diverged():
    table = error_vs_epochs_table(STUDY, "final").set_index(CELL)
    grouped = COUNTED.groupby(CELL)
    pd.testing.assert_series_equal(table["error"], grouped["top1_err"].min(), check_names=False)
    all_diverged = grouped["status"].apply(lambda s: set(s) == {"diverged"})
    assert table["diverged"].to_dict() == all_diverged.to_dict()
    assert table["diverged"].sum() == 1 and table.loc[("cnn_tiny", "sgd", 5), "diverged"]


def test_delta_error_vs_epochs_table_is_the_best_at_e_minus_the_best_at_the_longest():
    table = delta_error_vs_epochs_table(STUDY, "final").set_index(CELL)
    best = COUNTED.groupby(CELL)["top1_err"].min()
    np.testing.assert_allclose(table["gap"].sort_index(), (best - best.xs(10, level="epochs")).sort_index())


def test_expected_best_table_is_the_mean_best_of_k_trials_drawn_without_replacement():
    table = expected_best_table(STUDY, "final", n_boot=20)
    for (model, opt), group in COUNTED.groupby(["model", "optimizer"]):
        errors = np.sort(group["top1_err"].to_numpy())  # best first: the j-th best is the minimum of k
        n = len(errors)  # draws when the other k - 1 are among the n - j worse
        expected = [sum(e * comb(n - j, k - 1) for j, e in enumerate(errors, 1)) / comb(n, k) for k in range(1, n + 1)]
        got = _sorted(table[(table["model"] == model) & (table["optimizer"] == opt)], "k")
        assert got["k"].tolist() == list(range(1, n + 1))
        np.testing.assert_allclose(got["expected_best"], expected)
        assert got["expected_best"].iloc[0] == pytest.approx(errors.mean())
        assert got["expected_best"].iloc[-1] == pytest.approx(errors.min())
        assert (got["lo"] <= got["hi"]).all()


def test_generalization_table_is_every_trained_trial_with_its_model_s_medians():
    with pytest.warns(LeftOutWarning, match="generalization_table: left out 8 of 31 counted rows"):
        table = generalization_table(STUDY, "final")
    trained = STUDY[STUDY["status"] == "ok"]
    assert len(table) == len(trained) and set(table["n_left_out"]) == {len(STUDY) - len(trained)}
    np.testing.assert_allclose(table[["train_loss", "error"]], trained[["train_loss", "top1_err"]])
    for (opt, epochs, model), group in trained.groupby(["optimizer", "epochs", "model"]):
        got = table[(table["optimizer"] == opt) & (table["epochs"] == epochs) & (table["model"] == model)]
        assert set(got["median_error"]) == {np.median(group["top1_err"])}
        assert set(got["median_train_loss"]) == {np.median(group["train_loss"])}
