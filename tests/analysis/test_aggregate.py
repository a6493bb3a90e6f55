"""A pair of models across cells (findings.aggregate): the mean probability of improvement against rliable's
formula, its stratified bootstrap interval, the permutation test within cells against every split
enumerated, and the finding's sentence, table and JSON from one object."""

import itertools
import math
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpstudy.analysis.effects import mean_improvement, mean_improvement_interval, probability_of_improvement
from hpstudy.analysis.findings import findings_across, findings_table
from hpstudy.analysis.stratified import cell_p, mean_improvement_test, merged_p, smallest_p

# discrete errors with ties (k of 20 images, as a small validation set gives), 1-4 trials a group, 1-3 cells
small_group = st.lists(st.integers(0, 4).map(lambda k: 5.0 * k), min_size=1, max_size=4)
small_cells = st.lists(st.tuples(small_group, small_group), min_size=1, max_size=3)


def _as_arrays(cells):
    return [(np.asarray(a, float), np.asarray(b, float)) for a, b in cells]


def rliable_probability_of_improvement(scores_x: np.ndarray, scores_y: np.ndarray) -> float:
    """rliable.metrics.probability_of_improvement (runs x tasks score matrices, higher better), as published."""
    from scipy import stats

    num_tasks = scores_x.shape[1]
    num_runs_x, num_runs_y = scores_x.shape[0], scores_y.shape[0]
    task_improvement_probabilities = []
    for task in range(num_tasks):
        if np.array_equal(scores_x[:, task], scores_y[:, task]):
            task_improvement_prob = 0.5
        else:
            task_improvement_prob, _ = stats.mannwhitneyu(scores_x[:, task], scores_y[:, task], alternative="greater")
            task_improvement_prob /= num_runs_x * num_runs_y
        task_improvement_probabilities.append(task_improvement_prob)
    return float(np.mean(task_improvement_probabilities))


