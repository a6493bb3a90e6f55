"""Every figure is a triple (analysis/figures.py): `<name>_table(trials, ..., metric)` computes the numbers
it plots, `<name>_figure(table, ...)` draws them from that table only, `<name>_caption(table)` says what
it draws. The tables are checked against
plain pandas on a small hand-made study; the renderers against an edited table. For a paper (issue
#27): every figure at its preset width has no text below 7 pt (read from the saved PDF), reads in
grayscale (no two series of an axes share a colour-less style), composes into a user's figure and
leaves the user's rcParams in force outside the report."""

import functools
import inspect
import io
import re
from math import comb
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from hpstudy.analysis.catalogue import catalogue_order, model_family, model_label, model_size
from hpstudy.analysis.findings import findings
from hpstudy.analysis.metric import LeftOutWarning
from hpstudy.trainers.zoo import get_spec, list_models
from tests.helpers import epochs_of, pdf_text

if TYPE_CHECKING:  # matplotlib: imported by the tests that draw, not when they are collected
    from matplotlib.figure import Figure

CELL = ["model", "optimizer", "epochs"]
pytestmark = pytest.mark.filterwarnings("ignore::hpstudy.analysis.metric.LeftOutWarning")  # the failed trial


def _study() -> pd.DataFrame:
    """Two models of two families, AdamW and SGD, 5 and 10 epochs, 4 trials a cell with distinct errors;
    the last AdamW trial of each cell diverged, one trial failed, and every cnn_tiny SGD run at 5 epochs
    diverged."""
    rows = []
    for m, (model, family) in enumerate([("vit_c_tiny", "vit_c"), ("cnn_tiny", "cnn")]):
        for o, opt in enumerate(["adamw", "sgd"]):
            for epochs in (5, 10):
                for i in range(4):
                    diverged = (opt == "adamw" and i == 3) or (model, opt, epochs) == ("cnn_tiny", "sgd", 5)
                    failed = (model, opt, epochs, i) == ("vit_c_tiny", "sgd", 10, 1)
                    err = np.nan if failed else 90.0 if diverged else 10 + 3 * m + 2 * o + 20 / epochs + 1.7 * i**1.5
                    rows.append(
                        {
                            "study": "s",
                            "trial_key": f"{model}-{opt}-{epochs}-{i}",
                            "model": model,
                            "family": family,
                            "optimizer": opt,
                            "epochs": epochs,
                            "lr": 10 ** (-3 + 0.5 * i),
                            "wd": 10 ** (-2 + 0.3 * i),
                            "seed": i,
                            "status": "failed" if failed else "diverged" if diverged else "ok",
                            "top1_err": err,
                            "train_loss": np.nan if failed or diverged else err / 20,
                        }
                    )
    return pd.DataFrame(rows)


STUDY = _study()
COUNTED = STUDY[STUDY["status"] != "failed"]  # the metric `final` is top1_err, finite where not failed
ADAMW_10 = STUDY[(STUDY["optimizer"] == "adamw") & (STUDY["epochs"] == 10)]
SGD_10 = STUDY[(STUDY["optimizer"] == "sgd") & (STUDY["epochs"] == 10)]  # vit_c_tiny's failed trial

# figure name: a column its renderer draws
COLUMNS = {
    "delta_edf": "delta",
    "hp_scatter": "error",
    "error_vs_epochs": "error",
    "delta_error_vs_epochs": "gap",
    "expected_best": "expected_best",
    "generalization": "error",
    "best_of_k": "p_a_wins",
    "best_curves": "error",
    "importance": "importance",
}


