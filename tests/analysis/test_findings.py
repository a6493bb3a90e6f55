"""Findings (analysis/findings/): the generated sentences and their numbers, and `hpstudy suggest`. The
numbers of every finding agree across its sentence and tables by property in test_findings_properties.py;
here, known answers and each kind's wording."""

import json
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import scipy
import yaml

from hpstudy.analysis.findings import Seeds, claims_table, findings, findings_table, fmt_p, sig3
from hpstudy.analysis.findings.details import DELTA_APPROXIMATE_FROM
from hpstudy.analysis.gaps import optimizer_gap
from hpstudy.analysis.inference import (
    CALIBRATION_STUDIES,
    RULES,
    delta_detectable,
    delta_power,
    trials_for_delta,
    welch_detectable,
)
from hpstudy.analysis.stats import good_ranges
from hpstudy.cli import hpstudy_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_study
from hpstudy.study.store.spec_record import write_spec_record
from hpstudy.study.suggest import fixed_points, space_lines
from tests.helpers import make_trials, small_spec, stored_row


def _rows(cells):
    """A trial table from {(model, optimizer, epochs): [error, ...]}; NaN = failed, 90 = diverged.
    Each trial has its own lr/wd unless the cell's errors are given as (error, seed) pairs (then one
    lr/wd, the seeds repeating it)."""
    rows = []
    for (model, opt, epochs), errors in cells.items():
        for i, item in enumerate(errors):
            err, seed = item if isinstance(item, tuple) else (item, 0)
            fixed = isinstance(item, tuple)
            status = "failed" if np.isnan(err) else "diverged" if err == 90 else "ok"
            rows.append(
                {
                    "study": "gen",
                    "trial_key": f"{model}-{opt}-{epochs}-{i}",
                    "model": model,
                    "optimizer": opt,
                    "epochs": epochs,
                    "lr": 1e-3 if fixed else 1e-3 * 1.1**i,
                    "wd": 0.1 if fixed else 0.1 * 1.2**i,
                    "seed": seed,
                    "status": status,
                    "top1_err": err,
                    "best_top1_err": err,
                    "wall_s": 1.0,
                }
            )
    return pd.DataFrame(rows)


def _of(found, kind, *models):
    hits = [f for f in found if f.kind == kind and f.models[: len(models)] == models]
    assert len(hits) >= 1, (kind, models, [(f.kind, f.models) for f in found])
    return hits


C_ERR = list(10 + np.linspace(0, 1.5, 32))  # vit_c_tiny: every trial near its best
P_ERR = [10.0] + [20.0 + i / 2 for i in range(31)]  # vit_p_tiny: one near its best, the rest 10-25 points off


def _delta_edf_integral(da, db):
    """integral of F_a - F_b over the Δ axis, from the two step functions (an independent re-derivation
    of the signed area: equals mean Δ_b - mean Δ_a)."""
    grid = np.sort(np.concatenate([da, db, [max(da.max(), db.max())]]))
    fa = np.searchsorted(np.sort(da), grid[:-1], side="right") / len(da)
    fb = np.searchsorted(np.sort(db), grid[:-1], side="right") / len(db)
    return float(np.sum((fa - fb) * np.diff(grid)))


def _nearer(da, db):
    """P(a random Δ of a lies below a random Δ of b), ties half: scipy's Mann-Whitney U of b over a."""
    return scipy.stats.mannwhitneyu(db, da).statistic / (len(da) * len(db))


def test_a_known_ordering_gives_the_nearer_sentence_with_its_numbers():
    found = findings(_rows({("vit_p_tiny", "adamw", 6): P_ERR, ("vit_c_tiny", "adamw", 6): C_ERR}))
    (pair,) = _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny")
    dp, dc = np.array(P_ERR) - 10, np.array(C_ERR) - 10
    # the estimate: P(a ViT-P trial is nearer its best than a ViT-C trial), ties half; 31.5 of 1024 pairs
    assert pair.test.rule == "delta" and pair.statistic == pytest.approx(_nearer(dp, dc)) == pytest.approx(31.5 / 1024)
    assert pair.verdict == "b_better" and pair.better == "vit_c_tiny" and pair.p < 0.05 and not pair.test.borderline
    assert pair.detail.d_a_above == 0 and pair.detail.d_b_above == pytest.approx(31 / 32)  # ViT-P's never above
    # signed area, positive in a's (vit_p's) favour: here negative, vit_c's trials are nearer its best
    area = pair.detail.area
    assert area == pytest.approx(_delta_edf_integral(dp, dc)) == pytest.approx(dc.mean() - dp.mean())
    lo, hi = pair.detail.area_ci
    assert lo <= area <= hi < 0 and pair.detail.mean_delta == pytest.approx((dp.mean(), dc.mean()))
    assert pair.detail.within == (1 / 32, 1.0)
    assert pair.n == (32, 32) and pair.cell == {"optimizer": "adamw", "epochs": 6}
    # the sentence names the winner, the probability the test estimates (the winner's: 1 - 31.5/1024) and the test
    assert pair.sentence.startswith(
        "ViT-C tiny's trials lie nearer their own best than ViT-P tiny's (AdamW, 6 ep): a random ViT-C tiny trial "
        "is nearer its best than a random ViT-P tiny trial with probability 0.97 "
        f"({RULES['delta']}, p "
    )
    assert ", n = 32/32) [holds after Holm's adjustment over the family's 2 tests" in pair.sentence
    gap = dp.mean() - dc.mean()
    assert (
        f"ViT-C tiny's trials are nearer their best than ViT-P tiny's by {gap:.1f} points on average" in pair.sentence
    )
    assert "within 2 points of own best: ViT-P tiny 3%, ViT-C tiny 100%" in pair.sentence
    assert "largest gap between the Δ-EDFs D = 0.97" in pair.sentence
    assert "diverged ViT-P tiny 0/32, ViT-C tiny 0/32" in pair.sentence  # stated even when none diverged
    scope = found[0]
    assert scope.kind == "scope" and scope.sentence.startswith(
        f"2 tests at α = 0.05 each ({RULES['delta']} (1), {RULES['best']} (1)): 1 decided, 1 still decided after Holm"
    )
    assert fmt_p(8.2e-5) == "p < 0.001" and fmt_p(0.0123) == "p = 0.012" and fmt_p(0.43) == "p = 0.43"