@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_mean_improvement_is_rliables_aggregate_on_errors(runs_a, runs_b, tasks, seed):
    """rliable takes scores (higher better): errors enter negated; ties (a grid of 10 values) count half."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 10, (runs_a, tasks)).astype(float), rng.integers(0, 10, (runs_b, tasks)).astype(float)
    cells = [(a[:, t], b[:, t]) for t in range(tasks)]
    assert mean_improvement(cells) == pytest.approx(rliable_probability_of_improvement(-a, -b), abs=1e-12)


@given(small_cells)
def test_mean_improvement_counts_every_pair_of_each_cell(cells):
    """Each cell: the share of its (a, b) pairs where a is lower, ties half; cells weigh the same."""
    by_pairs = [np.mean([(x < y) + 0.5 * (x == y) for x in a for y in b]) for a, b in cells]
    assert mean_improvement(_as_arrays(cells)) == pytest.approx(np.mean(by_pairs), abs=1e-12)


@given(small_cells.filter(lambda cells: all(len(a) + len(b) > 1 for a, b in cells)))
def test_the_interval_lies_in_0_1_and_mirrors_when_the_groups_swap(cells):
    cells = _as_arrays(cells)
    labels = [(f"a{i}", f"b{i}") for i in range(len(cells))]
    low, high = mean_improvement_interval(cells, labels)
    swapped = mean_improvement_interval([(b, a) for a, b in cells], [(lb, la) for la, lb in labels])
    assert 0 <= low <= high <= 1
    assert swapped == pytest.approx((1 - high, 1 - low), abs=1e-9)


def test_the_interval_of_identical_constant_cells_is_a_point_at_one_half():
    cells = [(np.full(5, 3.0), np.full(7, 3.0))] * 3
    assert mean_improvement_interval(cells, [("a", "b")] * 3) == (0.5, 0.5)


def test_the_interval_is_rliables_stratified_bootstrap():
    """Each group of each cell resampled on its own: the interval equals a per-resample loop over indices drawn
    independently per group (here with a seeded generator per group, as rliable's StratifiedBootstrap draws
    per task); both the 95% percentile interval of 2,000 resamples, within their Monte-Carlo noise."""
    rng = np.random.default_rng(7)
    cells = [(rng.normal(0, 1, 12), rng.normal(0.6, 1, 9)), (rng.normal(0, 1, 3), rng.normal(0.2, 1, 3))]
    ours = mean_improvement_interval(cells, [("a0", "b0"), ("a1", "b1")])
    draws = np.random.default_rng(11)
    means = []
    for _ in range(4000):
        per_cell = []
        for a, b in cells:
            ra, rb = draws.choice(a, len(a)), draws.choice(b, len(b))
            per_cell.append(probability_of_improvement(ra, rb))
        means.append(np.mean(per_cell))
    peer = np.percentile(means, [2.5, 97.5])
    assert ours == pytest.approx(tuple(peer), abs=0.03)


def _splits(cells) -> int:
    return math.prod(math.comb(len(a) + len(b), len(a)) for a, b in cells)


def _one_sided_by_enumeration(a: np.ndarray, b: np.ndarray) -> float:
    """The share of the cell's splits (every way to choose len(a) of the pooled errors as a's) whose a is at
    least as likely to beat b as the data's: the exact p that a's errors lie lower, counted here."""
    pooled = np.concatenate([a, b])
    observed = probability_of_improvement(a, b)
    at_least = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        mask = np.zeros(len(pooled), bool)
        mask[list(chosen)] = True
        at_least += probability_of_improvement(pooled[mask], pooled[~mask]) >= observed - 1e-12
        total += 1
    return at_least / total


@given(small_group, small_group)
def test_a_cells_p_is_the_share_of_its_splits_at_least_as_extreme(a, b):
    """Ties as they are (errors on a grid of images), every split enumerated; the other side mirrors it."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    assert cell_p(a, b, a_lower=True) == pytest.approx(_one_sided_by_enumeration(a, b), abs=1e-9)
    assert cell_p(a, b, a_lower=False) == pytest.approx(_one_sided_by_enumeration(b, a), abs=1e-9)


@given(st.lists(st.floats(1e-12, 1.0), min_size=1, max_size=12))
def test_merged_p_is_e_times_the_geometric_mean_and_never_below_the_smallest_over_e(ps):
    merged = merged_p(ps)
    assert merged == pytest.approx(min(1.0, math.e * math.exp(np.mean(np.log(ps)))), rel=1e-9)
    assert min(ps) <= merged * 1.000001 or merged == 1.0  # a geometric mean is at least the smallest p
    assert merged_p([ps[0]] * len(ps)) == pytest.approx(min(1.0, math.e * ps[0]))  # one p copied: e times it


def test_the_merged_p_keeps_its_size_when_every_cell_is_the_same_cell():
    """The extreme of dependence: every cell a copy of one null cell. A p that assumed independent cells would
    multiply one cell's evidence by the number of cells; the merged p is e times that cell's p, so it rejects at
    most alpha / e of the time. Counted exactly over every split of one 4 + 4 cell copied 6 times."""
    pooled = np.arange(8, dtype=float)
    rejected = 0
    for chosen in itertools.combinations(range(8), 4):
        mask = np.zeros(8, bool)
        mask[list(chosen)] = True
        cell = (pooled[mask], pooled[~mask])
        rejected += mean_improvement_test([cell] * 6, (0.0, 1.0)).p <= 0.05
    assert rejected / math.comb(8, 4) <= 0.05


