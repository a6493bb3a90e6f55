import json
import os
import re
from datetime import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpstudy.analysis.edf import bootstrap_band, edf_table, step_points
from hpstudy.analysis.stats import StatsError, expected_best, expected_best_band, good_ranges
from hpstudy.cli import hpstudy_main
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_study, load_trials
from hpstudy.study.store.spec_record import write_spec_record
from hpstudy.trainers.schema import TRIAL_SCHEMA
from hpstudy.trainers.zoo import get_spec
from tests.helpers import make_trials, stored_row


def test_importing_and_plotting_leave_global_rcparams_alone(tmp_path):
    import matplotlib

    from hpstudy.analysis.figures import delta_edf_figure, save_figure

    before = dict(matplotlib.rcParams)
    trials = make_trials(n=8)
    save_figure(delta_edf_figure(edf_table(trials)), str(tmp_path), "x", trials.head(), {"metric": "paper"})
    assert dict(matplotlib.rcParams) == before


def _line_styles(fig):
    """(colour, line style, marker) of each model's line in a figure, by the model named in its label."""
    from matplotlib.colors import to_hex

    return {
        line.get_label().split(" (")[0]: (to_hex(line.get_color()), line.get_linestyle(), line.get_marker())
        for ax in fig.axes
        for line in ax.get_lines()
        if not line.get_label().startswith("_")
    }


def test_model_styles_are_fixed_distinct_and_grayscale_safe():
    from hpstudy.analysis.figures import PALETTE, delta_edf_figure, model_style

    trials = make_trials(n=6)
    together = _line_styles(delta_edf_figure(edf_table(trials)).fig)
    alone = _line_styles(delta_edf_figure(edf_table(trials[trials["model"] == "vit_c_tiny"])).fig)
    assert alone["ViT-C tiny"] == together["ViT-C tiny"]  # a model's style does not depend on the others
    assert set(together) == {"ViT-P tiny", "ViT-C tiny", "CNN tiny"}  # catalogue names, not identifiers
    assert len({colour for colour, _, _ in together.values()}) == 3
    assert len({line for _, line, _ in together.values()}) == 3  # one line style per family: no colour needed
    styles = {m: model_style(m) for m in ("vit_p_tiny", "vit_c_tiny", "cnn_tiny", "vit_p_1gf", "regnety_1gf")}
    assert {s["color"] for s in styles.values()} <= set(PALETTE.values())
    assert styles["vit_p_1gf"]["linestyle"] == styles["vit_p_tiny"]["linestyle"] != styles["cnn_tiny"]["linestyle"]


@pytest.mark.slow
def test_every_figure_renders_with_its_numbers_and_states_the_metric(tmp_path):
    from hpstudy.analysis.figures import (
        delta_edf_figure,
        delta_error_vs_epochs_figure,
        delta_error_vs_epochs_table,
        error_vs_epochs_figure,
        error_vs_epochs_table,
        expected_best_figure,
        expected_best_table,
        hp_scatter_figure,
        hp_scatter_table,
        save_figure,
    )

    trials = make_trials(epochs=(5, 10, 20), n=12, ema=True)
    trials.loc[(trials["model"] == "vit_p_tiny") & (trials["epochs"] == 20), "status"] = "diverged"
    adamw_10 = trials[(trials["optimizer"] == "adamw") & (trials["epochs"] == 10)]  # the scatter's one cell
    ranges = {m: good_ranges(g) for m, g in adamw_10.groupby("model")}
    curves = expected_best_table(trials, n_boot=20)
    curves_fig = expected_best_figure(curves)
    scatter, epochs, gaps = (
        hp_scatter_table(adamw_10),
        error_vs_epochs_table(trials),
        delta_error_vs_epochs_table(trials),
    )
    figures = {
        "edf": (delta_edf_figure(edf_table(trials[trials["epochs"] == 10])), trials),
        "scatter": (hp_scatter_figure(scatter, ranges), scatter),
        "epochs": (error_vs_epochs_figure(epochs), epochs),
        "length": (delta_error_vs_epochs_figure(gaps), gaps),
        "best": (curves_fig, curves),
    }
    for name, (fig, data) in figures.items():
        assert fig.caption.endswith("Metric: paper = ema_best."), name
        paths = save_figure(fig, str(tmp_path), name, data, {"n": len(data), "reference": "min", "metric": "paper"})
        for ext in ("pdf", "svg", "png", "csv", "json"):
            assert os.path.getsize(paths[ext]) > 200, (name, ext)
        # the JSON and the CSV hold the numbers given (to 10 decimals and 6 digits), with the metric stated
        numbers = data.select_dtypes("number").columns
        meta, csv = json.load(open(paths["json"])), pd.read_csv(paths["csv"])
        np.testing.assert_allclose(
            pd.DataFrame(meta["data"])[numbers].to_numpy(float), data[numbers].to_numpy(float), rtol=1e-9, atol=1e-10
        )
        np.testing.assert_allclose(csv[numbers].to_numpy(float), data[numbers].to_numpy(float), rtol=1e-5)
        assert list(csv.columns) == meta["columns"] and set(csv["metric"]) == set(data.get("metric", ["paper"]))
        assert b"/FontType /Type3" not in open(paths["pdf"], "rb").read()  # Type-42, not Type-3
    assert set(curves["model"]) == {"vit_p_tiny", "vit_c_tiny", "cnn_tiny"}
    assert (
        curves.groupby(["model", "optimizer", "epochs"])["expected_best"].apply(lambda s: s.is_monotonic_decreasing)
    ).all()
    with pytest.raises(ValueError, match="meta must state the metric"):
        save_figure(curves_fig, str(tmp_path), "unstated", curves, {})


