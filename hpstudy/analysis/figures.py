"""Paper figures (Xiao et al. 2021 layouts), saved as PDF/SVG/PNG with their numbers as CSV/JSON.

Every figure is a triple: `<name>_table(trials, ..., metric)` computes the numbers it plots (one
definition; the table saved beside it), `<name>_figure(table, ...)` draws from that table only, on a
new figure of a preset width (`size`: SIZES; by default column for one panel, text for more) or into
the caller's `fig` (`ax` for a one-panel figure), and returns a `Plot`: the figure, the rows it drew
and its caption; `<name>_caption(table)` says in words what the figure shows, on which metric, of how
many trials and against which reference. A figure carries no title (a paper sets the caption under
it): `title=True` draws the caption above it. Every figure is drawn on the error of a stated metric
(`hpstudy.analysis.metric`; failed rows and non-finite errors left out), which its caption, its CSV
(a `metric` column) and its JSON state; models are shown by their catalogue names
(`catalogue.model_label`; a model the catalogue does not know by its own name), the CSV/JSON keep
the identifiers.

A figure compares all its models in one panel; only where every model has a size class (from the
catalogue, or `sizes`: a spec's) and there are several does it draw a panel per size class, as the
paper does. Bands are shaded, with one legend entry per kind of band; each series has one legend entry;
each axis one tick format (plain numbers, `Plain`). Figures are built on `matplotlib.figure.Figure` (no
pyplot, no global backend or rcParams change) and drawn with the caller's rcParams; the house style is
the style file STYLE, which the report applies (`matplotlib.style.context(STYLE)`) and a user can
(`plt.style.use(STYLE)`). Every series of an axes differs in line style or marker (fill: the
optimizer), so a figure reads in grayscale. Output is byte-for-byte reproducible: PDF/SVG dates are
omitted unless SOURCE_DATE_EPOCH is set (then matplotlib uses it), and SVG ids are salted.
"""

import json
import os
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union, cast

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FixedFormatter, FixedLocator, Formatter, MaxNLocator, NullFormatter, NullLocator

from hpstudy.analysis.catalogue import catalogue_order, known, model_label, model_size
from hpstudy.analysis.cost import trial_hours
from hpstudy.analysis.edf import edf_table
from hpstudy.analysis.effects import COMPARED, compared_pairs
from hpstudy.analysis.findings.tables import AGGREGATE_ROW
from hpstudy.analysis.gaps import length_gap
from hpstudy.analysis.metric import DEFAULT_METRIC, ERR, usable, warn_left_out
from hpstudy.analysis.stats import (
    IMPORTANCE_DEPTH,
    IMPORTANCE_RESAMPLES,
    IMPORTANCE_SEEDS,
    Keys,
    best_of_k_win,
    budget_grid,
    choice_values,
    expected_best,
    expected_best_band,
    hp_kinds,
    importance_interval,
    value_label,
)
from hpstudy.trainers.schema import DIVERGED, OK
from hpstudy.trainers.zoo import SIZE_ORDER, get_spec, list_models

