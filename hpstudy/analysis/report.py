"""One-command report of a study: figures, tables and a self-contained HTML page."""

import functools
import json
import os
import tempfile
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

import matplotlib.style
import numpy as np
import pandas as pd

from hpstudy.analysis.captions import write_captions
from hpstudy.analysis.catalogue import catalogue_state
from hpstudy.analysis.edf import EDF_CONVENTION, bootstrap_band, dkw_epsilon
from hpstudy.analysis.effects import effects_table
from hpstudy.analysis.figures import STYLE, save_figure
from hpstudy.analysis.findings import CALIBRATION_DOC, CELL_KINDS, findings_table
from hpstudy.analysis.findings import findings as make_findings
from hpstudy.analysis.gaps import ema_gain
from hpstudy.analysis.inference import ALPHA, design_of
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, METRIC_DOCS, LeftOutWarning, Rows, usable
from hpstudy.analysis.report_figures import CELL, Planned, Study, planned_figures
from hpstudy.analysis.report_folder import build_into
from hpstudy.analysis.report_jobs import Job, JobFolder, finish, worker_beside, worker_wanted
from hpstudy.analysis.report_page import Drawn, Page, render
from hpstudy.analysis.stats import Keys, good_ranges, hp_importance, hp_kinds
from hpstudy.trainers.schema import DIVERGED, FAILED, FINISHED, STATUSES

Cell = Tuple[str, str, Any]  # (model, optimizer, epochs)


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


def cell_ranges(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, keys: Keys = ("lr", "wd")
) -> Dict[Cell, Tuple[pd.DataFrame, Dict[str, str]]]:
    """Per (model, optimizer, epochs) cell with >= 8 counted trials: its good ranges (stats.good_ranges) of each
    sampled hyperparameter (`keys`, see hpstudy.analysis.stats.hp_kinds) that takes two values or more there,
    and those hyperparameters with their kinds; cells where none does are left out. Never pooled across
    cells (the good lr of a 6- and a 16-epoch schedule differ)."""
    counted = usable(trials, metric, "ranges_and_importance").kept
    kinds = hp_kinds(keys)
    out = {}
    for key, group in counted.groupby(CELL, sort=True, observed=True):
        varied = {name: kind for name, kind in kinds.items() if group[name].nunique(dropna=False) >= 2}
        if len(group) >= 8 and varied:
            out[key] = (good_ranges(_cell(trials, key), metric, keys=varied), varied)
    return out


def _cell(trials: pd.DataFrame, key: Cell) -> pd.DataFrame:
    return trials[(trials[CELL] == pd.Series(key, index=CELL)).all(axis=1)]


def cell_importance(trials: pd.DataFrame, metric: str, key: Cell, varied: Dict[str, str]) -> Dict:
    """fANOVA importance (stats.hp_importance) of the `varied` hyperparameters in one (model, optimizer, epochs)
    cell."""
    return hp_importance(_cell(trials, key), metric, keys=varied)


def ranges_table(
    cells: Mapping[Cell, Tuple[pd.DataFrame, Dict[str, str]]], importances: Mapping[Cell, Dict], keys: Keys
) -> pd.DataFrame:
    """A row per cell (cell_ranges) and percentile: the good ranges, the cell's `n` and each sampled
    hyperparameter's importance (`importance_<name>`; None where it did not vary in the cell)."""
    out = []
    for key, (r, _) in cells.items():
        for q in r.index:
            out.append(
                {
                    **dict(zip(CELL, key)),
                    "percentile": q,
                    **r.loc[q].to_dict(),
                    **{f"importance_{name}": importances[key].get(name) for name in hp_kinds(keys)},
                }
            )
    return pd.DataFrame(out)


def ranges_and_importance(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, keys: Keys = ("lr", "wd")
) -> Tuple[pd.DataFrame, Dict]:
    """Good ranges and fANOVA importance per cell of cell_ranges: the table (ranges_table) and the ranges
    keyed by (model, optimizer, epochs)."""
    cells = cell_ranges(trials, metric, keys)
    importances = {key: cell_importance(trials, metric, key, varied) for key, (_, varied) in cells.items()}
    return ranges_table(cells, importances, keys), {key: r for key, (r, _) in cells.items()}


