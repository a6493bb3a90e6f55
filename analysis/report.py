"""One-command report of a study: figures, tables and a self-contained HTML page."""

import html
import json
import os
import re
import tempfile
import warnings
from typing import Dict, List, Optional, Tuple

import matplotlib.style
import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import yaml

from hpstudy.analysis.edf import EDF_CONVENTION, bootstrap_band, dkw_epsilon
from hpstudy.analysis.figures import (
    STYLE,
    delta_edf_figure,
    delta_edf_table,
    delta_error_vs_epochs_figure,
    delta_error_vs_epochs_table,
    error_vs_epochs_figure,
    error_vs_epochs_table,
    expected_best_figure,
    expected_best_table,
    generalization_figure,
    generalization_table,
    hp_names,
    hp_scatter_figure,
    hp_scatter_table,
    save_figure,
)
from hpstudy.analysis.findings import CALIBRATION_DOC, KINDS, Finding, claims_table, findings_table, fmt_p, sig3
from hpstudy.analysis.findings import findings as make_findings
from hpstudy.analysis.gaps import ema_gain
from hpstudy.analysis.inference import ALPHA, design_of
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, METRIC_DOCS, LeftOutWarning, Rows, usable
from hpstudy.analysis.report_folder import FOLDER_RULE, ReportError, check_report_dir, publish
from hpstudy.analysis.stats import Keys, good_ranges, hp_importance, hp_kinds
from hpstudy.trainers.schema import DIVERGED, FAILED, FINISHED, OK, STATUSES

CELL = ["model", "optimizer", "epochs"]
RANGES_BEYOND_LOG = " (linear values of a uniform or int one; per value of a choice, the share of the best trials)"


def left_out_table(rows: Rows) -> pd.DataFrame:
    """Per cell: the trials left out of every number (failed, or no finite error under the metric)."""
    left = rows.left_out.assign(failed=rows.left_out["status"] == FAILED)
    return (
        left.groupby(CELL, sort=True, observed=True)
        .agg(failed=("failed", "sum"), no_finite_error=("failed", lambda f: int((~f).sum())))
        .reset_index()
    )


def equalize_counts(frame: pd.DataFrame, by: List[str], metric: str = DEFAULT_METRIC, seed: int = 0) -> pd.DataFrame:
    """Subsample every group's counted trials to the smallest group's count (models compared at
    equal n); the rows that do not count are kept, for the next function to leave out and count."""
    rows = usable(frame, metric)
    n_min = rows.kept.groupby(by, observed=True).size().min()
    shuffled = rows.kept.sample(frac=1.0, random_state=seed)
    kept = shuffled[shuffled.groupby(by, observed=True).cumcount() < n_min].drop(columns=ERR)
    return pd.concat([kept, rows.left_out]).sort_values(by, kind="stable")