STYLE = os.path.join(os.path.dirname(__file__), "hpstudy.mplstyle")
SIZES = {"column": 3.4, "text": 7.0}  # preset widths in inches: a journal's column and text width
PNG_DPI = 300
# a figure of more trial points than this draws them as an image (at PNG_DPI) inside its PDF and SVG, axes and text
# still vector: at 20,000 trials the scatter's vector markers made a 1.8 MB SVG and the report page 18 MB
# (docs/performance.md)
RASTER_POINTS = 2000
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
# Models the catalogue does not know: Okabe-Ito colours (yellow left out: too light on white) and dash
# patterns no family uses.
OTHER_COLOURS = tuple(PALETTE[c] for c in ("blue", "vermillion", "green", "orange", "sky", "purple", "black"))
OTHER_LINES: Tuple[LineStyle, ...] = ((0, (1, 1)), (0, (6, 2)), (0, (3, 1, 1, 1)), (0, (8, 2, 2, 2)), (0, (2, 3)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*")  # by a model's place in its size class
OPTIMIZERS = {"adamw": "AdamW", "sgd": "SGD"}
SYMLOG_LINEAR = 1.0  # points: a symlog Δ axis is linear up to here (a trial within a point of its best)
SYMLOG_SPREAD = 5  # delta_scale: symlog where one model's Δs span this many times another's
BAND_ALPHA = 0.18  # a band's shade: the series' colour, light enough that every line over it reads
BAND_GREY = "0.45"  # a band kind's legend swatch: neutral, as every series' band is of that kind


class ModelStyle(TypedDict):
    """A model's keyword arguments for matplotlib's line calls."""

    color: str
    linestyle: LineStyle
    marker: str


@dataclass(frozen=True)
class Plot:
    """A drawn figure, the rows it drew and its caption (`<name>_caption` of those rows)."""

    fig: Figure
    data: pd.DataFrame
    caption: str = ""


def model_style(model: str, drawn: Sequence[str] = ()) -> ModelStyle:
    """The fixed colour (Okabe-Ito, colour-blind safe), line style (its family's) and marker (unique
    within its size class) of a catalogue model in every figure; a model the catalogue does not know
    gets a grey shade, dash pattern and marker by its place among the unknown models `drawn` beside it."""
    if not known(model):
        rank = sorted({m for m in drawn if not known(m)} | {model}).index(model)
        return {
            "color": OTHER_COLOURS[rank % len(OTHER_COLOURS)],
            "linestyle": OTHER_LINES[rank % len(OTHER_LINES)],
            "marker": MARKERS[rank % len(MARKERS)],
        }
    spec = get_spec(model)
    rank = list_models(spec.family).index(model)
    colours = FAMILY_COLOURS[spec.family]
    place = [m for m in list_models() if get_spec(m).size == spec.size].index(model)
    return {
        "color": PALETTE[colours[rank % len(colours)]],
        "linestyle": FAMILY_LINES[spec.family],
        "marker": MARKERS[place % len(MARKERS)],
    }


def series_style(model: str, optimizer: str, drawn: Sequence[str] = ()) -> Dict:
    """A (model, optimizer) series: the model's style, markers filled for AdamW and open for SGD."""
    st = model_style(model, drawn)
    return dict(st, markerfacecolor=st["color"] if optimizer == "adamw" else "white")


def _opt(optimizer: str) -> str:
    return OPTIMIZERS.get(optimizer, optimizer)


def cell_name(figure: str, optimizer: str, epochs: float) -> str:
    """The file name of a figure of one (optimizer, epochs) cell: `<figure>_<optimizer>_<epochs>ep`."""
    return f"{figure}_{optimizer}_{epochs:g}ep"


def one_cell(table: pd.DataFrame, figure: str) -> None:
    """ValueError unless `table` holds one (optimizer, epochs) cell: a figure that compares models within a
    cell never pools what the design separates (good ranges of 6 and 16 epochs differ)."""
    cells = sorted(table.groupby(["optimizer", "epochs"], observed=True).groups)
    if len(cells) > 1:
        shown = ", ".join(f"{_opt(o)} {e:g} ep" for o, e in cells)
        raise ValueError(
            f"{figure}: table: bad value, {len(cells)} (optimizer, epochs) cells ({shown}); allowed: one cell "
            f"per figure (filter the table to one optimizer and length)"
        )


def _columns(n_panels: int, most: int) -> int:
    """Columns for n_panels, at most `most`: the fewest empty grid slots, then the most columns."""
    return min(range(1, min(most, n_panels) + 1), key=lambda c: (-n_panels % c, -c))


def _grid(
    n_panels: int, size: Optional[str], fig: Optional[Figure], columns: Optional[int] = None
) -> Tuple[Figure, np.ndarray]:
    """n_panels axes on `fig`, or on a new figure of the preset width `size` (None: column for one
    panel, else text), in `columns` columns (by default up to 3 at text width, at column width 1 for
    up to two panels, else 2, leaving the fewest slots empty), hidden where unused."""
    size = size or ("column" if n_panels == 1 else "text")
    if size not in SIZES:
        raise ValueError(f"figure size {size!r}: allowed: {', '.join(SIZES)}")
    wide = size == "text" or fig is not None
    cols = columns or (_columns(n_panels, 3) if wide else 1 if n_panels <= 2 else 2)
    rows = int(np.ceil(n_panels / cols))
    if fig is None:
        width = SIZES[size]
        fig = Figure(figsize=(width, rows * min(width / cols * 0.75, 2.6) + 0.8), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    return fig, axes[:n_panels]


def size_classes(models: Sequence[str], sizes: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """Each model's size class: `sizes` (a spec's `models:`) where it gives one, else the catalogue's
    ("" for a model neither knows)."""
    return {m: (sizes or {}).get(m) or model_size(m) for m in models}


def _panels(models: Sequence[str], sizes: Optional[Mapping[str, str]] = None) -> List[List[str]]:
    """The models of each panel: one panel per size class where every model has one and there are
    several (in SIZE_ORDER), else all models in one panel."""
    classes = size_classes(models, sizes)
    present = set(classes.values())
    if "" in present or len(present) < 2:
        return [list(models)]
    return [[m for m in models if classes[m] == s] for s in SIZE_ORDER if s in present]


def _by_model(table: pd.DataFrame, by: Sequence[str] = ("model",)) -> List[Tuple[Any, pd.DataFrame]]:
    """`table`'s groups by `by` (model first), models in catalogue order (legend order), then the rest."""
    order = {m: i for i, m in enumerate(catalogue_order(table["model"]))}
    # a list of one key gives tuple keys in some pandas versions and scalars in others: both made tuples
    groups = [(k if isinstance(k, tuple) else (k,), g) for k, g in table.groupby(list(by), sort=False)]
    groups.sort(key=lambda kg: (order[kg[0][0]], kg[0][1:]))
    return [(k if len(by) > 1 else k[0], g) for k, g in groups]


def _cell(table: pd.DataFrame, columns: Sequence[str] = ("optimizer", "epochs")) -> str:
    """The optimizers and epochs a table holds, as a caption says them: `AdamW, SGD; 6, 16 epochs`."""
    parts = []
    if "optimizer" in columns and "optimizer" in table:
        parts.append(", ".join(_opt(o) for o in sorted(table["optimizer"].unique())))
    if "epochs" in columns and "epochs" in table:
        parts.append(", ".join(f"{e:g}" for e in sorted(table["epochs"].unique())) + " epochs")
    return "; ".join(parts)


def _n_range(counts: Iterable[int]) -> str:
    counts = [int(c) for c in counts]
    low, high = min(counts), max(counts)
    return f"{low}" if low == high else f"{low}-{high}"


def _fill(table: pd.DataFrame) -> str:
    """'; AdamW filled, SGD open' where a table holds both optimizers."""
    return "; AdamW filled, SGD open" if {"adamw", "sgd"} <= set(table["optimizer"]) else ""


def _metric(table: pd.DataFrame) -> str:
    return f"Metric: {table['metric'].iloc[0]}."


def plain_number(value: float) -> str:
    """A tick's number as a reader writes it: up to 3 significant figures, no exponent (0.001, 2.5, 40)."""
    if value == 0:
        return "0"
    return np.format_float_positional(float(value), precision=3, unique=True, fractional=False, trim="-")


class Plain(Formatter):
    """The one tick format of every figure's axes: plain_number."""

    def __call__(self, x, pos=None) -> str:
        return plain_number(x)


def fixed_ticks(axis, values: Iterable[float]) -> None:
    """Ticks at the given numbers only, in the one tick format, no minor ticks."""
    axis.set_major_locator(FixedLocator(sorted({float(v) for v in values})))
    axis.set_minor_locator(NullLocator())


def integer_ticks(ax, values: Sequence[int]) -> None:
    """Label a log-scaled x axis at the given whole numbers only (no 10^k, no minor labels)."""
    fixed_ticks(ax.xaxis, [int(v) for v in values])


def nice_ticks(low: float, high: float, most: int = 7) -> List[float]:
    """Ticks of a log axis on [low, high] (low > 0): the 1-2-5 steps in it, thinned to at most `most`;
    1-1.5-2-3-5-7 where 1-2-5 leaves fewer than 3."""
    decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
    for steps in ((1, 2, 5), (1, 1.5, 2, 3, 5, 7)):
        ticks = [m * 10.0**k for k in decades for m in steps if low <= m * 10.0**k <= high]
        if len(ticks) >= 3:
            break
    return ticks[:: int(np.ceil(len(ticks) / most))] if ticks else ticks


def log_ticks(axis, values: Iterable[float]) -> None:
    """A log axis over `values`, ticked at nice_ticks (plain numbers, no 10^k)."""
    finite = np.asarray([v for v in values if np.isfinite(v) and v > 0], dtype=float)
    if len(finite):
        fixed_ticks(axis, nice_ticks(finite.min() / 1.1, finite.max() * 1.1))


def _plain_ticks(axes: Iterable[Axes]) -> None:
    """One tick format on every axis of numbers: Plain for major labels, none for minor ones (an axis of
    categories, a FixedFormatter, keeps its names)."""
    for ax in axes:
        for axis in (ax.xaxis, ax.yaxis):
            if not isinstance(axis.get_major_formatter(), FixedFormatter):
                axis.set_major_formatter(Plain())
            axis.set_minor_formatter(NullFormatter())


def _finish(fig: Figure, axes: Iterable[Axes], caption: str, title: bool, bands: Sequence[str] = ()) -> None:
    """One tick format on `axes`, one legend (each series once, each kind of band in `bands` once), and
    the caption drawn above the figure where `title` asks for it."""
    axes = list(axes)
    _plain_ticks(axes)
    _legend(fig, axes, bands)
    if title:
        width = int(fig.get_figwidth() * 15)  # characters of the title font per inch, about
        fig.suptitle(textwrap.fill(caption, width))


def _legend(fig: Figure, axes: Iterable[Axes], bands: Sequence[str] = ()) -> None:
    """One legend for the figure, outside every axes (below them): each label once, then a grey swatch
    per kind of band."""
    handles: Dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    for band in bands:
        handles[band] = Patch(facecolor=BAND_GREY, alpha=BAND_ALPHA * 2, linewidth=0)
    if handles:
        # characters, with the line sample, the gap to its text and the gap to the next column (2 + 0.8 + 2 em)
        longest = max(len(label) for label in handles) + 7
        cols = max(1, min(len(handles), int(fig.get_figwidth() * 14 // longest)))  # 7 pt: ~14 per inch
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=cols)


def save_figure(fig: Union[Figure, Plot], out_dir: str, name: str, data: pd.DataFrame, meta: Dict) -> Dict[str, str]:
    """Write name.{pdf,svg,png} (PNG at PNG_DPI) and the plotted numbers as name.csv plus name.json
    (with meta).

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
    paths, figure = {}, fig.fig if isinstance(fig, Plot) else fig
    engine = figure.get_layout_engine()
    with matplotlib.rc_context(
        {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.hashsalt": "hpstudy"}
    ):  # whatever the style
        try:
            for ext, metadata in (
                ("pdf", {} if dated else {"CreationDate": None}),
                ("svg", {} if dated else {"Date": None}),
                ("png", {}),
            ):
                paths[ext] = f"{stem}.{ext}"
                figure.savefig(paths[ext], metadata=metadata, dpi=PNG_DPI)
                if engine is not None:  # the PDF's layout for the other two: with an engine each save draws
                    figure.set_layout_engine("none")  # the figure once more to lay it out (docs/performance.md)
        finally:
            if engine is not None:
                figure.set_layout_engine(engine)  # the caller's figure as it was
    data.to_csv(f"{stem}.csv", index=False, float_format="%.6g")
    paths["csv"] = f"{stem}.csv"
    saved = {
        "figure": name,
        **meta,
        "columns": list(data.columns),
        "data": json.loads(data.to_json(orient="records", double_precision=10)),
    }
    with open(f"{stem}.json", "w") as f:  # dumps without indent: C's encoder (18,605 rows: 0.10 s, indented 0.27 s)
        f.write(json.dumps(saved, sort_keys=True))
    paths["json"] = f"{stem}.json"
    return paths


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
    """Every model's Δ-EDF step points per (optimizer, epochs), Δ to the model's best trial, with DKW
    half-widths and diverged shares (edf_table)."""
    return edf_table(trials, by=["optimizer", "epochs", "model"], metric=metric, reference="min")


def _band(ax: Axes, x, lo, hi, style: Mapping[str, Any], step: bool) -> None:
    """A band shaded in the series' colour, without an outline (its legend entry is its kind's: _legend)."""
    ax.fill_between(
        x, lo, hi, step="post" if step else None, color=style["color"], alpha=BAND_ALPHA, linewidth=0, label="_band"
    )


def _diverged(group: pd.DataFrame) -> Tuple[int, int]:
    """(diverged, n) of one model's Δ-EDF rows."""
    n = int(group["n"].iloc[0])
    return int(round(group["diverged_share"].iloc[0] * n)), n


def delta_scale(table: pd.DataFrame) -> str:
    """The Δ axis a Δ-EDF table reads best on: symlog where one model's trials that did not diverge spread
    over SYMLOG_SPREAD times the range of another's (on a linear axis its curve would press against
    Δ = 0), else linear."""
    spans = []
    for _, group in table.groupby("model"):
        diverged, n = _diverged(group)
        if diverged < n:
            spans.append(float(group["delta"].iloc[n - diverged - 1]))
    spans = [s for s in spans if s > 0]
    return "symlog" if len(spans) > 1 and max(spans) > SYMLOG_SPREAD * min(spans) else "linear"


def delta_edf_caption(table: pd.DataFrame, band: bool = True) -> str:
    """What delta_edf_figure draws, on which metric, of how many trials and against which reference."""
    n = table.groupby("model")["n"].first()
    diverged = {model_label(m): _diverged(g) for m, g in _by_model(table)}
    gone = [f"{label} {d}/{k}" for label, (d, k) in diverged.items() if d]
    return (
        f"Δ-EDF of the random lr/wd trials ({_cell(table)}): for each model, the share of its trials (y) whose "
        f"top-1 error lies within Δ points (x) of the model's own best trial (the reference); n = {_n_range(n)} "
        "trials per model"
        + ("; shaded: DKW 95% simultaneous bands" if band else "")
        + ". Diverged trials count at chance error, beyond the axis: a curve ends below 1 by their share"
        + (f" (diverged: {', '.join(gone)})" if gone else " (none diverged)")
        + f". {_metric(table)}"
    )


def delta_edf_figure(
    table: pd.DataFrame,
    band: bool = True,
    size: Optional[str] = None,
    fig: Optional[Figure] = None,
    sizes: Optional[Mapping[str, str]] = None,
    xscale: str = "linear",
    title: bool = False,
) -> Plot:
    """Δ-EDFs, one line per model (Figs 5-6), all models in one panel (a panel per size class where
    every model has one: `sizes`, else the catalogue's), DKW bands shaded; the x axis (`xscale`: linear
    or symlog, see delta_scale) ends at the last trial that did not diverge, the diverged (at chance)
    counted in the legend."""
    if xscale not in ("linear", "symlog"):
        raise ValueError(f"xscale {xscale!r}: allowed: linear, symlog")
    panels = _panels(catalogue_order(table["model"]), sizes)
    classes = size_classes(table["model"].unique(), sizes)
    fig, axes = _grid(len(panels), size, fig)
    drawn = table["model"].unique()
    for ax, models in zip(axes, panels):
        right = 0.0
        for model, group in _by_model(table[table["model"].isin(models)]):
            x, f = _edf_steps(group["delta"].to_numpy(), group["F"].to_numpy())
            diverged, n = _diverged(group)
            right = max(right, float(group["delta"].iloc[n - diverged - 1]) if diverged < n else 0.0)
            label = f"{model_label(model)} (n = {n}" + (f"; diverged: {diverged}/{n} at chance)" if diverged else ")")
            st = model_style(model, drawn)
            ax.step(x, f, where="post", label=label, markevery=0.1, **st)
            if band:
                eps = group["dkw_eps"].iloc[0]
                _band(ax, x, np.clip(f - eps, 0, 1), np.clip(f + eps, 0, 1), st, step=True)
        ax.set(
            title=classes[models[0]] if len(panels) > 1 else "",
            xlabel="Δ top-1 error to own best (points)",
            ylabel="share of trials",
            ylim=(0, 1),
        )
        right = max(1.05 * right, 1.0)
        if xscale == "symlog":
            ax.set_xscale("symlog", linthresh=SYMLOG_LINEAR, linscale=0.5)
            fixed_ticks(ax.xaxis, [0.0, *nice_ticks(SYMLOG_LINEAR, right)])
        ax.set_xlim(left=0, right=right)
    caption = delta_edf_caption(table, band)
    _finish(fig, axes, caption, title, ["DKW 95% band"] if band else [])
    return Plot(fig, table, caption)


def hp_panels(keys: Keys = ("lr", "wd")) -> List[Tuple[str, str, str]]:
    """hp_scatter_figure's panels: (x, axis label, distribution) per sampled hyperparameter (`keys`, see
    hpstudy.analysis.stats.hp_kinds), x named as good_ranges names its column (log10_<name> for a
    log-uniform one, else <name>), with log10 lr·wd after lr and wd when both are log-uniform."""
    kinds = hp_kinds(keys)
    panels = [
        (f"log10_{k}", f"log10 {k}", kind) if kind == "log_uniform" else (k, k, kind) for k, kind in kinds.items()
    ]
    if kinds.get("lr") == kinds.get("wd") == "log_uniform":
        after = max(list(kinds).index("lr"), list(kinds).index("wd"))
        panels.insert(after + 1, ("log10_lr_wd", "log10 lr·wd", "log_uniform"))
    return panels


def hp_names(keys: Keys = ("lr", "wd")) -> str:
    """What hp_scatter_figure plots the error against, as its caption says it: `lr, wd and lr·wd`."""
    names = [label.removeprefix("log10 ") for _, label, _ in hp_panels(keys)]
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


def hp_scatter_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC, keys: Keys = ("lr", "wd")) -> pd.DataFrame:
    """Every counted trial's model, optimizer, epochs, sampled hyperparameters (`keys`, see
    hpstudy.analysis.stats.hp_kinds), error and status (Fig 4's points), with `n`, the counted trials of
    its (model, optimizer, epochs) cell."""
    rows = usable(trials, metric, "hp_scatter_table")
    table = rows.kept[["model", "optimizer", "epochs", *hp_kinds(keys), ERR, "status"]].rename(columns={ERR: "error"})
    n = table.groupby(["model", "optimizer", "epochs"], observed=True)["error"].transform("size")
    return table.assign(n=n.astype(int), metric=rows.metric)


def hp_scatter_caption(table: pd.DataFrame, keys: Keys = ("lr", "wd"), ranges: bool = True) -> str:
    """What hp_scatter_figure draws, on which metric, of how many trials (absolute errors: no reference)."""
    n = table.groupby("model")["n"].first()
    return (
        f"Top-1 error of every trial against {hp_names(keys)} ({_cell(table)}), a row of panels per model; "
        f"n = {_n_range(n)} trials per model{_fill(table)}"
        + ("; shaded: each model's good range (2.5-97.5% of the bootstrapped best trial's value)" if ranges else "")
        + f". Absolute errors (no reference). {_metric(table)}"
    )


def hp_scatter_figure(
    table: pd.DataFrame,
    ranges: Dict[str, pd.DataFrame],
    size: Optional[str] = None,
    fig: Optional[Figure] = None,
    keys: Keys = ("lr", "wd"),
    title: bool = False,
) -> Plot:
    """Error against each sampled hyperparameter per model (Fig 4: log10 lr, log10 wd and log10 lr·wd; see
    hp_panels), each model's good ranges (`ranges`: good_ranges per model) shaded; a choice's values are
    evenly spaced categories, unshaded. One (optimizer, epochs) cell per figure (`one_cell`)."""
    one_cell(table, "hp_scatter_figure")
    models = catalogue_order(table["model"])
    panels = hp_panels(keys)
    categories = {
        x: {value_label(v): i for i, v in enumerate(choice_values(table[x]))}
        for x, _, kind in panels
        if kind == "choice"
    }
    fig, axes = _grid(len(panels) * len(models), size, fig, columns=len(panels))
    for row, model in zip(axes.reshape(len(models), len(panels)), models):
        group = table[table["model"] == model]
        st = model_style(model, models)
        for i, (ax, (x, label, kind)) in enumerate(zip(row, panels)):
            if x == "log10_lr_wd":
                values = np.log10(group["lr"]) + np.log10(group["wd"])
            elif kind == "log_uniform":
                values = np.log10(group[x.removeprefix("log10_")].astype(float))
            elif kind == "choice":
                values = group[x].map(value_label).map(categories[x])
                ax.xaxis.set_major_locator(FixedLocator(list(categories[x].values())))
                ax.xaxis.set_major_formatter(FixedFormatter(list(categories[x])))
            else:
                values = group[x].astype(float)
            for opt, cell in group.groupby("optimizer"):
                ax.plot(
                    values[cell.index],
                    cell["error"],
                    linestyle="none",
                    markersize=2.5,
                    rasterized=len(table) > RASTER_POINTS,
                    label=f"{model_label(model)} ({_opt(opt)})",
                    **{k: v for k, v in series_style(model, opt, models).items() if k != "linestyle"},
                )
            if model in ranges and x in ranges[model] and kind != "choice":
                lo, hi = ranges[model].loc["p2.5", x], ranges[model].loc["p97.5", x]
                ax.axvspan(lo, hi, color=st["color"], alpha=BAND_ALPHA, linewidth=0)
            ax.set(xlabel=label, ylabel=f"{model_label(model)}\ntop-1 error (%)" if i == 0 else "")
    shaded = any(m in ranges for m in models)
    caption = hp_scatter_caption(table, keys, shaded)
    _finish(fig, axes, caption, title, ["good range (bootstrap 95%)"] if shaded else [])
    return Plot(fig, table, caption)


def error_vs_epochs_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """The best error per (model, optimizer, epochs), the worst of its trials that did not diverge, its
    trial count and whether all its runs diverged (Fig 3's points)."""
    rows = usable(trials, metric, "error_vs_epochs_table")
    trained = rows.kept[ERR].where(rows.kept["status"] != DIVERGED)
    return (
        rows.kept.assign(trained=trained)
        .groupby(["model", "optimizer", "epochs"])
        .agg(
            error=(ERR, "min"),
            worst=("trained", "max"),
            n=(ERR, "size"),
            diverged=("status", lambda s: (s == DIVERGED).all()),
        )
        .reset_index()
        .assign(metric=rows.metric)
    )


def error_vs_epochs_caption(table: pd.DataFrame) -> str:
    """What error_vs_epochs_figure draws, on which metric, of how many trials (absolute errors)."""
    return (
        f"Best top-1 error against training length ({_cell(table, ['optimizer'])}), per model and optimizer: each "
        f"point the best of its cell's n = {_n_range(table['n'])} trials, its bar up to the worst trial that did "
        f"not diverge; the series of one length are set side by side{_fill(table)}"
        + ("; a cross: every trial of the cell diverged" if table["diverged"].any() else "")
        + f". Absolute errors (no reference). {_metric(table)}"
    )


def _dodge(epochs: Sequence[float], k: int) -> np.ndarray:
    """Multipliers of an epoch count that set k series side by side on a log axis, centred on it, at most
    half the gap between neighbouring lengths wide."""
    lengths = np.log10(sorted(set(float(e) for e in epochs)))
    gap = float(np.diff(lengths).min()) if len(lengths) > 1 else 0.3
    step = min(0.02, 0.5 * gap / max(k, 1))
    return 10 ** ((np.arange(k) - (k - 1) / 2) * step)


def error_vs_epochs_figure(
    table: pd.DataFrame,
    size: Optional[str] = None,
    fig: Optional[Figure] = None,
    sizes: Optional[Mapping[str, str]] = None,
    title: bool = False,
) -> Plot:
    """Best error against training epochs per model and optimizer, all models in one panel (a panel per
    size class where every model has one), AdamW filled and SGD open, each point's bar up to its worst
    trial that did not diverge, the series of one length side by side, cells where all diverged as
    crosses, both axes log (Fig 3)."""
    panels = _panels(catalogue_order(table["model"]), sizes)
    classes = size_classes(table["model"].unique(), sizes)
    fig, axes = _grid(len(panels), size, fig)
    drawn = table["model"].unique()
    for ax, models in zip(axes, panels):
        series = _by_model(table[table["model"].isin(models)], ("model", "optimizer"))
        for ((model, opt), group), shift in zip(series, _dodge(table["epochs"], len(series))):
            st = series_style(model, opt, drawn)
            ok = group[~group["diverged"]]
            ax.plot(ok["epochs"] * shift, ok["error"], label=f"{model_label(model)} ({_opt(opt)})", **st)
            ax.vlines(ok["epochs"] * shift, ok["error"], ok["worst"], color=st["color"], linewidth=0.6)
            gone = group[group["diverged"]]
            if len(gone):
                ax.plot(gone["epochs"] * shift, gone["error"], linestyle="none", marker="x", color=st["color"])
        if table["diverged"].any():
            ax.plot([], [], linestyle="none", marker="x", color="black", label="all trials diverged")
        ax.set(
            title=classes[models[0]] if len(panels) > 1 else "",
            xscale="log",
            yscale="log",
            xlabel="epochs",
            ylabel="top-1 error (%)",
        )
        integer_ticks(ax, table["epochs"].unique())
        log_ticks(ax.yaxis, pd.concat([table["error"], table["worst"]]))
    caption = error_vs_epochs_caption(table)
    _finish(fig, axes, caption, title)
    return Plot(fig, table, caption)


def delta_error_vs_epochs_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC) -> pd.DataFrame:
    """The training-length gap error(E) - error(E_max) per model, optimizer and epochs (length_gap), with
    each cell's counted trials `n`."""
    gaps = length_gap(trials, metric=metric)
    counted = usable(trials, metric).kept.groupby(["model", "optimizer", "epochs"]).size().rename("n")
    return gaps.join(counted, on=["model", "optimizer", "epochs"]) if len(gaps) else gaps


def delta_error_vs_epochs_caption(table: pd.DataFrame) -> str:
    """What delta_error_vs_epochs_figure draws, on which metric, of how many trials, against which reference."""
    references = ", ".join(f"{e:g}" for e in sorted(table["reference_epochs"].unique()))
    fallback = (
        "; where every trial of the longest schedule diverged, the reference is the best shorter schedule"
        if table["reference_fallback"].any()
        else ""
    )
    return (
        f"Training-length gap ({_cell(table, ['optimizer'])}): the best top-1 error at E epochs minus the best at the "
        f"longest schedule (the reference: {references} epochs), per model and optimizer; n = {_n_range(table['n'])} "
        f"trials per cell{fallback}. {_metric(table)}"
    )


def delta_error_vs_epochs_figure(
    table: pd.DataFrame, size: Optional[str] = None, ax: Optional[Axes] = None, title: bool = False
) -> Plot:
    """Training-length gap error(E) - error(E_max) against epochs per model and optimizer (Fig 2)."""
    if ax is None:
        fig, axes = _grid(1, size, None)
        ax = axes[0]
    fig = cast(Figure, ax.get_figure())
    drawn = table["model"].unique()
    for (model, opt), group in _by_model(table, ("model", "optimizer")):
        ax.plot(
            group["epochs"],
            group["gap"],
            label=f"{model_label(model)} ({_opt(opt)})",
            **series_style(model, opt, drawn),
        )
    ax.axhline(0, color="0.6", linewidth=0.5)
    ax.set(xscale="log", xlabel="epochs", ylabel="Δ top-1 error to longest (points)")
    integer_ticks(ax, table["epochs"].unique())
    caption = delta_error_vs_epochs_caption(table)
    _finish(fig, [ax], caption, title)
    return Plot(fig, table, caption)


def expected_best_table(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, estimator: str = "unbiased", n_boot: int = 200
) -> pd.DataFrame:
    """The expected best error after k random trials per (model, optimizer, epochs) cell, for k in
    stats.budget_grid(n) (every k up to 64, then about 100 steps to n), never pooled across cells, with its
    bootstrap band (`lo`, `hi`), the cell's counted trials `n` and what k of them cost on average (`hours`: k
    times their mean cost.trial_hours)."""
    # costed before any row is left out: a fused group's wall time is shared among all the rows it stored
    used = usable(trials.assign(cost=trial_hours(trials)), metric, "expected_best_table")
    rows = []
    for (opt, epochs, model), group in used.kept.groupby(["optimizer", "epochs", "model"], observed=True):
        errors = group[ERR].to_numpy(float)
        ks = budget_grid(len(errors))
        curve = expected_best(errors, ks, estimator)
        lo, hi = expected_best_band(errors, ks, estimator, n_boot=n_boot)
        cell = {"model": model, "optimizer": opt, "epochs": epochs, "n": len(errors)}
        per_trial = float(group["cost"].mean())  # NaN where a trial's wall time is missing
        rows += [
            {**cell, "k": int(k), "hours": k * per_trial, "expected_best": c, "lo": low, "hi": high}
            for k, c, low, high in zip(ks, curve, lo, hi)
        ]
    return pd.DataFrame(rows).assign(metric=used.metric)


BUDGETS = ("trials", "hours")  # expected_best_figure's x axis: k, or what k trials cost in hours
HOURS_BUDGET = (
    "the hours k random trials take on average (k times the mean wall time of that model's trials in the cell, a "
    "fused group's wall time shared among its members; wall times on a shared machine include waiting for it)"
)


def expected_best_caption(table: pd.DataFrame, budget: str = "trials") -> str:
    """What expected_best_figure draws against `budget`, on which metric, of how many trials (absolute errors)."""
    n = table.groupby(["model", "optimizer", "epochs"])["n"].first()
    panels = "" if table.groupby(["optimizer", "epochs"]).ngroups == 1 else "a panel per optimizer and length, "
    against = f", against {HOURS_BUDGET}" if budget == "hours" else ""
    return (
        f"Expected best top-1 error after k random lr/wd trials (unbiased estimator, Tang et al. 2020; "
        f"{_cell(table)}){against}, {panels}a line per model, from n = {_n_range(n)} trials per model and cell; "
        f"shaded: bootstrap 95% pointwise bands. Absolute errors (no reference). {_metric(table)}"
    )


def expected_best_figure(
    table: pd.DataFrame,
    size: Optional[str] = None,
    fig: Optional[Figure] = None,
    title: bool = False,
    budget: str = "trials",
) -> Plot:
    """Expected best error against the number of random trials k (`budget="hours"`: against what k trials take
    in hours, Dodge et al. 2019's budget in compute), a panel per (optimizer, epochs) cell, a line and its
    shaded bootstrap band per model; ValueError for another budget, or hours where a cost is missing."""
    if budget not in BUDGETS:
        raise ValueError(f"expected_best_figure: budget: bad value {budget!r}; allowed: {', '.join(BUDGETS)}")
    if budget == "hours" and not np.isfinite(table["hours"].astype(float)).all():
        raise ValueError(
            "expected_best_figure: budget: bad value 'hours' for this table; allowed: 'trials' (some trials have "
            "no wall_s to cost them)"
        )
    x = "k" if budget == "trials" else "hours"
    cells = sorted(table.groupby(["optimizer", "epochs"]).groups)
    fig, axes = _grid(len(cells), size, fig)
    for ax, (opt, epochs) in zip(axes, cells):
        panel = table[(table["optimizer"] == opt) & (table["epochs"] == epochs)]
        for model, curve in _by_model(panel):
            st = model_style(model, table["model"].unique())
            ax.plot(curve[x], curve["expected_best"], label=model_label(model), markevery=0.15, **st)
            _band(ax, curve[x], curve["lo"], curve["hi"], st, step=False)
        ax.set(
            title=f"{_opt(opt)}, {epochs:g} epochs" if len(cells) > 1 else "",
            xscale="log",
            xlabel="trials k" if budget == "trials" else "hours of k trials",
            ylabel="expected best top-1 error (%)",
        )
        if budget == "trials":
            integer_ticks(ax, trial_count_ticks(int(panel["k"].max())))
        else:
            log_ticks(ax.xaxis, panel["hours"])
    caption = expected_best_caption(table, budget)
    _finish(fig, axes, caption, title, ["bootstrap 95% band"])
    return Plot(fig, table, caption)


def best_of_k_table(trials: pd.DataFrame, metric: str = DEFAULT_METRIC, compared: Optional[str] = None) -> pd.DataFrame:
    """For every pair the design compares (hpstudy.analysis.effects.compared_pairs; only `compared`'s pairs
    when given), the probability that a's best of k random trials beats b's (best_of_k_win, unbiased) for
    k in stats.budget_grid(min(n_a, n_b)), with the cell it holds fixed."""
    used = usable(trials, metric, "best_of_k_table")
    rows = []
    for kind, cell, a, b, ea, eb in compared_pairs(used.kept):
        if compared is not None and kind != compared:
            continue
        ks = budget_grid(min(len(ea), len(eb)))
        pair = {"compared": kind, **cell, "a": a, "b": b, "n_a": len(ea), "n_b": len(eb)}
        rows += [{**pair, "k": int(k), "p_a_wins": p} for k, p in zip(ks, best_of_k_win(ea, eb, ks))]
    columns = ["compared", "model", "optimizer", "epochs", "a", "b", "n_a", "n_b", "k", "p_a_wins"]
    return pd.DataFrame(rows, columns=columns).assign(metric=used.metric)


def _level(field: str, value: Any) -> str:
    """A compared level as a legend says it: a model's label, an optimizer's name, `16 ep`."""
    return model_label(value) if field == "model" else _opt(value) if field == "optimizer" else f"{value:g} ep"


def _pair_label(row: Mapping[str, Any]) -> str:
    """A pair's legend entry: `ViT-C vs ViT-P`, or with the model it holds fixed, `ViT-C: AdamW vs SGD`."""
    field = COMPARED[row["compared"]]
    pair = f"{_level(field, row['a'])} vs {_level(field, row['b'])}"
    return pair if field == "model" else f"{model_label(row['model'])}: {pair}"


def _pair_style(row: Mapping[str, Any], drawn: Sequence[str]) -> ModelStyle:
    """A pair's line: a pair of models in its first model's colour and line style with its second's marker
    (two pairs of one model look apart in grayscale too); a pair of optimizers or lengths as its model."""
    if COMPARED[row["compared"]] != "model":
        return model_style(row["model"], drawn)
    return {**model_style(row["a"], drawn), "marker": model_style(row["b"], drawn)["marker"]}


def _panel_fields(table: pd.DataFrame) -> List[str]:
    """The fields a best-of-k panel holds fixed: the pair's cell but its model (a line each)."""
    fields = {COMPARED[c] for c in table["compared"].unique()}
    return [f for f in ("optimizer", "epochs") if f not in fields]


def best_of_k_caption(table: pd.DataFrame) -> str:
    """What best_of_k_figure draws, on which metric, of how many trials (a probability: no reference)."""
    n = pd.concat([table["n_a"], table["n_b"]])
    kinds = " and ".join(sorted({c if c != "lengths" else "training lengths" for c in table["compared"]}))
    fields = _panel_fields(table)
    per = " and ".join({"optimizer": "optimizer", "epochs": "length"}[f] for f in fields)
    return (
        f"Probability that the best of k random lr/wd trials of the first of a pair of {kinds} has a lower top-1 "
        f"error than the best of k of the second, ties counted half ({_cell(table, fields)}; k of each group's "
        f"trials without replacement, in closed form from the order statistics, up to k = min(n_a, n_b): at k = 1 "
        f"the probability of improvement, at k = n_a = n_b the two observed bests compared), a line per pair"
        f"{f', a panel per {per}' if per else ''}, from n = {_n_range(n)} trials per group; dotted: 0.5, neither "
        f"ahead. A description of the sample, not a test, with no band: at k = 1 it is the effect-size table's "
        f"probability of improvement, whose interval is there (from 8 trials a group); as k grows it rests on each "
        f"group's few best trials and strays from 0.5 even between groups that do not differ (at 24 trials a "
        f"group its spread is 0.08 at k = 1, 0.23 at k = 8, 0.5 at k = 24: bench.best_of_k). "
        f"A probability (no reference). {_metric(table)}"
    )


def best_of_k_figure(
    table: pd.DataFrame, size: Optional[str] = None, fig: Optional[Figure] = None, title: bool = False
) -> Plot:
    """The probability that a's best of k trials beats b's against k, a panel per cell the pairs share (the
    model aside), a line per pair (_pair_style); ValueError for a
    table of several comparisons (their cells differ: a panel of them would pool what the design separates)."""
    kinds = sorted(table["compared"].unique())
    if len(kinds) > 1:
        raise ValueError(
            f"best_of_k_figure: table: bad value, {len(kinds)} comparisons ({', '.join(kinds)}); allowed: one per "
            f"figure (best_of_k_table(..., compared=...))"
        )
    fields = _panel_fields(table)
    panels = sorted(table.groupby(fields, observed=True).groups) if fields else [()]
    fig, axes = _grid(len(panels), size, fig)
    by_model = table["compared"] == "models"
    drawn = sorted(set(table.loc[by_model, "a"]) | set(table.loc[by_model, "b"]) | set(table.loc[~by_model, "model"]))
    for ax, values in zip(axes, panels):
        values = values if isinstance(values, tuple) else (values,)
        panel = table[np.logical_and.reduce([table[f] == v for f, v in zip(fields, values)])] if fields else table
        for _, curve in panel.groupby(["compared", "model", "optimizer", "epochs", "a", "b"], dropna=False, sort=False):
            first = curve.iloc[0]
            ax.plot(curve["k"], curve["p_a_wins"], label=_pair_label(first), markevery=0.2, **_pair_style(first, drawn))
        ax.axhline(0.5, color=BAND_GREY, linestyle=":", linewidth=0.8, label="_even")
        named = {"optimizer": _opt, "epochs": lambda e: f"{e:g} epochs"}
        ax.set(
            title=", ".join(named[f](v) for f, v in zip(fields, values)) if len(panels) > 1 else "",
            xscale="log",
            ylim=(-0.02, 1.02),
            xlabel="trials k of each",
            ylabel="P(first's best of k wins)",
        )
        integer_ticks(ax, trial_count_ticks(int(panel["k"].max())))
    caption = best_of_k_caption(table)
    _finish(fig, axes, caption, title)
    return Plot(fig, table, caption)


BEST_CURVES = 5  # best_curves: the trials drawn per model and cell, as pycls's plot_curves is given a few runs


def _epoch_errors(epochs: pd.DataFrame, metric: str) -> pd.Series:
    """Each epoch row's validation error of the weights `metric` is about: EMA where the metric takes EMA
    (ema_best; paper where that epoch has an EMA error), else the raw weights'."""
    ema = epochs["ema_top1_err"].astype(float) if "ema_top1_err" in epochs else pd.Series(np.nan, epochs.index)
    raw = epochs["top1_err"].astype(float)
    if metric == "ema_best":
        return ema
    return ema.where(np.isfinite(ema), raw) if metric == DEFAULT_METRIC else raw


def best_curves_table(
    trials: pd.DataFrame, metric: str = DEFAULT_METRIC, *, epochs: pd.DataFrame, best: int = BEST_CURVES
) -> pd.DataFrame:
    """Per (model, optimizer, epochs) cell, the `best` trials with the lowest `metric` error (ties by trial key)
    and their stored validation error at every epoch (`epochs`: the study's epoch rows), with the trial's
    rank, its metric error (`final`) and the cell's counted trials `n`."""
    used = usable(trials, metric, "best_curves_table")
    ranked = used.kept.sort_values(["optimizer", "epochs", "model", ERR, "trial_key"], kind="stable")
    ranked = ranked.assign(
        rank=ranked.groupby(["optimizer", "epochs", "model"], observed=True).cumcount() + 1,
        n=ranked.groupby(["optimizer", "epochs", "model"], observed=True)[ERR].transform("size"),
    )
    chosen = ranked[ranked["rank"] <= best][["trial_key", "model", "optimizer", "epochs", "rank", "n", ERR]]
    curves = epochs[epochs["trial_key"].isin(chosen["trial_key"])]
    curves = curves[["trial_key", "epoch"]].assign(error=_epoch_errors(curves, metric))
    table = chosen.rename(columns={ERR: "final"}).merge(curves, on="trial_key", how="inner")
    columns = ["model", "optimizer", "epochs", "rank", "trial_key", "epoch", "error", "final", "n"]
    return table[columns].sort_values(["optimizer", "epochs", "model", "rank", "epoch"]).assign(metric=used.metric)


def best_curves_caption(table: pd.DataFrame) -> str:
    """What best_curves_figure draws, on which metric, of how many trials (absolute errors)."""
    n = table.groupby(["model", "optimizer", "epochs"])["n"].first()
    shown = table.groupby(["model", "optimizer", "epochs"])["rank"].max()
    return (
        f"Validation top-1 error against the epoch of each model's {_n_range(shown)} best trials ({_cell(table)}; "
        f"of n = {_n_range(n)} trials per model, chosen by the metric below on the same validation set, so the "
        f"curves are the luckiest as well as the best; ties by trial key), a line per trial in its model's style, "
        f"the best one marked and the others lighter; a curve stops at the last epoch its trial stored. Absolute "
        f"errors (no reference). {_metric(table)}"
    )


def best_curves_figure(
    table: pd.DataFrame, size: Optional[str] = None, fig: Optional[Figure] = None, title: bool = False
) -> Plot:
    """The best trials' validation error over the epochs (pycls's plot_curves, for the best few of a cell), all
    models in one panel: the best trial of each model drawn with its markers, the next ones thinner and
    lighter; one (optimizer, epochs) cell (one_cell)."""
    one_cell(table, "best_curves_figure")
    fig, axes = _grid(1, size, fig)
    ax = axes[0]
    drawn = table["model"].unique()
    for model, group in _by_model(table):
        st = model_style(model, drawn)
        for rank, curve in group.groupby("rank", sort=True):
            first = rank == 1
            ax.plot(
                curve["epoch"],
                curve["error"],
                label=model_label(model) if first else "_next",
                alpha=1.0 if first else 0.45,
                linewidth=None if first else 0.8,
                markevery=0.25 if first else [],
                **st,
            )
    ax.set(yscale="log", xlabel="epoch", ylabel="validation top-1 error (%)")
    log_ticks(ax.yaxis, table["error"])
    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True, min_n_ticks=2))
    caption = best_curves_caption(table)
    _finish(fig, axes, caption, title)
    return Plot(fig, table, caption)


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


def generalization_caption(table: pd.DataFrame) -> str:
    """What generalization_figure draws, on which metric, of how many trials (absolute errors)."""
    n = table.groupby(["model", "optimizer", "epochs"]).size()
    return (
        f"Validation top-1 error against final train loss ({_cell(table)}), a panel per optimizer and length: a "
        f"small marker per trial, a large one the median per model; n = {_n_range(n)} trained trials per model "
        f"and panel ({int(table['n_left_out'].iloc[0])} left out: diverged, failed or without a finite error). Lower "
        f"error at the same loss: better generalization; lower loss: more capacity. Absolute errors (no reference). "
        f"{_metric(table)}"
    )


def generalization_figure(
    table: pd.DataFrame, size: Optional[str] = None, fig: Optional[Figure] = None, title: bool = False
) -> Plot:
    """Validation error against final train loss, a point per trial and each model's median marked, one
    panel per (optimizer, epochs): CoAtNet's split of generalization (lower error at the same train loss)
    from capacity (lower train loss)."""
    cells = sorted(table.groupby(["optimizer", "epochs"]).groups)
    fig, axes = _grid(len(cells), size, fig)
    for ax, (opt, epochs) in zip(axes, cells):
        cell = table[(table["optimizer"] == opt) & (table["epochs"] == epochs)]
        for model, group in _by_model(cell):
            st = {k: v for k, v in model_style(model, table["model"].unique()).items() if k != "linestyle"}
            ax.plot(
                group["train_loss"],
                group["error"],
                linestyle="none",
                markersize=2,
                alpha=0.5,
                label="_trials",
                rasterized=len(table) > RASTER_POINTS,
                zorder=1.9,  # every model's trials before the medians: one image per panel when rasterized
                **st,
            )
            ax.plot(
                group["median_train_loss"].iloc[:1],
                group["median_error"].iloc[:1],
                linestyle="none",
                markersize=6,
                markeredgecolor="black",
                markeredgewidth=0.6,
                label=model_label(model),
                **st,
            )
        ax.set(
            title=f"{_opt(opt)}, {epochs} epochs",
            xscale="log",
            xlabel="final train loss",
            ylabel="validation top-1 error (%)",
        )
        log_ticks(ax.xaxis, table["train_loss"])
    caption = generalization_caption(table)
    _finish(fig, axes, caption, title)
    return Plot(fig, table, caption)


def aggregate_caption(table: pd.DataFrame) -> str:
    """What aggregate_figure draws, on which metric, of how many trials (a probability: no reference)."""
    cells = table[table["row"] != AGGREGATE_ROW]
    n = pd.concat([cells["n_a"], cells["n_b"]])
    return (
        f"Probability that a random trial of the first of a pair of models has a lower top-1 error than a random "
        f"trial of the second in the same cell, ties counted half (rliable's probability of improvement), a panel "
        f"per pair: a dot per cell (its studies, optimizer and epochs; bar: the cell's 95% bootstrap interval, "
        f"given from 8 trials a group), and a diamond for the mean over the cells, each cell weighing the same "
        f"(bar: 95% stratified bootstrap interval, every group of every cell resampled on its own, the cells taken "
        f"as independent: where they share configurations or seeds it is too short, bench.stratified); n = "
        f"{_n_range(n)} trials per group and cell, diverged trials counted at chance error; dotted: 0.5, neither "
        f"ahead. A probability (no reference). {_metric(table)}"
    )


def aggregate_figure(
    table: pd.DataFrame, size: Optional[str] = None, fig: Optional[Figure] = None, title: bool = False
) -> Plot:
    """Interval estimates per pair of models across cells (findings.aggregate_table): a panel per pair, a row per
    cell and the mean over the cells last, each with its interval, on one probability axis."""
    pairs = list(dict.fromkeys(zip(table["a"], table["b"])))
    fig, axes = _grid(len(pairs), size or "text", fig, columns=1)
    drawn = sorted({m for pair in pairs for m in pair})
    for ax, (a, b) in zip(axes, pairs):
        rows = table[(table["a"] == a) & (table["b"] == b)].reset_index(drop=True)
        y = np.arange(len(rows))[::-1]
        mean = (rows["row"] == AGGREGATE_ROW).to_numpy()
        style = model_style(a, drawn)
        for part, marker, size_pt in ((~mean, "o", 4), (mean, "D", 6)):
            sub, ys = rows[part], y[part]
            ax.errorbar(
                sub["p_a_better"],
                ys,
                xerr=[sub["p_a_better"] - sub["low"], sub["high"] - sub["p_a_better"]],
                fmt=marker,
                markersize=size_pt,
                color=style["color"],
                capsize=2,
                linewidth=1.4 if marker == "D" else 0.9,
            )
        cell = lambda r: textwrap.fill(f"{_opt(r['optimizer'])}, {int(r['epochs'])} ep · {r['row']}", 64)  # a long name
        labels = [AGGREGATE_ROW if r["row"] == AGGREGATE_ROW else cell(r) for _, r in rows.iterrows()]
        fixed_ticks(ax.yaxis, y)
        ax.yaxis.set_major_formatter(FixedFormatter(labels[::-1]))  # the ticks ascend: the last row first
        ax.axvline(0.5, color=BAND_GREY, linestyle=":", linewidth=0.8)
        ax.set(
            xlim=(-0.02, 1.02),
            xlabel=f"P({model_label(a)} trial better than {model_label(b)} trial)",
            title=f"{model_label(a)} vs {model_label(b)}" if len(pairs) > 1 else "",
        )
    caption = aggregate_caption(table)
    _finish(fig, axes, caption, title)
    return Plot(fig, table, caption)


def importance_table(
    trials: pd.DataFrame,
    metric: str = DEFAULT_METRIC,
    keys: Keys = ("lr", "wd"),
    resamples: int = IMPORTANCE_RESAMPLES,
    seeds: int = IMPORTANCE_SEEDS,
    progress: Optional[Callable[[int, int], None]] = None,
) -> pd.DataFrame:
    """stats.importance_interval per (model, optimizer, epochs) cell with 2 counted trials or more and errors that
    differ, of the hyperparameters (`keys`) that take two values or more there (a cell of seeds of one
    configuration has none, a cell whose trials all diverged no variance: left out; never pooled across cells),
    a row per cell and hyperparameter; `progress(done, cells)` after each cell."""
    kept = usable(trials, metric, "importance_table").kept
    kinds = hp_kinds(keys)
    cells = []
    for key, cell in kept.groupby(["model", "optimizer", "epochs"], sort=True):
        varied = {name: kind for name, kind in kinds.items() if cell[name].nunique(dropna=False) >= 2}
        if len(cell) > 1 and varied and cell[ERR].nunique() > 1:
            cells.append((key, cell, varied))
    parts = []
    for done, ((model, optimizer, epochs), cell, varied) in enumerate(cells, start=1):
        found = importance_interval(cell, metric, varied, resamples, seeds)
        parts.append(found.assign(model=model, optimizer=optimizer, epochs=epochs))
        if progress:
            progress(done, len(cells))
    columns = ["model", "optimizer", "epochs", "param", "importance", "low", "high", "seed_low", "seed_high", "n"]
    rest = ["resamples", "refits", "seeds", "n_left_out", "metric"]
    return pd.concat(parts, ignore_index=True)[columns + rest] if parts else pd.DataFrame(columns=columns + rest)


def importance_caption(table: pd.DataFrame) -> str:
    """What importance_figure draws, on which metric, of how many trials (a share: no reference)."""
    first = table.iloc[0]
    return (
        f"fANOVA importance of each sampled hyperparameter per model ({_cell(table)}; optuna's evaluator, trees of "
        f"at most {IMPORTANCE_DEPTH} levels, importances of a cell summing to 1), a panel per optimizer and length: "
        f"a dot for the importance on all of a cell's trials, a thin bar from the 2.5% to the 97.5% quantile of "
        f"{_n_range(table['refits'])} refits on the trials drawn with replacement, each with its own forest seed (a "
        f"description of how far it moves, not a calibrated interval), a "
        f"thick bar for the range over {int(first['seeds'])} forest seeds on all trials (the seed's own effect); "
        f"n = {_n_range(table['n'])} trials per model and cell. A share of variance (no reference). {_metric(table)}"
    )


def importance_figure(
    table: pd.DataFrame, size: Optional[str] = None, fig: Optional[Figure] = None, title: bool = False
) -> Plot:
    """Importance intervals (importance_table): a panel per (optimizer, epochs) cell, a row per model and
    hyperparameter, on one 0-1 axis."""
    panels = list(table.groupby(["optimizer", "epochs"], sort=True).groups)
    fig, axes = _grid(len(panels), size, fig, columns=min(len(panels), 2))
    drawn = table["model"].unique()
    for ax, (optimizer, epochs) in zip(axes, panels):
        panel = table[(table["optimizer"] == optimizer) & (table["epochs"] == epochs)]
        rows = [r for _, group in _by_model(panel) for _, r in group.iterrows()]
        y = np.arange(len(rows))[::-1]
        for row, at in zip(rows, y):
            style = model_style(row["model"], drawn)
            ax.plot([row["low"], row["high"]], [at, at], color=style["color"], linewidth=0.9, label="_interval")
            bar = dict(color=style["color"], linewidth=4, alpha=0.5, label="_seeds")
            ax.plot([row["seed_low"], row["seed_high"]], [at, at], **bar)
        models, values = np.array([r["model"] for r in rows]), np.array([r["importance"] for r in rows], float)
        for model in dict.fromkeys(models):  # a model's dots: one series, its legend entry
            style, mine = model_style(model, drawn), models == model
            dots = dict(marker=style["marker"], color=style["color"], linestyle="none", label=model_label(model))
            ax.plot(values[mine], y[mine], **dots)
        fixed_ticks(ax.yaxis, y)
        ax.yaxis.set_major_formatter(FixedFormatter([f"{model_label(r['model'])} · {r['param']}" for r in rows][::-1]))
        ax.set(xlim=(-0.02, 1.02), xlabel="fANOVA importance", title=f"{_opt(optimizer)}, {epochs:g} epochs")
    caption = importance_caption(table)
    _finish(fig, axes, caption, title)
    return Plot(fig, table, caption)


def write_importance(table: pd.DataFrame, folder: str) -> None:
    """importance_figure of `table` in the house style, saved into `folder` as importance.{pdf,svg,png,csv,json}."""
    with matplotlib.style.context(STYLE):
        plot = importance_figure(table)
        save_figure(plot, folder, "importance", table, {"metric": table["metric"].iloc[0], "caption": plot.caption})