def test_a_small_sample_is_inconclusive_and_says_what_power_would_need():
    """4 vs 4 trials: every one of the 70 splits enumerated. The Δs (ViT-P 0, 1, 1.5, 4; ViT-C 0, 1.2, 2,
    4) give P(ViT-P nearer) = 9 / 16 (3.5 + 3 + 2 + 0.5 of the 16 pairs), far from decided; 80% power at
    that probability needs trials_for_delta of it per model, more than ran."""
    cells = {("vit_p_tiny", "sgd", 4): [10, 11, 11.5, 14], ("vit_c_tiny", "sgd", 4): [20, 21.2, 22, 24]}
    found = findings(_rows(cells))
    (pair,) = _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny")
    assert pair.verdict == "inconclusive" and pair.better is None and pair.test.decidable
    assert (
        pair.statistic
        == pytest.approx(9 / 16)
        == pytest.approx(_nearer(np.array([0, 1, 1.5, 4]), np.array([0, 1.2, 2, 4])))
    )
    assert pair.n == (4, 4) and pair.test.mc is None  # exact
    assert pair.test.floor == pytest.approx(2 / 70)
    assert (
        "Δ-EDFs (SGD, 4 ep): inconclusive at this n: a random ViT-P tiny trial is nearer its best than a random "
        in (pair.sentence)
    )
    assert "with probability 0.56 (1/2: no difference;" in pair.sentence
    assert np.isinf(delta_detectable((4, 4)))  # even a probability of 1 is found less than 80% of the time
    assert pair.detail.detectable is None  # below 24 per model the approximation overstates the power
    assert "; below 24 trials per model this test's power is far under its normal approximation" in pair.sentence
    needed = trials_for_delta(9 / 16)
    assert needed > 4 and delta_power(9 / 16, (needed, needed)) >= 0.8 > delta_power(9 / 16, (needed - 1,) * 2)
    assert pair.detail.trials_needed == needed
    assert f"(about {needed} trials per model would find 0.56 at 80% power)" in pair.sentence
    # the peak: the two cells at the longest schedule, bests of samples, 4 vs 4 fully apart: the two splits
    # of the 70 that put one group wholly below the other, p = 2/70
    (peak,) = _of(found, "peak", "vit_p_tiny", "vit_c_tiny")
    assert peak.test.rule == "best" and peak.cell == {"optimizer": "sgd", "epochs": 4}
    assert peak.statistic == pytest.approx(-10.0) and peak.verdict == "a_better" and peak.p == pytest.approx(2 / 70)


def test_an_inconclusive_delta_edf_never_proposes_fewer_trials_than_ran():
    """2 vs 8 trials (45 splits): P(ViT-P nearer) = 15/16 but p = 0.067. Noether's 80% power at 15/16 is 8
    trials per model, and 8 already ran; below DELTA_APPROXIMATE_FROM (24) the approximation overstates the
    power, so the plan is 24 per model, never fewer than ran."""
    cells = {
        ("vit_p_tiny", "adamw", 6): [10.1, 10.1],
        ("vit_c_tiny", "adamw", 6): [20.5, 21.0, 10.7, 13.8, 22.6, 24.8, 10.5, 18.8],
    }
    (pair,) = _of(findings(_rows(cells)), "edf_pair", "vit_p_tiny", "vit_c_tiny")
    assert pair.verdict == "inconclusive" and pair.statistic == pytest.approx(15 / 16) and pair.p > 0.05
    assert trials_for_delta(15 / 16) <= max(pair.n) and pair.detail.trials_needed == DELTA_APPROXIMATE_FROM
    assert f"(about {DELTA_APPROXIMATE_FROM} trials per model would find 0.94 at 80% power)" in pair.sentence
    assert "with probability 0.94 (1/2: no difference;" in pair.sentence


