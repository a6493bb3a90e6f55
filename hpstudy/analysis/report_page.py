"""The report's page, laid out by the study's design: first the study (its models, cells, n and status, the
best error per cell, the main Δ-EDF figure and the decided findings as sentences), then one section per
comparison the design holds (models, optimizers, training lengths, sampled fields), the paper's claims
where the study compares ViT-P and ViT-C, every cell's numbers and the spec. Nothing is shown for what
the design cannot show. Sentences are the findings' own (hpstudy.analysis.findings); tables are read by
people: names, words for verdicts, numbers to two decimals, and a note on what each interval is."""

import html
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import yaml

from hpstudy.analysis.catalogue import catalogue_order, model_label
from hpstudy.analysis.edf import EDF_CONVENTION
from hpstudy.analysis.effects import COMPARED
from hpstudy.analysis.findings import CALIBRATION_DOC, DeltaDetail, Finding, GapDetail, claims_table, fmt_p
from hpstudy.analysis.findings.text import cell_text
from hpstudy.analysis.inference import ALPHA, RULES

DECIDED = ("a_better", "b_better", "adamw_better", "sgd_better", "shorter_worse", "shorter_better")
OPTIMIZERS = {"adamw": "AdamW", "sgd": "SGD"}
READING_DOC = "docs/reading-a-report.md"


@dataclass(frozen=True)
class Drawn:
    """A figure the report drew: its file name, the section it belongs to, its caption and its files."""

    name: str
    section: str  # "main", "models", "lengths" or "sampled"
    caption: str
    paths: Dict[str, str]


@dataclass(frozen=True)
class Comparison:
    """A section of the page: what the design compares there, its findings' kinds and its tables."""

    key: str
    title: str
    kinds: Tuple[str, ...]
    tables: Tuple[str, ...] = ()


def comparisons(summary: pd.DataFrame, sampled: Sequence[str]) -> List[Comparison]:
    """The comparisons the design holds (summary: summary_table; sampled: the sampled fields), in the
    page's order: models, optimizers, training lengths, sampled fields."""
    out = []
    models = [model_label(m) for m in catalogue_order(summary["model"])]
    if len(models) > 1:
        out.append(Comparison("models", f"Models: {' vs '.join(models)}", ("edf_pair", "peak")))
    optimizers = sorted(summary["optimizer"].unique())
    if len(optimizers) > 1:
        names = " vs ".join(OPTIMIZERS.get(o, o) for o in optimizers)
        out.append(Comparison("optimizers", f"Optimizers: {names}", ("optimizer_gap", "optimizer_gap_pair")))
    epochs = sorted(summary["epochs"].unique())
    if len(epochs) > 1:
        lengths = " vs ".join(f"{e:g}" for e in epochs)
        out.append(Comparison("lengths", f"Training lengths: {lengths} epochs", ("length_gap", "length_gap_pair")))
    if (summary["design"] == "samples").any() and sampled:
        out.append(Comparison("sampled", f"Sampled fields: {_and(list(sampled))}", (), ("good_ranges",)))
    return out


def _and(names: List[str]) -> str:
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


# ---- numbers and words ------------------------------------------------------------------------------


def points(value: float, signed: bool = False) -> str:
    """A difference or an error in points (percent), to two decimals (0.00, not 0.000000795); – if not finite."""
    if value is None or not np.isfinite(value):
        return "–"
    text = f"{value:+.2f}" if signed else f"{value:.2f}"
    return text.replace("-0.00", "0.00").replace("+0.00", "0.00")


def interval(ci: Optional[Tuple[float, float]], signed: bool = True) -> str:
    """' [low, high]' to two decimals, or nothing."""
    if ci is None or not all(np.isfinite(ci)):
        return ""
    low, high = sorted(ci)
    return f" [{points(low, signed)}, {points(high, signed)}]"


def p_shown(p: Optional[float]) -> str:
    """p as a table shows it: 0.012, 0.43, < 0.001; – where there is none."""
    if p is None or not np.isfinite(p):
        return "–"
    return fmt_p(p).removeprefix("p = ").removeprefix("p ")


