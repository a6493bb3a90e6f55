"""The report's numbers (analysis/report.py, analysis/report_page.py) on a hand-made study, built
in-process (no figure: one family, one lr/wd per cell, one length): the status line, the counts and the
diverged share with failed and diverged rows, the left-out table, and the findings' tables and sentences,
against counts by hand and Welch t from scipy.stats; a seeds-only study of ViT-P and ViT-C has the
sections its design holds, then the paper's claims."""

import html
import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import scipy

from hpstudy.analysis.inference import RULES

NAN, INF = float("nan"), float("inf")
ERRORS = {  # (model, optimizer): (error, status) per seed, one lr/wd, 2 epochs
    ("vit_p_tiny", "adamw"): [(10.0, "ok"), (11.0, "ok"), (12.0, "ok"), (NAN, "failed")],
    ("vit_p_tiny", "sgd"): [(12.5, "ok"), (13.5, "ok"), (14.5, "ok")],
    ("vit_c_tiny", "adamw"): [(20.0, "ok"), (22.0, "ok"), (90.0, "diverged"), (NAN, "failed")],
    ("vit_c_tiny", "sgd"): [(21.0, "ok"), (23.0, "ok"), (25.0, "ok"), (INF, "ok")],  # ok, no finite error
}
WELCH = RULES["welch"]
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
    from hpstudy.analysis.report import build_report

    out = tmp_path_factory.mktemp("report")
    trials = _trials()
    page = open(build_report(trials, trials.iloc[:0], RECORD, str(out), metric="final")).read()
    return page, json.load(open(out / "report.json"))


def _shown_p(p: float) -> str:
    """A p as a table shows it: < 0.001, else two significant figures (two decimals from 0.1)."""
    return "< 0.001" if p < 0.001 else f"{p:.2g}" if p < 0.1 else f"{p:.2f}"


def _rows(fragment: str):
    """The body rows of the first table in an HTML fragment, as the strings it shows."""
    table = fragment.split("<table", 1)[1].split("</table>", 1)[0]
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S) if "<td>" in row]


def _table(page: str, title: str):
    """The body rows of the table under the heading `title`."""
    return _rows(page.split(f"<h3>{html.escape(title)}</h3>", 1)[1])


def _section(page: str, section: str) -> str:
    """What one section of the page holds below its heading."""
    return page.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0].split("</h2>", 1)[1]


def _counted(model, opt):
    return np.array([e for e, s in ERRORS[(model, opt)] if s != "failed" and np.isfinite(e)])


def test_the_completeness_line_counts_stored_ok_and_diverged_trials_of_those_expected(report):
    page, data = report
    assert data["completeness"] == COMPLETENESS and f"Status: {COMPLETENESS}.</p>" in _section(page, "study")
    assert "Every number is on the <b>final</b> error" in _section(page, "study")
    assert (data["n_finished"], data["n_expected"], data["earlier_spec_rows"]) == (13, 16, 3)
    assert (data["n_failed"], data["n_left_out"]) == (2, 3)


def test_the_summary_counts_by_status_and_the_diverged_share_is_of_the_counted_trials(report):
    """vit_c_tiny AdamW: 2 ok, 1 diverged, 1 failed: 3 counted, 1 of them diverged (33.33%, not 1 of 4);
    errors 20, 22, 90: median 22, mean 44, sd sqrt(((-24)^2 + (-22)^2 + 46^2) / 2) = sqrt(1588)."""
    page, data = report
    sd = f"{math.sqrt(1588):.2f}"  # two decimals
    seeds = "one lr/wd over seeds"
    assert _rows(_section(page, "cells")) == [  # catalogue order: ViT-P before ViT-C
        ["ViT-P tiny", "AdamW, 2 ep", seeds, "3", "0", "1", "1", "10.00", "11.00", "11.00 ± 1.00", "–"],
        ["ViT-P tiny", "SGD, 2 ep", seeds, "3", "0", "0", "0", "12.50", "13.50", "13.50 ± 1.00", "–"],
        ["ViT-C tiny", "AdamW, 2 ep", seeds, "3", "1", "1", "1", "20.00", "22.00", f"44.00 ± {sd}", "–"],
        ["ViT-C tiny", "SGD, 2 ep", seeds, "3", "0", "0", "1", "21.00", "23.00", "23.00 ± 2.00", "–"],
    ]
    summary = data["tables"]["summary"]  # report.json keeps 10 significant digits
    assert [row["diverged_share"] for row in summary] == pytest.approx([1 / 3, 0, 0, 0], rel=1e-9, abs=0)
    assert [row["sd"] for row in summary] == pytest.approx([math.sqrt(1588), 2, 1, 1], rel=1e-9)
    assert _table(page, "Trials left out (failed, or no finite error under the metric)") == [
        ["ViT-P tiny", "AdamW, 2 ep", "1", "0"],
        ["ViT-C tiny", "AdamW, 2 ep", "1", "0"],
        ["ViT-C tiny", "SGD, 2 ep", "0", "1"],
    ]


