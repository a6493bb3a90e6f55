"""One-command report of a study: figures, tables and a self-contained HTML page."""

import json
import os
import tempfile
import warnings
from typing import Dict, List, Optional, Tuple

import matplotlib.style
import numpy as np
import pandas as pd
import pyarrow.fs as pafs

from hpstudy.analysis.captions import write_captions
from hpstudy.analysis.edf import EDF_CONVENTION, bootstrap_band, dkw_epsilon
from hpstudy.analysis.effects import effects_table
from hpstudy.analysis.figures import STYLE, save_figure
from hpstudy.analysis.findings import CALIBRATION_DOC, KINDS, findings_table
from hpstudy.analysis.findings import findings as make_findings
from hpstudy.analysis.gaps import ema_gain
from hpstudy.analysis.inference import ALPHA, design_of
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, METRIC_DOCS, LeftOutWarning, Rows, usable
from hpstudy.analysis.report_figures import CELL, Study, planned_figures
from hpstudy.analysis.report_folder import FOLDER_RULE, ReportError, check_report_dir, publish
from hpstudy.analysis.report_page import Drawn, Page, render
from hpstudy.analysis.stats import Keys, good_ranges, hp_importance, hp_kinds
from hpstudy.trainers.schema import DIVERGED, FAILED, FINISHED, STATUSES


def left_out_table(rows: Rows) -> pd.DataFrame:
    """Per cell: the trials left out of every number (failed, or no finite error under the metric)."""
    left = rows.left_out.assign(failed=rows.left_out["status"] == FAILED)
    return (
        left.groupby(CELL, sort=True, observed=True)
        .agg(failed=("failed", "sum"), no_finite_error=("failed", lambda f: int((~f).sum())))
        .reset_index()
    )


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
    """Good ranges and fANOVA importance per (model, optimizer, epochs) cell with >= 8 counted trials, of
    each sampled hyperparameter (`keys`, see hpstudy.analysis.stats.hp_kinds) that takes two values or more
    there; never pooled across cells (the good lr of a 6- and a 16-epoch schedule differ). The table has a
    row per cell and percentile with the cell's `n`; the ranges are keyed by (model, optimizer, epochs)."""
    counted = usable(trials, metric, "ranges_and_importance").kept
    kinds = hp_kinds(keys)
    out, ranges = [], {}
    for key, group in counted.groupby(CELL, sort=True, observed=True):
        varied = {name: kind for name, kind in kinds.items() if group[name].nunique(dropna=False) >= 2}
        if len(group) < 8 or not varied:
            continue
        cell = trials[(trials[CELL] == pd.Series(key, index=CELL)).all(axis=1)]
        r = good_ranges(cell, metric, keys=varied)
        ranges[key] = r
        importance = hp_importance(cell, metric, keys=varied)
        for q in r.index:
            out.append(
                {
                    **dict(zip(CELL, key)),
                    "percentile": q,
                    **r.loc[q].to_dict(),
                    **{f"importance_{name}": importance.get(name) for name in kinds},
                }
            )
    return pd.DataFrame(out), ranges


def spec_sizes(record: Optional[Dict]) -> Dict[str, str]:
    """The size classes a spec's `models:` gives (a timm: model's {name, family, size})."""
    models = ((record or {}).get("spec") or {}).get("models") or []
    return {m["name"]: m["size"] for m in models if isinstance(m, dict) and m.get("size")}


def _figures(
    trials: pd.DataFrame,
    rows: Rows,
    ranges: Dict,
    out: str,
    metric: str,
    keys: Keys = ("lr", "wd"),
    sizes: Optional[Dict[str, str]] = None,
    epochs: Optional[pd.DataFrame] = None,
) -> List[Drawn]:
    """Draw every figure the data supports (hpstudy.analysis.report_figures.FIGURES) in the house style,
    each from its table, saved beside it with the metric, its caption and its entry's metadata."""
    stated = {"metric": rows.metric, "metric_definition": METRIC_DOCS[metric]}
    made: List[Drawn] = []
    for planned in planned_figures(Study(trials, rows, ranges, metric, keys, sizes, epochs)):
        with matplotlib.style.context(STYLE):
            plot = planned.figure(planned.table)
            meta = {**stated, "caption": plot.caption, **planned.meta}
            paths = save_figure(plot, out, planned.name, planned.table, meta)
        made.append(Drawn(planned.name, planned.section, plot.caption, paths))
    return made


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
            "effects": effects_table(trials, metric),
            "ema_gain": ema_gain(trials),
            "left_out": left_out_table(rows),
        }
        figures = _figures(trials, rows, ranges, out, metric, keys, spec_sizes(record), epochs)
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
                "figures": {d.name: {"caption": d.caption, "section": d.section} for d in figures},
            },
            f,
            indent=1,
            sort_keys=True,
        )
    write_captions(out, study, [(d.name, d.caption) for d in figures])
    page = Page(study, completeness, stated, tables, figures, record, found, tuple(keys))
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(render(page))