def verdict_words(f: Finding) -> str:
    """The finding's verdict after Holm's adjustment, in words: what it favours, or not decided."""
    verdict = f.verdict_holm
    if verdict == "inconclusive":
        return "not decided" if f.test is not None and f.test.decidable else "cannot be decided at this n"
    if verdict == "borderline":
        return "borderline (the exact p may lie either side of α)"
    if verdict in ("adamw_better", "sgd_better"):
        return f"{OPTIMIZERS[verdict.split('_')[0]]} lower"
    if verdict in ("shorter_worse", "shorter_better"):
        return "shorter schedule " + ("higher" if verdict == "shorter_worse" else "lower")
    a, b = (model_label(m) for m in f.models)
    favoured = a if verdict == "a_better" else b
    return {
        "edf_pair": f"{favoured}'s trials nearer their best",
        "peak": f"{favoured} lower",
        "optimizer_gap_pair": f"{favoured} loses less to SGD",
        "length_gap_pair": f"{favoured} nearer its long-schedule error",
        "aggregate": f"{favoured}'s trials better across cells",
    }[f.kind]


def _estimate(f: Finding) -> str:
    """The test's estimate, named by its quantity, with its interval where the test gives one."""
    assert f.test is not None
    d = f.detail
    if isinstance(d, DeltaDetail):
        return f"{f.test.estimate:.2f}"
    assert isinstance(d, GapDetail)
    return f"{d.quantity} = {points(f.test.estimate, True)}{interval(f.test.ci)}"


def findings_rows(found: Sequence[Finding], kind: str) -> pd.DataFrame:
    """The tested findings of one kind as a table for reading (report.json keeps findings_table's fields)."""
    rows = []
    for f in found:
        if f.kind != kind or f.test is None:
            continue
        row = {
            "models" if len(f.models) > 1 else "model": " vs ".join(model_label(m) for m in f.models),
            "cell": cell_text(f.cell.get("optimizer"), f.cell.get("epochs")),
            "test": RULES[f.test.rule],
        }
        if isinstance(f.detail, DeltaDetail):
            row["P(first's trial nearer its best)"] = _estimate(f)
            row["mean Δ, second − first (pts) [95% CI]"] = points(f.detail.area, True) + interval(f.detail.area_ci)
        else:
            row["estimate (pts)"] = _estimate(f)
        row.update(
            {
                "p": p_shown(f.p),
                "p after Holm": p_shown(f.p_holm),
                "verdict after Holm": verdict_words(f),
                "n": "/".join(map(str, f.n)),
            }
        )
        rows.append(row)
    with_ci = any(f.test.ci for f in found if f.kind == kind and f.test is not None)
    return pd.DataFrame(rows).rename(columns={"estimate (pts)": "estimate (pts) [95% CI]"} if with_ci else {})


INTERVALS = {  # what a findings table's intervals are, by the test of its rows
    "delta": (
        "The probability is the test's estimate (1/2: no difference); it has no interval. The mean Δ difference "
        "is the signed area between the Δ-EDFs, with a bootstrap 95% interval in which each resample's best is "
        "recomputed."
    ),
    "welch": "Intervals are 95% confidence intervals of the difference of seed means (Welch t).",
    "best": (
        "The bootstrap of the best gives no interval (its resampled minimum sits on the observed one, so a "
        "percentile interval would end on the estimate)."
    ),
}


def _interval_note(rules: Sequence[str], test: str = "") -> str:
    """What a findings table's intervals are (by the `rules` of its rows), and its test where every row has
    the same one."""
    note = test + " ".join(INTERVALS[r] for r in sorted(set(rules)))
    return (
        f"<p class='note'>{html.escape(note)} p after Holm: adjusted over every test of this report at α = "
        f"{ALPHA:g}; each rule's measured error rate and power: <code>{CALIBRATION_DOC}</code>.</p>"
    )


