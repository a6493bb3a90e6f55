"""Never pooled across cells: good ranges, importance, the scatter, the expected best and `suggest`'s fixed
points are per (optimizer, epochs) cell, per model within it, each with its n (issue #38)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpstudy.analysis.report_page import ranges_table
from hpstudy.analysis.stats import good_ranges
from hpstudy.study.suggest import fixed_points, space_lines
from tests.helpers import stored_row

CELL = ["model", "optimizer", "epochs"]


def bowl_rows(model: str, optimizer: str, epochs: int, best_log_lr: float, n: int, seed: int) -> list:
    """n ok trials of one cell (stored_row) whose error is a bowl in log10 lr around `best_log_lr`, lr on an
    even grid over [-5, -1] (shuffled), wd log-uniform and unrelated to the error."""
    rng = np.random.default_rng(seed)
    log_lr = rng.permutation(np.linspace(-5, -1, n))
    log_wd = rng.uniform(-5, -3, n)
    err = 10 + 6 * (log_lr - best_log_lr) ** 2 + rng.uniform(0, 0.1, n)
    return [
        stored_row(
            trial_key=f"{model}-{optimizer}-{epochs}-{i}",
            study="s",
            model=model,
            family=model.rsplit("_", 1)[0],
            optimizer=optimizer,
            epochs=epochs,
            lr=10 ** log_lr[i],
            wd=10 ** log_wd[i],
            seed=i,
            status="ok",
            top1_err=float(err[i]),
        )
        for i in range(n)
    ]


def study(cells, n: int = 16, seed: int = 0) -> pd.DataFrame:
    """The trials of the (model, optimizer, epochs, best log10 lr) cells, n each."""
    rows = [r for i, (m, o, e, b) in enumerate(cells) for r in bowl_rows(m, o, e, b, n, seed + i)]
    return pd.DataFrame(rows)


def _range(ranges: pd.DataFrame) -> tuple:
    return float(ranges.loc["p2.5", "log10_lr"]), float(ranges.loc["p97.5", "log10_lr"])


@settings(max_examples=3)
@given(
    short=st.sampled_from([-1.75, -2.0]),
    gap=st.sampled_from([2.5, 3.0]),
    lengths=st.sampled_from([(6, 16), (2, 5)]),
)
def test_two_lengths_whose_best_lr_differs_get_disjoint_good_ranges_that_pooling_would_blend(short, gap, lengths):
    """The short schedule's best lr lies `gap` decades above the long one's: each length's good lr range holds
    its own best and not the other's, and the range of the trials pooled over both lengths is neither."""
    from hpstudy.analysis.report import ranges_and_importance

    short_e, long_e = lengths
    trials = study([("cnn_tiny", "adamw", short_e, short), ("cnn_tiny", "adamw", long_e, short - gap)], n=32)
    table, ranges = ranges_and_importance(trials, "final")
    assert set(ranges) == {("cnn_tiny", "adamw", short_e), ("cnn_tiny", "adamw", long_e)}
    lo_s, hi_s = _range(ranges[("cnn_tiny", "adamw", short_e)])
    lo_l, hi_l = _range(ranges[("cnn_tiny", "adamw", long_e)])
    assert hi_l < lo_s  # disjoint: the long schedule's whole range lies below the short one's
    assert lo_s <= short <= hi_s and lo_l <= short - gap <= hi_l
    pooled = _range(good_ranges(trials, "final"))
    assert pooled not in ((lo_s, hi_s), (lo_l, hi_l))
    assert set(table["n"]) == {32}  # each cell's own trials, not the 64 of both
    points = fixed_points(trials, good_ranges, "final")
    assert [(p["epochs"], p["n"]) for p in points] == [(short_e, 32), (long_e, 32)]
    lr = {p["epochs"]: np.log10(p["lr"]) for p in points}
    assert lr[short_e] > lr[long_e] + 1