@pytest.mark.parametrize("extra", [0, 1])
def test_trial_points_beyond_raster_points_are_an_image_in_the_vector_files_and_the_rest_stays_vector(tmp_path, extra):
    """Both per-trial figures: at RASTER_POINTS trials every trial is a vector marker in the SVG and the PDF has no
    image; one more and the markers are one image per panel (axes, ticks and text still vector, fonts embedded)."""
    from hpstudy.analysis.figures import (
        RASTER_POINTS,
        generalization_figure,
        generalization_table,
        hp_scatter_figure,
        hp_scatter_table,
        save_figure,
    )

    n = RASTER_POINTS // 3 + extra  # three models in one cell: 3n trials, 1,998 or 2,001 at 2,000
    trials = make_trials(optimizers=("adamw",), n=n, diverge_share=0.0, seed=extra)
    trials["train_loss"] = np.random.default_rng(1).uniform(0.1, 2.0, len(trials))
    trials["family"] = trials["model"].map(lambda model: get_spec(model).family)
    ranges = {m: good_ranges(g) for m, g in trials.groupby("model")}
    for name, plot in {
        "scatter": hp_scatter_figure(hp_scatter_table(trials), ranges),
        "generalization": generalization_figure(generalization_table(trials)),
    }.items():
        dense = len(plot.data) > RASTER_POINTS
        assert dense == bool(extra) and len(plot.data) == 3 * n, name
        paths = save_figure(plot, str(tmp_path), name, plot.data, {"metric": "paper"})
        svg, pdf = open(paths["svg"]).read(), open(paths["pdf"], "rb").read()
        markers = len(re.findall(r"<use xlink:href=\"#m", svg))
        panels = sum(any(line.get_rasterized() for line in ax.lines) for ax in plot.fig.axes)
        if dense:
            assert svg.count("<image") == panels > 0 and b"/Subtype /Image" in pdf and markers < 100, name
        else:
            assert "<image" not in svg and b"/Subtype /Image" not in pdf and markers >= len(plot.data), name
        assert "<text" in svg or "<path" in svg  # the axes are drawn as vectors either way
        assert b"/FontType /Type3" not in pdf


def _fill_store(root, trials, expected):
    for row in trials.drop(columns="study").to_dict("records"):
        write_trial(root, "gen", stored_row(**row))
    write_spec_record(root, "gen", {"name": "gen", "samples": 12}, expected)