def _in_catalogue_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of (model, optimizer, epochs) cells, models in catalogue order."""
    order = {m: i for i, m in enumerate(catalogue_order(frame["model"]))}
    by_catalogue = lambda column: column.map(order) if column.name == "model" else column  # noqa: E731
    return frame.sort_values(["model", "optimizer", "epochs"], key=by_catalogue)


def _named(frame: pd.DataFrame) -> Dict[str, List[str]]:
    """The model and cell columns of a table of cells, as a reader names them."""
    return {
        "model": [model_label(m) for m in frame["model"]],
        "cell": [cell_text(o, e) for o, e in zip(frame["optimizer"], frame["epochs"])],
    }


def left_out_rows(left: pd.DataFrame) -> pd.DataFrame:
    """The trials left out per cell, for reading."""
    left = _in_catalogue_order(left)
    return pd.DataFrame({**_named(left), "failed": left["failed"], "no finite error": left["no_finite_error"]})


def cells_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Every cell's design, counts and error levels, for reading (models in catalogue order)."""
    summary = _in_catalogue_order(summary)
    return pd.DataFrame(
        {
            **_named(summary),
            "design": summary["design"].map({"seeds": "one lr/wd over seeds", "samples": "random samples"}),
            "trials counted": summary["n"],
            "diverged": summary["diverged"],
            "failed": summary["failed"],
            "left out": summary["n_left_out"],
            "best error (%)": summary["best"].map(points),
            "median error (%)": summary["median"].map(points),
            "mean ± sd (%)": [f"{points(m)} ± {points(s)}" for m, s in zip(summary["mean"], summary["sd"])],
            "DKW band ± (95%)": summary["dkw_eps_95"].map(lambda e: points(e) if np.isfinite(e) else "–"),
        }
    )


def best_table(summary: pd.DataFrame) -> pd.DataFrame:
    """The best error per model (rows) and cell (columns), with the trials counted."""
    cells = sorted({(o, e) for o, e in zip(summary["optimizer"], summary["epochs"])})
    rows = []
    for model in catalogue_order(summary["model"]):
        row = {"model": model_label(model)}
        for opt, epochs in cells:
            hit = summary[(summary["model"] == model) & (summary["optimizer"] == opt) & (summary["epochs"] == epochs)]
            row[cell_text(opt, epochs)] = (
                f"{points(hit['best'].iloc[0])}% (n = {int(hit['n'].iloc[0])})"
                if len(hit) and hit["n"].iloc[0]
                else "–"
            )
        rows.append(row)
    return pd.DataFrame(rows)


def ranges_table(ranges: pd.DataFrame, importance: bool = False) -> pd.DataFrame:
    """Good ranges for reading: a row per (model, optimizer, epochs) cell with its trials, each field's
    median best value with its 2.5-97.5% range; or (`importance`) each field's fANOVA importance."""
    cell_columns = ("model", "optimizer", "epochs", "percentile", "n", "sample_size", "n_left_out", "metric")
    fields = [c for c in ranges if c not in cell_columns and not c.startswith("importance_")]
    rows = []
    for model in catalogue_order(ranges["model"]):
        for (opt, epochs), cell in ranges[ranges["model"] == model].groupby(["optimizer", "epochs"], sort=True):
            at = cell.set_index("percentile")
            row: Dict[str, object] = {
                "model, cell": f"{model_label(model)}, {cell_text(opt, epochs)}",
                "trials": int(at["n"].iloc[0]),
            }
            if importance:
                for column in [c for c in cell if c.startswith("importance_")]:
                    value = at[column].iloc[0]
                    row[column.removeprefix("importance_")] = points(value) if np.isfinite(value) else "–"
            else:
                for field in fields:
                    low, mid, high = (at.loc[q, field] for q in ("p2.5", "p50", "p97.5"))
                    name = "log10 lr·wd" if field == "log10_lr_wd" else field.replace("log10_", "log10 ")
                    row[name] = f"{points(mid)} [{points(low)}, {points(high)}]"
            rows.append(row)
    return pd.DataFrame(rows)


def effects_rows(effects: pd.DataFrame, compared: str) -> pd.DataFrame:
    """The effect sizes of one comparison for reading: the cell held fixed, the pair, the trials, the probability
    that a improves on b and both IQMs (points), each with its 95% interval."""
    label = {"models": model_label, "optimizers": lambda o: OPTIMIZERS.get(o, o), "lengths": lambda e: f"{e:g} ep"}
    rows = []
    for row in effects[effects["compared"] == compared].itertuples(index=False):
        if compared == "models":
            cell = cell_text(row.optimizer, row.epochs)
        else:
            fixed = cell_text(row.optimizer) if compared == "lengths" else cell_text(epochs=row.epochs)
            cell = f"{model_label(row.model)}, {fixed}"
        a, b = label[compared](row.a), label[compared](row.b)
        rows.append(
            {
                "cell": cell,
                "a vs b": f"{a} vs {b}",
                "trials": f"{row.n_a} vs {row.n_b}",
                "P(a better)": f"{row.p_a_better:.2f}" + _ci2(row.p_a_better_low, row.p_a_better_high),
                "IQM a": points(row.iqm_a) + interval((row.iqm_a_low, row.iqm_a_high), signed=False),
                "IQM b": points(row.iqm_b) + interval((row.iqm_b_low, row.iqm_b_high), signed=False),
            }
        )
    return pd.DataFrame(rows)


