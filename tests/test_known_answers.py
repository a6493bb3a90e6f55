"""Analysis functions on hand-made tables whose right answer is known and written out here: groups
with different minima and sizes, a clear-cut optimizer gap, E_max runs that did not diverge, good
ranges whose bootstrap law is known in closed form."""

import math

import numpy as np
import pandas as pd
import pytest

from analysis.edf import edf_table
from analysis.gaps import length_gap, optimizer_gap
from analysis.stats import good_ranges

LN_40 = math.log(40.0)      # ln(2 / alpha) at alpha = 0.05


def _frame(rows, columns):
    return pd.DataFrame([dict(zip(columns, r)) for r in rows])


# two models of different sizes and minima; b has a diverged trial (at chance), a a failed one
GROUPS = _frame([("a", "ok", 9.0), ("a", "ok", 5.0), ("a", "ok", 7.0), ("a", "failed", None),
                 ("b", "ok", 14.0), ("b", "diverged", 90.0), ("b", "ok", 10.0), ("b", "ok", 11.0)],
                ["model", "status", "top1_err"]).assign(optimizer="adamw", epochs=10)


def _by_model(table):
    return {m: g.reset_index(drop=True) for m, g in table.groupby("model")}


def test_edf_table_deltas_are_from_each_groups_own_minimum():
    with pytest.warns(UserWarning, match="left out 1 of 8 rows: 1 failed"):
        groups = _by_model(edf_table(GROUPS, metric="final"))
    assert groups["a"]["error"].tolist() == [5.0, 7.0, 9.0]
    assert groups["a"]["delta"].tolist() == [0.0, 2.0, 4.0] and (groups["a"]["reference"] == 5.0).all()
    assert groups["b"]["error"].tolist() == [10.0, 11.0, 14.0, 90.0]
    assert groups["b"]["delta"].tolist() == [0.0, 1.0, 4.0, 80.0] and (groups["b"]["reference"] == 10.0).all()


def test_edf_table_counts_and_dkw_bands_are_per_group():
    with pytest.warns(UserWarning):
        groups = _by_model(edf_table(GROUPS, metric="final"))
    a, b = groups["a"], groups["b"]
    assert a["F"].tolist() == pytest.approx([1 / 3, 2 / 3, 1.0]) and b["F"].tolist() == [0.25, 0.5, 0.75, 1.0]
    assert (a["n"] == 3).all() and (b["n"] == 4).all()
    assert (a["n_left_out"] == 1).all() and (b["n_left_out"] == 0).all()
    assert (a["diverged_share"] == 0.0).all() and (b["diverged_share"] == 0.25).all()
    # DKW: sqrt(ln(2 / alpha) / (2 n)) with the group's own n
    assert a["dkw_eps"].tolist() == pytest.approx([math.sqrt(LN_40 / 6)] * 3)
    assert b["dkw_eps"].tolist() == pytest.approx([math.sqrt(LN_40 / 8)] * 4)
    with pytest.warns(UserWarning):
        wide = _by_model(edf_table(GROUPS, metric="final", alpha=0.2))
    assert wide["b"]["dkw_eps"].iloc[0] == pytest.approx(math.sqrt(math.log(10.0) / 8))


def test_edf_table_ties_take_the_top_of_the_step_and_groups_can_be_pairs():
    frame = _frame([("a", "adamw", 3.0), ("a", "adamw", 2.0), ("a", "adamw", 2.0), ("a", "sgd", 8.0),
                    ("a", "sgd", 6.0)], ["model", "optimizer", "top1_err"]).assign(status="ok")
    table = edf_table(frame, by=["model", "optimizer"], metric="final")
    assert table[["optimizer", "error", "F", "n"]].values.tolist() == [
        ["adamw", 2.0, 2 / 3, 3], ["adamw", 2.0, 2 / 3, 3], ["adamw", 3.0, 1.0, 3],
        ["sgd", 6.0, 0.5, 2], ["sgd", 8.0, 1.0, 2]]
    assert table["delta"].tolist() == [0.0, 0.0, 1.0, 0.0, 2.0]


