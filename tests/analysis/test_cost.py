"""Budgets in hours (hpstudy.analysis.cost, expected_best_figure(budget="hours")): a trial costs its worker's
wall time, a fused group's shared among its members so that no hour is counted twice or lost; the expected
best's `hours` is k times a cell's mean cost; the report draws the expected best at equal compute only where
every trial has a wall time."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis.cost import trial_hours
from hpstudy.analysis.metric import usable
from tests.helpers import make_trials

pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")

# groups as a study stores them: (node, members K: 1 alone or a fused group, seconds of the group's wall time)
groups = st.lists(
    st.tuples(st.sampled_from(["n0", "n1"]), st.integers(1, 8), st.floats(1, 1e5, allow_nan=False)),
    min_size=1,
    max_size=12,
    unique_by=lambda g: g[2],  # two groups never end with the same float wall time
)


@settings(max_examples=100, deadline=None)
@given(groups, st.randoms(use_true_random=False))
def test_a_fused_groups_wall_time_is_shared_among_its_members_and_no_hour_is_lost(stored, rnd):
    rows = [
        {"node": node, "model": "m", "optimizer": "adamw", "epochs": 4, "wall_s": wall, "group": i}
        for i, (node, k, wall) in enumerate(stored)
        for _ in range(k)
    ]
    rnd.shuffle(rows)  # rows of a group need not be neighbours
    frame = pd.DataFrame(rows)
    hours = trial_hours(frame)
    sizes = frame.groupby("group")["group"].transform("size")
    np.testing.assert_allclose(hours, frame["wall_s"] / sizes / 3600)
    assert hours.sum() == pytest.approx(sum(wall for _, _, wall in stored) / 3600)


def test_a_trial_without_a_wall_time_costs_nothing_known():
    frame = pd.DataFrame({"wall_s": [3600.0, np.nan, 7200.0]})
    assert trial_hours(frame).tolist()[::2] == [1.0, 2.0] and np.isnan(trial_hours(frame).iloc[1])
    assert trial_hours(frame.drop(columns="wall_s")).isna().all()
    named = [trial_hours(f).name for f in (frame, frame.drop(columns="wall_s"), frame.assign(node="n0"))]
    assert named == ["hours"] * 3  # one column name whichever way the hours were found


def test_equal_wall_times_are_one_group_only_within_a_cell_on_a_node_of_a_store():
    """Rounded or generated wall times repeat: without a node (not a store's rows) nothing is shared, and two
    cells' or nodes' rows never form one group."""
    frame = pd.DataFrame({"wall_s": [60.0] * 4, "model": ["a", "a", "b", "b"], "optimizer": "adamw", "epochs": 4})
    assert trial_hours(frame).tolist() == [60 / 3600] * 4
    on_nodes = frame.assign(node=["n0", "n0", "n0", "n1"])
    assert trial_hours(on_nodes).tolist() == [30 / 3600, 30 / 3600, 60 / 3600, 60 / 3600]


def test_the_expected_bests_hours_are_k_times_the_cells_mean_cost_of_a_counted_trial():
    from hpstudy.analysis.figures import expected_best_table

    trials = make_trials(["vit_c_tiny", "cnn_tiny"], ["adamw"], epochs=(4, 8), n=6, seed=4, fail_share=0.2)
    trials["wall_s"] = np.random.default_rng(0).uniform(10, 100, len(trials))
    table = expected_best_table(trials, "final", n_boot=20)
    counted = trials[trials["status"] != "failed"]
    for (model, opt, epochs), curve in table.groupby(["model", "optimizer", "epochs"]):
        walls = counted[(counted["model"] == model) & (counted["epochs"] == epochs)]["wall_s"]
        np.testing.assert_allclose(curve["hours"], curve["k"] * walls.mean() / 3600)


def test_a_fused_member_left_out_still_shares_its_groups_wall_time():
    """A group of 4 fused trials (one wall time on one node) whose last member failed: the 3 counted ones cost
    a quarter of the group's wall time each, not a third."""
    from hpstudy.analysis.figures import expected_best_table

    trials = make_trials(["cnn_tiny"], ["adamw"], epochs=(4,), n=4, seed=4, diverge_share=0.0)
    trials = trials.assign(wall_s=7200.0, node="n0")  # one group: one wall time in one cell on one node
    trials.loc[trials.index[-1], ["status", "top1_err"]] = ["failed", np.nan]
    table = expected_best_table(trials, "final", n_boot=20)
    np.testing.assert_allclose(table["hours"], table["k"] * 0.5)


def test_the_hours_figure_draws_its_tables_hours_and_refuses_a_table_that_cannot_be_costed():
    from hpstudy.analysis.figures import expected_best_figure, expected_best_table

    trials = make_trials(["vit_c_tiny", "cnn_tiny"], ["adamw"], epochs=(8,), n=6, seed=4)
    trials["wall_s"] = np.random.default_rng(1).uniform(10, 100, len(trials))  # every model's cost its own
    table = expected_best_table(trials, "final", n_boot=20)
    edited = table.copy()
    edited.loc[edited.index[0], "hours"] *= 1.37
    lines = expected_best_figure(edited, budget="hours").fig.axes[0].get_lines()
    drawn = np.concatenate([line.get_xdata() for line in lines])
    assert np.isclose(drawn, edited["hours"].iloc[0]).any() and not np.isclose(drawn, table["hours"].iloc[0]).any()
    assert "hours k random trials take" in expected_best_figure(table, budget="hours").caption
    with pytest.raises(ValueError, match="budget: bad value 'gpus'; allowed: trials, hours"):
        expected_best_figure(table, budget="gpus")
    with pytest.raises(ValueError, match="budget: bad value 'hours' for this table; allowed: 'trials'"):
        expected_best_figure(table.assign(hours=np.nan), budget="hours")


@pytest.mark.parametrize("walls, models", [(True, 2), (False, 2), (True, 1)])
def test_the_report_compares_models_at_equal_compute_only_where_every_trial_has_a_wall_time(walls, models):
    from hpstudy.analysis.report_figures import Study, planned_figures

    trials = make_trials(["vit_c_tiny", "cnn_tiny"][:models], ["adamw", "sgd"], epochs=(4,), n=6, seed=2)
    trials = trials.assign(family=trials["model"]) if walls else trials.drop(columns="wall_s").assign(family="x")
    planned = planned_figures(Study(trials, usable(trials, "final"), {}, "final", ("lr", "wd"), None))
    hours = [p for p in planned if p.name == "expected_best_hours"]
    assert len(hours) == (walls and models > 1)  # one model: only the expected best's axis rescaled
    if hours:
        (figure,) = hours
        assert figure.section == "sampled" and figure.cell is None
        cells = {f"{m}/{o}/4" for m in ("vit_c_tiny", "cnn_tiny") for o in ("adamw", "sgd")}
        assert set(figure.meta["hours_per_trial"]) == cells