def test_three_samples_each_cannot_reach_alpha_and_the_sentence_says_so():
    cells = {("vit_p_tiny", "adamw", 6): [30.0, 40.0, 50.0], ("vit_p_tiny", "sgd", 6): [60.0, 70.0, 80.0]}
    (gap,) = _of(findings(_rows(cells)), "optimizer_gap", "vit_p_tiny")
    assert gap.test.rule == "best" and gap.test.floor > 0.05 and not gap.test.decidable
    assert gap.verdict == "inconclusive" and gap.statistic == pytest.approx(30.0)  # fully separated, still undecided
    assert "cannot be decided at n = 3/3 (the smallest p this design can give is" in gap.sentence


def test_failed_trials_are_left_out_and_counted_diverged_count_at_chance():
    cells = {("vit_p_tiny", "adamw", 6): P_ERR + [float("nan")], ("vit_c_tiny", "adamw", 6): C_ERR + [90.0]}
    found = findings(_rows(cells))
    (pair,) = _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny")
    dp, dc = np.array(P_ERR) - 10, np.array(C_ERR + [90.0]) - 10
    assert pair.n == (32, 33) and pair.n_left_out == (1, 0)
    assert pair.statistic == pytest.approx(_nearer(dp, dc))  # the diverged trial counts, at its chance error
    assert pair.detail.d_a_above == pytest.approx(1 / 33)  # the diverged vit_c trial: vit_p is above there
    assert pair.detail.mean_delta[1] == pytest.approx(dc.mean()) and pair.detail.within[1] == pytest.approx(32 / 33)
    assert "1 left out (failed / no finite error)" in pair.sentence
    assert "diverged ViT-P tiny 0/32, ViT-C tiny 1/33" in pair.sentence
    scope = found[0]
    assert (scope.detail.n_failed, scope.detail.n_diverged, scope.detail.n) == (1, 1, 65)
    assert "1 of them diverged (counted at chance error); 1 failed left out" in scope.sentence


def test_optimizer_gap_findings_match_the_gap_table():
    cells = {
        ("vit_p_tiny", "adamw", 6): P_ERR,
        ("vit_p_tiny", "sgd", 6): [e + 30 for e in P_ERR],
        ("vit_c_tiny", "adamw", 6): C_ERR,
        ("vit_c_tiny", "sgd", 6): [e + 0.1 * (i % 2) for i, e in enumerate(C_ERR)],
    }
    trials = _rows(cells)
    found = findings(trials)
    table = optimizer_gap(trials).set_index("model")
    (p_gap,) = _of(found, "optimizer_gap", "vit_p_tiny")
    assert p_gap.test.rule == "best"  # lr/wd samples: the best of each, not a seed mean
    assert p_gap.statistic == pytest.approx(30.0) == pytest.approx(table.loc["vit_p_tiny", "gap"])
    assert p_gap.test.ci is None and not {"gap_lo", "gap_hi"} & set(table.columns)  # the best rule: no interval
    assert p_gap.p == table.loc["vit_p_tiny", "gap_p"] < 0.05
    # what the best rule shows: the lowest errors lie lower with AdamW, by the bests' difference
    assert p_gap.verdict == "adamw_better" and p_gap.sentence.startswith(
        "ViT-P tiny's lowest errors lie lower with AdamW than with SGD (6 ep), its bests 30.0 points apart"
    )
    assert "best SGD − best AdamW = +30.0 points (calibrated exact bootstrap of the best, null: the cells share" in (
        p_gap.sentence
    )
    (c_gap,) = _of(found, "optimizer_gap", "vit_c_tiny")
    assert c_gap.statistic == pytest.approx(0.0) and c_gap.p > 0.05
    assert c_gap.verdict == "inconclusive" and "inconclusive at this n" in c_gap.sentence
    (pair,) = _of(found, "optimizer_gap_pair", "vit_p_tiny", "vit_c_tiny")
    assert pair.statistic == pytest.approx(30.0) and pair.verdict == "b_better" and pair.p < 0.05
    assert pair.sentence.startswith(
        "ViT-P tiny's loss from SGD instead of AdamW is 30.0 points larger than ViT-C tiny's (of the best; 6 ep)"
    )


def _seeds(base, spread):
    """One lr/wd, three seeds: errors base, base + spread, base + 2 spread."""
    return [(base + spread * s, s) for s in range(3)]


SEED_CELLS = {  # one lr/wd per cell, three seeds: the length study's design
    ("vit_p_tiny", "adamw", 2): _seeds(30, 5.0),
    ("vit_p_tiny", "adamw", 8): _seeds(20, 1.0),
    ("vit_c_tiny", "adamw", 2): _seeds(11, 0.5),
    ("vit_c_tiny", "adamw", 8): _seeds(10, 0.5),
}