@functools.cache
def _figures() -> dict:
    """{figure name: (its table of the study, its renderer with the options the report gives)}."""
    from hpstudy.analysis import figures as f

    return {
        "delta_edf": (lambda: f.delta_edf_table(ADAMW_10, "final"), f.delta_edf_figure),
        "hp_scatter": (
            lambda: f.hp_scatter_table(SGD_10, "final"),  # one cell per figure
            lambda table, **kw: f.hp_scatter_figure(table, {}, **kw),
        ),
        "error_vs_epochs": (lambda: f.error_vs_epochs_table(STUDY, "final"), f.error_vs_epochs_figure),
        "delta_error_vs_epochs": (
            lambda: f.delta_error_vs_epochs_table(STUDY, "final"),
            f.delta_error_vs_epochs_figure,
        ),
        "expected_best": (lambda: f.expected_best_table(STUDY, "final", n_boot=20), f.expected_best_figure),
        "generalization": (lambda: f.generalization_table(STUDY, "final"), f.generalization_figure),
        "best_of_k": (lambda: f.best_of_k_table(STUDY, "final", "models"), f.best_of_k_figure),
        "best_curves": (lambda: f.best_curves_table(ADAMW_10, "final", epochs=epochs_of(STUDY)), f.best_curves_figure),
        "importance": (lambda: f.importance_table(STUDY, "final", resamples=2, seeds=2), f.importance_figure),
    }


@functools.cache
def _tables() -> dict:
    """{figure name: its table of the study}."""
    return {name: make() for name, (make, _) in _figures().items()}


def _triples():
    """{name: (table function, renderer, caption)} of every `<name>_table` analysis/figures.py defines."""
    from hpstudy.analysis import figures

    tables = {
        name[: -len("_table")]: fn
        for name, fn in vars(figures).items()
        if name.endswith("_table") and callable(fn) and fn.__module__ == figures.__name__
    }
    return {
        name: (fn, getattr(figures, f"{name}_figure"), getattr(figures, f"{name}_caption"))
        for name, fn in tables.items()
    }


def test_every_figure_is_a_table_function_a_renderer_and_a_caption_of_that_table():
    triples = _triples()
    assert set(triples) == set(_figures()) == set(COLUMNS)
    for name, (table, figure, caption) in triples.items():
        computes, draws = inspect.signature(table).parameters, inspect.signature(figure).parameters
        says = inspect.signature(caption).parameters
        assert list(computes)[0] == "trials" and "metric" in computes, name
        assert list(draws)[0] == "table" and not {"trials", "metric"} & set(draws), name
        assert list(says)[0] == "table" and not {"trials", "metric"} & set(says), name
        assert draws["title"].default is False, name  # no title unless asked


def _drawn(fig) -> np.ndarray:
    """Every number a figure draws: its lines' points, its markers' positions, its filled areas' outlines."""
    collections = [c for ax in fig.axes for c in ax.collections]
    arrays = (
        [line.get_xydata() for ax in fig.axes for line in ax.get_lines()]
        + [c.get_offsets() for c in collections]
        + [p.vertices for c in collections for p in c.get_paths()]
    )
    return np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays])


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_a_renderer_draws_the_numbers_and_the_metric_of_its_table(name):
    make, figure = _figures()[name]
    column = COLUMNS[name]
    table = make()
    edited = table.copy()
    edited.loc[edited.index[0], column] += 0.0123
    new = edited[column].iloc[0]
    assert not np.isclose(_drawn(figure(table).fig), new).any()
    assert np.isclose(_drawn(figure(edited).fig), new).any()
    stated = figure(table.assign(metric="as the table says"))
    assert stated.caption.endswith("Metric: as the table says.") and not stated.fig.get_suptitle()


def _sorted(frame: pd.DataFrame, by) -> pd.DataFrame:
    return frame.sort_values(by).reset_index(drop=True)


def test_delta_edf_table_is_each_model_s_edf_of_its_distance_to_its_best():
    from hpstudy.analysis.figures import delta_edf_table

    table = delta_edf_table(ADAMW_10, "final")
    for model, group in ADAMW_10.groupby("model"):
        errors = np.sort(group["top1_err"].to_numpy())
        n = len(errors)
        got = table[table["model"] == model]
        np.testing.assert_allclose(got["delta"], errors - errors.min())
        np.testing.assert_allclose(got["F"], [(errors <= e).sum() / n for e in errors])
        assert set(got["n"]) == {n}
        np.testing.assert_allclose(got["dkw_eps"], np.sqrt(np.log(2 / 0.05) / (2 * n)))
    assert set(table["metric"]) == {"final"}