def _ci2(low: float, high: float) -> str:
    """' [low, high]' of a probability to two decimals, or nothing (no interval below INTERVAL_FROM trials)."""
    return f" [{low:.2f}, {high:.2f}]" if np.isfinite(low) and np.isfinite(high) else ""


EFFECTS_NOTE = (
    "<p class='note'>Effect sizes, not tests (the verdicts above are the tests). P(a better): the chance that a "
    "random trial of a ends with a lower error than a random trial of b, ties counted half (the Mann-Whitney U "
    "over n_a n_b; rliable's probability of improvement). IQM: the mean of the middle half of a cell's errors "
    "(points; rliable's interquartile mean). Both count every trial that ended, diverged ones at their error, "
    "within one cell, never pooled. Brackets: 95% stratified percentile bootstrap intervals (2,000 resamples of "
    "each group; given from 8 trials a group, their coverage measured in docs/analysis.md).</p>"
)


# ---- html ---------------------------------------------------------------------------------------------


def table_html(frame: pd.DataFrame) -> str:
    """A table for reading: no index, text as given (the frames above hold words and formatted numbers)."""
    table = frame.to_html(index=False, border=0, classes="t", na_rep="–")
    return f'<div class="wide">{table}</div>'


def _sentences(found: Sequence[Finding]) -> str:
    return "<ul class='findings'>" + "".join(f"<li>{html.escape(f.sentence)}</li>" for f in found) + "</ul>"


SVG_SCALE = 2.0  # inline figures at twice their print size (7 pt type reads as about 19 px)


def inline_svg(svg: str) -> str:
    """The figure's <svg> element, drawn at SVG_SCALE times its size in points (as CSS px), at most
    the page's width."""
    svg = svg[svg.index("<svg") :]
    head_end = svg.index(">")
    head = svg[:head_end]
    width = re.search(r'width="([0-9.]+)pt"', head)
    if not width:
        return svg
    px = float(width.group(1)) * 4 / 3 * SVG_SCALE
    head = re.sub(r'\s(width|height)="[0-9.]+pt"', "", head)
    return f'{head} style="width:{px:.0f}px">' + svg[head_end + 1 :]


def figure_html(drawn: Drawn) -> str:
    """A figure inline, its caption under it and links to its files."""
    with open(drawn.paths["svg"]) as f:
        svg = inline_svg(f.read())
    links = " ".join(f'<a href="{os.path.basename(p)}">{ext}</a>' for ext, p in drawn.paths.items())
    return f'<figure id="{drawn.name}">{svg}<figcaption>{html.escape(drawn.caption)} ({links})</figcaption></figure>'


class _SpecDumper(yaml.SafeDumper):
    """YAML as a spec is written by hand: lists of plain values on one line ([low, high])."""


_SpecDumper.add_representer(
    list,
    lambda dumper, value: dumper.represent_sequence(
        "tag:yaml.org,2002:seq", value, flow_style=not any(isinstance(v, (dict, list)) for v in value)
    ),
)


def spec_yaml(spec: Dict) -> str:
    """The spec record as YAML (lists of numbers or names in flow style)."""
    return yaml.dump(spec, Dumper=_SpecDumper, sort_keys=False, allow_unicode=True, width=100)


@dataclass(frozen=True)
class Page:
    """What the page shows: the study's name, status line and metric, its tables, figures and findings."""

    study: str
    completeness: str
    metric: Dict[str, str]
    tables: Dict[str, pd.DataFrame]
    figures: List[Drawn]
    record: Optional[Dict]
    found: List[Finding]
    sampled: Tuple[str, ...]


def _design_words(summary: pd.DataFrame, sampled: Sequence[str]) -> str:
    """How the cells were run: random samples of the sampled fields, one lr/wd over seeds, or both."""
    parts = []
    for design, words in (
        ("samples", f"random samples of {_and(list(sampled or ('lr', 'wd')))}"),
        ("seeds", "one lr/wd over seeds"),
    ):
        cells = summary[summary["design"] == design]
        if len(cells):
            n = sorted(set(cells["n"]))
            counts = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
            parts.append(f"{words} ({counts} trials counted per cell)")
    return "; ".join(parts)


