import json
import os

import matplotlib
import pytest

from analysis.__main__ import main as analysis_cli
from analysis.edf import edf_table
from analysis.figures import (delta_edf_figure, delta_error_vs_epochs_figure, error_vs_epochs_figure,
                              expected_best_figure, hp_scatter_figure, model_style, save_figure)
from analysis.gaps import length_gap
from analysis.report import build_report
from analysis.stats import good_ranges
from study.store import load_study, write_spec_record, write_trial
from tests.helpers import make_trials, stored_row


def test_importing_and_plotting_leave_global_rcparams_alone(tmp_path):
    before = dict(matplotlib.rcParams)
    trials = make_trials(n=8)
    save_figure(delta_edf_figure(edf_table(trials)), str(tmp_path), "x", trials.head(), {})
    assert dict(matplotlib.rcParams) == before


def test_model_styles_are_fixed_distinct_and_grayscale_safe():
    styles = {m: model_style(m) for m in ("vit_p_tiny", "vit_c_tiny", "cnn_tiny", "vit_p_1gf", "regnety_1gf")}
    assert model_style("vit_c_tiny") == styles["vit_c_tiny"]
    assert len({s["linestyle"] for s in styles.values()}) == 3       # one per family
    tiny = [styles[m]["color"] for m in ("vit_p_tiny", "vit_c_tiny", "cnn_tiny")]
    assert len(set(tiny)) == 3


def test_every_figure_renders_with_its_numbers(tmp_path):
    trials = make_trials(epochs=(5, 10, 20), n=12)
    trials.loc[(trials["model"] == "vit_p_tiny") & (trials["epochs"] == 20), "status"] = "diverged"
    ranges = {m: good_ranges(g) for m, g in trials[trials["optimizer"] == "adamw"].groupby("model")}
    curves_fig, curves = expected_best_figure(trials, n_boot=20)
    figures = {
        "edf": (delta_edf_figure(edf_table(trials[trials["epochs"] == 10])), trials),
        "scatter": (hp_scatter_figure(trials[trials["optimizer"] == "adamw"], ranges), trials),
        "epochs": (error_vs_epochs_figure(trials), trials),
        "length": (delta_error_vs_epochs_figure(length_gap(trials)), length_gap(trials)),
        "best": (curves_fig, curves),
    }
    for name, (fig, data) in figures.items():
        paths = save_figure(fig, str(tmp_path), name, data, {"n": len(data), "reference": "min"})
        for ext in ("pdf", "svg", "png", "csv", "json"):
            assert os.path.getsize(paths[ext]) > 200, (name, ext)
        meta = json.load(open(paths["json"]))
        assert meta["n"] == len(data) and len(meta["data"]) == len(data)
        assert b"/FontType /Type3" not in open(paths["pdf"], "rb").read()  # Type-42, not Type-3
    assert set(curves["model"]) == {"vit_p_tiny", "vit_c_tiny", "cnn_tiny"}
    assert (curves.groupby(["model", "optimizer"])["expected_best"].apply(lambda s: s.is_monotonic_decreasing)).all()


def _fill_store(root, trials, expected):
    for row in trials.drop(columns="study").to_dict("records"):
        write_trial(root, "gen", stored_row(**row))
    write_spec_record(root, "gen", {"name": "gen", "samples": 12}, expected)


@pytest.mark.slow
def test_report_is_complete_reproducible_and_says_how_complete(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    store = str(tmp_path / "store")
    trials = make_trials(models=("vit_p_tiny", "vit_c_tiny"), epochs=(5, 10), n=10, fail_share=0.1, seed=7)
    _fill_store(store, trials, expected=len(trials) + 20)   # a partial, still-running study
    first = build_report(*load_study(store, "gen"), str(tmp_path / "r1"))
    second = build_report(*load_study(store, "gen"), str(tmp_path / "r2"))
    html = open(first).read()
    finished = int(trials["status"].isin(["ok", "diverged"]).sum())
    assert f"{finished} of {len(trials) + 20} trials stored" in html
    for section in ("Δ-EDF", "Optimizer gap", "Training-length gap", "Good lr/wd ranges",
                    "Model comparisons", "Failed trials", "Spec", "<svg"):
        assert section in html, section
    files = sorted(f for f in os.listdir(tmp_path / "r1") if f.endswith((".pdf", ".svg")))
    assert len(files) >= 16
    for name in files:
        assert open(tmp_path / "r1" / name, "rb").read() == open(tmp_path / "r2" / name, "rb").read(), name
    assert open(first).read() == open(second).read()
    report = json.load(open(tmp_path / "r1" / "report.json"))
    assert report["n_failed"] == int((trials["status"] == "failed").sum()) > 0


def test_source_date_epoch_is_honoured(tmp_path, monkeypatch):
    trials = make_trials(n=6)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    paths = save_figure(delta_edf_figure(edf_table(trials)), str(tmp_path), "d", trials, {})
    assert b"D:20231114" in open(paths["pdf"], "rb").read()


def test_analysis_cli_report_and_query(tmp_path, capsys):
    store = str(tmp_path / "store")
    _fill_store(store, make_trials(models=("vit_c_tiny",), optimizers=("adamw",), n=6, seed=1), expected=6)
    assert analysis_cli(["report", "--store", store, "--study", "gen", "--out", str(tmp_path / "rep")]) == 0
    assert os.path.exists(tmp_path / "rep" / "index.html")
    assert analysis_cli(["query", "--store", store, "top1_err < 100 and model == 'vit_c_tiny'"]) == 0
    out = capsys.readouterr().out
    assert "vit_c_tiny" in out and len(out.strip().splitlines()) >= 2
    assert analysis_cli(["report", "--store", store, "--study", "nope"]) == 2
    assert "no trials of study 'nope'" in capsys.readouterr().err