def summary_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Per (model, optimizer, epochs): its design (one lr/wd over seeds, or lr/wd samples), counts by
    status, trials counted and left out, best/median/mean/sd error under `metric`, diverged share;
    for lr/wd samples also the DKW and bootstrap half-widths of its EDF (seeds: not an lr/wd EDF)."""
    rows = usable(trials, metric, "summary_table")
    kept = dict(list(rows.kept.groupby(CELL, sort=True, observed=True)))
    out = []
    for key, group in trials.groupby(CELL, sort=True, observed=True):
        counted = kept.get(key, rows.kept.iloc[:0])
        errors = counted[ERR].to_numpy(float)
        status = group["status"].value_counts()
        design = design_of(counted["lr"].to_numpy(), counted["wd"].to_numpy(), counted.get("config_json"))
        edf = design == "samples" and len(errors) > 1
        out.append(
            {
                **dict(zip(CELL, key)),
                "design": design,
                "n": len(errors),
                "n_left_out": len(group) - len(errors),
                **{s: int(status.get(s, 0)) for s in STATUSES},
                "diverged_share": float((counted["status"] == DIVERGED).mean()) if len(errors) else np.nan,
                "best": errors.min() if len(errors) else np.nan,
                "median": np.median(errors) if len(errors) else np.nan,
                "mean": errors.mean() if len(errors) else np.nan,
                "sd": errors.std(ddof=1) if len(errors) > 1 else np.nan,
                "dkw_eps_95": float(dkw_epsilon(len(errors))) if edf else np.nan,
                "bootstrap_eps_95": bootstrap_band(errors, n_boot=300) if edf else np.nan,
            }
        )
    return pd.DataFrame(out).assign(metric=rows.metric)


def hp_keys(trials: pd.DataFrame, record: Optional[Dict]) -> Dict[str, str]:
    """The sampled hyperparameters the report analyses: the spec record's `sampled` (field -> distribution;
    lr and wd without one) that are columns of `trials`."""
    sampled = hp_kinds((record or {}).get("sampled") or ("lr", "wd"))
    return {name: kind for name, kind in sampled.items() if name in trials}


def ranges_and_importance(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, keys: Keys = ("lr", "wd")
) -> Tuple[pd.DataFrame, Dict]:
    """Good ranges and fANOVA importance per (model, optimizer) with >= 8 counted trials, of each sampled
    hyperparameter (`keys`, see hpstudy.analysis.stats.hp_kinds) that takes two values or more there."""
    counted = usable(trials, metric, "ranges_and_importance").kept
    kinds = hp_kinds(keys)
    out, ranges = [], {}
    for (model, opt), group in counted.groupby(["model", "optimizer"], sort=True, observed=True):
        varied = {name: kind for name, kind in kinds.items() if group[name].nunique(dropna=False) >= 2}
        if len(group) < 8 or not varied:
            continue
        cell = trials[(trials["model"] == model) & (trials["optimizer"] == opt)]
        r = good_ranges(cell, metric, keys=varied)
        ranges[(model, opt)] = r
        importance = hp_importance(cell, metric, keys=varied)
        for q in r.index:
            out.append(
                {
                    "model": model,
                    "optimizer": opt,
                    "percentile": q,
                    **r.loc[q].to_dict(),
                    **{f"importance_{name}": importance.get(name) for name in kinds},
                }
            )
    return pd.DataFrame(out), ranges


def _sampled(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the (model, optimizer, epochs) cells that sampled lr/wd (not one lr/wd over seeds)."""
    if frame.empty:
        return frame
    designs = {
        key: design_of(cell["lr"], cell["wd"], cell.get("config_json"))
        for key, cell in frame.groupby(CELL, observed=True)
    }
    return frame[[designs[key] == "samples" for key in frame[CELL].itertuples(index=False, name=None)]]


