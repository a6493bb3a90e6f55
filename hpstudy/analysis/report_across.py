"""One report over several studies (`hpstudy report --study A --study B`): the family declared over them
(findings.findings_across: each source's per-cell findings side by side and, per pair of models, one aggregate
across every cell that holds both), the aggregates' interval figure, the paper's claims, each source's effect
sizes, report.json and index.html; every verdict after Holm's adjustment over the whole family."""

import functools
import html
import json
import os
import warnings
from typing import Dict, List, Mapping, Sequence, Tuple

import matplotlib.style
import pandas as pd

from hpstudy.analysis.captions import write_captions
from hpstudy.analysis.catalogue import model_label
from hpstudy.analysis.effects import effects_table
from hpstudy.analysis.figures import STYLE, aggregate_figure, save_figure
from hpstudy.analysis.findings import (
    CALIBRATION_DOC,
    CELL_KINDS,
    AggregateDetail,
    Finding,
    ScopeDetail,
    aggregate_table,
    claims_table,
    findings_across,
    findings_table,
    sources_of,
)
from hpstudy.analysis.findings.text import p_holm_text, probability_interval
from hpstudy.analysis.inference import ALPHA
from hpstudy.analysis.metric import DEFAULT_METRIC, METRIC_DOCS, LeftOutWarning
from hpstudy.analysis.report_folder import build_into
from hpstudy.analysis.report_page import (
    EFFECTS_NOTE,
    Drawn,
    claims_section,
    effects_rows,
    figure_html,
    page_html,
    table_html,
    verdict_words,
)

FIGURE = "aggregate"
AGGREGATE_DOC = "docs/analysis.md#one-conclusion-across-studies"  # the aggregate's test, interval and calibration


def build_across_report(tables: Mapping[str, pd.DataFrame], out: str, metric: str = DEFAULT_METRIC) -> str:
    """Write the report over several studies' trial tables (by study name) into `out` (report_folder.build_into:
    only an earlier report's files are replaced); returns the path of its index.html."""
    return build_into(out, functools.partial(_write, tables, metric=metric))


def title_of(studies: Sequence[str]) -> str:
    """The report's name: its studies joined by ' + ', sorted."""
    return " + ".join(sorted(studies))


def _source_trials(tables: Mapping[str, pd.DataFrame], source: Tuple[str, ...]) -> pd.DataFrame:
    """A source's trials, each once (its studies share trials: findings_across merges them the same way)."""
    return pd.concat([tables[name] for name in source], ignore_index=True).drop_duplicates("trial_key")


def _effects(tables: Mapping[str, pd.DataFrame], metric: str) -> pd.DataFrame:
    """Each source's effect sizes per pair and cell (effects_table), with its studies."""
    parts = [
        effects_table(_source_trials(tables, source), metric).assign(studies=" + ".join(source))
        for source in sources_of(tables)
    ]
    return pd.concat(parts, ignore_index=True)


def _write(tables: Mapping[str, pd.DataFrame], out: str, metric: str) -> None:
    """Write the report's files (see build_across_report) into the new, empty folder `out`."""
    with warnings.catch_warnings():  # what is left out is counted in every sentence and in the scope line
        warnings.simplefilter("ignore", LeftOutWarning)
        found = findings_across(tables, metric)
        effects = _effects(tables, metric)
    scope = found[0]
    assert isinstance(scope.detail, ScopeDetail)
    used = scope.detail.metric
    stated = {"requested": metric, "used": used, "definition": METRIC_DOCS[metric]}
    aggregates = aggregate_table(found).assign(metric=used)
    frames: Dict[str, pd.DataFrame] = {
        "aggregate": aggregates,
        **{kind: findings_table(found, kind) for kind in CELL_KINDS},
        "claims": claims_table(found),
        "effects": effects,
    }
    figures: List[Drawn] = []
    if not aggregates.empty:
        with matplotlib.style.context(STYLE):
            plot = aggregate_figure(aggregates)
            meta = {"metric": used, "metric_definition": METRIC_DOCS[metric], "caption": plot.caption}
            paths = save_figure(plot, out, FIGURE, aggregates, meta)
        figures.append(Drawn(FIGURE, "aggregate", plot.caption, paths))
    title = title_of(list(tables))
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(
            {
                "studies": sorted(tables),
                "sources": [list(source) for source in sources_of(tables)],
                "n_trials": {name: len(table) for name, table in sorted(tables.items())},
                "metric": stated,
                "findings": [finding.as_dict() for finding in found],
                "family": {"tests": scope.family, "adjustment": "Holm", "alpha": ALPHA},
                "calibration": CALIBRATION_DOC,
                "aggregate_calibration": AGGREGATE_DOC,
                "tables": {k: json.loads(v.to_json(orient="records")) for k, v in frames.items()},
                "figures": {d.name: {"caption": d.caption, "section": d.section} for d in figures},
            },
            f,
            indent=1,
            sort_keys=True,
        )
    write_captions(out, title, [(d.name, d.caption) for d in figures])
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(render_across(title, found, effects, figures, {k: len(v) for k, v in tables.items()}))