def test_hp_scatter_table_is_every_counted_trial_with_its_cells_n():
    from hpstudy.analysis.figures import hp_scatter_table

    table = hp_scatter_table(STUDY, "final")
    expected = COUNTED[CELL + ["lr", "wd", "top1_err", "status"]].rename(columns={"top1_err": "error"})
    expected = expected.assign(n=COUNTED.groupby(CELL)["top1_err"].transform("size"))
    pd.testing.assert_frame_equal(table.drop(columns="metric").reset_index(drop=True), expected.reset_index(drop=True))
    assert set(table["metric"]) == {"final"}


def test_error_vs_epochs_table_is_the_best_trial_per_cell_and_whether_all_diverged():
    from hpstudy.analysis.figures import error_vs_epochs_table

    table = error_vs_epochs_table(STUDY, "final").set_index(CELL)
    grouped = COUNTED.groupby(CELL)
    pd.testing.assert_series_equal(table["error"], grouped["top1_err"].min(), check_names=False)
    all_diverged = grouped["status"].apply(lambda s: set(s) == {"diverged"})
    assert table["diverged"].to_dict() == all_diverged.to_dict()
    assert table["diverged"].sum() == 1 and table.loc[("cnn_tiny", "sgd", 5), "diverged"]


def test_delta_error_vs_epochs_table_is_the_best_at_e_minus_the_best_at_the_longest():
    from hpstudy.analysis.figures import delta_error_vs_epochs_table

    table = delta_error_vs_epochs_table(STUDY, "final").set_index(CELL)
    best = COUNTED.groupby(CELL)["top1_err"].min()
    np.testing.assert_allclose(table["gap"].sort_index(), (best - best.xs(10, level="epochs")).sort_index())


def test_expected_best_table_is_the_mean_best_of_k_trials_drawn_without_replacement():
    from hpstudy.analysis.figures import expected_best_table

    table = expected_best_table(STUDY, "final", n_boot=20)
    for (model, opt, epochs), group in COUNTED.groupby(CELL):  # per cell: never pooled over lengths
        errors = np.sort(group["top1_err"].to_numpy())  # best first: the j-th best is the minimum of k
        n = len(errors)  # draws when the other k - 1 are among the n - j worse
        expected = [sum(e * comb(n - j, k - 1) for j, e in enumerate(errors, 1)) / comb(n, k) for k in range(1, n + 1)]
        got = _sorted(table[(table[CELL] == [model, opt, epochs]).all(axis=1)], "k")
        assert got["k"].tolist() == list(range(1, n + 1)) and set(got["n"]) == {n}
        np.testing.assert_allclose(got["expected_best"], expected)
        assert got["expected_best"].iloc[0] == pytest.approx(errors.mean())
        assert got["expected_best"].iloc[-1] == pytest.approx(errors.min())
        assert (got["lo"] <= got["hi"]).all()


def test_generalization_table_is_every_trained_trial_with_its_model_s_medians():
    from hpstudy.analysis.figures import generalization_table

    with pytest.warns(LeftOutWarning, match="generalization_table: left out 8 of 31 counted rows"):
        table = generalization_table(STUDY, "final")
    trained = STUDY[STUDY["status"] == "ok"]
    assert len(table) == len(trained) and set(table["n_left_out"]) == {len(STUDY) - len(trained)}
    np.testing.assert_allclose(table[["train_loss", "error"]], trained[["train_loss", "top1_err"]])
    for (opt, epochs, model), group in trained.groupby(["optimizer", "epochs", "model"]):
        got = table[(table["optimizer"] == opt) & (table["epochs"] == epochs) & (table["model"] == model)]
        assert set(got["median_error"]) == {np.median(group["top1_err"])}
        assert set(got["median_train_loss"]) == {np.median(group["train_loss"])}