@pytest.mark.parametrize("sizes", [[(3, 3)], [(3, 3), (3, 3)], [(2, 3), (4, 2), (3, 3)], [(24, 24), (3, 3)]])
def test_the_floor_is_what_the_most_extreme_data_gives(sizes):
    """Every a below every b in every cell, no ties: each enumerated cell's one-sided p is 1 / C(n_a + n_b, n_a)
    (a cell past enumeration: its normal approximation's), and the test's p is the floor smallest_p states."""
    cells = [(np.arange(n_a, dtype=float), np.arange(n_a, n_a + n_b, dtype=float)) for n_a, n_b in sizes]
    floor = smallest_p(cells)
    test = mean_improvement_test(cells, (0.0, 1.0))
    assert test.floor == floor and test.p == pytest.approx(floor, rel=1e-9)
    if all(math.comb(a + b, a) <= 32768 for a, b in sizes):
        expected = min(1.0, 2 * math.e * math.prod(1 / math.comb(a + b, a) for a, b in sizes) ** (1 / len(sizes)))
        assert floor == pytest.approx(expected)
    assert test.decidable == (floor <= 0.05)


@given(small_cells)
def test_the_test_is_symmetric_in_its_groups(cells):
    cells = _as_arrays(cells)
    test = mean_improvement_test(cells, (0.0, 1.0))
    mirrored = mean_improvement_test([(b, a) for a, b in cells], (0.0, 1.0))
    assert mirrored.estimate == pytest.approx(1 - test.estimate, abs=1e-12)
    if test.estimate != 0.5:
        assert mirrored.p == pytest.approx(test.p, rel=1e-9)
    assert 0 < test.p <= 1 and test.floor <= test.p + 1e-12


def _cell(prefix, model, opt, epochs, errors):
    return pd.DataFrame(
        {
            "trial_key": [f"{prefix}{model}{opt}{epochs}-{i}" for i in range(len(errors))],
            "model": model,
            "optimizer": opt,
            "epochs": epochs,
            "lr": [1e-3 * 1.1**i for i in range(len(errors))],
            "wd": [0.05 * 1.2**i for i in range(len(errors))],
            "seed": 0,
            "status": "ok",
            "top1_err": errors,
            "best_top1_err": errors,
        }
    )


def _study(prefix, rng, shift, cells=(("adamw", 6), ("sgd", 6)), n=10):
    """A study of ViT-P and ViT-C per cell, ViT-P's errors `shift` points higher (k of 200 images)."""
    parts = []
    for opt, epochs in cells:
        parts.append(_cell(prefix, "vit_c_tiny", opt, epochs, np.round(rng.uniform(5, 25, n) * 2) / 2))
        parts.append(_cell(prefix, "vit_p_tiny", opt, epochs, np.round(rng.uniform(5, 25, n) * 2) / 2 + shift))
    return pd.concat(parts, ignore_index=True)


@pytest.mark.parametrize("shift", [-12.0, 0.0, 12.0])
def test_a_family_over_two_studies_holds_one_aggregate_per_pair_of_models(shift):
    """ViT-C better (shift > 0), no difference, ViT-P better: the verdict follows the estimate's side of 1/2, the
    sentence quotes the table's and the JSON's numbers, per cell from the sentence's first model's side."""
    rng = np.random.default_rng(int(shift) + 100)
    found = findings_across({"one": _study("x", rng, shift), "two": _study("y", rng, shift, (("adamw", 16),))})
    aggregates = [f for f in found if f.kind == "aggregate"]
    assert len(aggregates) == 1
    f = aggregates[0]
    assert f.models == ("vit_p_tiny", "vit_c_tiny")  # catalogue order
    assert len(f.detail.cells) == 3 and f.n == (30, 30)
    assert [c.studies for c in f.detail.cells] == [("one",), ("one",), ("two",)]
    assert f.statistic == pytest.approx(np.mean([c.p_a_better for c in f.detail.cells]))
    assert f in found[1:] and f.family == found[0].family and f.p_holm is not None
    expected = {12.0: "b_better", -12.0: "a_better"}.get(shift)
    if expected:
        assert f.verdict == expected
    table = findings_table(found, "aggregate")
    assert len(table) == 1 and table["estimate"].iloc[0] == f.statistic and table["cells"].iloc[0] == 3
    assert f.as_dict()["sentence"] == f.sentence
    words = f.sentence
    decided = f.verdict in ("a_better", "b_better")
    flip = f.verdict == "b_better"
    quoted = float(re.search(r"with probability (\d\.\d\d)", words).group(1))
    assert quoted == float(f"{(1 - f.statistic if flip else f.statistic):.2f}")
    per_cell = [float(v) for v in re.findall(r"\] (\d\.\d\d) \(n = ", words)]
    assert per_cell == [float(f"{(1 - c.p_a_better if flip else c.p_a_better):.2f}") for c in f.detail.cells]
    low, high = map(float, re.search(r"95% CI \[(\d\.\d\d), (\d\.\d\d)\]", words).groups())
    ci = sorted((1 - f.test.ci[1], 1 - f.test.ci[0]) if flip else f.test.ci)
    assert (low, high) == tuple(float(f"{v:.2f}") for v in ci)
    winner = {"a_better": "ViT-P tiny", "b_better": "ViT-C tiny"}.get(f.verdict)
    assert words.startswith(f"{winner}'s trials beat" if decided else "ViT-P tiny vs ViT-C tiny across 3 cells")


