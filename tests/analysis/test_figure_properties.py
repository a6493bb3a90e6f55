"""What a paper needs of every figure kind (issue #39), checked on the figure objects of a user's own
two-model study (a zoo model and a timm: model): no title unless asked, a caption stating metric, n
and reference, one legend entry per series and per kind of band, shaded bands, one tick format, all
models of a comparison in one panel, dodged bars, no empty grid slot, and the optional symlog Δ axis."""

import functools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import epochs_of, make_trials

pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")
MODELS = ("vit_c_tiny", "timm:resnet10t")
LABELS = ("ViT-C tiny", "timm:resnet10t")


def _study(models=MODELS) -> pd.DataFrame:
    """Random lr/wd trials of two models, AdamW and SGD, at 6 and 16 epochs, some diverged."""
    trials = make_trials(models=models, epochs=(6, 16), n=8, seed=5, diverge_share=0.2)
    trials.loc[trials.index[:3], "status"] = "diverged"  # at least one diverged trial in the first cell
    return trials.assign(family=trials["model"], train_loss=np.where(trials["status"] == "ok", 0.5, np.nan))


STUDY = _study()
CELL = STUDY[(STUDY["optimizer"] == "adamw") & (STUDY["epochs"] == 16)]
KINDS = (
    "delta_edf",
    "hp_scatter",
    "error_vs_epochs",
    "delta_error_vs_epochs",
    "expected_best",
    "generalization",
    "best_of_k",
    "best_curves",
)
BANDS = {"delta_edf": ["DKW 95% band"], "expected_best": ["bootstrap 95% band"]}
REFERENCE = {  # what each caption says the numbers are measured from
    "delta_edf": "the model's own best trial (the reference)",
    "delta_error_vs_epochs": "the longest schedule (the reference: 16 epochs)",
    "best_of_k": "A probability (no reference)",
}


@functools.cache
def _tables() -> dict:
    """{kind: its table of the study}."""
    from hpstudy.analysis import figures

    return {
        "delta_edf": figures.delta_edf_table(CELL, "final"),
        "hp_scatter": figures.hp_scatter_table(CELL, "final"),
        "error_vs_epochs": figures.error_vs_epochs_table(STUDY, "final"),
        "delta_error_vs_epochs": figures.delta_error_vs_epochs_table(STUDY, "final"),
        "expected_best": figures.expected_best_table(STUDY[STUDY["epochs"] == 16], "final", n_boot=20),
        "generalization": figures.generalization_table(STUDY, "final"),
        "best_of_k": figures.best_of_k_table(STUDY, "final", "optimizers"),
        "best_curves": figures.best_curves_table(CELL, "final", epochs=epochs_of(STUDY)),
    }


def _plot(name: str, **options):
    import matplotlib.style

    from hpstudy.analysis import figures

    extra = {"ranges": {}} if name == "hp_scatter" else {}
    with matplotlib.style.context(figures.STYLE):
        return getattr(figures, f"{name}_figure")(_tables()[name], **extra, **options)


@functools.cache
def _plots() -> dict:
    """{kind: its figure of the study}, drawn once for the tests that only read it."""
    return {name: _plot(name) for name in KINDS}