def _list(found: Sequence[Finding]) -> str:
    return "<ul class='findings'>" + "".join(f"<li>{html.escape(f.sentence)}</li>" for f in found) + "</ul>"


def _aggregate_row(f: Finding) -> Dict[str, object]:
    """An aggregate as the page's table shows it: its pair, cells, trials, estimate, p after Holm and verdict."""
    assert isinstance(f.detail, AggregateDetail) and f.test is not None and f.test.ci is not None
    return {
        "pair": " vs ".join(model_label(m) for m in f.models),
        "cells": len(f.detail.cells),
        "trials": f"{f.n[0]} vs {f.n[1]}",
        "P(a better)": f"{f.statistic:.2f} {probability_interval(f.test.ci)}",
        "p, Holm": p_holm_text(f),
        "verdict": verdict_words(f),
    }


def _aggregate_section(found: Sequence[Finding], figures: Sequence[Drawn]) -> str:
    aggregates = [f for f in found if f.kind == "aggregate"]
    if not aggregates:
        return (
            "<p>No pair of models is held by two sources or more (studies that share trials are one source): "
            "there is nothing to aggregate across studies. Each source's findings are below.</p>"
        )
    shown = pd.DataFrame([_aggregate_row(f) for f in aggregates])
    return (
        "<p>Per pair of models, the probability that a random trial of the first has a lower error than a random "
        "trial of the second in the same cell, averaged over every cell of every source that holds both (each "
        "cell weighing the same; never pooled across cells), with its 95% stratified bootstrap interval and a test "
        "valid however the cells depend on each other (each cell's Mann-Whitney p, merged), in the family's Holm "
        f"adjustment (how it is calibrated: "
        f"<code>{AGGREGATE_DOC}</code>). Which quantity: a random trial, diverged ones at their chance error.</p>"
        + table_html(shown)
        + _list(aggregates)
        + "".join(figure_html(d) for d in figures)
    )


def _sources_section(found: Sequence[Finding]) -> str:
    parts = []
    for studies in dict.fromkeys(f.studies for f in found[1:] if f.kind != "aggregate"):
        own = [f for f in found[1:] if f.studies == studies and f.kind != "aggregate"]
        parts.append(f"<h3>{html.escape(' + '.join(studies))}</h3>{_list(own)}")
    return "".join(parts) or "<p>No finding: no cell holds two groups to compare.</p>"


def _effects_section(effects: pd.DataFrame) -> str:
    parts = [EFFECTS_NOTE]
    for studies, own in effects.groupby("studies", sort=True):
        for compared in ("models", "optimizers", "lengths"):
            rows = effects_rows(own, compared)
            if not rows.empty:
                parts.append(f"<h3>{html.escape(str(studies))}: {compared}</h3>{table_html(rows)}")
    return "".join(parts)


def render_across(
    title: str, found: Sequence[Finding], effects: pd.DataFrame, figures: Sequence[Drawn], n: Mapping[str, int]
) -> str:
    """The report's index.html: its studies and family, the aggregates, the claims, each source's findings and
    effect sizes."""
    counts = ", ".join(f"{html.escape(name)} ({k} rows)" for name, k in sorted(n.items()))
    sections = [
        ("family", "The studies and the family", f"<p>Studies: {counts}.</p><p>{html.escape(found[0].sentence)}</p>"),
        ("aggregate", "Across cells: pairs of models", _aggregate_section(found, figures)),
    ]
    claims = claims_section(found)
    if claims:
        sections.append(("claims", "The paper's claims (Xiao et al. 2021)", claims))
    sections.append(("sources", "Each source's findings, per cell", _sources_section(found)))
    sections.append(("effects", "Effect sizes per cell", _effects_section(effects)))
    return page_html(title, sections)
