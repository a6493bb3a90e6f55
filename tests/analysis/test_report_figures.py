"""The report's figure registry (hpstudy.analysis.report_figures): a figure added as one entry is drawn,
saved with its metadata, captioned and placed in its section of the page, and only where its entry says
it applies; the built-in entries give each figure one name and never pool training lengths."""

import json
from typing import TYPE_CHECKING

import pandas as pd
import pytest

from hpstudy.analysis.metric import usable
from tests.helpers import make_trials, svg_only

if TYPE_CHECKING:  # matplotlib: imported by the tests that draw, not when they are collected
    from hpstudy.analysis.figures import Plot


def _two_models(epochs=(6,), optimizers=("adamw",)) -> pd.DataFrame:
    """Six lr/wd trials per model and cell, two model families."""
    trials = make_trials(models=("vit_c_tiny", "cnn_tiny"), optimizers=optimizers, epochs=epochs, n=6, seed=3)
    return trials.assign(family=trials["model"])


def _count_figure(table: pd.DataFrame) -> "Plot":
    import matplotlib.pyplot as plt

    from hpstudy.analysis.figures import Plot

    fig, ax = plt.subplots()
    ax.bar(table["model"], table["n"])
    return Plot(fig, table, f"Trials per model, n = {int(table['n'].sum())}.")


@pytest.mark.parametrize("applies", [True, False])
def test_a_figure_added_as_one_entry_is_drawn_saved_and_placed_only_where_it_applies(tmp_path, monkeypatch, applies):
    import hpstudy.analysis.report as report_module
    from hpstudy.analysis.report import build_report
    from hpstudy.analysis.report_figures import FIGURES, Planned, Study

    def counts(study: Study):
        if applies:
            table = study.rows.kept.groupby("model").size().rename("n").reset_index()
            yield Planned("trial_counts", "models", table, _count_figure, {"aggregate": "count per model"})

    monkeypatch.setattr(report_module, "save_figure", svg_only)
    monkeypatch.setitem(FIGURES, "trial_counts", counts)
    trials = _two_models()
    record = {"n_trials": len(trials), "spec": {"name": "s", "models": ["vit_c_tiny", "cnn_tiny"]}}
    page = open(build_report(trials, trials.iloc[:0], record, str(tmp_path), metric="final")).read()
    saved = tmp_path / "trial_counts.json"
    assert saved.exists() is applies and ("trial_counts" in page) is applies
    if applies:
        meta = json.loads(saved.read_text())
        assert meta["aggregate"] == "count per model" and meta["caption"].startswith("Trials per model, n = ")
        assert meta["metric"] and meta["caption"] in open(tmp_path / "captions.md").read()


def test_a_kind_is_registered_once():
    from hpstudy.analysis.report_figures import register_figure

    with pytest.raises(ValueError, match="'delta_edf' is registered already"):
        register_figure("delta_edf")(lambda study: iter(()))


@pytest.mark.parametrize("epochs", [(6,), (6, 16)])
@pytest.mark.parametrize("optimizers", [("adamw",), ("adamw", "sgd")])
def test_each_figure_has_one_name_and_no_figure_pools_training_lengths(epochs, optimizers):
    from hpstudy.analysis.report_figures import Study, planned_figures

    trials = _two_models(epochs, optimizers)
    rows = usable(trials, "final")
    planned = planned_figures(Study(trials, rows, {}, "final", ("lr", "wd"), None))
    names = [p.name for p in planned]
    assert len(names) == len(set(names))
    per_cell = [p for p in planned if "epochs" in p.meta]
    assert len(per_cell) == 3 * len(epochs) * len(optimizers)  # Δ-EDF, scatter, expected best per cell
    for p in per_cell:
        assert set(p.table["epochs"]) <= {p.meta["epochs"]} and set(p.table["optimizer"]) <= {p.meta["optimizer"]}
    lengths = {p.name for p in planned if p.section == "lengths"}
    several = len(epochs) > 1
    assert lengths == ({"error_vs_epochs", "delta_error_vs_epochs", "best_of_k_lengths"} if several else set())
    # a best-of-k figure per comparison the design holds, in its section; a pair's curve is one cell's k = 1..n
    # (stats.budget_grid: every k up to BUDGET_DENSE, which these cells are below)
    best_of_k = {p.section: p.table for p in planned if p.name.startswith("best_of_k_")}
    held = {"models": True, "optimizers": len(optimizers) > 1, "lengths": several}
    assert set(best_of_k) == {kind for kind, holds in held.items() if holds}
    for kind, table in best_of_k.items():
        assert set(table["compared"]) == {kind}
        for _, curve in table.groupby(["model", "optimizer", "epochs", "a", "b"], dropna=False):
            assert curve["k"].tolist() == list(range(1, min(curve["n_a"].iloc[0], curve["n_b"].iloc[0]) + 1))