def test_every_table_states_n_per_cell():
    from hpstudy.analysis.figures import expected_best_table, hp_scatter_table
    from hpstudy.analysis.report import ranges_and_importance, summary_table

    trials = study([("cnn_tiny", "adamw", 6, -2), ("cnn_tiny", "adamw", 16, -4), ("vit_p_tiny", "sgd", 6, -3)], n=10)
    trials = trials.iloc[:-3]  # vit_p_tiny's cell has 7 trials: below the 8 good ranges need
    counts = trials.groupby(CELL).size()
    ranges, _ = ranges_and_importance(trials, "final")
    best = expected_best_table(trials, "final", n_boot=20)
    scatter = hp_scatter_table(trials, "final")
    summary = summary_table(trials, "final")
    for name, table in {
        "good_ranges": ranges,
        "expected_best": best,
        "hp_scatter": scatter,
        "summary": summary,
    }.items():
        stated = table.groupby(CELL)["n"].agg(["min", "max"])
        assert (stated["min"] == stated["max"]).all(), name
        assert (stated["max"] == counts.loc[stated.index]).all(), name
    assert set(ranges.groupby(CELL).groups) == {("cnn_tiny", "adamw", 6), ("cnn_tiny", "adamw", 16)}
    page = ranges_table(ranges)
    assert page[["model, cell", "trials"]].values.tolist() == [
        ["CNN tiny, AdamW, 6 ep", 10],
        ["CNN tiny, AdamW, 16 ep", 10],
    ]


# unbalanced designs: any 1-4 (model, optimizer, epochs) cells, each with its own best lr
designs = st.lists(
    st.tuples(st.sampled_from(["cnn_tiny", "vit_p_tiny"]), st.sampled_from(["adamw", "sgd"]), st.integers(1, 40)),
    min_size=1,
    max_size=4,
    unique=True,
)


@settings(max_examples=4)
@given(keys=designs, n=st.integers(8, 10), seed=st.integers(0, 2**16))
def test_no_output_row_mixes_two_epochs_values_and_each_is_its_cells_own_numbers(keys, n, seed):
    """Over generated designs: every row of every per-cell table carries one cell, its n is that cell's, and
    its numbers are those of that cell alone (recomputed on it); the scatter refuses a table of two cells;
    `suggest` gives a point per cell and a `space:` block per length."""
    from hpstudy.analysis.figures import expected_best_table, hp_scatter_figure, hp_scatter_table
    from hpstudy.analysis.report import ranges_and_importance

    rng = np.random.default_rng(seed)
    trials = study([(*key, rng.uniform(-4, -2)) for key in keys], n=n, seed=seed)
    ranges, by_cell = ranges_and_importance(trials, "final")
    best = expected_best_table(trials, "final", n_boot=10)
    scatter = hp_scatter_table(trials, "final")
    for key, alone in trials.groupby(CELL):
        own = good_ranges(alone, "final")
        pd.testing.assert_frame_equal(by_cell[key], own)
        rows = ranges[(ranges[CELL] == list(key)).all(axis=1)].set_index("percentile")
        np.testing.assert_allclose(rows.loc[own.index, "log10_lr"], own["log10_lr"])
        curve = best[(best[CELL] == list(key)).all(axis=1)]
        assert curve["k"].tolist() == list(range(1, len(alone) + 1)) and set(curve["n"]) == {len(alone)}
        assert curve["expected_best"].iloc[-1] == pytest.approx(alone["top1_err"].min())
        assert len(scatter[(scatter[CELL] == list(key)).all(axis=1)]) == len(alone)
    points = fixed_points(trials, good_ranges, "final")
    assert sorted((p["model"], p["optimizer"], p["epochs"]) for p in points) == sorted(keys)
    lines = space_lines(points, "s", "store")
    lengths = len({e for _, _, e in keys})
    assert lines.count("---") == (lengths if lengths > 1 else 0) and lines.count("space:") == lengths
    assert any("never pooled; one block (YAML document) per length" in line for line in lines) == (lengths > 1)
    if trials.groupby(["optimizer", "epochs"]).ngroups > 1:
        with pytest.raises(ValueError, match=r"^hp_scatter_figure: table: bad value, \d+ \(optimizer, epochs\) cells"):
            hp_scatter_figure(scatter, {})


@pytest.mark.parametrize(
    "opt,epochs,name", [("adamw", 10, "hp_scatter_adamw_10ep"), ("sgd", 6.0, "hp_scatter_sgd_6ep")]
)
def test_a_cells_figure_is_named_by_its_optimizer_and_length(opt, epochs, name):
    from hpstudy.analysis.figures import cell_name

    assert cell_name("hp_scatter", opt, epochs) == name