@pytest.mark.slow
def test_report_is_complete_reproducible_and_says_how_complete(tmp_path, monkeypatch):
    from hpstudy.analysis.report import build_report

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    store = str(tmp_path / "store")
    trials = make_trials(models=("vit_p_tiny", "vit_c_tiny"), epochs=(5, 10), n=10, fail_share=0.1, seed=7, ema=True)
    _fill_store(store, trials, expected=len(trials) + 20)  # a partial, still-running study
    first = build_report(*load_study(store, "gen"), str(tmp_path / "r1"))
    second = build_report(*load_study(store, "gen"), str(tmp_path / "r2"))
    html = open(first).read()
    finished = int(trials["status"].isin(["ok", "diverged"]).sum())
    assert f"{finished} of {len(trials) + 20} trials stored" in html
    for section in (
        "Δ-EDF",
        "Optimizers: AdamW vs SGD",
        "Training-length gap",
        "Good ranges",
        "Δ-EDF tests, pairs of models",
        "Trials left out",
        "EMA gain",
        "Spec",
        "<svg",
        "on the <b>paper = ema_best</b> error",
    ):
        assert section in html, section
    files = sorted(f for f in os.listdir(tmp_path / "r1") if f.endswith((".pdf", ".svg")))
    assert len(files) >= 16
    for name in files:
        assert open(tmp_path / "r1" / name, "rb").read() == open(tmp_path / "r2" / name, "rb").read(), name
    assert open(first).read() == open(second).read()
    report = json.load(open(tmp_path / "r1" / "report.json"))
    assert report["n_failed"] == int((trials["status"] == "failed").sum()) > 0
    assert report["metric"] == {
        "requested": "paper",
        "used": "paper = ema_best",
        "definition": "ema_best where EMA was on, else best (pycls's test_ema_epoch.min_top1_err)",
    }
    assert report["tables"]["ema_gain"] and all(r["gain_mean"] >= 0 for r in report["tables"]["ema_gain"])
    # the tables' numbers, against the trials (paper metric = best EMA error here), computed apart
    counted = trials[trials["status"] != "failed"]
    best = counted.groupby(["model", "optimizer", "epochs"])["best_ema_top1_err"].min()
    summary = pd.DataFrame(report["tables"]["summary"]).set_index(["model", "optimizer", "epochs"])
    np.testing.assert_allclose(summary["best"].sort_index(), best.sort_index())
    assert (summary["n"] + summary["n_left_out"]).sum() == len(trials)
    assert summary["failed"].sum() == (trials["status"] == "failed").sum()
    # the findings' tables: random lr/wd cells, so the estimates are differences of bests
    gaps = pd.DataFrame(report["tables"]["optimizer_gap"]).set_index(["model", "epochs"])["estimate"]
    expected_gaps = best.xs("sgd", level="optimizer") - best.xs("adamw", level="optimizer")
    np.testing.assert_allclose(gaps.sort_index(), expected_gaps.sort_index())
    lengths = pd.DataFrame(report["tables"]["length_gap"]).set_index(["model", "optimizer", "epochs"])["estimate"]
    expected_lengths = (best - best.xs(10, level="epochs")).loc[lengths.index]  # shortest against 10 epochs
    assert len(lengths) and (lengths.index.get_level_values("epochs") < 10).all()
    np.testing.assert_allclose(lengths.sort_index(), expected_lengths.sort_index())
    assert f"{best.min():.4g}" in html
    for name in files:  # every figure's numbers state the metric
        meta = json.load(open(tmp_path / "r1" / (name.rsplit(".", 1)[0] + ".json")))
        assert meta["metric"] == "paper = ema_best", name


def _one_trial_each(models):
    """One ok trial per model (AdamW, 10 epochs, one lr): the fewest rows that make a report."""
    return pd.DataFrame(
        [
            {
                "study": "gen",
                "trial_key": model,
                "model": model,
                "family": get_spec(model).family,
                "optimizer": "adamw",
                "epochs": 10,
                "lr": 1e-3,
                "wd": 0.05,
                "seed": 0,
                "status": "ok",
                "top1_err": 20.0 + i,
                "best_top1_err": 19.0 + i,
                "train_loss": 1.0 + i,
                "wall_s": 1.0,
            }
            for i, model in enumerate(models)
        ]
    )