def test_seed_cells_are_tested_on_their_means_by_welch_t():
    cells = SEED_CELLS
    found = findings(_rows(cells))
    assert not [f for f in found if f.kind == "edf_pair"]  # one lr/wd per model: seeds only
    p2, p8, c2, c8 = (np.array([e for e, _ in cells[k]]) for k in cells)
    (p_len,) = _of(found, "length_gap", "vit_p_tiny")
    welch = scipy.stats.ttest_ind(p2, p8, equal_var=False)
    assert p_len.test.rule == "welch" and p_len.statistic == pytest.approx(14.0)  # mean 35 - mean 21
    assert 0.025 < p_len.p < 0.05  # decided two-sided at alpha, not at alpha / 2
    assert p_len.p == pytest.approx(welch.pvalue, rel=1e-10)
    assert p_len.test.ci == pytest.approx(tuple(welch.confidence_interval()), rel=1e-10)
    assert p_len.verdict == "shorter_worse" and p_len.sentence.startswith(
        "ViT-P tiny's mean error at 2 epochs is 14.0 points above its 8-epoch one (AdamW)"
    )
    assert "2 ep 35.00 ± 5.00% (best 30.00%)" in p_len.sentence  # mean ± sd, best of seeds beside it
    (pair,) = _of(found, "length_gap_pair", "vit_p_tiny", "vit_c_tiny")
    parts = [g.var(ddof=1) / 3 for g in (p2, p8, c2, c8)]
    se, df = np.sqrt(sum(parts)), sum(parts) ** 2 / sum(q**2 / 2 for q in parts)
    assert pair.statistic == pytest.approx(13.0) and pair.test.df == pytest.approx(df)
    assert pair.p == pytest.approx(2 * scipy.stats.t.sf(13.0 / se, df), rel=1e-10) and 0.025 < pair.p < 0.05
    assert pair.verdict == "b_better" and pair.verdict_holm == "inconclusive"  # Holm: 0.11
    assert pair.sentence.startswith(
        "ViT-P tiny's distance from its long-schedule error is 13.0 points larger than ViT-C tiny's (of the mean "
        "over seeds; AdamW, 2 ep) [does not hold after Holm's adjustment"
    )
    (peak,) = _of(found, "peak", "vit_p_tiny", "vit_c_tiny")
    best = scipy.stats.ttest_ind(p8, c8, equal_var=False)  # the two models' cells at the longest schedule, 8 epochs
    assert peak.statistic == pytest.approx(10.5) and peak.p == pytest.approx(best.pvalue, rel=1e-10)
    assert peak.verdict == "b_better" and peak.sentence.startswith(
        "ViT-C tiny reaches a lower mean error over seeds than ViT-P tiny (AdamW, 8 ep)"
    )


def test_an_undecided_peak_says_so_and_what_difference_80_percent_power_needs():
    """Seeds 10, 11, 12 against 10.5, 11.5, 12.5 (sd 1, n 3): Welch p 0.57, undecided; the difference
    found 80% of the time at this spread is 3.07 points (Student's t, df 4: test_inference). A sd of 3
    seeds is uncertain: the difference is also stated over each sd's central 80% chi-square interval (the
    difference scales with the sds: 3.07 x sqrt(2 / chi2(2) quantile))."""
    cells = {("vit_p_tiny", "adamw", 8): _seeds(10, 1.0), ("vit_c_tiny", "adamw", 8): _seeds(10.5, 1.0)}
    (peak,) = _of(findings(_rows(cells)), "peak", "vit_p_tiny", "vit_c_tiny")
    assert peak.verdict == "inconclusive" and peak.p == pytest.approx(0.57, abs=0.005)
    assert peak.sentence.startswith("ViT-P tiny vs ViT-C tiny peak error (AdamW, 8 ep): inconclusive at this n: ")
    value = welch_detectable([1.0, 1.0], [3, 3])
    low, high = (value * np.sqrt(2 / scipy.stats.chi2.ppf(q, 2)) for q in (0.9, 0.1))
    assert peak.detail.detectable == pytest.approx((value, low, high), rel=1e-6)
    assert peak.sentence.endswith(
        f"; detectable at 80% power: |difference| ≥ 3.07 points at these seeds' sds ({low:.2f}-{high:.2f} over "
        "their 80% intervals)"
    )


def test_a_length_gap_is_found_after_a_model_optimizer_with_a_single_length():
    """vit_c_tiny has one AdamW length (no length gap there) and two SGD lengths: the SGD gap is still
    found, mean 21 at 2 epochs - mean 11 at 8."""
    cells = {
        ("vit_c_tiny", "adamw", 8): _seeds(10, 1.0),
        ("vit_c_tiny", "sgd", 2): _seeds(20, 1.0),
        ("vit_c_tiny", "sgd", 8): _seeds(10, 1.0),
    }
    (gap,) = _of(findings(_rows(cells)), "length_gap", "vit_c_tiny")
    assert gap.cell == {"optimizer": "sgd", "epochs": 2} and gap.statistic == pytest.approx(10.0)