def _figures(
    trials: pd.DataFrame, rows: Rows, ranges: Dict, out: str, metric: str, keys: Keys = ("lr", "wd")
) -> List[Tuple[str, str, Dict]]:
    """Render every figure the data supports in the house style, each from its table, saved beside it
    (the scatter against each sampled hyperparameter of `keys`); returns (name, caption, paths)."""
    made = []
    stated = {"metric": rows.metric, "metric_definition": METRIC_DOCS[metric]}

    def draw(name: str, caption: str, table: pd.DataFrame, figure, **meta) -> None:
        with matplotlib.style.context(STYLE):
            paths = save_figure(figure(table), out, name, table, {**stated, **meta})
        made.append((name, caption, paths))

    usable_rows = rows.kept
    sampled, sampled_rows = (
        _sampled(trials),
        _sampled(usable_rows),
    )  # lr/wd figures: seed-only cells are not lr/wd studies
    for (opt, epochs), cell in sampled_rows.groupby(["optimizer", "epochs"], sort=True, observed=True):
        if cell.groupby("model").size().min() < 2:
            continue
        whole = sampled[(sampled["optimizer"] == opt) & (sampled["epochs"] == epochs)]
        table = delta_edf_table(equalize_counts(whole, ["model"], metric), metric)
        draw(
            f"delta_edf_{opt}_{epochs}ep",
            f"Δ-EDF of top-1 error ({rows.metric}), {opt}, {epochs} epochs (equal n per model)",
            table,
            delta_edf_figure,
            n_per_model=int(table.groupby("model")["n"].first().min()),
            reference="group minimum",
            edf_convention=EDF_CONVENTION,
            band="DKW 95% simultaneous",
            optimizer=opt,
            epochs=int(epochs),
        )
    for opt in sorted(usable_rows["optimizer"].unique()):
        by_model = {m: r for (m, o), r in ranges.items() if o == opt}
        if (sampled_rows["optimizer"] == opt).any():
            draw(
                f"hp_scatter_{opt}",
                f"Top-1 error ({rows.metric}) against {hp_names(keys)} ({opt}); shaded: good ranges",
                hp_scatter_table(sampled[sampled["optimizer"] == opt], metric, keys),
                lambda table: hp_scatter_figure(table, by_model, keys=keys),
                good_ranges="bootstrap (2500 x max(1, int(25% n))) of the best trial's log10 values, 2.5-97.5%"
                + ("" if set(hp_kinds(keys).values()) == {"log_uniform"} else RANGES_BEYOND_LOG),
                ranges={m: r.to_dict() for m, r in by_model.items()},
            )
    if usable_rows["epochs"].nunique() > 1:
        draw(
            "error_vs_epochs",
            f"Best top-1 error ({rows.metric}) against training length (diverged runs dashed)",
            error_vs_epochs_table(trials, metric),
            error_vs_epochs_figure,
            aggregate="best trial per (model, optimizer, epochs)",
        )
        draw(
            "delta_error_vs_epochs",
            f"Training-length gap: error(E) - error(E_max), {rows.metric}",
            delta_error_vs_epochs_table(trials, metric),
            delta_error_vs_epochs_figure,
            rule="E_max all diverged -> best shorter schedule, flagged",
        )
    losses = usable_rows.get("train_loss")  # a table without train losses has no such figure
    trained = losses is not None and ((usable_rows["status"] == OK) & np.isfinite(losses.astype(float))).any()
    if usable_rows["family"].nunique() > 1 and trained:
        draw(
            "generalization",
            f"Generalization vs capacity (CoAtNet's Fig. 1 from the stored rows): validation "
            f"top-1 error ({rows.metric}) against final train loss per trial, medians per model "
            f"large; diverged trials left out",
            generalization_table(trials, metric),
            generalization_figure,
            aggregate="median per model",
            left_out="failed, no finite error, diverged",
        )
    if len(sampled_rows) and sampled_rows.groupby(["model", "optimizer"]).size().max() >= 2:
        draw(
            "expected_best",
            f"Expected best top-1 error ({rows.metric}) after k random trials (unbiased estimator)",
            expected_best_table(sampled, metric),
            expected_best_figure,
            estimator="unbiased, Tang et al. 2020",
            band="bootstrap 95% pointwise",
        )
    return made


# Readable column names with units for the HTML tables (report.json keeps the field names).
# "%" = top-1 error in percent; "pts" = a difference of errors in percentage points.
COLUMN_LABELS = {
    "design": "design",
    "n": "trials counted",
    "n_left_out": "left out",
    "ok": "ok",
    "diverged": "diverged",
    "failed": "failed",
    "diverged_share": "diverged (%)",
    "best": "best error (%)",
    "median": "median error (%)",
    "mean": "mean error (%)",
    "sd": "sd (pts)",
    "dkw_eps_95": "DKW band ± (95%)",
    "bootstrap_eps_95": "bootstrap band ± (95%)",
    "rule": "test",
    "estimate": "estimate (pts) [CI]",
    "p": "p",
    "p_mc_lo": "exact p from (Monte-Carlo)",
    "p_mc_hi": "exact p to (Monte-Carlo)",
    "p_holm": "p, Holm",
    "verdict": "verdict",
    "verdict_holm": "verdict, Holm",
    "area": "signed area, a's favour (pts) [95% CI]",
    "within2_a": "a within 2 pts of best (%)",
    "within2_b": "b within 2 pts of best (%)",
    "detectable": "probability detectable at 80% power",
    "d_a_above": "D, a's Δ-EDF above",
    "d_b_above": "D, b's Δ-EDF above",
    "log10_lr": "log10 lr",
    "log10_wd": "log10 wd",
    "log10_lr_wd": "log10 lr·wd",
    "sample_size": "bootstrap sample size",
    "importance_lr": "fANOVA importance lr",
    "importance_wd": "fANOVA importance wd",
    "gain_mean": "mean gain (pts)",
    "gain_median": "median gain (pts)",
    "best_ema": "best EMA error (%)",
    "gain_of_best": "gain of the bests (pts)",
    "no_finite_error": "no finite error",
}
TABLE_LABELS = {
    "edf_pair": {"estimate": "P(a trial of a nearer its best than one of b)", "diverged": "diverged a/b"},
    "length_gap": {"epochs": "shortest (epochs)"},
    "length_gap_pair": {"epochs": "shortest (epochs)"},
}
SHARES = ("diverged_share", "within2_a", "within2_b")  # fractions shown in percent
P_VALUES = ("p", "p_holm", "p_mc_lo", "p_mc_hi")