def test_edf_table_matched_reference_is_the_best_of_the_matched_rows():
    frame = _frame([("p", "small", 12.0), ("p", "small", 15.0), ("c", "small", 10.0), ("c", "small", 11.0),
                    ("p", "large", 8.0), ("c", "large", 9.0)], ["model", "size", "top1_err"]).assign(status="ok")
    table = edf_table(frame, metric="final", reference="matched", match=["size"])
    small = table["error"] >= 10
    assert (table.loc[small, "reference"] == 10.0).all() and (table.loc[~small, "reference"] == 8.0).all()
    assert sorted(table["delta"]) == [0.0, 0.0, 1.0, 1.0, 2.0, 5.0]
    assert (table["reference_kind"] == "best of the group matched on size").all()
    fixed = edf_table(frame, metric="final", reference=7.5)
    assert sorted(fixed["delta"]) == [0.5, 1.5, 2.5, 3.5, 4.5, 7.5]
    assert (fixed["reference_kind"] == "fixed reference 7.5").all()
    with pytest.raises(ValueError, match="reference='matched' needs `match` columns"):
        edf_table(frame, metric="final", reference="matched")
    with pytest.raises(ValueError, match=r"reference runs missing for groups \[\('p',\)\]"):
        edf_table(frame, metric="final", reference={("c",): 1.0})
    with pytest.raises(ValueError, match="reference: bad value 'max'"):
        edf_table(frame, metric="final", reference="max")


# a clear-cut gap: SGD's best is 10 points above AdamW's in model m, 2 below in model n
GAP = _frame([("m", "sgd", e) for e in (30.0, 31.0, 32.0, 33.0)] + [("m", "adamw", e) for e in (20.0, 24.0, 25.0, 29.0)]
             + [("n", "sgd", e) for e in (40.0, 41.0, 45.0)] + [("n", "adamw", e) for e in (42.0, 43.0)],
             ["model", "optimizer", "top1_err"]).assign(status="ok", epochs=10)


def test_optimizer_gap_is_sgd_minus_adamw_with_its_own_ci():
    gap = optimizer_gap(GAP, metric="final", n_boot=2000).set_index("model")
    assert gap.loc["m", ["best_sgd", "best_adamw", "gap"]].tolist() == [30.0, 20.0, 10.0]
    assert gap.loc["n", ["best_sgd", "best_adamw", "gap"]].tolist() == [40.0, 42.0, -2.0]
    # every bootstrap difference of minima lies in [min sgd - max adamw, max sgd - min adamw]
    assert 30 - 29 <= gap.loc["m", "gap_lo"] <= 10.0 <= gap.loc["m", "gap_hi"] <= 33 - 20
    assert 40 - 43 <= gap.loc["n", "gap_lo"] <= -2.0 <= gap.loc["n", "gap_hi"] <= 45 - 42
    assert gap.loc["m", "gap_lo"] > 0      # clear-cut: every resampled SGD best is worse
    assert gap.loc["m", ["n_sgd", "n_adamw", "budget_k"]].tolist() == [4, 4, 4]
    assert gap.loc["n", ["n_sgd", "n_adamw", "budget_k"]].tolist() == [3, 2, 2]


def test_optimizer_gap_at_an_equal_budget_is_the_expected_best_of_k():
    gap = optimizer_gap(GAP[GAP["model"] == "m"], metric="final", n_boot=10, budget=2).iloc[0]
    # best of 2 of 4 drawn without replacement: the i-th best wins in (4 - i) of the 6 pairs
    sgd, adamw = (30 * 3 + 31 * 2 + 32) / 6, (20 * 3 + 24 * 2 + 25) / 6
    assert gap["budget_k"] == 2 and gap["gap_at_k"] == pytest.approx(sgd - adamw) == pytest.approx(8.5)
    one = optimizer_gap(GAP[GAP["model"] == "m"], metric="final", n_boot=10, budget=1).iloc[0]
    assert one["gap_at_k"] == pytest.approx(np.mean([30, 31, 32, 33]) - np.mean([20, 24, 25, 29]))


def test_optimizer_gap_skips_a_cell_without_both_optimizers():
    gap = optimizer_gap(GAP[~((GAP["model"] == "n") & (GAP["optimizer"] == "adamw"))], metric="final", n_boot=10)
    assert gap["model"].tolist() == ["m"]