@pytest.mark.parametrize("shift, verdict", [(2.5, "adamw_better"), (2.0, "inconclusive")])
def test_welch_decides_two_sided_at_alpha(shift, verdict):
    """Seeds 10, 11, 12 (AdamW) against the same shifted by 2.5 or 2 (SGD): sd 1 each, df 4, two-sided
    p 0.038 (in (alpha/2, alpha]: decided) and 0.071 (in (alpha, 2 alpha]: a one-sided p would decide)."""
    adamw, sgd = np.array([10.0, 11.0, 12.0]), np.array([10.0, 11.0, 12.0]) + shift
    cells = {("vit_p_tiny", "adamw", 2): [(e, s) for s, e in enumerate(adamw)]}
    cells[("vit_p_tiny", "sgd", 2)] = [(e, s) for s, e in enumerate(sgd)]
    scope, gap = findings(_rows(cells))
    expected = scipy.stats.ttest_ind(sgd, adamw, equal_var=False)
    assert 0.025 < expected.pvalue < 0.1 and (expected.pvalue <= 0.05) == (verdict != "inconclusive")
    assert gap.p == pytest.approx(expected.pvalue, rel=1e-10) and gap.test.df == pytest.approx(4.0, rel=1e-12)
    assert gap.test.ci == pytest.approx(tuple(expected.confidence_interval(0.95)), rel=1e-10)
    assert gap.verdict == gap.verdict_holm == verdict and gap.p_holm == gap.p and gap.family == 1
    assert scope.detail.decided == scope.detail.decided_holm == (verdict != "inconclusive")
    low, high = expected.confidence_interval(0.95)
    assert f"= +{shift:.1f} points [{low:.1f}, {high:.1f}] (Welch t, 95% CI, p = {expected.pvalue:.2g}, df 4.0)" in (
        gap.sentence
    )


def test_holm_adjusts_over_every_finding_with_a_p():
    found = findings(_rows(SEED_CELLS))
    family = [f for f in found if f.p is not None]
    assert found[0].family == len(family) == 4 and all(f.family == len(family) for f in family)
    ps = np.array([f.p for f in family])
    order = np.argsort(ps)
    expected = np.maximum.accumulate((len(ps) - np.arange(len(ps))) * ps[order]).clip(max=1)
    assert [family[i].p_holm for i in order] == pytest.approx(expected, rel=1e-12)
    for f in family:
        assert f.verdict_holm == (f.verdict if f.p_holm <= 0.05 else "inconclusive")
        assert f.p_holm_mc is None  # Welch p-values are exact: no Monte-Carlo bounds on Holm's
    assert found[0].detail.decided_holm == sum(f.verdict_holm != "inconclusive" for f in family)


def test_a_table_and_its_sentence_come_from_one_object():
    found = findings(_rows({("vit_p_tiny", "adamw", 6): P_ERR, ("vit_p_tiny", "sgd", 6): [e + 30 for e in P_ERR]}))
    (gap,) = _of(found, "optimizer_gap", "vit_p_tiny")
    changed = replace(gap, test=replace(gap.test, estimate=-12.3))
    row = findings_table([changed], "optimizer_gap").iloc[0]
    assert row["estimate"] == -12.3 and row["verdict"] == "sgd_better" == changed.verdict
    assert changed.sentence.startswith(
        "ViT-P tiny's lowest errors lie lower with SGD than with AdamW (6 ep), its bests 12.3 points apart"
    )
    assert "best SGD − best AdamW = -12.3 points" in changed.sentence


def test_a_borderline_p_says_so_with_its_interval_in_every_table():
    """A Monte-Carlo p whose interval still holds alpha after every draw allowed: not decided either way,
    and the sentence, the tables and report.json all say borderline, with the interval."""
    found = findings(_rows({("vit_p_tiny", "adamw", 6): P_ERR, ("vit_c_tiny", "adamw", 6): C_ERR}))
    (pair,) = _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny")
    edge = replace(pair, test=replace(pair.test, p=0.0497, mc=(0.0481, 0.0514)), p_holm=0.0994, p_holm_mc=(0.096, 0.1))
    assert edge.test.borderline and not edge.test.significant
    assert edge.verdict == edge.verdict_holm == "borderline" and edge.better is None
    assert (
        "ViT-P tiny vs ViT-C tiny Δ-EDFs (AdamW, 6 ep): borderline: the exact p lies in [0.048, 0.051] (Monte-Carlo, "
        "99.9% interval) around α = 0.05 even after every draw allowed, so the verdict would depend on the random seed"
    ) in edge.sentence
    assert "detectable at 80% power" not in edge.sentence  # not a question of power
    row = findings_table([edge], "edf_pair").iloc[0]
    assert (row["verdict"], row["verdict_holm"], row["p_mc_lo"], row["p_mc_hi"]) == (
        "borderline",
        "borderline",
        0.0481,
        0.0514,
    )
    record = edge.as_dict()
    assert (
        record["verdict"] == "borderline" and record["test"]["borderline"] and record["test"]["mc"] == [0.0481, 0.0514]
    )
    assert claims_table([found[0], edge]).iloc[0]["verdict"] == "borderline"