def _series(fig) -> list:
    return [line.get_label() for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_figure_has_no_title_unless_asked_and_its_caption_states_metric_n_and_reference(name):
    plot = _plots()[name]
    single = len([ax for ax in plot.fig.axes if ax.get_visible()]) == 1
    assert plot.fig.get_suptitle() == "" and (not single or plot.fig.axes[0].get_title() == "")
    assert plot.caption.endswith("Metric: final.") and "n = " in plot.caption
    assert REFERENCE.get(name, "Absolute errors (no reference)") in plot.caption
    assert _plot(name, title=True).fig.get_suptitle().split() == plot.caption.split()


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_legend_has_one_entry_per_series_then_one_per_kind_of_band(name):
    fig = _plots()[name].fig
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    series = list(dict.fromkeys(_series(fig)))
    assert texts == series + BANDS.get(name, []) and len(texts) == len(set(texts))
    shown = {label.split(" (")[0].split(": ")[0] for label in series}  # best of k: `ViT-C tiny: AdamW vs SGD`
    assert set(LABELS) <= shown  # both models of the study, by their names


@pytest.mark.parametrize("name", sorted(BANDS))
def test_a_band_is_shaded_in_its_series_colour_without_an_outline(name):
    from matplotlib.colors import to_rgb

    for ax in _plots()[name].fig.axes:
        bands = [c for c in ax.collections if c.get_label() == "_band"]
        lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert len(bands) == len(lines) == len(MODELS)
        for band, line in zip(bands, lines):
            assert np.allclose(band.get_facecolor()[0][:3], to_rgb(line.get_color()))
            assert band.get_linewidth().max() == 0 and band.get_alpha() < 0.5


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_axis_of_numbers_has_the_one_plain_tick_format(name):
    from matplotlib.ticker import FixedFormatter, NullFormatter

    from hpstudy.analysis.figures import Plain

    fig = _plots()[name].fig
    fig.canvas.draw()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            major = axis.get_major_formatter()
            assert isinstance(major, (Plain, FixedFormatter)), (name, type(major))
            assert isinstance(axis.get_minor_formatter(), NullFormatter), name
            for label in axis.get_ticklabels():
                assert not any(mark in label.get_text() for mark in ("$", "×", "e+", "e-")), (name, label)


@pytest.mark.parametrize("name", ["delta_edf", "error_vs_epochs", "delta_error_vs_epochs"])
def test_a_zoo_model_and_a_timm_model_are_compared_in_one_panel(name):
    (ax,) = [ax for ax in _plots()[name].fig.axes if ax.get_visible()]
    drawn = {line.get_label().split(" (")[0] for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(LABELS) <= drawn and ax.get_title() == ""


@pytest.mark.parametrize(
    "models, sizes, panels",
    [
        (("vit_c_tiny", "vit_c_1gf"), None, ["tiny", "1gf"]),  # every model has a size class: the paper's panels
        (("vit_c_1gf", "timm:resnet10t"), None, [""]),  # one without: never an "other models" panel
        (("vit_c_1gf", "timm:resnet10t"), {"timm:resnet10t": "tiny"}, ["tiny", "1gf"]),  # the spec's size class
        (("vit_c_tiny", "timm:resnet10t"), {"timm:resnet10t": "tiny"}, [""]),  # one class: one panel
    ],
)
def test_size_panels_only_where_every_model_has_a_size_class(models, sizes, panels):
    from hpstudy.analysis import figures

    study = _study(models)
    edf = figures.delta_edf_figure(figures.delta_edf_table(study[study["epochs"] == 16], "final"), sizes=sizes)
    epochs = figures.error_vs_epochs_figure(figures.error_vs_epochs_table(study, "final"), sizes=sizes)
    for fig in (edf.fig, epochs.fig):
        assert [ax.get_title() for ax in fig.axes if ax.get_visible()] == panels


def test_the_bars_of_one_length_are_dodged_to_distinct_x_in_series_order():
    from matplotlib.collections import LineCollection

    (ax,) = _plots()["error_vs_epochs"].fig.axes
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(bars) == 2 * len(MODELS)  # a bar per (model, optimizer) series
    for epochs in (6, 16):
        xs = [next(s[0, 0] for s in bar.get_segments() if abs(np.log10(s[0, 0] / epochs)) < 0.1) for bar in bars]
        assert len(set(np.round(xs, 9))) == len(xs) and xs == sorted(xs)
        assert np.exp(np.log(xs).mean()) == pytest.approx(epochs)  # centred on the length


@given(
    epochs=st.lists(st.integers(1, 400), min_size=1, max_size=6, unique=True),
    k=st.integers(1, 12),
)
def test_dodged_series_keep_their_order_and_stay_between_the_neighbouring_lengths(epochs, k):
    from hpstudy.analysis import figures

    shifts = figures._dodge(epochs, k)
    assert len(shifts) == k and np.all(np.diff(shifts) > 0)
    if len(epochs) > 1:
        gap = np.diff(np.log10(sorted(epochs))).min()
        assert np.log10(shifts[-1] / shifts[0]) <= gap / 2 + 1e-12


@given(n=st.integers(1, 40))
def test_a_grid_leaves_the_fewest_slots_empty(n):
    from hpstudy.analysis import figures

    cols = figures._columns(n, 3)
    assert 1 <= cols <= 3 and all(-n % cols <= -n % c for c in range(1, min(3, n) + 1))


def test_four_panels_fill_a_two_by_two_grid():
    fig = _plots()["generalization"].fig  # AdamW and SGD at 6 and 16 epochs
    assert len(fig.axes) == 4 and all(ax.get_visible() for ax in fig.axes)


def _spread(scale: float) -> pd.DataFrame:
    """A Δ-EDF table of two models whose trials spread over 2 points and over 2 x `scale` points."""
    from hpstudy.analysis import figures

    rows = [
        {
            "model": m,
            "optimizer": "adamw",
            "epochs": 6,
            "seed": 0,
            "lr": 1e-3,
            "wd": 0.05,
            "status": "ok",
            "top1_err": e,
        }
        for m, s in (("vit_c_tiny", 1.0), ("timm:resnet10t", scale))
        for e in 10 + s * np.linspace(0, 2, 8)
    ]
    return figures.delta_edf_table(pd.DataFrame(rows), "final")


def test_a_symlog_delta_axis_is_chosen_where_one_model_spreads_far_wider_and_ticks_plainly():
    from hpstudy.analysis import figures
    from hpstudy.analysis.figures import Plain, delta_scale

    assert delta_scale(_spread(1.5)) == "linear" and delta_scale(_spread(20)) == "symlog"
    plot = figures.delta_edf_figure(_spread(20), xscale="symlog")
    (ax,) = plot.fig.axes
    plot.fig.canvas.draw()
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ax.get_xscale() == "symlog" and ticks[0] == "0" and "1" in ticks and "10" in ticks
    assert isinstance(ax.xaxis.get_major_formatter(), Plain)
    with pytest.raises(ValueError, match="xscale 'log': allowed: linear, symlog"):
        figures.delta_edf_figure(_spread(20), xscale="log")