def _with_ci(value: float, lo: float, hi: float) -> str:
    return sig3(value) + (f" [{sig3(lo)}, {sig3(hi)}]" if np.isfinite(lo) and np.isfinite(hi) else "")


def readable(frame: pd.DataFrame, key: str = "") -> pd.DataFrame:
    """A table for reading: estimates with their CI in one column, p as `< 0.001`, shares in percent,
    readable column names with units, without the `metric` column (the page states the metric once)."""
    frame = frame.drop(columns=[c for c in ("metric",) if c in frame])
    for stat in ("area", "estimate"):
        if {stat, f"{stat}_lo", f"{stat}_hi"} <= set(frame):
            frame = frame.assign(
                **{stat: [_with_ci(*v) for v in zip(frame[stat], frame[f"{stat}_lo"], frame[f"{stat}_hi"])]}
            )
            frame = frame.drop(columns=[f"{stat}_lo", f"{stat}_hi"])
    frame = frame.assign(
        **{
            c: [
                fmt_p(p).removeprefix("p = ").removeprefix("p ") if np.isfinite(p) else "–"
                for p in frame[c].astype(float)
            ]
            for c in P_VALUES
            if c in frame
        }
    )
    frame = frame.assign(**{c: 100 * frame[c].astype(float) for c in SHARES if c in frame})
    return frame.rename(columns={**COLUMN_LABELS, **TABLE_LABELS.get(key, {})})


def _table_html(frame: pd.DataFrame, empty: str, key: str = "") -> str:
    if frame is None or frame.empty:
        return f"<p><em>{html.escape(empty)}</em></p>"
    table = readable(frame, key).to_html(index=False, float_format=sig3, border=0, classes="t", na_rep="–")
    return f'<div class="wide">{table}</div>'


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


FINDING_TITLES = {
    "scope": "Scope: the tests and the trials",
    "edf_pair": "Δ-EDFs, pairs of models (lr/wd stability; Figs 5-6)",
    "optimizer_gap": "Optimizer gap per model (Fig 3)",
    "optimizer_gap_pair": "Optimizer gap, pairs of models",
    "length_gap": "Training-length gap per model (Fig 2)",
    "length_gap_pair": "Training-length gap, pairs of models",
    "peak": "Peak error over seeds, best configurations (Fig 7)",
}


def _claims_html(found: List[Finding]) -> str:
    """The paper's claims against this study (findings.claims_table), or why there are none."""
    claims = claims_table(found)
    if claims.empty:
        return "<p><em>no ViT-P / ViT-C pair was compared: the paper's claims are not tested here</em></p>"
    return (
        "<p>Each row is a finding below on a ViT-P / ViT-C pair: its number with its interval, and its verdict "
        "after Holm's adjustment over the report's tests.</p>"
        + claims.to_html(index=False, border=0, classes="t claims")
    )