def test_verdicts_do_not_depend_on_any_seed():
    """The area's bootstrap, the Δ-EDF test's random splits and the best rule's null studies each take a
    seed: another of each changes Monte-Carlo p-values and the area's interval (the seeds reach them), but
    no verdict (a verdict may only turn borderline)."""
    cells = {("vit_p_tiny", "adamw", 6): P_ERR, ("vit_c_tiny", "adamw", 6): C_ERR}
    cells.update({(m, "sgd", 6): [e + 5 for e in errs] for (m, _, _), errs in list(cells.items())})
    trials = _rows(cells)
    runs = [findings(trials, seeds=Seeds(area=s, permutation=1000 + s, calibration=2000 + s)) for s in range(3)]
    for same in zip(*runs):
        for verdicts in ({f.verdict for f in same}, {f.verdict_holm for f in same}):
            assert len(verdicts - {"borderline"}) <= 1, [f.sentence for f in same]
    pairs = [[f for f in run if f.kind == "edf_pair"] for run in runs]
    assert len({f.detail.area_ci for f, *_ in pairs}) == 3  # the area's seed reaches its bootstrap
    assert len({f.p for run in runs for f in run if f.test is not None and f.test.mc is not None and f.p > 0.01}) > 1


def test_findings_are_plain_json():
    found = findings(_rows({("vit_p_tiny", "adamw", 6): P_ERR, ("vit_c_tiny", "adamw", 6): C_ERR}))
    for record in json.loads(json.dumps([f.as_dict() for f in found])):
        assert {
            "kind",
            "models",
            "cell",
            "statistic",
            "p",
            "p_holm",
            "n",
            "verdict",
            "verdict_holm",
            "sentence",
        } <= set(record)


def test_best_rule_sentences_say_what_the_test_showed_with_image_counts_on_a_grid():
    """Errors of k of 360 validation images: a best-rule sentence says the lowest errors (not the error
    a model reaches) and how many images the bests are; a peak says its null is one distribution; the
    scope names the grid."""
    images = lambda ks: [float(np.float32(100 * k / 360)) for k in ks]
    cells = {
        ("vit_p_tiny", "adamw", 16): images([23, 25, 26, 28, 30, 31, 33, 35, 36, 40]),
        ("vit_c_tiny", "adamw", 16): images([2, 2, 3, 3, 3, 4, 5, 5, 6, 7]),
    }
    found = findings(_rows(cells))
    (peak,) = _of(found, "peak", "vit_p_tiny", "vit_c_tiny")
    assert peak.test.rule == "best" and peak.verdict == "b_better" and peak.detail.images == 360
    assert peak.sentence.startswith("ViT-C tiny's trials lie lower than ViT-P tiny's near their bests (AdamW, 16 ep)")
    assert "bests ViT-P tiny 6.39%, ViT-C tiny 0.56% (23 vs 2 of 360 images)" in peak.sentence
    assert (
        "the test's null is one error distribution for both, so it shows that their lowest errors differ, not that "
        "ViT-C tiny's expected best of 10 trials is lower"
    ) in peak.sentence
    assert "reaches a lower error" not in peak.sentence
    assert "The errors lie on a grid of 360 validation images (one image = 0.28 points)." in found[0].sentence
    # claim 4 is about the error a model reaches: a test of the lowest errors does not test it
    claim = claims_table(found).set_index("claim").loc["4. peak performance (Fig 7)"]
    assert claim["verdict"].startswith("not tested") and claim["this study"] == (
        f"best ViT-P tiny − best ViT-C tiny = {peak.statistic:.2f} pts"
    )


def _store(root, trials):
    for row in trials.drop(columns="study").to_dict("records"):
        write_trial(root, "gen", stored_row(**row))
    write_spec_record(root, "gen", {"name": "gen", "samples": 40}, len(trials))


