"""Hostile inputs on the way to a report: store files lacking a column, rows of an earlier spec,
report folders that cannot be written, and `python -m hpstudy.analysis` exiting as `hpstudy` does."""

import json
import os
from datetime import datetime

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpstudy.analysis.report_folder import ReportError, check_report_dir
from hpstudy.cli import hpstudy_main
from hpstudy.study.store.compaction import compact
from hpstudy.study.store.layout import REQUIRED, TABLES, write_trial
from hpstudy.study.store.read import load_epochs, load_study, load_trials, stored_keys
from hpstudy.study.store.spec_record import write_spec_record
from tests.helpers import epoch_row, stored_row

GOOD = ("a", "b", "c")


def complete_row(key: str) -> dict:
    """A stored ok trial with a value in every column a report reads."""
    return stored_row(
        trial_key=key,
        model="vit_p_tiny",
        family="vit_p",
        optimizer="adamw",
        epochs=1,
        lr=1e-3,
        wd=0.05,
        seed=0,
        status="ok",
        top1_err=10.0,
        train_loss=1.0,
        wall_s=1.0,
    )


def write_without(path, table: str, column: str, row: dict) -> None:
    """A file of `table` holding `row` without `column`, as a hand-made or foreign file may be."""
    schema = pa.schema([f for f in TABLES[table] if f.name != column])
    values = {k: datetime.fromisoformat(v) if k == "finished_at" else v for k, v in row.items() if k != column}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([values], schema=schema), path)


def store_with_incomplete_file(tmp_path, column: str) -> str:
    """A store with three complete trials of study s and trial x's file lacking `column`."""
    root = str(tmp_path / "store")
    for key in GOOD:
        write_trial(root, "s", complete_row(key), [epoch_row(epoch=1, top1_err=10.0)])
    write_without(tmp_path / "store/trials/study=s/x.parquet", "trials", column, complete_row("x"))
    return root


@pytest.mark.parametrize("column", REQUIRED["trials"])
def test_a_trial_file_lacking_a_column_is_skipped_naming_file_and_column(tmp_path, column):
    root = store_with_incomplete_file(tmp_path, column)
    named = rf"skipping unreadable file .*study=s/x\.parquet: missing column '{column}'"
    with pytest.warns(UserWarning, match=named) as caught:
        trials = load_trials(root, "s")
    assert sorted(trials["trial_key"]) == list(GOOD) and trials["model"].notna().all()
    assert len([w for w in caught if "x.parquet" in str(w.message)]) == 1
    with pytest.warns(UserWarning, match=named):  # what resume counts as stored
        assert stored_keys(root, "s") == set(GOOD)


def test_a_complete_store_reads_without_a_warning(tmp_path, recwarn):
    root = str(tmp_path / "store")
    for key in GOOD:
        write_trial(root, "s", complete_row(key))
    assert sorted(load_trials(root, "s", columns=["status"])["trial_key"]) == list(GOOD)
    assert not [w for w in recwarn if "hpstudy store" in str(w.message)]


def test_compact_quarantines_a_file_lacking_a_column_and_keeps_every_good_row(tmp_path):
    root = store_with_incomplete_file(tmp_path, "model")
    write_without(
        tmp_path / "store/epochs/study=s/y.parquet",
        "epochs",
        "epoch",
        epoch_row(trial_key="y", model="vit_p_tiny", optimizer="adamw", top1_err=1.0),
    )
    with pytest.warns(UserWarning, match="moved to"):
        counts = compact(root, "s")
    assert counts["trials"]["quarantined"] == counts["epochs"]["quarantined"] == 1
    assert counts["trials"]["merged_rows"] == counts["epochs"]["merged_rows"] == len(GOOD)
    quarantine = tmp_path / "store/quarantine"
    assert sorted(os.listdir(quarantine / "trials/study=s")) == ["x.parquet", "x.parquet.note.txt"]
    assert "missing column 'model'" in (quarantine / "trials/study=s/x.parquet.note.txt").read_text()
    assert "missing column 'epoch'" in (quarantine / "epochs/study=s/y.parquet.note.txt").read_text()
    assert pq.read_schema(quarantine / "trials/study=s/x.parquet").names == [
        n for n in TABLES["trials"].names if n != "model"
    ]  # kept as it was
    assert sorted(load_trials(root, "s")["trial_key"]) == list(GOOD)  # no warning left: nothing to skip
    assert sorted(load_epochs(root, "s")["trial_key"]) == list(GOOD)


def one_trial() -> pd.DataFrame:
    """One ok trial: the fewest rows that make a report (no figure to draw, so it is quick)."""
    return pd.DataFrame([dict(complete_row("a"), study="s")])


