"""The best trials' learning curves (figures.best_curves_table / _figure, pycls's plot_curves for a cell's best
few): under every metric the table holds each cell's lowest-error trials (as pandas ranks them) with their
stored epochs on the error the metric is about, never pools cells, and the report draws one per sampled cell
whose trials have epochs."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis.metric import METRIC_COLUMNS, usable
from tests.helpers import epochs_of, make_trials

pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")


def _paper(trials: pd.DataFrame) -> pd.Series:
    """pycls's min top-1: the EMA best where EMA ran, else the raw best."""
    ema = trials["best_ema_top1_err"] if "best_ema_top1_err" in trials else pd.Series(np.nan, trials.index)
    return ema.fillna(trials["best_top1_err"])


@settings(max_examples=25, deadline=None)
@given(
    metric=st.sampled_from(["final", "best", "ema_best", "paper"]),
    best=st.integers(1, 7),
    seed=st.integers(0, 1000),
    ema=st.booleans(),
)
def test_each_cell_shows_its_lowest_error_trials_with_every_stored_epoch_on_the_metrics_weights(
    metric, best, seed, ema
):
    from hpstudy.analysis.figures import best_curves_table

    ema = ema or metric == "ema_best"  # ema_best has no trial without EMA
    models, optimizers = ["vit_p_tiny", "cnn_tiny"], ["adamw", "sgd"]
    trials = make_trials(models, optimizers, (3, 5), 6, seed, diverge_share=0.2, fail_share=0.1, ema=ema)
    epochs = epochs_of(trials)
    table = best_curves_table(trials, metric, epochs=epochs, best=best)
    value = _paper(trials) if metric == "paper" else trials[METRIC_COLUMNS[metric]]
    ended = trials.assign(value=value)[(trials["status"] != "failed") & np.isfinite(value)]
    for cell, group in ended.groupby(["model", "optimizer", "epochs"]):
        want = group.sort_values(["value", "trial_key"]).head(best)
        got = table[(table[["model", "optimizer", "epochs"]] == list(cell)).all(axis=1)]
        assert got.groupby("rank")["trial_key"].first().tolist() == want["trial_key"].tolist()
        assert set(got["n"]) == {len(group)} and set(got["final"]) <= set(want["value"])
        for key, curve in got.groupby("trial_key"):
            stored = epochs[epochs["trial_key"] == key].sort_values("epoch")
            on_ema = metric == "ema_best" or (metric == "paper" and stored["ema_top1_err"].notna().all())
            np.testing.assert_allclose(curve["error"], stored["ema_top1_err" if on_ema else "top1_err"])
            assert curve["epoch"].tolist() == stored["epoch"].tolist()
    assert set(table["metric"]) == {usable(trials, metric).metric}


def test_the_figure_draws_one_cell_all_models_in_one_panel_and_refuses_two():
    from hpstudy.analysis.figures import best_curves_figure, best_curves_table

    trials = make_trials(["vit_p_tiny", "vit_c_tiny", "cnn_tiny"], ["adamw"], epochs=(4, 8), n=8, seed=3)
    table = best_curves_table(trials, "final", epochs=epochs_of(trials))
    with pytest.raises(ValueError, match="best_curves_figure: table: bad value, 2 .optimizer, epochs. cells"):
        best_curves_figure(table)
    plot = best_curves_figure(table[table["epochs"] == 8])
    (ax,) = plot.fig.axes
    labelled = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert labelled == ["ViT-P tiny", "ViT-C tiny", "CNN tiny"]  # each model once, the best trial's line
    assert len(ax.get_lines()) == 3 * 5 and "of each model's 5 best trials" in plot.caption


def test_the_report_draws_best_curves_per_sampled_cell_only_when_epochs_are_stored():
    from hpstudy.analysis.report_figures import Study, planned_figures

    trials = make_trials(["vit_c_tiny", "cnn_tiny"], ["adamw", "sgd"], epochs=(4, 8), n=6, seed=2)
    trials = trials.assign(family=trials["model"])
    rows = usable(trials, "final")
    with_epochs = planned_figures(Study(trials, rows, {}, "final", ("lr", "wd"), None, epochs_of(trials)))
    curves = {p.name: p for p in with_epochs if p.name.startswith("best_curves")}
    assert set(curves) == {f"best_curves_{o}_{e}ep" for o in ("adamw", "sgd") for e in (4, 8)}
    for p in curves.values():
        assert p.section == "sampled" and set(p.table["optimizer"]) == {p.meta["optimizer"]}
        assert set(p.table["epochs"]) == {p.meta["epochs"]} and p.cell == (p.meta["optimizer"], p.meta["epochs"])
    without = planned_figures(Study(trials, rows, {}, "final", ("lr", "wd"), None))
    assert not [p for p in without if p.name.startswith("best_curves")]
