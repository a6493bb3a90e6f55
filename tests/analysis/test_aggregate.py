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
from hpstudy.analysis.inference import PERMUTATION_SEED
from hpstudy.analysis.stratified import TOLERANCE, smallest_p, stratified_test

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


def _exact_p(cells) -> float:
    """The permutation p over every split of every cell (their product), two-sided about 1/2."""
    per_cell = []
    for a, b in cells:
        pooled = np.concatenate([a, b])
        splits = itertools.combinations(range(len(pooled)), len(a))
        values = []
        for chosen in splits:
            mask = np.zeros(len(pooled), bool)
            mask[list(chosen)] = True
            values.append(probability_of_improvement(pooled[mask], pooled[~mask]))
        per_cell.append(values)
    observed = mean_improvement(cells)
    means = np.array([np.mean(combo) for combo in itertools.product(*per_cell)])
    return float(np.mean(np.abs(means - 0.5) >= abs(observed - 0.5) - TOLERANCE))


def _splits(cells) -> int:
    return math.prod(math.comb(len(a) + len(b), len(a)) for a, b in cells)


@given(small_cells.filter(lambda cells: _splits(cells) <= 5000))
def test_the_permutation_p_is_the_p_over_every_split_within_cells(cells):
    """Labels permuted within cells only (enumerated at these sizes); never below the design's floor."""
    cells = _as_arrays(cells)
    exact = _exact_p(cells)
    observed, mc = stratified_test(cells)
    assert observed == pytest.approx(mean_improvement(cells), abs=1e-12)
    assert mc.exact and mc.p == pytest.approx(exact, abs=1e-12)
    assert exact >= smallest_p(cells) - 1e-12


@given(small_cells.filter(lambda cells: _splits(cells) <= 5000))
def test_a_monte_carlo_p_estimates_the_p_over_every_split(cells):
    """Where the splits are too many to enumerate the p is drawn: on designs small enough to enumerate, the drawn
    p is within 5 standard errors of the exact one (a seed changes the draws, never the p's target)."""
    cells = _as_arrays(cells)
    exact = _exact_p(cells)
    _, mc = stratified_test(cells, exact_up_to=0)
    assert not mc.exact
    assert abs(mc.p - exact) <= 5 * math.sqrt(exact * (1 - exact) / mc.draws) + 2 / mc.draws


@pytest.mark.parametrize("sizes", [[(3, 3)], [(3, 3), (3, 3)], [(2, 3), (4, 2), (3, 3)], [(24, 24), (3, 3)]])
def test_the_floor_is_the_smallest_exact_p_or_the_draws_resolution(sizes):
    """Without ties, every a below every b in every cell gives the exact p 2 / prod C(n_a + n_b, n_a) (the split
    and its mirror); a tie can leave the data's split alone as extreme, 1 / prod C, the floor smallest_p states
    (or the Monte-Carlo resolution where that is larger)."""
    cells = [(np.arange(n_a, dtype=float), np.arange(n_a, n_a + n_b, dtype=float)) for n_a, n_b in sizes]
    splits = math.prod(math.comb(n_a + n_b, n_a) for n_a, n_b in sizes)
    floor = smallest_p(cells)
    assert floor >= 1 / splits
    if splits <= 5000:
        assert floor == pytest.approx(1 / splits)
        assert _exact_p(cells) == pytest.approx(2 / splits)
        tied = [(np.zeros(1), np.full(n_a + n_b - 1, 5.0)) for n_a, n_b in sizes]  # a alone lowest, b all tied
        tied_splits = math.prod(n_a + n_b for n_a, n_b in sizes)
        assert _exact_p(tied) == pytest.approx(1 / tied_splits)
    _, mc = stratified_test(cells)
    assert mc.p >= floor * 0.999


@given(small_cells, st.integers(0, 2**31))
def test_the_test_is_symmetric_in_its_estimate_and_its_draws_are_seeded_by_the_data(cells, seed):
    """Drawn (not enumerated) splits: the same data and seed draw the same splits; the swapped groups mirror
    the estimate."""
    cells = _as_arrays(cells)
    observed, mc = stratified_test(cells, seed=seed, exact_up_to=0)
    mirrored, _ = stratified_test([(b, a) for a, b in cells], seed=seed, exact_up_to=0)
    assert mirrored == pytest.approx(1 - observed, abs=1e-12)
    assert stratified_test(cells, seed=seed, exact_up_to=0)[1] == mc


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


def test_one_source_has_no_aggregate_and_a_pair_in_one_cell_none():
    rng = np.random.default_rng(3)
    assert not [f for f in findings_across({"one": _study("x", rng, 5.0)}) if f.kind == "aggregate"]
    one_cell = {"one": _study("x", rng, 5.0, (("adamw", 6),)), "two": _study("y", rng, 5.0, (("sgd", 6),))}
    found = findings_across({**one_cell, "three": _study("z", rng, 5.0, (("sgd", 16),))})
    aggregates = [f for f in found if f.kind == "aggregate"]
    assert len(aggregates) == 1 and len(aggregates[0].detail.cells) == 3
    only = {"one": _study("x", rng, 5.0, (("adamw", 6),)), "two": _cell("y", "vit_c_tiny", "sgd", 6, [1.0, 2.0])}
    assert not [f for f in findings_across(only) if f.kind == "aggregate"]  # ViT-P in one cell only


def test_the_aggregate_is_retested_at_holms_thresholds_and_its_seed_reaches_it():
    """The permutation seed draws the aggregate's splits: another seed, another p within its Monte-Carlo
    interval, the same verdict."""
    from hpstudy.analysis.findings import Seeds

    rng = np.random.default_rng(5)
    tables = {"one": _study("x", rng, 2.0), "two": _study("y", rng, 2.0)}
    a, b = (
        [f for f in findings_across(tables, seeds=Seeds(permutation=s)) if f.kind == "aggregate"][0]
        for s in (PERMUTATION_SEED, PERMUTATION_SEED + 1)
    )
    assert a.statistic == b.statistic and a.p != b.p
    assert a.verdict_holm == b.verdict_holm
