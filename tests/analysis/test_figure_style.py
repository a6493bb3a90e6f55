"""Figures for a paper (issue #27): every figure at its preset width has no text below 7 pt (read from
the saved PDF), reads in grayscale (no two series of an axes share a colour-less style), composes into
a user's figure and leaves the user's rcParams in force outside the report."""

import io
import re
import zlib

import matplotlib
import matplotlib.style
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from PIL import Image

from hpstudy.analysis.figures import SAVE_RC, SIZES, STYLE, delta_edf_figure, delta_error_vs_epochs_figure, save_figure
from tests.analysis.test_figure_contract import FIGURES

pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")
TABLES = {name: make() for name, (make, _, _) in FIGURES.items()}


def _pdf_text(fig: Figure):
    """(smallest font size in pt, width in inches) of the figure as saved to PDF."""
    buf = io.BytesIO()
    with matplotlib.rc_context(SAVE_RC):
        fig.savefig(buf, format="pdf")
    pdf = buf.getvalue()
    streams = [zlib.decompress(s) for s in re.findall(rb"stream\r?\n(.*?)endstream", pdf, re.S) if s[:1] == b"x"]
    sizes = [float(v) for s in streams for v in re.findall(rb"/F\d+ ([\d.]+) Tf", s)]
    width = float(re.search(rb"/MediaBox \[\s*0 0 ([\d.]+)", pdf).group(1)) / 72
    return min(sizes), width


def _draw(name: str, size: str) -> Figure:
    return FIGURES[name][1](TABLES[name], size=size)


@pytest.mark.parametrize("size", sorted(SIZES))
def test_every_figure_is_its_preset_width_with_no_text_below_7_pt(size):
    with matplotlib.style.context(STYLE):
        for name in FIGURES:
            smallest, width = _pdf_text(_draw(name, size))
            assert width == pytest.approx(SIZES[size], abs=0.01), name
            assert smallest >= 7, (name, smallest)


def _colourless(line) -> tuple:
    filled = line.get_markerfacecolor() not in ("none", "white") and to_hex(line.get_markerfacecolor()) != "#ffffff"
    return (str(line.get_linestyle()), line.get_marker(), filled)


def test_no_two_series_of_an_axes_share_a_colourless_style():
    for name in FIGURES:
        for ax in _draw(name, "text").axes:
            series = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
            styles = [_colourless(line) for line in series]
            assert len(styles) == len(set(styles)), (name, ax.get_title(), [s.get_label() for s in series])


def test_figures_draw_into_a_users_figure_and_axes_with_the_users_rcparams():
    fig = Figure(figsize=(5, 3))
    with matplotlib.rc_context({"xtick.labelsize": 14}):
        ax = fig.add_subplot(1, 2, 1)
        plot = delta_error_vs_epochs_figure(TABLES["delta_error_vs_epochs"], ax=ax)
        fig.canvas.draw()
    assert plot.fig is fig and fig.get_size_inches()[0] == 5 and ax.get_lines()
    assert {t.get_fontsize() for t in ax.get_xticklabels()} == {14}  # the user's size, not the house style's
    pd.testing.assert_frame_equal(plot.data, TABLES["delta_error_vs_epochs"])  # the rows it drew
    edf = delta_edf_figure(TABLES["delta_edf"], fig=Figure())
    assert len(edf.fig.axes) == 1 and edf.data is TABLES["delta_edf"]


def test_the_style_file_is_a_matplotlib_style_and_the_png_is_300_dpi(tmp_path):
    assert matplotlib.rc_params_from_file(STYLE, use_default_template=False)["xtick.labelsize"] == 7
    with matplotlib.style.context(STYLE):
        plot = _draw("delta_edf", "column")
        paths = save_figure(plot, str(tmp_path), "d", plot.data, {"metric": "final"})
    with Image.open(paths["png"]) as png:
        assert png.size[0] == pytest.approx(300 * SIZES["column"], abs=2)
        assert round(png.info["dpi"][0]) == 300


def test_a_delta_edf_ends_its_x_axis_before_the_diverged_and_counts_them():
    table = TABLES["delta_edf"]  # the last AdamW trial of each model diverged (error 90)
    plot = delta_edf_figure(table)
    ax = plot.fig.axes[0]
    kept = table[table["error"] < 90]
    assert kept["delta"].max() <= ax.get_xlim()[1] < table["delta"].max()
    labels = [t.get_text() for t in plot.fig.legends[0].get_texts()]
    assert all("diverged: 1/4 at chance" in label for label in labels) and "ViT-C tiny" in labels[0] + labels[1]
