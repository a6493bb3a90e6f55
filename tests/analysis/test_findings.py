"""Findings (analysis/findings.py): the generated sentences and their numbers, and `hpstudy suggest`."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from hpstudy.analysis.findings import findings, fmt_p
from hpstudy.analysis.gaps import length_gap, optimizer_gap
from hpstudy.analysis.stats import good_ranges, min_detectable_d, trials_for_ks
from hpstudy.cli import hpstudy_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store import write_trial
from hpstudy.study.store_read import load_study
from hpstudy.study.store_spec_record import write_spec_record
from hpstudy.study.suggest import fixed_points, space_lines
from tests.helpers import make_trials, small_spec, stored_row

N_BOOT = 200


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


C_ERR = list(10 + np.linspace(0, 1.5, 8))  # vit_c_tiny: every trial near its best
P_ERR = [10.0] + [20.0 + 2 * i for i in range(7)]  # vit_p_tiny: one near its best, the rest 10-22 points off


def test_a_known_ordering_gives_the_dominance_sentence_with_its_numbers():
    found = findings(_rows({("vit_p_tiny", "adamw", 6): P_ERR, ("vit_c_tiny", "adamw", 6): C_ERR}), n_boot=N_BOOT)
    (pair,) = _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny")
    dp, dc = np.array(P_ERR) - 10, np.array(C_ERR) - 10
    expected = stats.ks_2samp(dc, dp, alternative="greater")
    assert pair.verdict == "b_better" and pair.better == "vit_c_tiny"
    assert pair.statistic == pytest.approx(7 / 8) == pytest.approx(expected.statistic)
    assert pair.p == pytest.approx(expected.pvalue) and pair.p < 0.025
    assert pair.detail["ks_d_a_better"] == 0  # vit_p is nowhere above: "dominates"
    assert pair.detail["area"] == pytest.approx(stats.wasserstein_distance(dc, dp))
    assert pair.detail["area_lo"] <= pair.detail["area"] <= pair.detail["area_hi"]
    assert pair.detail["within2_b"] == 1.0 and pair.detail["within2_a"] == 1 / 8
    assert pair.n == (8, 8) and pair.cell == {"optimizer": "adamw", "epochs": 6}
    assert pair.sentence.startswith(
        f"vit_c_tiny's Δ-EDF dominates vit_p_tiny's (AdamW, 6 ep): one-sided KS "
        f"D = 0.88, {fmt_p(expected.pvalue)}, n = 8/8; area between Δ-EDFs "
        f"{pair.detail['area']:.1f} points ["
    )
    assert "within 2 points of own best: vit_p_tiny 12%, vit_c_tiny 100%" in pair.sentence
    scope = found[0]
    assert scope.kind == "scope" and scope.sentence.startswith("1 test at α = 0.05 each, 1 decided")
    assert fmt_p(8.2e-5) == "p = 8e-5" and fmt_p(0.0123) == "p = 0.012" and fmt_p(0.43) == "p = 0.43"


def test_a_small_sample_is_inconclusive_and_says_what_it_would_take():
    found = findings(
        _rows({("vit_p_tiny", "sgd", 4): [10, 11, 12.5, 14], ("vit_c_tiny", "sgd", 4): [20, 21.2, 22, 24]}),
        n_boot=N_BOOT,
    )
    (pair,) = _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny")
    d_min = min_detectable_d(4, 4)
    assert pair.verdict == "inconclusive" and pair.better is None
    assert f"inconclusive at this n (minimum detectable D = {d_min:.2f}): KS D = 0.25" in pair.sentence
    assert pair.statistic == pytest.approx(0.25) and pair.n == (4, 4)
    assert f"about {trials_for_ks(0.25)} trials per model would make D = 0.25 significant" in pair.sentence
    # one point per model: no lr/wd study, no Δ-EDF test; no repeated seed: the peak has no noise floor
    (peak,) = _of(found, "peak", "vit_p_tiny", "vit_c_tiny")
    assert peak.verdict == "inconclusive" and "no noise floor" in peak.sentence and peak.p is None


def test_failed_trials_are_left_out_and_counted_diverged_count_at_chance():
    cells = {("vit_p_tiny", "adamw", 6): P_ERR + [float("nan")], ("vit_c_tiny", "adamw", 6): C_ERR + [90.0]}
    found = findings(_rows(cells), n_boot=N_BOOT)
    (pair,) = _of(found, "edf_pair", "vit_p_tiny", "vit_c_tiny")
    dp, dc = np.array(P_ERR) - 10, np.array(C_ERR + [90.0]) - 10
    expected = stats.ks_2samp(dc, dp, alternative="greater")
    assert pair.n == (8, 9) and pair.n_left_out == (1, 0)
    assert pair.statistic == pytest.approx(8 / 9 - 1 / 8) == pytest.approx(expected.statistic)
    assert pair.p == pytest.approx(expected.pvalue)
    assert pair.detail["ks_d_a_better"] == pytest.approx(1 / 9)  # the diverged vit_c trial: now vit_p is above there
    assert pair.verdict == "b_better" and "lies above" in pair.sentence and "1 left out (failed" in pair.sentence
    scope = found[0]
    assert scope.detail["n_failed"] == 1 and scope.detail["n_diverged"] == 1 and scope.n == (17,)
    assert "1 of them diverged (counted at chance error); 1 failed left out" in scope.sentence


def test_optimizer_gap_findings_match_the_gap_table():
    cells = {
        ("vit_p_tiny", "adamw", 6): P_ERR,
        ("vit_p_tiny", "sgd", 6): [e + 30 for e in P_ERR],
        ("vit_c_tiny", "adamw", 6): C_ERR,
        ("vit_c_tiny", "sgd", 6): [e + 0.1 * (-1) ** i for i, e in enumerate(C_ERR)],
    }
    trials = _rows(cells)
    found = findings(trials, n_boot=N_BOOT)
    table = optimizer_gap(trials, n_boot=N_BOOT).set_index("model")
    (p_gap,) = _of(found, "optimizer_gap", "vit_p_tiny")
    assert p_gap.statistic == pytest.approx(30.0) == pytest.approx(table.loc["vit_p_tiny", "gap"])
    assert p_gap.ci == pytest.approx((table.loc["vit_p_tiny", "gap_lo"], table.loc["vit_p_tiny", "gap_hi"]))
    assert p_gap.verdict == "adamw_better" and p_gap.sentence.startswith("vit_p_tiny loses 30.0 points when SGD")
    (c_gap,) = _of(found, "optimizer_gap", "vit_c_tiny")
    assert (
        c_gap.statistic == pytest.approx(0.1)
        and table.loc["vit_c_tiny", "gap_lo"] < 0 < table.loc["vit_c_tiny", "gap_hi"]
    )
    assert c_gap.verdict == "inconclusive" and "inconclusive at this n (the CI includes 0)" in c_gap.sentence
    (pair,) = _of(found, "optimizer_gap_pair", "vit_p_tiny", "vit_c_tiny")
    assert pair.statistic == pytest.approx(29.9) and pair.verdict == "b_better" and pair.ci[0] > 0
    assert pair.sentence.startswith("vit_p_tiny loses 29.9 points more than vit_c_tiny when SGD replaces AdamW")


def test_length_gap_and_peak_against_the_seed_noise():
    seeds = lambda base, spread: [(base + spread * s, s) for s in range(3)]  # noqa: E731 - one lr/wd, 3 seeds
    # the short schedule's seeds spread 5x more: the peak's noise is the best configuration's own
    cells = {
        ("vit_p_tiny", "adamw", 2): seeds(30, 5.0),
        ("vit_p_tiny", "adamw", 8): seeds(20, 1.0),
        ("vit_c_tiny", "adamw", 2): seeds(11, 0.5),
        ("vit_c_tiny", "adamw", 8): seeds(10, 0.5),
    }
    trials = _rows(cells)
    found = findings(trials, n_boot=N_BOOT)
    assert not [f for f in found if f.kind == "edf_pair"]  # one lr/wd per model: seeds only
    gaps = length_gap(trials).set_index(["model", "epochs"])["gap"]
    (p_len,) = _of(found, "length_gap", "vit_p_tiny")
    assert p_len.statistic == pytest.approx(gaps[("vit_p_tiny", 2)]) == pytest.approx(10.0)
    assert p_len.verdict == "shorter_worse" and p_len.sentence.startswith("vit_p_tiny at 2 epochs is 10.0 points above")
    (pair,) = _of(found, "length_gap_pair", "vit_p_tiny", "vit_c_tiny")
    assert pair.statistic == pytest.approx(9.0) and pair.verdict == "b_better" and pair.better == "vit_c_tiny"
    (peak,) = _of(found, "peak", "vit_p_tiny", "vit_c_tiny")
    sigma = np.sqrt(1.0**2 + 0.5**2)  # std over the 3 seeds at 8 epochs: spread 1.0 and 0.5
    assert peak.statistic == pytest.approx(10.0) and peak.detail["sigma"] == pytest.approx(sigma)
    assert peak.p == pytest.approx(2 * stats.norm.sf(10 / sigma)) and peak.verdict == "b_better"
    assert peak.sentence.startswith("vit_c_tiny reaches a lower best error than vit_p_tiny, beyond the seed noise")
    assert f"{10 / sigma:.1f} × the seed-to-seed noise" in peak.sentence


def test_findings_are_plain_json():
    found = findings(_rows({("vit_p_tiny", "adamw", 6): P_ERR, ("vit_c_tiny", "adamw", 6): C_ERR}), n_boot=N_BOOT)
    for record in json.loads(json.dumps([f.as_dict() for f in found])):
        assert {"kind", "models", "cell", "statistic", "p", "n", "verdict", "sentence"} <= set(record)


def _store(root, trials):
    for row in trials.drop(columns="study").to_dict("records"):
        write_trial(root, "gen", stored_row(**row))
    write_spec_record(root, "gen", {"name": "gen", "samples": 40}, len(trials))


@pytest.mark.slow
def test_report_opens_with_findings_and_report_json_carries_them(tmp_path):
    from hpstudy.analysis.report import build_report

    store = str(tmp_path / "store")
    trials = make_trials(models=("vit_p_tiny", "vit_c_tiny"), optimizers=("adamw",), n=10, fail_share=0.1, seed=3)
    _store(store, trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        page = build_report(*load_study(store, "gen"), str(tmp_path / "rep"))
    html = open(page).read()
    assert html.index("<h2>Findings</h2>") < html.index("<h2>Status</h2>") < html.index("<h2>Summary per cell")
    report = json.load(open(tmp_path / "rep" / "report.json"))
    kinds = [f["kind"] for f in report["findings"]]
    assert kinds[0] == "scope" and "edf_pair" in kinds and "peak" in kinds
    for f in report["findings"]:
        assert f["sentence"].replace("'", "&#x27;") in html or f["sentence"] in html
    assert "ks_d_a_better" not in html.split("<h2>Spec")[0].split("Model comparisons")[1]  # readable names
    assert "KS D, a better (one-sided)" in html and "samples: 40" in html  # spec as YAML


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
