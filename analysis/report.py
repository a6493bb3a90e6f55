"""One-command report of a study: figures, tables and a self-contained HTML page."""

import html
import itertools
import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import pandas as pd

from analysis.edf import EDF_CONVENTION, bootstrap_band, dkw_epsilon, edf_table
from analysis.figures import (delta_edf_figure, delta_error_vs_epochs_figure, error_vs_epochs_figure,
                              expected_best_figure, hp_scatter_figure, save_figure)
from analysis.gaps import length_gap, optimizer_gap, peak_table
from analysis.stats import (ad_compare, effect_sizes, good_ranges, hp_importance, ks_compare,
                            min_detectable_d)
from trainers.schema import DIVERGED, FAILED, FINISHED, STATUSES

ERROR = "top1_err"


def split_failed(trials: pd.DataFrame) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """(trials that count in EDFs: ok and diverged at chance error, failed trials per cell)."""
    failed = trials[trials["status"] == FAILED]
    counts = failed.groupby(["model", "optimizer", "epochs"]).size().rename(FAILED).reset_index()
    return trials[trials["status"] != FAILED].copy(), counts


def equalize_counts(frame: pd.DataFrame, by: List[str], seed: int = 0) -> pd.DataFrame:
    """Subsample every group to the smallest group's size (models compared at equal n)."""
    n_min = frame.groupby(by).size().min()
    shuffled = frame.sample(frac=1.0, random_state=seed)
    kept = shuffled[shuffled.groupby(by).cumcount() < n_min]
    return kept.sort_values(by + [ERROR], kind="stable")


