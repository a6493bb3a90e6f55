"""Report folders (issue 23): a report replaces or deletes only the files an earlier hpstudy report wrote
there, refuses a folder (or a file in it) that is not hpstudy's, and writes nothing through a symbolic
link out of the store; through the library, `hpstudy report` and `run --report`."""

import json
import os

import pyarrow.fs as pafs
import pytest

import hpstudy.analysis.report_folder as report_folder
from hpstudy.analysis.report_folder import MANIFEST, ReportError, owned, publish
from hpstudy.cli import hpstudy_main, run_edf_main
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.spec_record import write_spec_record
from tests.helpers import small_spec, stored_row, write_spec

LOCAL = pafs.LocalFileSystem()


def files(folder) -> dict:
    """{relative path: text} of every file below `folder` (links not followed)."""
    out = {}
    for directory, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(directory, name)
            out[os.path.relpath(path, folder)] = "<link>" if os.path.islink(path) else open(path).read()
    return out


def report(tmp_path, name: str, **contents) -> str:
    """A made report: a local folder holding `contents` ({file name: text})."""
    folder = tmp_path / name
    folder.mkdir()
    for file, text in contents.items():
        (folder / file).write_text(text)
    return str(folder)


def test_a_second_report_replaces_the_first_and_keeps_the_users_own_files(tmp_path):
    target = str(tmp_path / "out")
    publish(LOCAL, target, report(tmp_path, "r1", **{"index.html": "1", "old.svg": "1"}), "--out")
    assert json.loads(open(f"{target}/{MANIFEST}").read())["files"] == ["index.html", "old.svg"]
    (tmp_path / "out/notes.md").write_text("mine")
    publish(LOCAL, target, report(tmp_path, "r2", **{"index.html": "2", "new.svg": "2"}), "--out")
    assert {k: v for k, v in files(target).items() if k != MANIFEST} == {
        "index.html": "2",
        "new.svg": "2",
        "notes.md": "mine",
    }
    assert json.loads(open(f"{target}/{MANIFEST}").read())["files"] == ["index.html", "new.svg"]


@pytest.mark.parametrize("make", ["thesis", "empty_subfolder", "hidden_file"])
def test_a_folder_hpstudy_did_not_write_is_refused_and_left_as_it_is(tmp_path, make):
    target = tmp_path / "paper"
    target.mkdir()
    {
        "thesis": lambda: (target / "thesis.tex").write_text("years of work"),
        "empty_subfolder": lambda: (target / "sub").mkdir(),
        "hidden_file": lambda: (target / ".git").write_text("x"),
    }[make]()
    before = files(target), sorted(os.listdir(target))
    with pytest.raises(
        ReportError,
        match=r"^--out: '.*paper' holds files hpstudy did not write \(.*\); "
        r"allowed: a new or empty folder, or one holding an hpstudy report$",
    ):
        publish(LOCAL, str(target), report(tmp_path, "r", **{"index.html": "x"}), "--out")
    assert (files(target), sorted(os.listdir(target))) == before


def test_a_report_never_overwrites_a_file_its_manifest_does_not_list(tmp_path):
    target = str(tmp_path / "out")
    publish(LOCAL, target, report(tmp_path, "r1", **{"index.html": "1"}), "--out")
    (tmp_path / "out/figure.pdf").write_text("hand-made")
    with pytest.raises(ReportError, match=r"^--out: .*/out/figure.pdf was not written by hpstudy; allowed: "):
        publish(LOCAL, target, report(tmp_path, "r2", **{"index.html": "2", "figure.pdf": "2"}), "--out")
    assert files(target)["figure.pdf"] == "hand-made" and files(target)["index.html"] == "1"


def test_a_manifest_naming_paths_outside_its_folder_deletes_nothing_there(tmp_path):
    target = tmp_path / "out"
    publish(LOCAL, str(target), report(tmp_path, "r1", **{"index.html": "1"}), "--out")
    (tmp_path / "outside.txt").write_text("keep")
    (target / MANIFEST).write_text(json.dumps({"files": ["index.html", "../outside.txt", "/etc/hostname", 7]}))
    publish(LOCAL, str(target), report(tmp_path, "r2", **{"a.svg": "2"}), "--out")
    assert (tmp_path / "outside.txt").read_text() == "keep" and sorted(os.listdir(target)) == [MANIFEST, "a.svg"]


def test_a_damaged_manifest_is_named_and_nothing_is_deleted(tmp_path):
    target = tmp_path / "out"
    publish(LOCAL, str(target), report(tmp_path, "r1", **{"index.html": "1"}), "--out")
    (target / MANIFEST).write_text("{not json")
    with pytest.raises(ReportError, match=r"^--out: '.*\.hpstudy-report\.json' is not an hpstudy report manifest"):
        publish(LOCAL, str(target), report(tmp_path, "r2", **{"a.svg": "2"}), "--out")
    assert (target / "index.html").read_text() == "1"