@pytest.mark.parametrize("earlier", [0, 3])
def test_the_report_says_how_many_rows_of_an_earlier_spec_it_left_out(tmp_path, earlier):
    from hpstudy.analysis.report import build_report

    record = {"spec": {"name": "s"}, "n_trials": 1, **({"earlier_spec_rows": earlier} if earlier else {})}
    page = build_report(one_trial(), pd.DataFrame(), record, str(tmp_path))
    sentence = f"{earlier} rows from an earlier spec of this study are not in these figures"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["earlier_spec_rows"] == earlier
    assert (sentence in report["completeness"]) == (sentence in open(page).read()) == bool(earlier)


def test_rows_of_an_earlier_spec_reach_the_report_as_a_count_through_load_study(tmp_path):
    from hpstudy.analysis.report import build_report

    root = str(tmp_path / "store")
    for key in GOOD:
        write_trial(root, "s", complete_row(key))
    write_spec_record(root, "s", {"name": "s"}, 1, trial_keys=["a"])
    with pytest.warns(UserWarning, match="2 rows from an earlier spec"):
        trials, epochs, record = load_study(root, "s")
    build_report(trials, epochs, record, str(tmp_path / "out"))
    report = json.loads((tmp_path / "out/report.json").read_text())
    assert report["earlier_spec_rows"] == 2 and report["n_finished"] == 1
    assert report["completeness"] == (
        "1 of 1 trials stored as ok/diverged (100%); 2 rows from an earlier spec of this study are not in these figures"
    )


# (report folder, given relative to a temporary folder holding a_file; what the error says)
BAD_FOLDERS = [
    ("a_file", "report folder: '{dir}/a_file' is a file; allowed: a folder that can be written"),
    ("a_file/sub", "report folder: cannot write '{dir}/a_file/sub' (Not a directory"),
    ("/proc/hpstudy-report", "report folder: cannot write '/proc/hpstudy-report' (No such file or directory"),
]


@pytest.mark.parametrize("folder,message", BAD_FOLDERS, ids=[f for f, _ in BAD_FOLDERS])
def test_a_report_folder_that_cannot_be_written_is_refused_naming_it(tmp_path, folder, message):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ReportError, match=r"^[^\n]*$") as raised:
        check_report_dir(str(tmp_path / folder))
    assert message.format(dir=tmp_path) in str(raised.value)
    assert (tmp_path / "a_file").read_text() == "x"


def test_check_report_dir_creates_the_folder_and_leaves_it_empty(tmp_path):
    check_report_dir(str(tmp_path / "new/report"), "--report")
    assert os.listdir(tmp_path / "new/report") == []
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ReportError, match=r"^--report: '.*a_file' is a file"):
        check_report_dir(str(tmp_path / "a_file"), "--report")


def store_for_report(tmp_path) -> str:
    """A store holding one trial of study s (of its recorded spec)."""
    root = str(tmp_path / "store")
    write_trial(root, "s", complete_row("a"))
    write_spec_record(root, "s", {"name": "s"}, 1, trial_keys=["a"])
    return root


# (argv after `report --study s`, exit code, stderr's first line); {dir}: a temporary folder holding
# a_file, a store with study s, and a store whose reports/ is a file (it cannot take the report)
EXIT_CASES = [
    (["--store", "{dir}/store", "--out", "{dir}/a_file"], 2, "error: --out: '{dir}/a_file' is a file"),
    (["--store", "{dir}/store", "--out", "{dir}/a_file/sub"], 2, "error: --out: cannot write '{dir}/a_file/sub'"),
    (["--store", "{dir}/store", "--study", "nope"], 2, "error: --study: no trials of study 'nope'"),
    (["--store", "{dir}/broken/store"], 3, "error: store: cannot write the report into {dir}/broken/store/reports/s "),
]


@pytest.mark.parametrize("extra,code,fragment", EXIT_CASES, ids=[f[7:45] for _, _, f in EXIT_CASES])
def test_hpstudy_report_exits_2_or_3_with_one_line(tmp_path, capsys, extra, code, fragment):
    (tmp_path / "a_file").write_text("x")
    store_for_report(tmp_path)
    (tmp_path / "broken").mkdir()
    store_for_report(tmp_path / "broken")
    (tmp_path / "broken/store/reports").write_text("not a folder")
    argv = ["report", "--study", "s", *[a.format(dir=tmp_path) for a in extra]]
    assert hpstudy_main(argv) == code
    err = capsys.readouterr().err
    assert err.startswith(fragment.format(dir=tmp_path)) and err.count("\n") == 1, err
    assert hpstudy_main(argv + ["--debug"]) == code
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.strip().splitlines()[-1].startswith("error: ")