def study_section(page: Page) -> str:
    """The first screen: the study, its best error per cell, its main Δ-EDF figure, its decided findings."""
    summary = page.tables["summary"]
    models = catalogue_order(summary["model"])
    cells = sorted({(o, e) for o, e in zip(summary["optimizer"], summary["epochs"])})
    names = _and([model_label(m) + (f" ({m})" if model_label(m) != m else "") for m in models])
    intro = (
        f"<p>This study trains {html.escape(names)} in {len(cells)} cell{'s' * (len(cells) != 1)} "
        f"({html.escape('; '.join(cell_text(o, e) for o, e in cells))}): "
        f"{html.escape(_design_words(summary, page.sampled))}. Status: {html.escape(page.completeness)}.</p>"
        f"<p>Every number is on the <b>{html.escape(page.metric['used'])}</b> error (requested "
        f"{html.escape(page.metric['requested'])}: {html.escape(page.metric['definition'])}). "
        f"{html.escape(EDF_CONVENTION)}; failed trials and trials without a finite error are left out of every "
        f"number and counted under <a href='#cells'>Every cell</a>.</p>"
    )
    if (summary["design"] == "seeds").all():
        intro += (
            "<p>Every cell ran one lr/wd over seeds: these are seed statistics (mean ± sd, Welch t), so no "
            "Δ-EDF, good range or expected-best output is shown (they describe lr/wd robustness).</p>"
        )
    best = "<h3>Best error per cell</h3>" + table_html(best_table(summary))
    main = "".join(figure_html(d) for d in page.figures if d.section == "main")
    scope = [f for f in page.found if f.kind == "scope"]
    decided = [f for f in page.found if f.verdict_holm in DECIDED]
    findings = "<h3>Decided findings</h3>" + (_sentences(scope) if scope else "")
    findings += (
        _sentences(decided)
        if decided
        else "<p>No test is decided after Holm's adjustment: each section below says what its test found "
        "and how many trials 80% power would need.</p>"
    )
    return intro + best + main + findings


def comparison_section(page: Page, comparison: Comparison) -> str:
    """One comparison: every finding of its kinds as sentences, its figures, its tables with their notes."""
    found = [f for f in page.found if f.kind in comparison.kinds]
    parts = [_sentences(found)] if found else []
    parts += [figure_html(d) for d in page.figures if d.section == comparison.key]
    for kind in comparison.kinds:
        rows = findings_rows(page.found, kind)
        if len(rows):
            tests = sorted(rows["test"].unique())
            one = f"Test: {tests[0]}. " if len(tests) == 1 else ""  # said once, not in a column of one value
            shown = rows.drop(columns="test") if one else rows
            rules = [f.test.rule for f in found if f.kind == kind and f.test is not None]
            note = _interval_note(rules, one)
            parts.append(f"<h3>{html.escape(TABLE_TITLES[kind])}</h3>{table_html(shown)}{note}")
    effects = effects_rows(page.tables["effects"], comparison.key) if comparison.key in COMPARED else pd.DataFrame()
    if len(effects):
        parts.append(f"<h3>Probability of improvement and IQM</h3>{table_html(effects)}{EFFECTS_NOTE}")
    if "good_ranges" in comparison.tables and not page.tables["good_ranges"].empty:
        parts.append(
            "<h3>Good ranges</h3>"
            + table_html(ranges_table(page.tables["good_ranges"]))
            + "<p class='note'>Good ranges (pycls): the median of the best trial's value (log10 for a log-uniform "
            "field) over 2,500 bootstrap samples of a quarter of a cell's trials, and in brackets its 2.5 and 97.5 "
            "percentiles (a 95% interval of where the best trial lies); per (optimizer, epochs) cell, never "
            "pooled across lengths.</p>"
            "<h3>fANOVA importance</h3>"
            + table_html(ranges_table(page.tables["good_ranges"], importance=True))
            + "<p class='note'>The share of the error's variance each field explains (fANOVA, Optuna), summing "
            "to 1 per model and cell; – where the field took one value in that cell.</p>"
        )
    return "".join(parts)


TABLE_TITLES = {
    "edf_pair": "Δ-EDF tests, pairs of models",
    "peak": "Peak error, pairs of models (longest schedule)",
    "optimizer_gap": "Optimizer gap per model",
    "optimizer_gap_pair": "Optimizer gap, pairs of models",
    "length_gap": "Training-length gap per model",
    "length_gap_pair": "Training-length gap, pairs of models",
}