# E_max = 200 epochs did not diverge and is worse than 100 epochs: the reference is still E_max's best
LENGTHS = _frame([("m", 50, "ok", 21.0), ("m", 50, "ok", 20.0), ("m", 100, "ok", 18.0), ("m", 100, "diverged", 90.0),
                  ("m", 200, "ok", 19.0), ("m", 200, "diverged", 90.0),
                  ("n", 50, "ok", 30.0), ("n", 200, "ok", 26.0), ("n", 200, "ok", 27.0)],
                 ["model", "epochs", "status", "top1_err"]).assign(optimizer="adamw")


def test_length_gap_is_measured_from_the_longest_schedules_best():
    table = length_gap(LENGTHS, metric="final").set_index(["model", "epochs"])
    assert table["reference"].to_dict() == {("m", 50): 19.0, ("m", 100): 19.0, ("m", 200): 19.0,
                                            ("n", 50): 26.0, ("n", 200): 26.0}
    assert table["error"].to_dict() == {("m", 50): 20.0, ("m", 100): 18.0, ("m", 200): 19.0,
                                        ("n", 50): 30.0, ("n", 200): 26.0}
    assert table["gap"].to_dict() == {("m", 50): 1.0, ("m", 100): -1.0, ("m", 200): 0.0,
                                      ("n", 50): 4.0, ("n", 200): 0.0}
    assert (table["reference_epochs"] == 200).all() and not table["reference_fallback"].any()
    assert not table["diverged"].any()     # some runs diverged at 100 and 200, not all


def test_length_gap_falls_back_to_the_best_shorter_schedule_when_every_e_max_run_diverged():
    frame = pd.concat([LENGTHS[LENGTHS["model"] == "m"],
                       _frame([("m", 400, "diverged", 90.0)] * 2, ["model", "epochs", "status", "top1_err"])
                       .assign(optimizer="adamw")])
    table = length_gap(frame, metric="final").set_index("epochs")
    assert table["reference_fallback"].all() and (table["reference_epochs"] == 100).all()
    assert (table["reference"] == 18.0).all()
    assert table["gap"].to_dict() == {50: 2.0, 100: 0.0, 200: 1.0, 400: 72.0}
    assert table["diverged"].to_dict() == {50: False, 100: False, 200: False, 400: True}


def _ranked_trials(n):
    """n trials, the i-th best (i = 1..n) with log10 lr = -i and log10 wd = -2 i."""
    rank = np.arange(1, n + 1)
    return pd.DataFrame({"status": "ok", "top1_err": 10.0 + rank, "lr": 10.0 ** -rank, "wd": 10.0 ** (-2 * rank)})


def _winner_quantile(n, size, q):
    """The q-quantile of the winning rank when the best of `size` trials drawn with replacement
    from n wins: P(rank <= r) = 1 - ((n - r) / n) ** size."""
    return next(r for r in range(1, n + 1) if 1 - ((n - r) / n) ** size >= q)


def test_good_ranges_draw_a_quarter_of_the_trials_and_keep_the_best():
    ranges = good_ranges(_ranked_trials(8), metric="final", n_boot=20000, seed=1)
    assert ranges["sample_size"].iloc[0] == 2 and ranges["n"].iloc[0] == 8
    # log10 lr falls as the rank rises: its 2.5th percentile is the 97.5% quantile of the rank
    for row, q in (("p2.5", 0.975), ("p50", 0.5), ("p97.5", 0.025)):
        rank = _winner_quantile(8, 2, q)
        assert ranges.loc[row, "log10_lr"] == pytest.approx(-rank)
        assert ranges.loc[row, "log10_wd"] == pytest.approx(-2 * rank)
        assert ranges.loc[row, "log10_lr_wd"] == pytest.approx(-3 * rank)
    assert [_winner_quantile(8, 2, q) for q in (0.025, 0.5, 0.975)] == [1, 3, 7]


def test_good_ranges_frac_sets_the_sample_size():
    ranges = good_ranges(_ranked_trials(8), metric="final", n_boot=20000, frac=0.5, seed=2)
    assert ranges["sample_size"].iloc[0] == 4
    assert ranges["log10_lr"].tolist() == pytest.approx([-_winner_quantile(8, 4, q) for q in (0.975, 0.5, 0.025)])
