"""A report about the user's own study (issue #39): a zoo model (vit_c_tiny) against a timm: model, label
smoothing sampled beside lr and wd, at two lengths. Its first screen is about those two models (the
study, the best error per cell, the main Δ-EDF, the decided findings as sentences); then one section per
comparison the design holds, named by what it compares, and nothing for what it cannot show; verdicts
in words, numbers for readers, intervals explained, tables that fit a 1,280 px page; captions beside
the figures as Markdown and LaTeX."""

import html
import json
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpstudy.analysis.captions import latex
from hpstudy.analysis.findings import VERDICTS
from hpstudy.analysis.report_page import DECIDED
from tests.helpers import make_trials, svg_only

MODELS = {"vit_c_tiny": "ViT-C tiny", "timm:resnet10t": "timm:resnet10t"}
SAMPLED = {"lr": "log_uniform", "wd": "log_uniform", "label_smoothing": "uniform"}


def _own_study() -> pd.DataFrame:
    """8 random lr/wd/label-smoothing trials per model at 6 and 16 epochs, AdamW; the timm model's errors
    spread six times wider (so the two differ), some trials diverged."""
    trials = make_trials(models=tuple(MODELS), optimizers=("adamw",), epochs=(6, 16), n=8, seed=2)
    wide = (trials["model"] == "timm:resnet10t") & (trials["status"] == "ok")
    trials.loc[wide, "top1_err"] = 10 + 6 * (trials.loc[wide, "top1_err"] - 10)
    smoothing = np.random.default_rng(0).uniform(0, 0.2, len(trials))
    return trials.assign(study="mine", family=trials["model"], label_smoothing=smoothing)


TRIALS = _own_study()
RECORD = {"n_trials": len(TRIALS), "spec": {"name": "mine", "models": list(MODELS)}, "sampled": SAMPLED}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(index.html, report.json, folder) of the own study's report on the `final` error."""
    import hpstudy.analysis.report as report_module
    from hpstudy.analysis.report import build_report

    out = tmp_path_factory.mktemp("own")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "save_figure", svg_only)
        page = open(build_report(TRIALS, TRIALS.iloc[:0], RECORD, str(out), metric="final")).read()
    return page, json.load(open(out / "report.json")), out


def _section(page: str, section: str) -> str:
    return page.split(f'<section id="{section}">', 1)[1].split("</section>", 1)[0]