def _findings_html(found: List[Finding]) -> str:
    parts = [
        f"<p>Each sentence is one test on the trials below, at α = {ALPHA:g}, and names its test and interval; "
        f"the tables below are the same findings. A finding the data cannot decide says "
        f"<em>inconclusive</em> (or that the design cannot reach α) and what 80% power would need. Each "
        f"rule's measured error rate and power: <code>{CALIBRATION_DOC}</code>; tests: "
        f"<code>analysis/inference.py</code>.</p>"
    ]
    for kind, title in FINDING_TITLES.items():
        items = [f for f in found if f.kind == kind]
        if not items:
            continue
        lis = "".join(f"<li>{html.escape(f.sentence)}</li>" for f in items)
        parts.append(
            f"<details><summary>{html.escape(title)} ({len(items)})</summary><ul class='findings'>{lis}</ul></details>"
        )
    return "".join(parts)


SVG_SCALE = 2.0  # inline figures at twice their print size (7 pt type reads as about 19 px)


def _inline_svg(svg: str) -> str:
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


def build_report(
    trials: pd.DataFrame, epochs: pd.DataFrame, record: Optional[Dict], out: str, metric: str = DEFAULT_METRIC
) -> str:
    """Write figures, JSON tables and index.html for one study's trials (complete or still running).

    `trials` and `epochs` are the study's rows (hpstudy.trainers.schema), `record` its spec record (the
    spec, its trial count and `earlier_spec_rows`, the rows of earlier versions of the spec left out
    of `trials`; or None); every number is on the `metric` error, which the page, report.json and
    every figure state (with any fallback). The report is made in a temporary folder and published into
    `out` (hpstudy.analysis.report_folder.publish: only files of an earlier report are replaced or deleted).
    ReportError if `out` cannot be written or is not hpstudy's to write. Returns the path of index.html.
    """
    check_report_dir(out)
    with tempfile.TemporaryDirectory(prefix="hpstudy-report-") as made:
        _write_report(trials, epochs, record, made, metric)
        try:
            publish(pafs.LocalFileSystem(), os.path.abspath(out), made, "report folder")
        except OSError as exc:
            raise ReportError(f"report folder: cannot write {out!r} ({exc}); allowed: {FOLDER_RULE}") from exc
    return os.path.join(out, "index.html")


def _write_report(trials: pd.DataFrame, epochs: pd.DataFrame, record: Optional[Dict], out: str, metric: str) -> None:
    """Write the report's files (see build_report) into the new, empty folder `out`."""
    study = str(trials["study"].iloc[0]) if "study" in trials and len(trials) else "study"
    rows = usable(trials, metric)
    expected = record["n_trials"] if record else None
    finished = int(trials["status"].isin(FINISHED).sum())
    earlier = (record or {}).get("earlier_spec_rows", 0)
    with warnings.catch_warnings():  # the report counts what it leaves out in its tables instead
        warnings.simplefilter("ignore", LeftOutWarning)
        keys = hp_keys(trials, record)
        ranges_table, ranges = ranges_and_importance(trials, metric, keys)
        found = make_findings(trials, metric)
        tables = {
            "summary": summary_table(trials, metric),
            **{kind: findings_table(found, kind) for kind in KINDS if kind != "scope"},
            "good_ranges": ranges_table,
            "ema_gain": ema_gain(trials),
            "left_out": left_out_table(rows),
        }
        figures = _figures(trials, rows, ranges, out, metric, keys)
    completeness = (
        f"{finished} of {expected} trials stored as ok/diverged ({100 * finished / expected:.0f}%)"
        if expected
        else f"{finished} trials stored"
    )
    if earlier:
        completeness += f"; {earlier} rows from an earlier spec of this study are not in these figures"
    stated = {"requested": metric, "used": rows.metric, "definition": METRIC_DOCS[metric]}
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(
            {
                "study": study,
                "completeness": completeness,
                "n_finished": finished,
                "n_expected": expected,
                "n_failed": int((trials["status"] == FAILED).sum()),
                "earlier_spec_rows": earlier,
                "n_left_out": len(rows.left_out),
                "metric": stated,
                "edf_convention": EDF_CONVENTION,
                "findings": [f.as_dict() for f in found],
                "family": {"tests": found[0].family, "adjustment": "Holm", "alpha": ALPHA},
                "calibration": CALIBRATION_DOC,
                "tables": {k: json.loads(v.to_json(orient="records")) for k, v in tables.items()},
                "spec": record["spec"] if record else None,
            },
            f,
            indent=1,
            sort_keys=True,
        )
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(_html(study, completeness, stated, tables, figures, record, found))