@pytest.mark.parametrize("models, drawn", [(("vit_c_tiny", "vit_c_1gf"), False), (("vit_c_tiny", "cnn_tiny"), True)])
def test_the_generalization_figure_is_drawn_only_across_families(tmp_path, models, drawn):
    """CoAtNet's generalization-vs-capacity split compares families: one family alone has nothing to split.
    Drawn, it is on the requested metric (`final`: top1_err 20, 21; the default would be best_top1_err)."""
    from hpstudy.analysis.report import build_report

    build_report(_one_trial_each(models), pd.DataFrame(), None, str(tmp_path), metric="final")
    assert os.path.exists(tmp_path / "generalization.svg") == drawn
    assert ('<figure id="generalization">' in open(tmp_path / "index.html").read()) == drawn
    if drawn:
        trained = pd.read_csv(tmp_path / "generalization.csv")
        assert trained["error"].tolist() == [20.0, 21.0] and set(trained["metric"]) == {"final"}


# errors of two vit_p_tiny AdamW trials at 1 epoch (two lr/wd samples) and at 2 epochs (one lr/wd, two seeds)
TWO_LENGTHS = {1: [30.0, 34.0], 2: [25.0, 27.0]}


def _two_lengths() -> pd.DataFrame:
    """TWO_LENGTHS as trials: `final` (top1_err) as given, `paper` (best_top1_err) a point below it."""
    return pd.DataFrame(
        [
            {
                "study": "gen",
                "trial_key": f"{epochs}-{i}",
                "model": "vit_p_tiny",
                "family": "vit_p",
                "optimizer": "adamw",
                "epochs": epochs,
                "lr": 1e-3 * 10 ** (i if epochs == 1 else 0),
                "wd": 0.05,
                "seed": i,
                "status": "ok",
                "top1_err": err,
                "best_top1_err": err - 1,
                "wall_s": 1.0,
            }
            for epochs, errors in TWO_LENGTHS.items()
            for i, err in enumerate(errors)
        ]
    )


def test_a_report_draws_lr_wd_figures_of_sampled_cells_only_each_stating_its_cell_and_the_metric(tmp_path, monkeypatch):
    """Which figures a report makes and what each one's JSON says, on the requested metric (`final`, not
    the default); each figure is saved as a blank page here (how they look: test_figure_contract)."""
    from matplotlib.figure import Figure

    import hpstudy.analysis.report as report_module
    from hpstudy.analysis.figures import save_figure
    from hpstudy.analysis.report import build_report

    monkeypatch.setattr(report_module, "save_figure", lambda fig, *args: save_figure(Figure(figsize=(1, 1)), *args))
    page = open(build_report(_two_lengths(), pd.DataFrame(), None, str(tmp_path), metric="final")).read()
    assert re.findall(r'<figure id="([^"]+)">', page) == [
        "delta_edf_adamw_1ep",  # the sampled cell only (2 epochs ran one lr/wd), first: the main figure
        "error_vs_epochs",  # the lengths compared
        "delta_error_vs_epochs",
        "hp_scatter_adamw_1ep",  # the sampled fields, per (optimizer, epochs) cell
        "expected_best_adamw_1ep",
    ]
    assert "Every cell ran one lr/wd over seeds" not in page  # one of the two sampled lr/wd
    names = ("delta_edf_adamw_1ep", "hp_scatter_adamw_1ep", "expected_best_adamw_1ep")
    meta = {name: json.load(open(tmp_path / f"{name}.json")) for name in names}
    edf = meta["delta_edf_adamw_1ep"]
    assert (edf["optimizer"], edf["epochs"], edf["n_per_model"]) == ("adamw", 1, 2)
    assert edf["band"] == "DKW 95% simultaneous" and edf["metric"] == "final"
    assert [row["error"] for row in meta["hp_scatter_adamw_1ep"]["data"]] == TWO_LENGTHS[1]
    for name in names[1:]:  # the cell and its n per model, in the figure's JSON
        stated = (meta[name]["optimizer"], meta[name]["epochs"], meta[name]["n_per_model"])
        assert stated == ("adamw", 1, {"vit_p_tiny": 2})
    best = pd.read_csv(tmp_path / "error_vs_epochs.csv")  # the best of each cell's two errors
    assert best[["epochs", "error"]].values.tolist() == [[1, 30], [2, 25]] and set(best["metric"]) == {"final"}


