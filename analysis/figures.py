"""Paper figures (Xiao et al. 2021 layouts), saved as PDF/SVG/PNG with their numbers as CSV/JSON.

Every figure is a pair: `<name>_table(trials, ..., metric)` computes the numbers it plots (one
definition; the table saved beside it), and `<name>_figure(table, ...)` draws from that table only.
Every figure is drawn on the error of a stated metric (`hpstudy.analysis.metric`; failed rows and
non-finite errors left out) and says which in its title, its CSV (a `metric` column) and its JSON.

Figures are built on `matplotlib.figure.Figure` (no pyplot, no global backend or rcParams change);
style settings apply inside `rc_context` only. Output is byte-for-byte reproducible: PDF/SVG dates
are omitted unless SOURCE_DATE_EPOCH is set (then matplotlib uses it), and SVG ids are salted.
"""

import json
import os
import textwrap
from contextlib import contextmanager
from typing import Dict, List, Sequence, Tuple, TypedDict, Union

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, StrMethodFormatter

from hpstudy.analysis.edf import edf_table
from hpstudy.analysis.gaps import length_gap
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, usable, warn_left_out
from hpstudy.analysis.stats import expected_best, expected_best_band
from hpstudy.trainers.schema import DIVERGED, OK
from hpstudy.trainers.zoo import SIZE_ORDER, get_spec, list_models

PANEL = (3.0, 2.0)  # inches per panel
OKABE_ITO = {
    "blue": "#0072B2",
    "sky": "#56B4E9",
    "vermillion": "#D55E00",
    "orange": "#E69F00",
    "green": "#009E73",
    "purple": "#CC79A7",
    "yellow": "#F0E442",
    "black": "#000000",
}
# Paul Tol's muted scheme (colour-blind safe) for the families the Okabe-Ito colours do not cover.
TOL_MUTED = {
    "indigo": "#332288",
    "teal": "#44AA99",
    "rose": "#CC6677",
    "olive": "#999933",
    "wine": "#882255",
    "cyan": "#88CCEE",
    "sand": "#DDCC77",
    "tol_green": "#117733",
    "tol_purple": "#AA4499",
}
PALETTE = {**OKABE_ITO, **TOL_MUTED}
# CoAtNet's colours follow its catalogue order: the four layouts at 224 px, CoAtNet-0..3, then the tiny
# layouts, which get the colours of their 224 px twins.
FAMILY_COLOURS = {
    "vit_p": ["blue", "sky"],
    "vit_c": ["vermillion", "orange"],
    "cnn": ["green", "purple", "black"],
    "coatnet": ["indigo", "teal", "rose", "olive", "wine", "cyan", "sand", "tol_green"],
    "vit_rel": ["tol_purple"],
}
LineStyle = Union[str, Tuple[int, Tuple[int, ...]]]  # a named style or (offset, on-off dash sequence)
FAMILY_LINES: Dict[str, LineStyle] = {
    "vit_p": "-",
    "vit_c": "--",
    "cnn": ":",
    "coatnet": "-.",
    "vit_rel": (0, (5, 1, 1, 1, 1, 1)),
}
STYLE = {
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.hashsalt": "hpstudy",
    "svg.fonttype": "path",
    "font.size": 7,
    "axes.titlesize": 7,
    "axes.labelsize": 7,
    "legend.fontsize": 6,
    "xtick.labelsize": 6,
    "ytick.labelsize": 6,
    "lines.linewidth": 1.2,
    "axes.linewidth": 0.6,
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "path.simplify": False,
}


class ModelStyle(TypedDict):
    """A model's keyword arguments for matplotlib's line calls."""

    color: str
    linestyle: LineStyle


def model_style(model: str) -> ModelStyle:
    """The fixed colour (Okabe-Ito, colour-blind safe) and line style of a model in every figure."""
    spec = get_spec(model)
    rank = list_models(spec.family).index(model)
    colours = FAMILY_COLOURS[spec.family]
    return {"color": PALETTE[colours[rank % len(colours)]], "linestyle": FAMILY_LINES[spec.family]}


@contextmanager
def style():
    """The paper style, for building and saving one figure."""
    with matplotlib.rc_context(STYLE):
        yield