def _html(
    study: str,
    completeness: str,
    metric: Dict[str, str],
    tables: Dict[str, pd.DataFrame],
    figures,
    record,
    found: List[Finding],
) -> str:
    status = (
        f"<p>{html.escape(completeness)}. Metric: <b>{html.escape(metric['used'])}</b> "
        f"(requested {html.escape(metric['requested'])}: {html.escape(metric['definition'])}); every "
        f"number, table and figure below is on this error. {html.escape(EDF_CONVENTION)}; failed trials "
        f"and trials without a finite error are left out of every number and counted below.</p>"
    )
    if not tables["summary"].empty and (tables["summary"]["design"] == "seeds").all():
        status += (
            "<p>Every cell ran one lr/wd over seeds: these are seed statistics (mean ± sd, Welch t), so "
            "no Δ-EDF, good range or expected-best output is shown (they describe lr/wd robustness).</p>"
        )
    sections = [
        ("claims", "The paper's claims", _claims_html(found)),
        ("status", "Status", status),
        ("findings", "Findings", _findings_html(found)),
    ]
    drawn = []
    for name, caption, paths in figures:
        with open(paths["svg"]) as f:
            svg = _inline_svg(f.read())
        links = " ".join(f'<a href="{os.path.basename(p)}">{ext}</a>' for ext, p in paths.items())
        drawn.append(f'<figure id="{name}">{svg}<figcaption>{html.escape(caption)} ({links})</figcaption></figure>')
    sections.append(("figures", "Figures", "".join(drawn)))
    titles = {
        "summary": "Summary per cell",
        **{kind: title for kind, title in FINDING_TITLES.items() if kind != "scope"},
        "good_ranges": "Good lr/wd ranges and fANOVA importance",
        "ema_gain": "EMA gain (best - EMA best, per trial as pycls, and of the bests)",
        "left_out": "Trials left out (failed, or no finite error under the metric)",
    }
    empty = {
        "ema_gain": "no trial has an EMA error: EMA was off (or the store predates best_ema_top1_err)",
        "left_out": "none",
    }
    for key, title in titles.items():
        sections.append(
            (key, title, _table_html(tables[key], empty.get(key, "not enough trials for this table yet"), key))
        )
    spec_text = spec_yaml(record["spec"]) if record else "(no spec record in the store)"
    sections.append(("spec", "Spec", f"<pre>{html.escape(spec_text)}</pre>"))
    toc = "".join(f'<li><a href="#{k}">{html.escape(t)}</a></li>' for k, t, _ in sections)
    body = "".join(f'<section id="{k}"><h2>{html.escape(t)}</h2>{c}</section>' for k, t, c in sections)
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpstudy: {html.escape(study)}</title>"
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto;padding:0 1em}"
        "table.t{border-collapse:collapse;font-size:13px}table.t td,table.t th{padding:3px 8px;"
        "border-bottom:1px solid #ddd;white-space:nowrap}"
        "table.t th{text-align:left;vertical-align:bottom;max-width:9em;white-space:normal}"
        # the claims table wraps its sentences so its verdict column stays on the page
        "table.claims td{white-space:normal;vertical-align:top}table.claims td:nth-child(2){min-width:16em}"
        "figure{margin:1em 0}figure svg{max-width:100%;height:auto;display:block}"
        "ul.findings li{margin:0.35em 0;line-height:1.35}summary{cursor:pointer;margin:0.4em 0}"
        "pre{background:#f6f6f6;padding:0.6em}div.wide{overflow-x:auto}</style></head><body>"
        f"<h1>hpstudy report: {html.escape(study)}</h1><nav><ol>{toc}</ol></nav>{body}</body></html>"
    )