@pytest.mark.parametrize("size", ["column", "text"])  # figures.SIZES
def test_a_figure_is_laid_out_for_its_pdf_and_saved_in_every_format_at_that_layout(tmp_path, size):
    """save_figure runs the figure's layout engine for the PDF only (with an engine, each savefig draws the
    figure once more to lay it out) and draws the SVG and PNG at the PDF's positions, which are those of the
    figure saved as a PDF alone; the figure keeps its engine (users save the Plot again)."""
    from hpstudy.analysis.figures import delta_edf_figure, save_figure

    table = edf_table(make_trials(n=8))
    plot, alone = delta_edf_figure(table, size=size), delta_edf_figure(table, size=size)
    engine, runs = plot.fig.get_layout_engine(), []
    execute = engine.execute
    engine.execute = lambda fig: (runs.append(fig), execute(fig))[1]
    paths = save_figure(plot, str(tmp_path), "d", table, {"metric": "paper"})
    assert len(runs) == 1 and set(paths) >= {"pdf", "svg", "png"}  # was once per format
    assert plot.fig.get_layout_engine() is engine
    alone.fig.savefig(tmp_path / "alone.pdf")
    assert [ax.get_position().bounds for ax in plot.fig.axes] == [ax.get_position().bounds for ax in alone.fig.axes]


def test_source_date_epoch_is_honoured(tmp_path, monkeypatch):
    from hpstudy.analysis.figures import delta_edf_figure, save_figure

    trials = make_trials(n=6)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    paths = save_figure(delta_edf_figure(edf_table(trials)), str(tmp_path), "d", trials, {"metric": "paper"})
    assert b"D:20231114" in open(paths["pdf"], "rb").read()