def test_a_listed_file_that_became_a_link_is_left_and_its_target_untouched(tmp_path):
    target = tmp_path / "out"
    publish(LOCAL, str(target), report(tmp_path, "r1", **{"index.html": "1", "fig.pdf": "1"}), "--out")
    (tmp_path / "paper.pdf").write_text("hand-made")
    (target / "fig.pdf").unlink()
    (target / "fig.pdf").symlink_to(tmp_path / "paper.pdf")
    publish(LOCAL, str(target), report(tmp_path, "r2", **{"index.html": "2"}), "--out")
    assert (tmp_path / "paper.pdf").read_text() == "hand-made" and os.path.islink(target / "fig.pdf")
    (target / "index.html").unlink()
    (target / "index.html").symlink_to(tmp_path / "paper.pdf")  # hpstudy did not write the link
    with pytest.raises(ReportError, match=r"out/index.html was not written by hpstudy"):
        publish(LOCAL, str(target), report(tmp_path, "r3", **{"index.html": "3"}), "--out")
    assert (tmp_path / "paper.pdf").read_text() == "hand-made" and os.path.islink(target / "index.html")


@pytest.mark.parametrize("linked", ["reports", "reports/s"])
def test_a_link_out_of_the_store_is_refused_and_what_it_points_at_is_kept(tmp_path, linked):
    store, paper = tmp_path / "store", tmp_path / "paper"
    (paper / "s").mkdir(parents=True)
    for folder in (paper, paper / "s"):
        (folder / "figure.pdf").write_text("hand-made")
        (folder / "index.html").write_text("my page")
    (store / linked).parent.mkdir(parents=True, exist_ok=True)
    (store / linked).symlink_to(paper if linked == "reports" else paper / "s")
    before = files(paper)
    with pytest.raises(
        ReportError,
        match=rf"^store report: '{store}/{linked}' is a symbolic link; allowed: a "
        r"folder inside the store",
    ):
        publish(
            LOCAL, f"{store}/reports/s", report(tmp_path, "r", **{"index.html": "x"}), "store report", root=str(store)
        )
    assert files(paper) == before


def test_a_report_written_before_manifests_is_replaced_and_a_users_file_beside_it_kept(tmp_path):
    target = tmp_path / "old"
    target.mkdir()
    (target / "report.json").write_text(json.dumps({"study": "s", "edf_convention": "x", "findings": []}))
    for name in ("index.html", "hp_scatter_sgd.pdf", "delta_edf_adamw_6ep.png", "delta_edf_final.pdf", "notes.md"):
        (target / name).write_text("old")
    assert owned(LOCAL, str(target), "--out") == {
        "report.json",
        "index.html",
        "hp_scatter_sgd.pdf",
        "delta_edf_adamw_6ep.png",
    }
    publish(LOCAL, str(target), report(tmp_path, "r", **{"index.html": "new", "report.json": "{}"}), "--out")
    assert sorted(os.listdir(target)) == [MANIFEST, "delta_edf_final.pdf", "index.html", "notes.md", "report.json"]
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake/index.html").write_text("mine")
    (tmp_path / "fake/report.json").write_text(json.dumps({"mine": 1}))
    with pytest.raises(ReportError, match="holds files hpstudy did not write"):
        owned(LOCAL, str(tmp_path / "fake"), "--out")


def test_a_publish_killed_part_way_leaves_every_written_file_listed(tmp_path, monkeypatch):
    target = str(tmp_path / "out")
    publish(LOCAL, target, report(tmp_path, "r1", **{"a.svg": "1"}), "--out")
    real_write, calls = report_folder._write, []

    def dying_write(fs, folder, name, data):
        calls.append(name)
        if len(calls) == 3:  # the manifest, b.svg, then killed before c.svg
            raise KeyboardInterrupt
        real_write(fs, folder, name, data)

    monkeypatch.setattr(report_folder, "_write", dying_write)
    with pytest.raises(KeyboardInterrupt):
        publish(LOCAL, target, report(tmp_path, "r2", **{"b.svg": "2", "c.svg": "2"}), "--out")
    monkeypatch.undo()
    assert owned(LOCAL, target, "--out") == {"a.svg", "b.svg"}
    publish(LOCAL, target, report(tmp_path, "r3", **{"d.svg": "3"}), "--out")
    assert sorted(os.listdir(target)) == [MANIFEST, "d.svg"]


def store_with_one_trial(tmp_path) -> str:
    root = str(tmp_path / "store")
    write_trial(
        root,
        "s",
        stored_row(
            trial_key="a",
            model="cnn_tiny",
            optimizer="adamw",
            epochs=1,
            lr=1e-3,
            wd=0.1,
            status="ok",
            top1_err=10.0,
            seed=0,
        ),
    )
    write_spec_record(root, "s", {"name": "s"}, 1, trial_keys=["a"])
    return root


