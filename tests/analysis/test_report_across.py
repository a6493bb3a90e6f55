"""One report over several studies (`hpstudy report --study A --study B`, report_across): the page, report.json
and the aggregate figure's CSV come from the same findings; the default folder is <store>/reports/<a>+<b>/;
bad studies are refused before anything is written."""

import html
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from hpstudy.cli import hpstudy_main
from tests.helpers import REPO, make_trials, pdf_text

STORE = os.path.join(REPO, "docs", "reproduction", "store")


def _tables():
    """Two studies of three models, distinct trials: two sources whose pairs share 4 cells."""
    one = make_trials(optimizers=("adamw", "sgd"), epochs=(6,), n=10, seed=0).assign(study="one")
    two = make_trials(optimizers=("adamw", "sgd"), epochs=(16,), n=10, seed=1).assign(study="two")
    return {"one": one, "two": two.assign(trial_key="two-" + two["trial_key"])}


def test_the_page_json_and_figure_data_are_the_families_findings(tmp_path):
    from hpstudy.analysis.findings import findings_across
    from hpstudy.analysis.report_across import build_across_report

    tables = _tables()
    page = build_across_report(tables, str(tmp_path / "r"))
    out = tmp_path / "r"
    report = json.loads((out / "report.json").read_text())
    found = findings_across(tables)
    assert [f["sentence"] for f in report["findings"]] == [f.sentence for f in found]
    assert report["family"]["tests"] == found[0].family and report["studies"] == ["one", "two"]
    aggregates = [f for f in found if f.kind == "aggregate"]
    assert len(aggregates) == 3  # three models: three pairs, each in 4 cells of 2 sources
    text = open(page).read()
    assert all(html.escape(f.sentence) in text for f in found)
    figure = pd.read_csv(out / "aggregate.csv")
    means = figure[figure["row"] == "all cells"]
    assert list(means["p_a_better"]) == pytest.approx([f.statistic for f in aggregates])
    assert list(means["low"]) == pytest.approx([f.test.ci[0] for f in aggregates])
    per_cell = figure[figure["row"] != "all cells"]
    expected = [c.p_a_better for f in aggregates for c in f.detail.cells]
    assert list(per_cell["p_a_better"]) == pytest.approx(expected)
    assert list(pd.DataFrame(report["tables"]["aggregate"])["p_a_better"]) == pytest.approx(figure["p_a_better"])
    caption = json.loads((out / "aggregate.json").read_text())["caption"]
    assert caption in (out / "captions.md").read_text() and "n = 10 trials per group and cell" in caption
    effects = pd.DataFrame(report["tables"]["effects"])
    assert set(effects["studies"]) == {"one", "two"} and np.isfinite(effects["p_a_better"]).all()
    smallest, width = pdf_text((out / "aggregate.pdf").read_bytes())
    assert smallest >= 7 and width == pytest.approx(7.0, abs=0.01)  # a page's text width, no type below 7 pt


def test_no_pair_in_two_cells_says_there_is_nothing_to_aggregate(tmp_path):
    from hpstudy.analysis.report_across import build_across_report

    one = make_trials(models=("vit_p_tiny", "vit_c_tiny"), optimizers=("adamw",), n=8, seed=2).assign(study="one")
    two = make_trials(models=("cnn_tiny",), optimizers=("sgd",), n=8, seed=3).assign(study="two")
    page = build_across_report({"one": one, "two": two.assign(trial_key="t" + two["trial_key"])}, str(tmp_path))
    assert "there is nothing to aggregate" in open(page).read()
    assert not os.path.exists(tmp_path / "aggregate.csv")


@pytest.mark.parametrize(
    "studies, message",
    [
        (["repro_digits_lr_wd", "a/b"], "--study: bad value 'a/b'"),
        (["repro_digits_lr_wd", "nope"], "--study: no trials of study 'nope'"),
    ],
)
def test_a_bad_study_among_several_exits_2_before_any_folder_is_made(tmp_path, capsys, studies, message):
    out = tmp_path / "out"
    argv = ["report", "--store", STORE, *[part for s in studies for part in ("--study", s)], "--out", str(out)]
    assert hpstudy_main(argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_studies_whose_joined_names_cannot_name_a_folder_exit_2_before_the_store_is_read(tmp_path, capsys):
    """Two names of 128 characters make a 257-byte folder name (<store>/reports/<a>+<b>/): refused first, not
    after the analysis; --out takes any folder."""
    names = ["a" * 128, "b" * 128]
    argv = ["report", "--store", str(tmp_path / "none"), "--study", names[0], "--study", names[1]]
    assert hpstudy_main(argv) == 2
    assert "--study: bad value, 2 studies whose names make a report folder name of 257 bytes" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("study", [5, [], ["ok", 3], None])
def test_the_api_names_a_bad_study_argument(tmp_path, study):
    import hpstudy
    from hpstudy.trainers.errors import HpstudyError

    with pytest.raises(HpstudyError, match="^study: bad value"):
        hpstudy.report(STORE, study, out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_hpstudy_report_over_two_studies_goes_to_the_store_by_default(tmp_path, capsys):
    """The reproduction's lr/wd and optimizer studies: two sources, three pairs of models across 12 cells each,
    in <store>/reports/<a>+<b>/ (names sorted); the API writes the same report."""
    import hpstudy

    store = str(tmp_path / "store")
    shutil.copytree(STORE, store)
    argv = ["report", "--store", store, "--study", "repro_digits_optimizer", "--study", "repro_digits_lr_wd"]
    assert hpstudy_main(argv) == 0
    folder = os.path.join(store, "reports", "repro_digits_lr_wd+repro_digits_optimizer")
    report = json.loads(open(os.path.join(folder, "report.json")).read())
    aggregates = [f for f in report["findings"] if f["kind"] == "aggregate"]
    assert len(aggregates) == 3 and all(len(f["detail"]["cells"]) == 12 for f in aggregates)
    assert report["sources"] == [["repro_digits_lr_wd"], ["repro_digits_optimizer"]]
    assert hpstudy.report(store, ["repro_digits_lr_wd", "repro_digits_optimizer"]) == folder
    again = json.loads(open(os.path.join(folder, "report.json")).read())
    assert [f["sentence"] for f in again["findings"]] == [f["sentence"] for f in report["findings"]]