def test_a_pair_needs_two_sources_and_cells_that_say_something():
    """One source: no aggregate (its own cells and effect sizes say it), however many cells; a pair held by one
    source of two: none either (an unrelated study does not make one); cells where every error is equal (both
    models' trials all diverged) are left out of the cells averaged."""
    rng = np.random.default_rng(3)
    four_cells = _study("x", rng, 5.0, (("adamw", 6), ("adamw", 16), ("sgd", 6), ("sgd", 16)))
    assert not [f for f in findings_across({"one": four_cells}) if f.kind == "aggregate"]
    other = _cell("y", "cnn_tiny", "adamw", 6, [1.0, 2.0, 3.0])
    assert not [f for f in findings_across({"one": four_cells, "other": other}) if f.kind == "aggregate"]
    three = {"one": _study("x", rng, 5.0, (("adamw", 6),)), "two": _study("y", rng, 5.0, (("sgd", 6),))}
    flat = _study("z", rng, 0.0, (("sgd", 16),)).assign(status="diverged", top1_err=90.0, best_top1_err=90.0)
    (aggregate,) = [f for f in findings_across({**three, "three": flat}) if f.kind == "aggregate"]
    assert [c.studies for c in aggregate.detail.cells] == [("one",), ("two",)]


def test_studies_whose_rows_give_different_errors_are_refused():
    """paper is EMA's best where EMA ran: a study with EMA and one without would mix two errors under one name."""
    from hpstudy.analysis.stats import StatsError

    rng = np.random.default_rng(4)
    ema = _study("x", rng, 5.0)
    ema = ema.assign(best_ema_top1_err=ema["best_top1_err"] - 0.5)
    with pytest.raises(StatsError, match="^findings_across: metric: bad value, the studies' rows give 2 errors"):
        findings_across({"ema": ema, "plain": _study("y", rng, 5.0)})
    assert findings_across({"ema": ema, "plain": _study("y", rng, 5.0)}, metric="best")


def test_the_per_cell_intervals_are_the_effect_size_tables():
    """A cell's interval in the aggregate is the one the report's effect-size table gives it (same streams)."""
    from hpstudy.analysis.effects import effects_table

    rng = np.random.default_rng(6)
    one, two = _study("x", rng, 3.0, n=12), _study("y", rng, 3.0, (("adamw", 16),), n=12)
    (aggregate,) = [f for f in findings_across({"one": one, "two": two}) if f.kind == "aggregate"]
    table = effects_table(one)
    table = table[table["compared"] == "models"].set_index(["optimizer", "epochs"])
    for cell in aggregate.detail.cells[:2]:
        row = table.loc[(cell.optimizer, cell.epochs)]
        assert cell.p_a_better_ci == pytest.approx((row["p_a_better_low"], row["p_a_better_high"]))
