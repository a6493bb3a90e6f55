"""The report's numbers (analysis/report.py) on a hand-made study, built in-process (no figure: one
family, one lr/wd per cell, one length): the completeness line, the counts and the diverged share with
failed and diverged rows, the left-out table, and the findings' tables and sentences, against counts
by hand and Welch t from scipy.stats."""

import html
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from hpstudy.analysis.report import build_report, ranges_and_importance

NAN, INF = float("nan"), float("inf")
ERRORS = {  # (model, optimizer): (error, status) per seed, one lr/wd, 2 epochs
    ("vit_p_tiny", "adamw"): [(10.0, "ok"), (11.0, "ok"), (12.0, "ok"), (NAN, "failed")],
    ("vit_p_tiny", "sgd"): [(12.5, "ok"), (13.5, "ok"), (14.5, "ok")],
    ("vit_c_tiny", "adamw"): [(20.0, "ok"), (22.0, "ok"), (90.0, "diverged"), (NAN, "failed")],
    ("vit_c_tiny", "sgd"): [(21.0, "ok"), (23.0, "ok"), (25.0, "ok"), (INF, "ok")],  # ok, no finite error
}
RECORD = {"n_trials": 16, "spec": {"name": "r"}, "earlier_spec_rows": 3}
# 15 rows stored: 13 ok or diverged (finished), 2 failed; 12 counted (the inf row left out too)
COMPLETENESS = (
    "13 of 16 trials stored as ok/diverged (81%); 3 rows from an earlier spec of this study are not in these figures"
)