def _pdf_text(fig: "Figure"):
    """(smallest font size in pt, width in inches) of the figure as saved to PDF."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"pdf.fonttype": 42}):  # as save_figure writes it
        fig.savefig(buf, format="pdf")
    return pdf_text(buf.getvalue())


def _draw(name: str, size: str) -> "Figure":
    return _figures()[name][1](_tables()[name], size=size).fig


# slow tier: each preset draws and renders every figure to PDF (~2 s)
@pytest.mark.slow
@pytest.mark.parametrize("size", ["column", "text"])
def test_every_figure_is_its_preset_width_with_no_text_below_7_pt(size):
    import matplotlib.style

    from hpstudy.analysis.figures import SIZES, STYLE

    with matplotlib.style.context(STYLE):
        for name in COLUMNS:
            smallest, width = _pdf_text(_draw(name, size))
            assert width == pytest.approx(SIZES[size], abs=0.01), name
            assert smallest >= 7, (name, smallest)


def _colourless(line) -> tuple:
    from matplotlib.colors import to_hex

    filled = line.get_markerfacecolor() not in ("none", "white") and to_hex(line.get_markerfacecolor()) != "#ffffff"
    return (str(line.get_linestyle()), line.get_marker(), filled)


def test_no_two_series_of_an_axes_share_a_colourless_style():
    for name in COLUMNS:
        for ax in _draw(name, "text").axes:
            series = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
            styles = [_colourless(line) for line in series]
            assert len(styles) == len(set(styles)), (name, ax.get_title(), [s.get_label() for s in series])


def test_figures_draw_into_a_users_figure_and_axes_with_the_users_rcparams():
    import matplotlib
    from matplotlib.figure import Figure

    from hpstudy.analysis.figures import delta_edf_figure, delta_error_vs_epochs_figure

    fig = Figure(figsize=(5, 3))
    with matplotlib.rc_context({"xtick.labelsize": 14}):
        ax = fig.add_subplot(1, 2, 1)
        plot = delta_error_vs_epochs_figure(_tables()["delta_error_vs_epochs"], ax=ax)
        fig.canvas.draw()
    assert plot.fig is fig and fig.get_size_inches()[0] == 5 and ax.get_lines()
    assert {t.get_fontsize() for t in ax.get_xticklabels()} == {14}  # the user's size, not the house style's
    pd.testing.assert_frame_equal(plot.data, _tables()["delta_error_vs_epochs"])  # the rows it drew
    edf = delta_edf_figure(_tables()["delta_edf"], fig=Figure())
    assert len(edf.fig.axes) == 1 and edf.data is _tables()["delta_edf"]


def test_the_style_file_is_a_matplotlib_style_and_the_png_is_300_dpi(tmp_path):
    import matplotlib.style

    from hpstudy.analysis.figures import SIZES, STYLE, delta_edf_figure, save_figure

    assert matplotlib.rc_params_from_file(STYLE, use_default_template=False)["xtick.labelsize"] == 7
    with matplotlib.style.context(STYLE):
        plot = delta_edf_figure(_tables()["delta_edf"], size="column")
        paths = save_figure(plot, str(tmp_path), "d", plot.data, {"metric": "final"})
    with Image.open(paths["png"]) as png:
        assert png.size[0] == pytest.approx(300 * SIZES["column"], abs=2)
        assert round(png.info["dpi"][0]) == 300


def test_a_delta_edf_ends_its_x_axis_before_the_diverged_and_counts_them():
    from hpstudy.analysis.figures import delta_edf_figure

    table = _tables()["delta_edf"]  # the last AdamW trial of each model diverged (error 90)
    plot = delta_edf_figure(table)
    ax = plot.fig.axes[0]
    kept = table[table["error"] < 90]
    assert kept["delta"].max() <= ax.get_xlim()[1] < table["delta"].max()
    *labels, band = [t.get_text() for t in plot.fig.legends[0].get_texts()]
    assert all("diverged: 1/4 at chance" in label for label in labels) and "ViT-C tiny" in labels[0] + labels[1]
    assert band == "DKW 95% band"


def _words(text: str) -> str:
    """A caption without its whitespace: the words as written, wherever a title wrapped them."""
    return "".join(text.split())


@pytest.mark.parametrize(
    "name, says",
    [
        (
            "delta_edf",
            "(AdamW; 10 epochs): for each model, the share of its trials (y) whose top-1 error lies within Δ points "
            "(x) of the model's own best trial (the reference); n = 4 trials per model; shaded: DKW 95% "
            "simultaneous bands",
        ),
        (  # vit_c_tiny lost its failed trial: 3 counted, cnn_tiny 4
            "hp_scatter",
            "against lr, wd and lr·wd (SGD; 10 epochs), a row of panels per model; n = 3-4 trials per model",
        ),
    ],
    ids=["equal_n", "n_range"],
)
def test_a_caption_names_the_optimizers_epochs_the_range_of_trials_per_model_and_the_metric(name, says):
    plot = _figures()[name][1](_tables()[name], size="text")
    assert says in plot.caption and plot.caption.endswith("Metric: final.")
    titled = _figures()[name][1](_tables()[name], size="text", title=True).fig.get_suptitle()
    assert _words(titled) == _words(plot.caption)  # title=True: the caption above the figure


def test_a_band_is_shaded_over_the_same_x_as_its_line():
    """Each band (a filled area labelled `_band`, no outline) spans the x of the line drawn before it: the
    Δs of a Δ-EDF, the k of an expected best (stats.budget_grid per model)."""
    for name in ("delta_edf", "expected_best"):
        for ax in _draw(name, "text").axes:
            lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
            bands = [c for c in ax.collections if c.get_label() == "_band"]
            assert len(bands) == len(lines) > 0, name
            for line, band in zip(lines, bands):
                x = band.get_paths()[0].vertices[:, 0]
                assert (x.min(), x.max()) == (min(line.get_xdata()), max(line.get_xdata())), name
                assert band.get_linewidth().max() == 0 and band.get_alpha() < 0.5, name


# ---- which models a figure or a sentence shows, by what name and in what order (analysis/catalogue.py):
# the catalogue's by their human names in catalogue order; any other name a table holds (a user's own
# model, a Tune run's) by that name, after them, with a style of its own.


def _series(fig) -> list:
    """Every labelled series of a figure, axes by axes, in drawing order (the legend's order)."""
    return [line.get_label() for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]


def _figures_of(study: pd.DataFrame):
    """{figure name: its figure} of every figure drawn from `study`, in the house style."""
    import matplotlib.style

    from hpstudy.analysis.figures import STYLE

    out = {}
    with matplotlib.style.context(STYLE):
        for name, (_, figure) in _figures().items():
            # _figures' table functions read STUDY; rebuild them on this study
            out[name] = figure(_table(name, study)).fig
    return out


def _table(name: str, study: pd.DataFrame) -> pd.DataFrame:
    from hpstudy.analysis import figures

    table = getattr(figures, f"{name}_table")
    if name in ("delta_edf", "hp_scatter", "best_curves"):  # figures of one (optimizer, epochs) cell
        study = study[(study["optimizer"] == "adamw") & (study["epochs"] == 10)]
    options = {
        "expected_best": {"n_boot": 20},
        "best_of_k": {"compared": "models"},
        "best_curves": {"epochs": epochs_of(study)},
    }.get(name, {})
    return table(study, "final", **options)


def test_the_catalogue_lookups_agree_with_the_zoo_and_take_any_other_name():
    from hpstudy.analysis.figures import model_style

    for model in list_models():
        spec = get_spec(model)
        assert (model_label(model), model_family(model), model_size(model)) == (spec.label, spec.family, spec.size)
    assert (model_label("mine_a"), model_family("mine_a"), model_size("mine_a")) == ("mine_a", "mine_a", "")
    # a timm: model resolves in the zoo but is not listed: its own name, family and a style of its own
    timm = "timm:resnet10t"
    assert (model_label(timm), model_family(timm), model_size(timm)) == (timm, timm, "")
    assert model_style(timm, [timm, "mine_a"]) != model_style("mine_a", [timm, "mine_a"])
    assert catalogue_order(["zeta", "cnn_tiny", "alpha", "vit_c_tiny", "cnn_tiny"]) == [
        "vit_c_tiny",
        "cnn_tiny",
        "alpha",
        "zeta",
    ]


def test_legends_list_models_in_catalogue_order_not_by_identifier():
    # the study holds vit_c_tiny and cnn_tiny: by identifier cnn_tiny would come first
    assert list_models().index("vit_c_tiny") < list_models().index("cnn_tiny")
    for name, fig in _figures_of(STUDY).items():
        # the models in the order the legend names them (a best-of-k pair names both: `ViT-C tiny vs CNN tiny`)
        text = " | ".join(label.split(" (")[0] for label in _series(fig))
        models = sorted({"ViT-C tiny", "CNN tiny"} & set(re.split(r" \| | vs |: ", text)), key=text.index)
        if name == "hp_scatter":  # one row of panels per model, labelled on the y axis
            models = [ax.get_ylabel().split("\n")[0] for ax in fig.axes if ax.get_ylabel()]
        assert models and models.index("ViT-C tiny") < models.index("CNN tiny"), (name, models)


def test_models_the_catalogue_does_not_know_are_drawn_by_name_each_in_a_style_of_its_own():
    from hpstudy.analysis.figures import model_style

    study = STUDY.assign(model=STUDY["model"].map({"vit_c_tiny": "mine_b", "cnn_tiny": "mine_a"}))
    for name, fig in _figures_of(study).items():
        text = " ".join(_series(fig) + [ax.get_ylabel() for ax in fig.axes])
        assert "mine_a" in text and "mine_b" in text and "tiny" not in text, (name, text)
        for ax in fig.axes:
            series = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
            styles = [_colourless(line) for line in series]
            assert len(styles) == len(set(styles)), (name, [s.get_label() for s in series])
        if name != "hp_scatter":
            labels = [label for label in _series(fig) if label.startswith("mine")]
            assert labels.index(next(x for x in labels if x.startswith("mine_a"))) == 0, (name, labels)
    styles = {model_style(m, ["mine_a", "mine_b", "mine_c"])["marker"] for m in ("mine_a", "mine_b", "mine_c")}
    assert len(styles) == 3


def test_known_and_unknown_models_share_one_panel():
    study = STUDY.assign(model=STUDY["model"].replace({"cnn_tiny": "mine"}))
    fig = _figures()["delta_edf"][1](_table("delta_edf", study)).fig
    assert [ax.get_title() for ax in fig.axes] == [""]
    assert [label.split(" (")[0] for label in _series(fig)] == ["ViT-C tiny", "mine"]


def test_sentences_name_models_by_their_catalogue_names_and_others_by_theirs():
    rng = np.random.default_rng(0)
    rows = [
        {
            "model": model,
            "optimizer": "adamw",
            "epochs": 6,
            "seed": 0,
            "lr": 10 ** rng.uniform(-4, -2),
            "wd": 0.05,
            "status": "ok",
            "top1_err": float(err),
        }
        for model, errors in (("vit_p_tiny", rng.uniform(10, 60, 24)), ("mine", rng.uniform(10, 12, 24)))
        for err in errors
    ]
    (pair,) = [f for f in findings(pd.DataFrame(rows), "final") if f.kind == "edf_pair"]
    assert pair.models == ("vit_p_tiny", "mine")  # identifiers in the object and its table
    assert "ViT-P tiny" in pair.sentence and "mine" in pair.sentence and "vit_p_tiny" not in pair.sentence