@pytest.mark.parametrize("where", ["store", "out", "cwd"])
def test_hpstudy_report_refuses_a_folder_with_a_users_files_with_one_line(tmp_path, capsys, monkeypatch, where):
    root = store_with_one_trial(tmp_path)
    folder = {"store": tmp_path / "store/reports/s", "out": tmp_path / "paper", "cwd": tmp_path / "work"}[where]
    folder.mkdir(parents=True)
    (folder / "notes.md").write_text("mine")
    monkeypatch.chdir(tmp_path / "work" if where == "cwd" else tmp_path)
    argv = ["report", "--store", root, "--study", "s"] + {
        "store": [],
        "out": ["--out", str(folder)],
        "cwd": ["--out", "."],
    }[where]
    assert hpstudy_main(argv) == 2
    err = capsys.readouterr().err
    flag = "report folder in the store" if where == "store" else "--out"
    assert err.startswith(f"error: {flag}: ") and "holds files hpstudy did not write ('notes.md')" in err
    assert err.count("\n") == 1 and os.listdir(folder) == ["notes.md"]
    (folder / "notes.md").unlink()  # an empty folder is fine
    assert hpstudy_main(argv) == 0 and {"index.html", MANIFEST} <= set(os.listdir(folder))


def test_a_run_refuses_a_report_folder_that_is_not_hpstudys_before_any_trial(tmp_path, capsys):
    spec = write_spec(tmp_path, small_spec(name="rf"))
    paper = tmp_path / "paper"
    paper.mkdir()
    (paper / "thesis.tex").write_text("x")
    (tmp_path / "store/reports/rf").mkdir(parents=True)
    (tmp_path / "store/reports/rf/notes.md").write_text("mine")
    for extra, flag in (([], "report folder in the store"), (["--report", str(paper)], "--report")):
        assert run_edf_main(["--config", spec, "--store", str(tmp_path / "store"), *extra]) == 2
        assert capsys.readouterr().err.startswith(f"error: {flag}: ")
    assert not (tmp_path / "store/trials").exists()


def _manifest_link_to_zero(target):
    (target / MANIFEST).symlink_to("/dev/zero")


def _manifest_fifo(target):
    os.mkfifo(target / MANIFEST)


def _manifest_folder(target):
    (target / MANIFEST).mkdir()


def _manifest_nested(target):
    (target / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)


def _manifest_huge(target):
    (target / MANIFEST).write_text(json.dumps({"files": ["a"] * 300_000}))


@pytest.mark.parametrize(
    "damage",
    [_manifest_link_to_zero, _manifest_fifo, _manifest_folder, _manifest_nested, _manifest_huge],
    ids=lambda f: f.__name__[10:],
)
def test_a_manifest_that_is_no_small_regular_file_is_refused_at_once(tmp_path, damage):
    target = tmp_path / "out"
    target.mkdir()
    (target / "index.html").write_text("mine")
    damage(target)
    with pytest.raises(
        ReportError,
        match=r"^--out: '.*\.hpstudy-report\.json' is not an hpstudy report manifest "
        r"\((not a regular file|larger than 1048576 bytes|nested too deeply)\)",
    ):
        publish(LOCAL, str(target), report(tmp_path, "r", **{"index.html": "x"}), "--out")
    assert (target / "index.html").read_text() == "mine"


def test_a_listed_folder_is_left_and_does_not_jam_later_reports(tmp_path):
    target = tmp_path / "out"
    publish(LOCAL, str(target), report(tmp_path, "r1", **{"index.html": "1"}), "--out")
    (target / "sub").mkdir()
    (target / "sub/data.csv").write_text("1")
    (target / MANIFEST).write_text(json.dumps({"files": ["index.html", "sub"]}))
    for n in (2, 3):
        publish(LOCAL, str(target), report(tmp_path, f"r{n}", **{"index.html": str(n)}), "--out")
    assert (target / "sub/data.csv").read_text() == "1" and (target / "index.html").read_text() == "3"


@pytest.mark.parametrize("flag", ["--out", "--report"])
def test_a_report_folder_given_as_a_uri_is_refused_not_written_locally(tmp_path, capsys, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    root = store_with_one_trial(tmp_path)
    if flag == "--out":
        code = hpstudy_main(["report", "--store", root, "--study", "s", "--out", "s3://bucket/reports/x"])
    else:
        code = run_edf_main(
            [
                "--config",
                write_spec(tmp_path, small_spec(name="u")),
                "--store",
                root,
                "--report",
                "s3://bucket/reports/x",
            ]
        )
    assert code == 2
    assert capsys.readouterr().err.startswith(
        f"error: {flag}: 's3://bucket/reports/x' is a URI; allowed: a local folder"
    )
    assert not (tmp_path / "s3:").exists()