def summary_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (model, optimizer, epochs): counts by status, best/median error, diverged share, bands."""
    rows = []
    for (model, opt, epochs), group in trials.groupby(["model", "optimizer", "epochs"], sort=True):
        usable = group[group["status"] != FAILED][ERROR].to_numpy(float)
        status = group["status"].value_counts()
        rows.append({"model": model, "optimizer": opt, "epochs": epochs, "n": len(usable),
                     **{s: status.get(s, 0) for s in STATUSES},
                     "diverged_share": status.get(DIVERGED, 0) / max(1, len(usable)),
                     "best": usable.min() if len(usable) else np.nan,
                     "median": np.median(usable) if len(usable) else np.nan,
                     "dkw_eps_95": float(dkw_epsilon(len(usable))) if len(usable) else np.nan,
                     "bootstrap_eps_95": bootstrap_band(usable, n_boot=300) if len(usable) > 1 else np.nan})
    return pd.DataFrame(rows)


def comparison_table(usable: pd.DataFrame) -> pd.DataFrame:
    """Pairwise model comparisons within each (optimizer, epochs) cell: KS, AD, D_min, effect sizes."""
    rows = []
    for (opt, epochs), cell in usable.groupby(["optimizer", "epochs"], sort=True):
        models = sorted(cell["model"].unique())
        for a, b in itertools.combinations(models, 2):
            ea = cell.loc[cell["model"] == a, ERROR].to_numpy(float)
            eb = cell.loc[cell["model"] == b, ERROR].to_numpy(float)
            if len(ea) < 2 or len(eb) < 2:
                continue
            effects = effect_sizes(ea, eb, n_boot=300)
            rows.append({"optimizer": opt, "epochs": epochs, "a": a, "b": b, "n_a": len(ea), "n_b": len(eb),
                         **ks_compare(ea, eb), **ad_compare([ea, eb], n_resamples=299),
                         "ks_d_min": min_detectable_d(len(ea), len(eb)),
                         "area": effects["area"], "area_lo": effects["area_lo"], "area_hi": effects["area_hi"],
                         "within2_a": effects["within2_a"], "within2_b": effects["within2_b"]})
    return pd.DataFrame(rows)


def ranges_and_importance(usable: pd.DataFrame) -> Tuple[pd.DataFrame, Dict]:
    """Good lr/wd ranges and fANOVA importance per (model, optimizer) with >= 8 trials."""
    rows, ranges = [], {}
    for (model, opt), group in usable.groupby(["model", "optimizer"], sort=True):
        if len(group) < 8 or group["lr"].nunique() < 2 or group["wd"].nunique() < 2:
            continue
        r = good_ranges(group)
        ranges[(model, opt)] = r
        importance = hp_importance(group)
        for q in r.index:
            rows.append({"model": model, "optimizer": opt, "percentile": q, **r.loc[q].to_dict(),
                         "importance_lr": importance.get("lr"), "importance_wd": importance.get("wd")})
    return pd.DataFrame(rows), ranges


def _figures(usable: pd.DataFrame, ranges: Dict, out: str) -> List[Tuple[str, str, Dict]]:
    """Render every figure the data supports; returns (name, caption, paths)."""
    made = []
    for (opt, epochs), cell in usable.groupby(["optimizer", "epochs"], sort=True):
        if cell.groupby("model").size().min() < 2:
            continue
        cell = equalize_counts(cell, ["model"])
        table = edf_table(cell, by=["model"], reference="min")
        name = f"delta_edf_{opt}_{epochs}ep"
        meta = {"n_per_model": int(table.groupby("model")["n"].first().min()), "reference": "group minimum",
                "edf_convention": EDF_CONVENTION, "band": "DKW 95% simultaneous", "optimizer": opt,
                "epochs": int(epochs), "error": ERROR}
        made.append((name, f"Δ-EDF of top-1 error, {opt}, {epochs} epochs (equal n per model)",
                     save_figure(delta_edf_figure(table), out, name, table, meta)))
    for opt in sorted(usable["optimizer"].unique()):
        cell = usable[usable["optimizer"] == opt]
        by_model = {m: r for (m, o), r in ranges.items() if o == opt}
        if cell["lr"].nunique() > 1:
            name = f"hp_scatter_{opt}"
            data = cell[["model", "optimizer", "epochs", "lr", "wd", ERROR, "status"]]
            meta = {"good_ranges": "bootstrap (2500 x 25%) of the best trial's log10 values, 2.5-97.5%",
                    "ranges": {m: r.to_dict() for m, r in by_model.items()}}
            made.append((name, f"Top-1 error against lr, wd and lr·wd ({opt}); shaded: good ranges",
                         save_figure(hp_scatter_figure(cell, by_model), out, name, data, meta)))
    if usable["epochs"].nunique() > 1:
        name = "error_vs_epochs"
        made.append((name, "Best top-1 error against training length (diverged runs dashed)",
                     save_figure(error_vs_epochs_figure(usable), out, name,
                                 usable[["model", "optimizer", "epochs", ERROR, "status"]],
                                 {"aggregate": "best trial per (model, optimizer, epochs)"})))
        gaps = length_gap(usable)
        name = "delta_error_vs_epochs"
        made.append((name, "Training-length gap: error(E) - error(E_max)",
                     save_figure(delta_error_vs_epochs_figure(gaps), out, name, gaps,
                                 {"rule": "E_max all diverged -> best shorter schedule, flagged"})))
    if usable.groupby(["model", "optimizer"]).size().max() >= 2:
        fig, curves = expected_best_figure(usable)
        name = "expected_best"
        made.append((name, "Expected best top-1 error after k random trials (unbiased estimator)",
                     save_figure(fig, out, name, curves,
                                 {"estimator": "unbiased, Tang et al. 2020", "band": "bootstrap 95% pointwise"})))
    return made


def _table_html(frame: pd.DataFrame) -> str:
    if frame is None or frame.empty:
        return "<p><em>not enough trials for this table yet</em></p>"
    return frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0, classes="t")


def build_report(trials: pd.DataFrame, epochs: pd.DataFrame, record: Optional[Dict], out: str) -> str:
    """Write figures, JSON tables and index.html for one study's trials (complete or still running).

    `trials` and `epochs` are the study's rows (trainers.schema), `record` its spec record (the
    spec and its trial count, or None); returns the path of index.html.
    """
    study = str(trials["study"].iloc[0]) if "study" in trials and len(trials) else "study"
    os.makedirs(out, exist_ok=True)
    usable, failed = split_failed(trials)
    expected = record["n_trials"] if record else None
    finished = int(trials["status"].isin(FINISHED).sum())
    ranges_table, ranges = ranges_and_importance(usable)
    tables = {"summary": summary_table(trials), "comparisons": comparison_table(usable),
              "optimizer_gap": optimizer_gap(usable) if usable["optimizer"].nunique() > 1 else pd.DataFrame(),
              "length_gap": length_gap(usable) if usable["epochs"].nunique() > 1 else pd.DataFrame(),
              "good_ranges": ranges_table, "peak": peak_table(usable),
              "failed": failed}
    figures = _figures(usable, ranges, out)
    completeness = (f"{finished} of {expected} trials stored as ok/diverged "
                    f"({100 * finished / expected:.0f}%)" if expected else f"{finished} trials stored")
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"study": study, "completeness": completeness, "n_finished": finished,
                   "n_expected": expected, "n_failed": int((trials["status"] == FAILED).sum()),
                   "edf_convention": EDF_CONVENTION,
                   "tables": {k: json.loads(v.to_json(orient="records")) for k, v in tables.items()},
                   "spec": record["spec"] if record else None}, f, indent=1, sort_keys=True)
    page = os.path.join(out, "index.html")
    with open(page, "w") as f:
        f.write(_html(study, completeness, tables, figures, record))
    return page


def _html(study: str, completeness: str, tables: Dict[str, pd.DataFrame], figures, record) -> str:
    sections = [("status", "Status", f"<p>{html.escape(completeness)}. {html.escape(EDF_CONVENTION)}; "
                                     f"failed trials are left out of EDFs and listed below.</p>")]
    for name, caption, paths in figures:
        with open(paths["svg"]) as f:
            svg = f.read()
        svg = svg[svg.index("<svg"):]
        links = " ".join(f'<a href="{os.path.basename(p)}">{ext}</a>' for ext, p in paths.items())
        sections.append((name, caption, f"<figure>{svg}<figcaption>{html.escape(caption)} ({links})"
                                        f"</figcaption></figure>"))
    titles = {"summary": "Summary per cell", "comparisons": "Model comparisons (KS, Anderson-Darling, effect sizes)",
              "optimizer_gap": "Optimizer gap (best SGD - best AdamW)", "length_gap": "Training-length gap",
              "good_ranges": "Good lr/wd ranges and fANOVA importance", "peak": "Peak performance",
              "failed": "Failed trials (excluded from EDFs)"}
    for key, title in titles.items():
        sections.append((key, title, _table_html(tables[key])))
    spec_text = json.dumps(record["spec"], indent=1, sort_keys=True) if record else "(no spec record in the store)"
    sections.append(("spec", "Spec", f"<pre>{html.escape(spec_text)}</pre>"))
    toc = "".join(f'<li><a href="#{k}">{html.escape(t)}</a></li>' for k, t, _ in sections)
    body = "".join(f'<section id="{k}"><h2>{html.escape(t)}</h2>{c}</section>' for k, t, c in sections)
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpstudy: {html.escape(study)}</title>"
            "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}table.t{border-collapse:collapse;"
            "font-size:12px}table.t td,table.t th{padding:2px 6px;border-bottom:1px solid #ddd}"
            "figure svg{max-width:100%;height:auto}</style></head><body>"
            f"<h1>hpstudy report: {html.escape(study)}</h1><nav><ol>{toc}</ol></nav>{body}</body></html>")