@pytest.mark.slow
def test_report_opens_with_the_study_then_its_comparisons_then_the_claims_and_report_json_carries_them(tmp_path):
    from hpstudy.analysis.report import build_report

    store = str(tmp_path / "store")
    trials = make_trials(models=("vit_p_tiny", "vit_c_tiny"), optimizers=("adamw",), n=10, fail_share=0.1, seed=3)
    _store(store, trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = build_report(*load_study(store, "gen"), str(tmp_path / "rep"))
    html = open(page).read()
    order = [
        "<h2>The study: ViT-P tiny vs ViT-C tiny</h2>",
        "<h2>Models: ViT-P tiny vs ViT-C tiny</h2>",
        "<h2>The paper&#x27;s claims (Xiao et al. 2021)</h2>",
        "<h2>Every cell</h2>",
    ]
    assert [html.index(heading) for heading in order] == sorted(html.index(heading) for heading in order)
    report = json.load(open(tmp_path / "rep" / "report.json"))
    kinds = [f["kind"] for f in report["findings"]]
    assert kinds[0] == "scope" and "edf_pair" in kinds and "peak" in kinds
    for f in report["findings"]:
        assert f["sentence"].replace("'", "&#x27;") in html or f["sentence"] in html
    tables = html.split("<h2>Spec")[0].split("<h2>Models")[1]
    assert "p_holm" not in tables and "verdict_holm" not in tables and "a_better" not in tables  # words
    assert (
        "p after Holm" in tables and "P(first's trial nearer its best)" in tables and "samples: 40" in html
    )  # spec as YAML


@pytest.mark.slow  # bootstraps the good ranges of every cell (~1.2 s)
def test_suggest_prints_spec_lines_at_the_known_best_region(tmp_path, capsys):
    store = str(tmp_path / "store")
    # make_trials' error is a bowl with its bottom at lr = 1e-3, wd = 0.1 (the CNN's too)
    trials = make_trials(
        models=("vit_p_tiny", "vit_c_tiny", "cnn_tiny"),
        optimizers=("adamw", "sgd"),
        n=40,
        diverge_share=0.0,
        fail_share=0.05,
        seed=5,
    )
    _store(store, trials)
    assert hpstudy_main(["suggest", "--store", store, "--study", "gen"]) == 0
    out = capsys.readouterr().out
    space = yaml.safe_load(out)["space"]
    trials = load_study(store, "gen")[0]  # good_ranges' bootstrap follows the rows' order: the store's
    assert set(space) == {"adamw", "sgd", "vit_p_tiny", "vit_c_tiny", "cnn_tiny"}  # a key per model
    for model in ("vit_p_tiny", "vit_c_tiny", "cnn_tiny"):
        for opt in ("adamw", "sgd"):
            cell = trials[(trials["model"] == model) & (trials["optimizer"] == opt)]
            p50 = good_ranges(cell).loc["p50"]
            point = space[model][opt]
            assert point["lr"] == pytest.approx(10 ** p50["log10_lr"], rel=5e-3)  # 3 significant digits
            assert point["wd"] == pytest.approx(10 ** p50["log10_wd"], rel=5e-3)
            assert 10**-3.5 < point["lr"] < 10**-2.5 and 10**-2 < point["wd"] < 1  # near the bowl's bottom
    assert space["adamw"] == space["vit_p_tiny"]["adamw"]  # the required top-level box: the first model's
    # two models of one family (vit_p_tiny, vit_p_1gf) each keep their own point
    both = space_lines(
        fixed_points(
            pd.concat([trials, trials.assign(model="vit_p_1gf", lr=trials["lr"] * 2)]),
            good_ranges,
            "paper",
            optimizers=["adamw"],
        ),
        "gen",
        store,
    )
    both = yaml.safe_load("\n".join(both))["space"]
    assert both["vit_p_1gf"]["adamw"]["lr"] == pytest.approx(2 * both["vit_p_tiny"]["adamw"]["lr"], rel=1e-2)
    spec = parse_spec(
        small_spec(
            models=["vit_p_tiny", "vit_c_tiny", "cnn_tiny"], space=space, epochs=[2, 4], samples=1, seeds=[0, 1, 2]
        ),
        check_paths=False,
    )
    for model in ("vit_p_tiny", "vit_c_tiny", "cnn_tiny"):
        for opt in ("adamw", "sgd"):
            assert spec.box(model, opt).lr == (space[model][opt]["lr"],) * 2  # a fixed point each
    lrs = {(t.model, t.optimizer): t.config["lr"] for t in expand(spec)}
    assert len(set(lrs.values())) == 6  # the trials train at each model's own lr
    assert "left out" in out and "good lr [" in out
    assert (
        hpstudy_main(["suggest", "--store", store, "--study", "gen", "--model", "cnn_tiny", "--optimizer", "sgd"]) == 0
    )
    only = yaml.safe_load(capsys.readouterr().out)["space"]
    assert set(only) == {"sgd", "cnn_tiny"} and set(only["cnn_tiny"]) == {"sgd"}
    assert hpstudy_main(["suggest", "--store", store, "--study", "gen", "--model", "vit_p_1gf"]) == 2
    assert "--model: bad value 'vit_p_1gf'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_seed_only_report_shows_seed_statistics_not_lr_wd_outputs(tmp_path):
    from hpstudy.analysis.report import build_report

    cells = {
        ("vit_p_tiny", "adamw", 2): _seeds(30, 5.0),
        ("vit_p_tiny", "sgd", 2): _seeds(40, 5.0),
        ("vit_c_tiny", "adamw", 2): _seeds(11, 0.5),
        ("vit_c_tiny", "sgd", 2): _seeds(12, 0.5),
    }
    trials = _rows(cells).assign(family="vit")
    page = open(build_report(trials, trials.iloc[:0], None, str(tmp_path / "rep"))).read()
    assert "Every cell ran one lr/wd over seeds" in page
    assert not list((tmp_path / "rep").glob("delta_edf_*")) and not list((tmp_path / "rep").glob("hp_scatter_*"))
    assert not list((tmp_path / "rep").glob("expected_best*"))
    report = json.load(open(tmp_path / "rep" / "report.json"))
    summary = report["tables"]["summary"]
    assert {row["design"] for row in summary} == {"seeds"} and all(row["dkw_eps_95"] is None for row in summary)
    assert all(row["sd"] is not None for row in summary)
    gaps = report["tables"]["optimizer_gap"]
    assert {row["rule"] for row in gaps} == {"Welch t on seed means"}
    for row, finding in zip(gaps, [f for f in report["findings"] if f["kind"] == "optimizer_gap"]):
        assert row["estimate"] == pytest.approx(finding["statistic"]) and row["p_holm"] == pytest.approx(
            finding["p_holm"]
        )
        assert row["verdict_holm"] == finding["verdict_holm"]


def test_the_claims_table_states_each_pair_finding_of_vit_p_and_vit_c_by_its_quantity_and_verdict():
    cells = {
        ("vit_p_tiny", "adamw", 6): P_ERR,
        ("vit_p_tiny", "sgd", 6): [e + 30 for e in P_ERR],
        ("vit_c_tiny", "adamw", 6): C_ERR,
        ("vit_c_tiny", "sgd", 6): [e + 0.1 * (i % 2) for i, e in enumerate(C_ERR)],
    }
    found = findings(_rows(cells))
    claims = claims_table(found).set_index(["claim", "cell"])
    (gap,) = _of(found, "optimizer_gap_pair", "vit_p_tiny", "vit_c_tiny")
    row = claims.loc[("2. optimizer stability (Fig 3)", "6 ep")]
    assert row["models"] == "ViT-P tiny vs ViT-C tiny" and row["n"] == "32/32/32/32"
    # the number is named by its quantity: gap ViT-P - gap ViT-C, positive where ViT-P loses more
    assert row["this study"] == f"gap ViT-P tiny − gap ViT-C tiny (of bests) = {gap.statistic:.2f} pts"
    assert gap.statistic > 0 and row["verdict"] == ("reproduced" if gap.verdict_holm == "b_better" else "not decided")
    # the four-group bests' calibrated p is at its Monte-Carlo floor here: Holm's p is then an upper bound too
    assert gap.test.mc[0] == 0 and gap.test.p == pytest.approx(1 / (CALIBRATION_STUDIES + 1), rel=0.5)
    assert row["p, Holm"] == f"p ≤ {gap.p_holm:.2g}" and f"p ≤ {gap.p_holm:.2g}]" in gap.sentence
    # claim 1: the probability the test estimates, of the first model's trials, and mean Δ first - second
    # (ViT-P's trials lie far from its best: a small probability and a positive difference)
    (pair,) = [f for f in _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny") if f.cell["optimizer"] == "adamw"]
    row = claims.loc[("1. lr/wd stability (Figs 5-6)", "AdamW, 6 ep")]
    mean_p, mean_c = pair.detail.mean_delta
    assert mean_p > mean_c and row["this study"].startswith(
        f"P(ViT-P tiny trial nearer its best than ViT-C tiny's) = {pair.statistic:.2f}; mean Δ ViT-P tiny − ViT-C "
        f"tiny = {mean_p - mean_c:.2f} pts ["
    )
    assert row["verdict"] == "reproduced" == ("reproduced" if pair.verdict_holm == "b_better" else "")
    assert set(claims.index.get_level_values("claim")) >= {
        "1. lr/wd stability (Figs 5-6)",
        "2. optimizer stability (Fig 3)",
    }
    assert claims_table(findings(_rows({k: v for k, v in cells.items() if k[0] == "vit_c_tiny"}))).empty


def test_the_claims_table_judges_claim_4_from_a_welch_test_of_seed_means():
    """Peak errors of one configuration over seeds test the error a model reaches: judged, and named by
    their quantity (mean ViT-P - mean ViT-C, positive: ViT-C lower)."""
    found = findings(_rows(SEED_CELLS))
    (peak,) = _of(found, "peak", "vit_p_tiny", "vit_c_tiny")
    row = claims_table(found).set_index("claim").loc["4. peak performance (Fig 7)"]
    low, high = peak.test.ci
    assert row["this study"] == f"mean ViT-P tiny − mean ViT-C tiny = {peak.statistic:.2f} pts [{low:.2f}, {high:.2f}]"
    assert (
        peak.statistic > 0
        and row["verdict"] == {"b_better": "reproduced", "inconclusive": "not decided"}[peak.verdict_holm]
    )


def test_numbers_are_shown_to_three_significant_figures_without_e_notation():
    assert [sig3(v) for v in (57.22, 0.012345, 1234.5, -0.8333, 2.977e-5)] == [
        "57.2",
        "0.0123",
        "1230",
        "-0.833",
        "0.0000298",
    ]
    assert sig3(float("nan")) == "–" and fmt_p(2.977e-12) == "p < 0.001"