def spec_sizes(record: Optional[Dict]) -> Dict[str, str]:
    """The size classes a spec's `models:` gives (a timm: model's {name, family, size})."""
    models = ((record or {}).get("spec") or {}).get("models") or []
    return {m["name"]: m["size"] for m in models if isinstance(m, dict) and m.get("size")}


def _importance_job(key: Cell) -> str:
    return "importance " + json.dumps([str(part) for part in key])  # unambiguous whatever the names hold


def _figure_job(name: str) -> str:
    return "figure " + name


def _draw(planned: Planned, out: str, stated: Dict[str, str]) -> Dict:
    """Draw one planned figure in the house style and save it beside its table, with the metric, its caption and
    its entry's metadata; the Drawn's fields."""
    with matplotlib.style.context(STYLE):
        plot = planned.figure(planned.table)
        meta = {**stated, "caption": plot.caption, **planned.meta}
        paths = save_figure(plot, out, planned.name, planned.table, meta)
    return {"name": planned.name, "section": planned.section, "caption": plot.caption, "paths": paths}


def plan_jobs(
    trials: pd.DataFrame,
    epochs: pd.DataFrame,
    metric: str,
    keys: Keys,
    sizes: Optional[Dict[str, str]],
    out: str,
) -> Tuple[Dict[Cell, Tuple[pd.DataFrame, Dict[str, str]]], List[Planned], Dict[str, Job]]:
    """The report's jobs that need nothing of each other, in the order they are taken (report_jobs): fANOVA
    importance per cell of cell_ranges, then every figure the data supports (report_figures.FIGURES), each
    saved into `out`. Returns the cells, the planned figures and the jobs by name."""
    cells = cell_ranges(trials, metric, keys)
    jobs: Dict[str, Job] = {
        _importance_job(key): functools.partial(cell_importance, trials, metric, key, varied)
        for key, (_, varied) in cells.items()
    }
    rows = usable(trials, metric)
    ranges = {key: r for key, (r, _) in cells.items()}
    planned = planned_figures(Study(trials, rows, ranges, metric, keys, sizes, epochs))
    stated = {"metric": rows.metric, "metric_definition": METRIC_DOCS[metric]}
    names = [p.name for p in planned]
    if len(set(names)) < len(names):  # two figures would write the same files
        raise ValueError(f"report figures: a name planned twice: {sorted({n for n in names if names.count(n) > 1})}")
    jobs.update({_figure_job(p.name): functools.partial(_draw, p, out, stated) for p in planned})
    return cells, planned, jobs


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
    return build_into(out, functools.partial(_write_report, trials, epochs, record, metric=metric))


def _write_report(trials: pd.DataFrame, epochs: pd.DataFrame, record: Optional[Dict], out: str, metric: str) -> None:
    """Write the report's files (see build_report) into the new, empty folder `out`."""
    study = str(trials["study"].iloc[0]) if "study" in trials and len(trials) else "study"
    rows = usable(trials, metric)
    expected = record["n_trials"] if record else None
    finished = int(trials["status"].isin(FINISHED).sum())
    earlier = (record or {}).get("earlier_spec_rows", 0)
    sizes = spec_sizes(record)
    with warnings.catch_warnings():  # the report counts what it leaves out in its tables instead
        warnings.simplefilter("ignore", LeftOutWarning)
        keys = hp_keys(trials, record)
        cells, planned, planned_jobs = plan_jobs(trials, epochs, metric, keys, sizes, out)
        with tempfile.TemporaryDirectory(prefix="hpstudy-report-jobs-") as folder:
            jobs = JobFolder(folder)
            inputs = {"trials": trials, "epochs": epochs}
            params: Dict[str, Any] = {"metric": metric, "keys": keys, "sizes": sizes, "out": out}
            params.update(catalogue=catalogue_state(), jobs=list(planned_jobs))
            with worker_beside(folder, inputs, params, worker_wanted(len(trials))) as worker:
                found = make_findings(trials, metric)
                summary, effects = summary_table(trials, metric), effects_table(trials, metric)
                results = finish(jobs, planned_jobs, worker)
        importances = {key: results[_importance_job(key)] for key in cells}
        tables = {
            "summary": summary,
            **{kind: findings_table(found, kind) for kind in CELL_KINDS},
            "good_ranges": ranges_table(cells, importances, keys),
            "effects": effects,
            "ema_gain": ema_gain(trials),
            "left_out": left_out_table(rows),
        }
        figures = [Drawn(**results[_figure_job(p.name)]) for p in planned]
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