def _grid(n_panels: int, columns: int = 3):
    cols = min(columns, max(1, n_panels))
    rows = int(np.ceil(n_panels / cols))
    fig = Figure(figsize=(PANEL[0] * cols, PANEL[1] * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def _sizes(models: Sequence[str]) -> List[str]:
    present = {get_spec(m).size for m in models}
    return [s for s in SIZE_ORDER if s in present]


def _title(fig: Figure, table: pd.DataFrame, *lines: str) -> None:
    """The figure's title: `lines` (what it shows), then the metric of its `table`, wrapped to the
    figure's width."""
    width = int(fig.get_figwidth() * 14)  # characters of the title font per inch, about
    lines += (f"metric: {table['metric'].iloc[0]}",)
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in lines))


def save_figure(fig: Figure, out_dir: str, name: str, data: pd.DataFrame, meta: Dict) -> Dict[str, str]:
    """Write name.{pdf,svg,png} and the plotted numbers as name.csv plus name.json (with meta).

    meta must state the metric (`meta["metric"]`); the CSV gets it as a `metric` column if the data
    has none.
    """
    if "metric" not in meta:
        raise ValueError(f"save_figure {name}: meta must state the metric the figure is drawn on")
    if "metric" not in data:
        data = data.assign(metric=meta["metric"])
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.join(out_dir, name)
    dated = "SOURCE_DATE_EPOCH" in os.environ
    paths = {}
    with style():
        for ext, metadata in (
            ("pdf", {} if dated else {"CreationDate": None}),
            ("svg", {} if dated else {"Date": None}),
            ("png", {}),
        ):
            paths[ext] = f"{stem}.{ext}"
            fig.savefig(paths[ext], metadata=metadata)
    data.to_csv(f"{stem}.csv", index=False, float_format="%.6g")
    paths["csv"] = f"{stem}.csv"
    with open(f"{stem}.json", "w") as f:
        json.dump(
            {
                "figure": name,
                **meta,
                "columns": list(data.columns),
                "data": json.loads(data.to_json(orient="records", double_precision=10)),
            },
            f,
            indent=1,
            sort_keys=True,
        )
    paths["json"] = f"{stem}.json"
    return paths