def _tables(page: str):
    """Every table of the page as (header cells, body rows), each cell's text unescaped."""
    out = []
    for table in re.findall(r"<table.*?</table>", page, re.S):
        header = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", table, re.S)]
        rows = [
            [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
            if "<td>" in row
        ]
        out.append((header, rows))
    return out


def test_the_first_screen_is_the_users_study_its_best_errors_main_figure_and_decided_findings(report):
    page, data, _ = report
    first = _section(page, "study")
    assert page.index('<section id="study">') < page.index("<section", page.index('<section id="study">') + 1)
    assert "<h2>The study: ViT-C tiny vs timm:resnet10t</h2>" in first
    assert (
        "This study trains ViT-C tiny (vit_c_tiny) and timm:resnet10t in 2 cells (AdamW, 6 ep; AdamW, 16 ep): "
        "random samples of lr, wd and label_smoothing (8 trials counted per cell)."
    ) in html.unescape(first)
    assert f"Status: {data['completeness']}." in first and "ViT-P" not in first and "paper" not in first
    counted = TRIALS[TRIALS["status"] != "failed"].groupby(["model", "epochs"])["top1_err"]
    best, n = counted.min(), counted.size()
    (_, rows), *_ = _tables(first)
    assert rows == [
        [label, *(f"{best[(model, e)]:.2f}% (n = {n[(model, e)]})" for e in (6, 16))] for model, label in MODELS.items()
    ]
    main = re.findall(r'<figure id="([^"]+)">', first)
    assert main == ["delta_edf_adamw_16ep"]  # equal n: the longest schedule
    assert json.load(open(report[2] / "delta_edf_adamw_16ep.json"))["models"] == sorted(MODELS)
    decided = [f["sentence"] for f in data["findings"] if f["kind"] == "scope" or f["verdict_holm"] in DECIDED]
    shown = [html.unescape(s) for s in re.findall(r"<li>(.*?)</li>", first.split("<h3>Decided findings</h3>")[1])]
    assert shown == decided and len(decided) > 1 and "<details>" not in page


def test_one_section_per_comparison_the_design_holds_named_by_what_it_compares(report):
    page, _, _ = report
    assert re.findall(r'<section id="([^"]+)"><h2>(.*?)</h2>', page) == [
        ("study", "The study: ViT-C tiny vs timm:resnet10t"),
        ("models", "Models: ViT-C tiny vs timm:resnet10t"),
        ("lengths", "Training lengths: 6 vs 16 epochs"),
        ("sampled", "Sampled fields: lr, wd and label_smoothing"),
        ("cells", "Every cell"),
        ("spec", "Spec"),
    ]  # one optimizer: no optimizer section; no ViT-P: no claims
    assert "not enough trials" not in page and "Fig 3" not in page and "Fig 7" not in page
    assert {"error_vs_epochs", "delta_error_vs_epochs"} <= set(
        re.findall(r'<figure id="([^"]+)"', _section(page, "lengths"))
    )
    sampled = re.findall(r'<figure id="([^"]+)"', _section(page, "sampled"))
    assert [name for name in sampled if not name.startswith("delta_edf")] == [
        "hp_scatter_adamw_6ep",  # per (optimizer, epochs) cell: the 6 and 16 epochs never pooled
        "expected_best_adamw_6ep",
        "hp_scatter_adamw_16ep",
        "expected_best_adamw_16ep",
        "expected_best_hours",  # a panel per cell: the expected best at equal compute
    ]
    assert "label_smoothing" in _section(page, "sampled")


def test_verdicts_are_words_numbers_are_for_readers_and_every_interval_is_explained(report):
    page, _, _ = report
    tables = _tables(page)
    tokens = [v for v in VERDICTS if "_" in v]
    for header, rows in tables:
        for row in rows:
            assert not {c for c in row if c in tokens}, row
            assert not [c for c in row if re.search(r"\d\.\d{5,}", c)], row  # no 0.000000795 (p: 0.0025)
    interval_tables = re.findall(r"<table.*?\[95% CI\].*?</table>(.*?)(?:<h3>|</section>)", page, re.S)
    assert interval_tables and all("class='note'" in after and "95%" in after for after in interval_tables)


CHAR_PX, PAD_PX = 7.0, 16  # 13 px text: about 7 px a character
HEADER_PX, CELL_PX = 12 * 13, 20 * 13  # the page's CSS wraps a header at 12em, a cell at 20em


def _wrapped(text: str, at: float) -> float:
    """The width of `text` wrapped at `at` px: at most that, at least its longest word."""
    return max(min(len(text) * CHAR_PX, at), max((len(w) for w in text.split()), default=0) * CHAR_PX)


def _width(header, rows) -> float:
    """A table's width in px as the page's CSS lays it out."""
    total = 0.0
    for i, name in enumerate(header):
        cells = [_wrapped(row[i], CELL_PX) for row in rows if i < len(row)]
        total += max([_wrapped(name, HEADER_PX), *cells]) + PAD_PX
    return total


def test_every_table_fits_a_1280_px_page(report):
    page, _, _ = report
    for header, rows in _tables(page):
        assert _width(header, rows) <= 1200, (header, rows[:1])


def test_captions_stand_beside_the_figures_as_markdown_and_latex(report):
    page, data, out = report
    figures = data["figures"]
    assert set(figures) == set(re.findall(r'<figure id="([^"]+)"', page))
    markdown, tex = (out / "captions.md").read_text(), (out / "captions.tex").read_text()
    for name, figure in figures.items():
        assert f"## {name}\n\n![{name}]({name}.png)\n\n{figure['caption']}\n" in markdown
        assert f"<figcaption>{html.escape(figure['caption'])} (" in page
        assert (
            f"\\includegraphics{{{name}.pdf}}\n  \\caption{{{latex(figure['caption'])}}}\n  \\label{{fig:{name}}}"
            in tex
        )
    assert tex.isascii() and tex.count("\\begin{figure}") == len(figures)


@given(st.text(alphabet=st.sampled_from(list("ab %&$#_{}~^\\Δ−·±≤α×é")), max_size=40))
def test_latex_escapes_every_special_character_and_writes_ascii(text):
    escaped = latex(text)
    assert escaped.isascii()
    bare = re.sub(r"\\[a-zA-Z]+\{\}|\\[%&$#_{}]|\$\\[a-zA-Z]+\$|\$-\$", "", escaped)
    assert not set(bare) & set("%&$#_{}~^\\")


def test_a_spec_that_gives_a_timm_model_a_size_class_gets_the_papers_size_panels(tmp_path, monkeypatch):
    """vit_c_1gf beside timm:resnet10t: one panel; the spec's `models:` giving the timm model the size
    class tiny: a panel per size class, as the paper draws them."""
    import hpstudy.analysis.report as report_module
    from hpstudy.analysis.report import build_report, spec_sizes

    models = [{"name": "timm:resnet10t", "family": "resnet", "size": "tiny"}, "vit_c_1gf", {"name": "timm:x"}]
    assert spec_sizes({"spec": {"models": models}}) == {"timm:resnet10t": "tiny"} and spec_sizes(None) == {}
    panels = {}

    def titles(plot, out, name, data, meta):
        panels[name] = [ax.get_title() for ax in plot.fig.axes if ax.get_visible()]
        return svg_only(plot, out, name, data, meta)

    monkeypatch.setattr(report_module, "save_figure", titles)
    trials = TRIALS[TRIALS["epochs"] == 16].replace({"vit_c_tiny": "vit_c_1gf"})
    for spec, drawn in (({"models": ["vit_c_1gf", "timm:resnet10t"]}, [""]), ({"models": models[:2]}, ["tiny", "1gf"])):
        build_report(trials, trials.iloc[:0], {"n_trials": 1, "spec": spec}, str(tmp_path / str(len(drawn))), "final")
        assert panels["delta_edf_adamw_16ep"] == drawn