@pytest.mark.slow  # a whole report with every figure (~2 s)
def test_analysis_cli_report_and_query(tmp_path, capsys):
    store = str(tmp_path / "store")
    trials = make_trials(models=("vit_c_tiny",), optimizers=("adamw",), n=6, seed=1)
    _fill_store(store, trials, expected=6)
    assert (
        hpstudy_main(
            ["report", "--store", store, "--study", "gen", "--out", str(tmp_path / "rep"), "--metric", "final"]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().endswith("metric: final")
    summary = json.load(open(tmp_path / "rep" / "report.json"))["tables"]["summary"][0]
    assert summary["best"] == pytest.approx(trials["top1_err"].min()) and summary["metric"] == "final"
    assert hpstudy_main(["query", "--store", store, "top1_err < 100 and model == 'vit_c_tiny'"]) == 0
    out = capsys.readouterr().out
    assert "vit_c_tiny" in out and len(out.strip().splitlines()) >= 2
    assert hpstudy_main(["report", "--store", store, "--study", "nope"]) == 2
    assert "no trials of study 'nope'" in capsys.readouterr().err


def _write_old_store(root, trials):
    """Trial files as written before best_ema_top1_err existed (the old schema), EMA on."""
    old = pa.schema([f for f in TRIAL_SCHEMA if f.name != "best_ema_top1_err"])
    directory = os.path.join(root, "trials", "study=gen")
    os.makedirs(directory)
    for row in trials.drop(columns="study").to_dict("records"):
        row = stored_row(**row, ema_top1_err=row["best_top1_err"] - 0.5)
        row["finished_at"] = datetime.fromisoformat(row["finished_at"])
        pq.write_table(
            pa.Table.from_pylist([{f.name: row[f.name] for f in old}], schema=old),
            os.path.join(directory, f"{row['trial_key']}.parquet"),
        )
    return directory


@pytest.mark.slow  # a whole report (~1.2 s)
def test_a_store_written_before_best_ema_still_reports_and_says_which_metric(tmp_path, capsys):
    store = str(tmp_path / "store")
    trials = make_trials(models=("vit_c_tiny",), optimizers=("adamw",), n=6, seed=1, fail_share=0.2)
    directory = _write_old_store(store, trials)
    assert "best_ema_top1_err" not in pq.read_schema(os.path.join(directory, os.listdir(directory)[0])).names
    loaded = load_trials(store, "gen")
    assert loaded["best_ema_top1_err"].isna().all() and len(loaded) == len(trials)
    assert hpstudy_main(["report", "--store", store, "--study", "gen", "--out", str(tmp_path / "rep")]) == 0
    fallback = "paper = best (EMA ran but best_ema_top1_err is missing: a store written before that column existed)"
    assert f"metric: {fallback}" in capsys.readouterr().out
    assert json.load(open(tmp_path / "rep" / "report.json"))["metric"]["used"] == fallback
    assert fallback in open(tmp_path / "rep" / "index.html").read()
    summary = json.load(open(tmp_path / "rep" / "report.json"))["tables"]["summary"][0]
    counted = trials[trials["status"] != "failed"]
    assert summary["best"] == pytest.approx(counted["best_top1_err"].min()) and summary["metric"] == fallback
    assert summary["n_left_out"] == (trials["status"] == "failed").sum() > 0
    assert hpstudy_main(["report", "--store", store, "--study", "gen", "--metric", "ema_best"]) == 2
    assert "error: metric ema_best: no trial has a value" in capsys.readouterr().err


def _loop_bootstrap_band(errors, alpha=0.05, n_boot=1000, seed=0):
    """bootstrap_band as it was: one searchsorted per resample."""
    x, f = step_points(errors)
    draws = np.random.default_rng(seed).choice(errors, size=(n_boot, len(errors)), replace=True)
    draws.sort(axis=1)
    f_star = np.stack([np.searchsorted(d, x, side="right") for d in draws]) / len(errors)
    return float(np.quantile(np.abs(f_star - f).max(axis=1), 1 - alpha))


def _loop_expected_best_band(errors, ks, estimator, n_boot, seed=0, alpha=0.05):
    """expected_best_band as it was: one resample and one expected_best per bootstrap draw."""
    rng = np.random.default_rng(seed)
    curves = np.stack([expected_best(rng.choice(errors, len(errors)), ks, estimator) for _ in range(n_boot)])
    return np.quantile(curves, alpha / 2, axis=0), np.quantile(curves, 1 - alpha / 2, axis=0)


@pytest.mark.parametrize("n,seed,n_boot", [(1, 0, 50), (2, 3, 50), (7, 1, 300), (24, 2, 300), (60, 5, 1000)])
def test_the_vectorised_bootstrap_band_is_the_loops_band_for_the_same_seed(n, seed, n_boot):
    errors = np.round(np.random.default_rng(n).gamma(2.0, 3.0, n), 1)  # rounded: ties, as real errors have
    assert bootstrap_band(errors, n_boot=n_boot, seed=seed) == _loop_bootstrap_band(errors, n_boot=n_boot, seed=seed)
    assert bootstrap_band(errors, alpha=0.5, n_boot=n_boot, seed=seed) == _loop_bootstrap_band(
        errors, alpha=0.5, n_boot=n_boot, seed=seed
    )


@pytest.mark.parametrize("estimator", ["plugin", "unbiased"])
@pytest.mark.parametrize("n", [1, 5, 24, 64])
def test_the_vectorised_expected_best_band_draws_the_loops_resamples(estimator, n):
    """Same resamples in the same order; each curve value is then a sum of n products summed in another
    order, so the two differ by at most n float epsilons of the largest error (weights sum to 1)."""
    errors = 20 + np.random.default_rng(n).gamma(2.0, 3.0, n)
    ks = np.arange(1, n + 1)
    tol = n * np.finfo(float).eps * errors.max()
    for new, old in zip(
        expected_best_band(errors, ks, estimator, n_boot=200), _loop_expected_best_band(errors, ks, estimator, 200)
    ):
        np.testing.assert_allclose(new, old, rtol=0, atol=tol)
    if n > 1:  # another seed's resamples move the band by far more than that
        other = expected_best_band(errors, ks, estimator, n_boot=200, seed=1)[1]
        assert np.abs(other - _loop_expected_best_band(errors, ks, estimator, 200)[1]).max() > 1000 * tol


def test_the_expected_best_band_refuses_what_expected_best_refuses():
    with pytest.raises(StatsError, match="k must be in \\[1, 3\\]"):
        expected_best_band(np.array([1.0, 2.0, 3.0]), [4])
    with pytest.raises(StatsError, match="estimator: bad value 'mean'"):
        expected_best_band(np.array([1.0, 2.0]), [1], "mean")