def _trials() -> pd.DataFrame:
    rows = [
        {
            "study": "r",
            "trial_key": f"{model}-{opt}-{seed}",
            "model": model,
            "family": "vit",
            "optimizer": opt,
            "epochs": 2,
            "lr": 1e-3,
            "wd": 0.1,
            "seed": seed,
            "status": status,
            "top1_err": err,
            "wall_s": 1.0,
        }
        for (model, opt), errors in ERRORS.items()
        for seed, (err, status) in enumerate(errors)
    ]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(index.html, report.json) of the hand-made study on the `final` error."""
    out = tmp_path_factory.mktemp("report")
    trials = _trials()
    page = open(build_report(trials, trials.iloc[:0], RECORD, str(out), metric="final")).read()
    return page, json.load(open(out / "report.json"))


def _shown_p(p: float) -> str:
    """A p as a table shows it: < 0.001, else two significant figures (two decimals from 0.1)."""
    return "< 0.001" if p < 0.001 else f"{p:.2g}" if p < 0.1 else f"{p:.2f}"


def _cells(page: str, section: str):
    """The body rows of the table in one section of the page, as the strings it shows."""
    body = page.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def _counted(model, opt):
    return np.array([e for e, s in ERRORS[(model, opt)] if s != "failed" and np.isfinite(e)])


def test_the_completeness_line_counts_stored_ok_and_diverged_trials_of_those_expected(report):
    page, data = report
    assert data["completeness"] == COMPLETENESS and f"<p>{COMPLETENESS}. Metric: <b>final</b>" in page
    assert (data["n_finished"], data["n_expected"], data["earlier_spec_rows"]) == (13, 16, 3)
    assert (data["n_failed"], data["n_left_out"]) == (2, 3)


def test_the_summary_counts_by_status_and_the_diverged_share_is_of_the_counted_trials(report):
    """vit_c_tiny AdamW: 2 ok, 1 diverged, 1 failed: 3 counted, 1 of them diverged (33.33%, not 1 of 4);
    errors 20, 22, 90: median 22, mean 44, sd sqrt(((-24)^2 + (-22)^2 + 46^2) / 2) = sqrt(1588)."""
    page, data = report
    sd = f"{math.sqrt(1588):.3g}"  # 3 significant figures
    assert _cells(page, "summary") == [
        ["vit_c_tiny", "adamw", "2", "seeds", "3", "1", "2", "1", "1", "33.3", "20", "22", "44", sd, "–", "–"],
        ["vit_c_tiny", "sgd", "2", "seeds", "3", "1", "4", "0", "0", "0", "21", "23", "23", "2", "–", "–"],
        ["vit_p_tiny", "adamw", "2", "seeds", "3", "1", "3", "0", "1", "0", "10", "11", "11", "1", "–", "–"],
        ["vit_p_tiny", "sgd", "2", "seeds", "3", "0", "3", "0", "0", "0", "12.5", "13.5", "13.5", "1", "–", "–"],
    ]
    summary = data["tables"]["summary"]  # report.json keeps 10 significant digits
    assert [row["diverged_share"] for row in summary] == pytest.approx([1 / 3, 0, 0, 0], rel=1e-9, abs=0)
    assert [row["sd"] for row in summary] == pytest.approx([math.sqrt(1588), 2, 1, 1], rel=1e-9)
    assert _cells(page, "left_out") == [
        ["vit_c_tiny", "adamw", "2", "1", "0"],
        ["vit_c_tiny", "sgd", "2", "0", "1"],
        ["vit_p_tiny", "adamw", "2", "1", "0"],
    ]


def _welch_pair():
    """The gap of gaps (vit_p SGD - AdamW) - (vit_c SGD - AdamW) by Welch-Satterthwaite, by hand."""
    groups = [_counted(m, o) for m in ("vit_p_tiny", "vit_c_tiny") for o in ("sgd", "adamw")]
    parts = np.array([g.var(ddof=1) / len(g) for g in groups])
    estimate = groups[0].mean() - groups[1].mean() - groups[2].mean() + groups[3].mean()
    df = parts.sum() ** 2 / np.sum(parts**2 / 2)
    return 2 * stats.t.sf(abs(estimate) / math.sqrt(parts.sum()), df)


def _holm(ps):
    """Holm's adjusted p-values: the i-th smallest times (m - i + 1), kept monotone, at most 1."""
    order = np.argsort(ps)
    out, running = np.empty(len(ps)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def test_the_findings_tables_show_welch_t_from_scipy_and_holm_over_the_five_tests(report):
    """vit_p_tiny's optimizer gap has p between alpha/2 and alpha (two-sided 0.038): decided at 5%,
    not after Holm (x 4); the peak at SGD (p 0.0055) holds after Holm (x 5)."""
    page, data = report
    c = {key: _counted(*key) for key in ERRORS}
    tests = {
        "gap p": stats.ttest_ind(c[("vit_p_tiny", "sgd")], c[("vit_p_tiny", "adamw")], equal_var=False),
        "gap c": stats.ttest_ind(c[("vit_c_tiny", "sgd")], c[("vit_c_tiny", "adamw")], equal_var=False),
        "peak adamw": stats.ttest_ind(c[("vit_p_tiny", "adamw")], c[("vit_c_tiny", "adamw")], equal_var=False),
        "peak sgd": stats.ttest_ind(c[("vit_p_tiny", "sgd")], c[("vit_c_tiny", "sgd")], equal_var=False),
    }
    p = {name: t.pvalue for name, t in tests.items()}
    p["pair"] = _welch_pair()
    holm = dict(zip(p, _holm(np.array(list(p.values())))))
    assert 0.025 < p["gap p"] < 0.05 < holm["gap p"] and holm["peak sgd"] < 0.05 < holm["gap c"]

    def row(name, estimate, verdict, verdict_holm, diverged, left_out):
        ci = tests[name].confidence_interval(0.95)
        # Welch's p is exact: no Monte-Carlo interval (–, –)
        numbers = [f"{estimate:.3g} [{ci.low:.3g}, {ci.high:.3g}]", _shown_p(p[name]), "–", "–", _shown_p(holm[name])]
        return [*numbers, verdict, verdict_holm, "3/3", diverged, left_out]

    assert _cells(page, "optimizer_gap") == [
        ["vit_c_tiny", "2", "Welch t on seed means", *row("gap c", -21, "inconclusive", "inconclusive", "0/1", "2")],
        ["vit_p_tiny", "2", "Welch t on seed means", *row("gap p", 2.5, "adamw_better", "inconclusive", "0/0", "1")],
    ]
    assert _cells(page, "peak") == [
        ["vit_p_tiny", "vit_c_tiny", "adamw", "2", "Welch t on seed means"]
        + row("peak adamw", -33, "inconclusive", "inconclusive", "0/1", "2"),
        ["vit_p_tiny", "vit_c_tiny", "sgd", "2", "Welch t on seed means"]
        + row("peak sgd", -9.5, "a_better", "a_better", "0/0", "1"),
    ]
    (pair,) = data["tables"]["optimizer_gap_pair"]
    assert pair["estimate"] == 23.5 and pair["p"] == pytest.approx(p["pair"], rel=1e-9)
    assert pair["p_holm"] == pytest.approx(holm["pair"], rel=1e-9) and pair["n_left_out"] == 3
    scope, *found = data["findings"]
    assert scope["sentence"].startswith(
        "5 tests at α = 0.05 each (Welch t on seed means (5)): 2 decided, 1 still decided after Holm's"
    )
    assert scope["sentence"].endswith(
        "12 trials counted on the final error, 1 of them diverged (counted at chance error); 2 failed and 1 "
        "without a finite error left out. The errors lie on a grid of 200 validation images (one image = 0.5 "
        "points)."  # every error here is a multiple of 0.5 points: as if k of 200 images
    )
    (gap,) = [f for f in found if f["kind"] == "optimizer_gap" and f["models"] == ["vit_p_tiny"]]
    ci = tests["gap p"].confidence_interval(0.95)
    # Welch tests the mean over seeds, and the sentence says so; decided at alpha, not after Holm (x 4)
    assert gap["sentence"].startswith(
        f"ViT-P tiny's mean error over seeds is 2.5 points higher with SGD than with AdamW (2 ep) [does not hold "
        f"after Holm's adjustment over the family's 5 tests: p = {holm['gap p']:.2f}]: "
    )
    assert (
        f"mean SGD − mean AdamW = +2.5 points [{ci.low:.1f}, {ci.high:.1f}] (Welch t, 95% CI, "
        f"p = {p['gap p']:.2g}, df {tests['gap p'].df:.1f}); SGD 13.50 ± 1.00% (best 12.50%), AdamW 11.00 ± 1.00% "
        "(best 10.00%); n = 3 per group; none diverged; 1 left out (failed / no finite error)"
    ) in gap["sentence"]
    for f in [scope, *found]:
        assert html.escape(f["sentence"]) in page


def test_the_page_opens_with_the_claims_and_folds_the_findings_unbolded(report):
    page, _ = report
    assert page.index('id="claims"') < page.index('id="findings"') < page.index('id="figures"')
    claims = _cells(page, "claims")
    assert claims and all(row[0].startswith(("1.", "2.", "3.", "4.")) for row in claims)
    assert all(
        row[-1] in ("reproduced", "contradicted", "not decided", "borderline") or row[-1].startswith("not tested")
        for row in claims
    )
    findings = page.split('<section id="findings">', 1)[1].split("</section>", 1)[0]
    assert findings.count("<details>") >= 2 and "font-weight" not in page and "<b>" not in findings


SECTIONS = [  # (id, title) of every section of a report page, in order
    ("claims", "The paper's claims"),
    ("status", "Status"),
    ("findings", "Findings"),
    ("figures", "Figures"),
    ("summary", "Summary per cell"),
    ("edf_pair", "Δ-EDFs, pairs of models (lr/wd stability; Figs 5-6)"),
    ("optimizer_gap", "Optimizer gap per model (Fig 3)"),
    ("optimizer_gap_pair", "Optimizer gap, pairs of models"),
    ("length_gap", "Training-length gap per model (Fig 2)"),
    ("length_gap_pair", "Training-length gap, pairs of models"),
    ("peak", "Peak error over seeds, best configurations (Fig 7)"),
    ("good_ranges", "Good lr/wd ranges and fANOVA importance"),
    ("ema_gain", "EMA gain (best - EMA best, per trial as pycls, and of the bests)"),
    ("left_out", "Trials left out (failed, or no finite error under the metric)"),
    ("spec", "Spec"),
]


def _section(page: str, section: str) -> str:
    """What one section of the page holds below its heading."""
    return page.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0].split("</h2>", 1)[1]