def claims_section(found: Sequence[Finding]) -> Optional[str]:
    """The paper's claims against this study, where it compares ViT-P and ViT-C (else None: no section)."""
    claims = claims_table(found)
    if claims.empty:
        return None
    return (
        "<p>Xiao et al. (2021) claim that ViT-C trains more stably than ViT-P (lr/wd, optimizer, convergence) and "
        "reaches a lower error (peak performance). Each row is a finding above on a "
        "ViT-P / ViT-C pair: its number with its interval (95%, as in its section's table), and its verdict "
        "after Holm's adjustment over the report's tests.</p>"
        + claims.to_html(index=False, border=0, classes="t claims")
    )


def cells_section(page: Page) -> str:
    """Every cell's numbers, the trials left out (where any were) and the EMA gain (where EMA ran)."""
    parts = [
        table_html(cells_table(page.tables["summary"])),
        "<p class='note'>DKW band: the half-width of the 95% simultaneous band around a cell's EDF of random "
        "samples (Dvoretzky-Kiefer-Wolfowitz); seeds of one lr/wd have no lr/wd EDF.</p>",
    ]
    if not page.tables["left_out"].empty:
        parts.append("<h3>Trials left out (failed, or no finite error under the metric)</h3>")
        parts.append(table_html(left_out_rows(page.tables["left_out"])))
    ema = page.tables["ema_gain"]
    if not ema.empty:
        shown = ema.drop(columns=[c for c in ("metric",) if c in ema]).assign(model=ema["model"].map(model_label))
        numbers = {c: shown[c].map(points) for c in shown if c.startswith(("gain", "best"))}
        parts.append("<h3>EMA gain (best − EMA best, per trial as pycls, and of the bests; points)</h3>")
        parts.append(table_html(shown.assign(**numbers)))
    return "".join(parts)


def sections(page: Page) -> List[Tuple[str, str, str]]:
    """(id, title, html) of every section of the page, in order."""
    summary = page.tables["summary"]
    names = " vs ".join(model_label(m) for m in catalogue_order(summary["model"]))
    out = [("study", f"The study: {names}", study_section(page))]
    for comparison in comparisons(summary, page.sampled):
        body = comparison_section(page, comparison)
        if body:
            out.append((comparison.key, comparison.title, body))
    claims = claims_section(page.found)
    if claims:
        out.append(("claims", "The paper's claims (Xiao et al. 2021)", claims))
    out.append(("cells", "Every cell", cells_section(page)))
    spec_text = spec_yaml(page.record["spec"]) if page.record else "(no spec record in the store)"
    out.append(("spec", "Spec", f"<pre>{html.escape(spec_text)}</pre>"))
    return out


STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:auto;padding:0 1em}"
    # a long cell (a quantity named by its models, a verdict in words) wraps at 20em, so a table fits the page
    "table.t{border-collapse:collapse;font-size:13px}table.t td,table.t th{padding:3px 8px;"
    "border-bottom:1px solid #ddd;vertical-align:top}table.t td{max-width:20em}"
    "table.t th{text-align:left;vertical-align:bottom;max-width:12em}"
    # the claims table wraps its sentences so its verdict column stays on the page
    "table.claims td{white-space:normal;vertical-align:top}table.claims td:nth-child(2){min-width:16em}"
    "figure{margin:1em 0}figure svg{max-width:100%;height:auto;display:block}figcaption{max-width:60em}"
    "ul.findings li{margin:0.35em 0;line-height:1.35}p.note{font-size:13px;color:#444;max-width:60em}"
    "pre{background:#f6f6f6;padding:0.6em}div.wide{overflow-x:auto}"
)


def page_html(title: str, parts: Sequence[Tuple[str, str, str]]) -> str:
    """A report page: its title, a contents list, then every (id, title, html) section."""
    toc = "".join(f'<li><a href="#{k}">{html.escape(t)}</a></li>' for k, t, _ in parts)
    body = "".join(f'<section id="{k}"><h2>{html.escape(t)}</h2>{c}</section>' for k, t, c in parts)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpstudy: {html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h1>hpstudy report: {html.escape(title)}</h1>"
        f"<p>How to read a report: <code>{READING_DOC}</code> in hpstudy's docs.</p>"
        f"<nav><ol>{toc}</ol></nav>{body}</body></html>"
    )


def render(page: Page) -> str:
    """The report's index.html: a contents list, then every section."""
    return page_html(page.study, sections(page))