def _welch_pair():
    """The gap of gaps (vit_p SGD - AdamW) - (vit_c SGD - AdamW) by Welch-Satterthwaite, by hand."""
    groups = [_counted(m, o) for m in ("vit_p_tiny", "vit_c_tiny") for o in ("sgd", "adamw")]
    parts = np.array([g.var(ddof=1) / len(g) for g in groups])
    estimate = groups[0].mean() - groups[1].mean() - groups[2].mean() + groups[3].mean()
    df = parts.sum() ** 2 / np.sum(parts**2 / 2)
    return 2 * scipy.stats.t.sf(abs(estimate) / math.sqrt(parts.sum()), df)


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
        "gap p": scipy.stats.ttest_ind(c[("vit_p_tiny", "sgd")], c[("vit_p_tiny", "adamw")], equal_var=False),
        "gap c": scipy.stats.ttest_ind(c[("vit_c_tiny", "sgd")], c[("vit_c_tiny", "adamw")], equal_var=False),
        "peak adamw": scipy.stats.ttest_ind(c[("vit_p_tiny", "adamw")], c[("vit_c_tiny", "adamw")], equal_var=False),
        "peak sgd": scipy.stats.ttest_ind(c[("vit_p_tiny", "sgd")], c[("vit_c_tiny", "sgd")], equal_var=False),
    }
    p = {name: t.pvalue for name, t in tests.items()}
    p["pair"] = _welch_pair()
    holm = dict(zip(p, _holm(np.array(list(p.values())))))
    assert 0.025 < p["gap p"] < 0.05 < holm["gap p"] and holm["peak sgd"] < 0.05 < holm["gap c"]

    def row(name, quantity, estimate, verdict):
        ci = tests[name].confidence_interval(0.95)
        shown = f"{quantity} = {estimate:+.2f} [{ci.low:+.2f}, {ci.high:+.2f}]"
        return [shown, _shown_p(p[name]), _shown_p(holm[name]), verdict, "3/3"]  # one test: said in the note

    assert f"Test: {WELCH}. Intervals are 95% confidence intervals of the difference of seed means" in page
    gaps = _table(page, "Optimizer gap per model")
    assert sorted(gaps) == [
        ["ViT-C tiny", "2 ep", *row("gap c", "mean SGD − mean AdamW", -21, "not decided")],
        ["ViT-P tiny", "2 ep", *row("gap p", "mean SGD − mean AdamW", 2.5, "not decided")],  # decided, not after Holm
    ]
    assert _table(page, "Peak error, pairs of models (longest schedule)") == [
        [
            "ViT-P tiny vs ViT-C tiny",
            "AdamW, 2 ep",
            *row("peak adamw", "mean ViT-P tiny − mean ViT-C tiny", -33, "not decided"),
        ],
        [
            "ViT-P tiny vs ViT-C tiny",
            "SGD, 2 ep",
            *row("peak sgd", "mean ViT-P tiny − mean ViT-C tiny", -9.5, "ViT-P tiny lower"),
        ],
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


SECTIONS = [  # (id, title) of every section of this study's page, in order: one length, no lr/wd samples
    ("study", "The study: ViT-P tiny vs ViT-C tiny"),
    ("models", "Models: ViT-P tiny vs ViT-C tiny"),
    ("optimizers", "Optimizers: AdamW vs SGD"),
    ("claims", "The paper's claims (Xiao et al. 2021)"),  # a ViT-P / ViT-C study: after its own results
    ("cells", "Every cell"),
    ("spec", "Spec"),
]


def test_the_page_has_a_section_per_comparison_the_design_holds_and_a_contents_list(report):
    page, _ = report
    headings = re.findall(r'<section id="([^"]+)"><h2>(.*?)</h2>', page)
    assert headings == [(key, html.escape(title)) for key, title in SECTIONS]
    links = "".join(f'<li><a href="#{key}">{html.escape(title)}</a></li>' for key, title in SECTIONS)
    assert f"<nav><ol>{links}</ol></nav>" in page
    assert "not enough trials" not in page and "<details>" not in page and "<figure" not in page


def test_a_seeds_only_study_says_so_and_shows_no_lr_wd_output(report):
    page, _ = report
    assert (
        "<p>Every cell ran one lr/wd over seeds: these are seed statistics (mean ± sd, Welch t), so no Δ-EDF, "
        "good range or expected-best output is shown (they describe lr/wd robustness).</p>"
    ) in _section(page, "study")
    assert "Good ranges" not in page and "EMA gain" not in page  # nor a table of what did not run


def test_the_claims_come_after_the_study_and_say_their_verdicts_are_after_holm(report):
    page, _ = report
    claims = _section(page, "claims")
    assert "its verdict after Holm's adjustment over the report's tests" in claims
    rows = _rows(claims)
    assert rows and all(row[0].startswith(("1.", "2.", "3.", "4.")) for row in rows)
    assert all(
        row[-1] in ("reproduced", "contradicted", "not decided", "borderline") or row[-1].startswith("not tested")
        for row in rows
    )


def test_fanova_importance_of_the_good_ranges_goes_to_the_hyperparameter_the_error_depends_on():
    """Eight lr/wd samples whose error depends on wd only (lr crossed with it): wd carries most of the
    normalized importances (they sum to 1), the same on every percentile row."""
    from hpstudy.analysis.report import ranges_and_importance

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
    assert list(ranges) == [("vit_p_tiny", "adamw", 2)] and len(table) == len(ranges[("vit_p_tiny", "adamw", 2)])
    importance = table[["importance_lr", "importance_wd"]].drop_duplicates()
    assert len(importance) == 1
    lr, wd = importance.iloc[0]
    assert lr + wd == pytest.approx(1) and wd > 2 * lr