def integer_ticks(ax, values: Sequence[int]) -> None:
    """Label a log-scaled x axis at the given whole numbers only (no 10^k, no minor labels)."""
    ax.xaxis.set_major_locator(FixedLocator(sorted({int(v) for v in values})))
    ax.xaxis.set_major_formatter(StrMethodFormatter("{x:.0f}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def trial_count_ticks(n: int) -> List[int]:
    """1, 2, 4, 8, ... up to n, and n itself (a power of two too close to n left out): ticks for a
    number-of-trials axis."""
    ticks = [2**i for i in range(int(np.log2(max(n, 1))) + 1)]
    if ticks[-1] != n:
        if len(ticks) > 1 and n < 1.4 * ticks[-1]:
            ticks.pop()
        ticks.append(n)
    return ticks


def _edf_steps(delta: np.ndarray, f: np.ndarray):
    """Step coordinates starting at F = 0 just before the first point."""
    return np.concatenate([[delta[0]], delta]), np.concatenate([[0.0], f])


def delta_edf_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Every model's Δ-EDF step points, Δ to the model's best trial, with DKW half-widths (edf_table)."""
    return edf_table(trials, by=["model"], metric=metric, reference="min")


def delta_edf_figure(table: pd.DataFrame, band: bool = True) -> Figure:
    """Δ-EDF panels, one per model size, one line per model (Figs 5-6), DKW bands as light fills."""
    with style():
        sizes = _sizes(table["model"].unique())
        fig, axes = _grid(len(sizes))
        for ax, size in zip(axes, sizes):
            for model, group in table[table["model"].map(lambda m: get_spec(m).size) == size].groupby("model"):
                x, f = _edf_steps(group["delta"].to_numpy(), group["F"].to_numpy())
                st = model_style(model)
                ax.step(x, f, where="post", label=f"{model} (n={group['n'].iloc[0]})", **st)
                if band:
                    eps = group["dkw_eps"].iloc[0]
                    ax.fill_between(
                        x,
                        np.clip(f - eps, 0, 1),
                        np.clip(f + eps, 0, 1),
                        step="post",
                        color=st["color"],
                        alpha=0.15,
                        linewidth=0,
                    )
            ax.set(title=size, xlabel="Δ top-1 error (points)", ylabel="cumulative prob.", ylim=(0, 1))
            ax.legend(loc="lower right", frameon=False)
        _title(fig, table, f"Δ-EDF, reference: {table['reference_kind'].iloc[0]}")
    return fig


def hp_scatter_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Every counted trial's model, optimizer, epochs, lr, wd, error and status (Fig 4's points)."""
    rows = usable(trials, metric, "hp_scatter_table")
    return (
        rows.kept[["model", "optimizer", "epochs", "lr", "wd", ERR, "status"]]
        .rename(columns={ERR: "error"})
        .assign(metric=rows.metric)
    )


def hp_scatter_figure(table: pd.DataFrame, ranges: Dict[str, pd.DataFrame]) -> Figure:
    """Error against log10 lr, log10 wd and log10 lr·wd per model (Fig 4), each model's good ranges
    (`ranges`: good_ranges per model) shaded."""
    models = sorted(table["model"].unique(), key=list_models().index)
    columns = [("log10_lr", "log10 lr"), ("log10_wd", "log10 wd"), ("log10_lr_wd", "log10 lr·wd")]
    with style():
        fig = Figure(figsize=(PANEL[0] * 3, PANEL[1] * len(models)), layout="constrained")
        axes = fig.subplots(len(models), 3, squeeze=False)
        for row, model in zip(axes, models):
            group = table[table["model"] == model]
            logs = {"log10_lr": np.log10(group["lr"]), "log10_wd": np.log10(group["wd"])}
            logs["log10_lr_wd"] = logs["log10_lr"] + logs["log10_wd"]
            st = model_style(model)
            for ax, (key, label) in zip(row, columns):
                for opt, marker in (("adamw", "o"), ("sgd", "s")):
                    sel = (group["optimizer"] == opt).to_numpy()
                    if sel.any():
                        ax.scatter(
                            logs[key][sel],
                            group["error"][sel],
                            s=6,
                            marker=marker,
                            color=st["color"],
                            label=opt,
                            linewidths=0,
                        )
                if model in ranges:
                    lo, hi = ranges[model].loc["p2.5", key], ranges[model].loc["p97.5", key]
                    ax.axvspan(lo, hi, color=st["color"], alpha=0.12, linewidth=0)
                ax.set(xlabel=label, ylabel=f"{model} top-1 err (%)")
            row[0].legend(frameon=False)
        _title(fig, table)
    return fig


def error_vs_epochs_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """The best error per (model, optimizer, epochs) and whether all its runs diverged (Fig 3's points)."""
    rows = usable(trials, metric, "error_vs_epochs_table")
    return (
        rows.kept.groupby(["model", "optimizer", "epochs"])
        .agg(error=(ERR, "min"), diverged=("status", lambda s: (s == DIVERGED).all()))
        .reset_index()
        .assign(metric=rows.metric)
    )


def error_vs_epochs_figure(table: pd.DataFrame) -> Figure:
    """Best error against training epochs per model, AdamW and SGD, diverged runs dashed (Fig 3)."""
    with style():
        sizes = _sizes(table["model"].unique())
        fig, axes = _grid(len(sizes))
        for ax, size in zip(axes, sizes):
            for (model, opt), group in table[table["model"].map(lambda m: get_spec(m).size) == size].groupby(
                ["model", "optimizer"]
            ):
                st = dict(model_style(model), marker="o" if opt == "adamw" else "s", markersize=3)
                ok = group[~group["diverged"]]
                ax.plot(ok["epochs"], ok["error"], label=f"{model} {opt}", **st)
                if group["diverged"].any():
                    ax.plot(
                        group["epochs"],
                        group["error"],
                        **dict(st, linestyle=(0, (2, 2)), markerfacecolor="none", label=None),
                    )
            ax.set(title=size, xscale="log", xlabel="epochs", ylabel="top-1 error (%)")
            integer_ticks(ax, table["epochs"].unique())
            ax.legend(frameon=False)
        _title(fig, table)
    return fig


def delta_error_vs_epochs_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """The training-length gap error(E) - error(E_max) per model, optimizer and epochs (length_gap)."""
    return length_gap(trials, metric=metric)


def delta_error_vs_epochs_figure(table: pd.DataFrame) -> Figure:
    """Training-length gap error(E) - error(E_max) against epochs per model (Fig 2)."""
    with style():
        fig, axes = _grid(1)
        ax = axes[0]
        for (model, opt), group in table.groupby(["model", "optimizer"]):
            ax.plot(
                group["epochs"], group["gap"], marker="o", markersize=3, label=f"{model} {opt}", **model_style(model)
            )
        ax.axhline(0, color="0.6", linewidth=0.5)
        ax.set(xscale="log", xlabel="epochs", ylabel="Δ top-1 error vs longest (points)")
        integer_ticks(ax, table["epochs"].unique())
        ax.legend(frameon=False)
        _title(fig, table)
    return fig


def expected_best_table(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, estimator: str = "unbiased", n_boot: int = 200
) -> pd.DataFrame:
    """The expected best error after k = 1..n random trials per model and optimizer, with its bootstrap
    band (`lo`, `hi`)."""
    used = usable(trials, metric, "expected_best_table")
    rows = []
    for (opt, model), group in used.kept.groupby(["optimizer", "model"]):
        errors = group[ERR].to_numpy(float)
        ks = np.arange(1, len(errors) + 1)
        curve = expected_best(errors, ks, estimator)
        lo, hi = expected_best_band(errors, ks, estimator, n_boot=n_boot)
        rows += [
            {"model": model, "optimizer": opt, "k": int(k), "expected_best": c, "lo": low, "hi": high}
            for k, c, low, high in zip(ks, curve, lo, hi)
        ]
    return pd.DataFrame(rows).assign(metric=used.metric)


def expected_best_figure(table: pd.DataFrame) -> Figure:
    """Expected best error against the number of random trials k, a panel per optimizer, a line and its
    bootstrap band per model."""
    with style():
        optimizers = sorted(table["optimizer"].unique())
        fig, axes = _grid(len(optimizers))
        for ax, opt in zip(axes, optimizers):
            panel = table[table["optimizer"] == opt]
            for model, curve in panel.groupby("model"):
                st = model_style(model)
                ax.plot(curve["k"], curve["expected_best"], label=model, **st)
                ax.fill_between(curve["k"], curve["lo"], curve["hi"], color=st["color"], alpha=0.15, linewidth=0)
            ax.set(title=opt, xscale="log", xlabel="trials k", ylabel="expected best top-1 err (%)")
            integer_ticks(ax, trial_count_ticks(int(panel["k"].max())))
            ax.legend(frameon=False)
        _title(fig, table)
    return fig


def generalization_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """Every trained trial's validation error and final train loss, with the medians of its model in its
    (optimizer, epochs) cell. Diverged trials have no final train loss and are left out, said as a
    LeftOutWarning and counted in `n_left_out` (with the failed and those without a finite error)."""
    used = usable(trials, metric, "generalization_table")
    trained = (used.kept["status"] == OK) & np.isfinite(used.kept["train_loss"].astype(float))
    if (~trained).any():
        warn_left_out(
            "generalization_table",
            int((~trained).sum()),
            len(used.kept),
            "counted rows: diverged, without a final train loss",
        )
    points = used.kept[trained][["model", "family", "optimizer", "epochs", "train_loss", ERR]].rename(
        columns={ERR: "error"}
    )
    medians = points.groupby(["optimizer", "epochs", "model"])[["train_loss", "error"]].transform("median")
    return points.assign(
        median_train_loss=medians["train_loss"],
        median_error=medians["error"],
        metric=used.metric,
        n_left_out=len(trials) - int(trained.sum()),
    )


def generalization_figure(table: pd.DataFrame) -> Figure:
    """Validation error against final train loss, a point per trial and each model's median marked, one
    panel per (optimizer, epochs): CoAtNet's split of generalization (lower error at the same train loss)
    from capacity (lower train loss)."""
    with style():
        cells = sorted(table.groupby(["optimizer", "epochs"]).groups)
        fig, axes = _grid(len(cells))
        for ax, (opt, epochs) in zip(axes, cells):
            cell = table[(table["optimizer"] == opt) & (table["epochs"] == epochs)]
            for model in sorted(cell["model"].unique(), key=list_models().index):
                group = cell[cell["model"] == model]
                colour = model_style(model)["color"]
                ax.scatter(group["train_loss"], group["error"], s=6, color=colour, alpha=0.5, linewidths=0)
                ax.scatter(
                    group["median_train_loss"].iloc[0],
                    group["median_error"].iloc[0],
                    s=40,
                    color=colour,
                    edgecolors="black",
                    linewidths=0.6,
                    label=f"{model} (n={len(group)})",
                )
            ax.set(
                title=f"{opt}, {epochs} epochs",
                xscale="log",
                xlabel="final train loss",
                ylabel="validation top-1 error (%)",
            )
            ax.legend(frameon=False)
        _title(fig, table, "generalization vs capacity: points = trials, large = median per model")
    return fig