def test_the_contents_list_links_every_section_in_page_order(report):
    page, _ = report
    headings = re.findall(r'<section id="([^"]+)"><h2>(.*?)</h2>', page)
    assert headings == [(key, html.escape(title)) for key, title in SECTIONS]
    links = "".join(f'<li><a href="#{key}">{html.escape(title)}</a></li>' for key, title in SECTIONS)
    assert f"<nav><ol>{links}</ol></nav>" in page


def test_a_table_without_rows_says_why_and_seed_only_cells_draw_no_figure(report):
    """One lr/wd per cell, one length, no EMA: no Δ-EDF pair, length gap, good range or EMA table, and
    no figure; the status says these are seed statistics."""
    page, _ = report
    for key in ("edf_pair", "length_gap", "length_gap_pair", "good_ranges"):
        assert _section(page, key) == "<p><em>not enough trials for this table yet</em></p>", key
    assert _section(page, "ema_gain") == (
        "<p><em>no trial has an EMA error: EMA was off (or the store predates best_ema_top1_err)</em></p>"
    )
    assert _section(page, "figures") == ""
    assert (
        "<p>Every cell ran one lr/wd over seeds: these are seed statistics (mean ± sd, Welch t), so no Δ-EDF, "
        "good range or expected-best output is shown (they describe lr/wd robustness).</p>"
    ) in _section(page, "status")


def test_the_claims_say_their_verdicts_are_after_holm(report):
    page, _ = report
    assert _section(page, "claims").startswith(
        "<p>Each row is a finding below on a ViT-P / ViT-C pair: its number with its interval, and its verdict "
        "after Holm's adjustment over the report's tests.</p>"
    )


def test_fanova_importance_of_the_good_ranges_goes_to_the_hyperparameter_the_error_depends_on():
    """Eight lr/wd samples whose error depends on wd only (lr crossed with it): wd carries most of the
    normalized importances (they sum to 1), the same on every percentile row."""
    log_wd = np.linspace(-3, -1, 8)
    log_lr = np.array([-4, -2, -3.5, -2.5, -3, -2.25, -3.75, -2.75])  # no trend along wd
    trials = pd.DataFrame(
        {
            "model": "vit_p_tiny",
            "optimizer": "adamw",
            "epochs": 2,
            "lr": 10**log_lr,
            "wd": 10**log_wd,
            "seed": 0,
            "status": "ok",
            "top1_err": 10 + 4 * (log_wd + 2) ** 2,
        }
    )
    table, ranges = ranges_and_importance(trials, "final")
    assert list(ranges) == [("vit_p_tiny", "adamw")] and len(table) == len(ranges[("vit_p_tiny", "adamw")])
    importance = table[["importance_lr", "importance_wd"]].drop_duplicates()
    assert len(importance) == 1
    lr, wd = importance.iloc[0]
    assert lr + wd == pytest.approx(1) and wd > 2 * lr
