"""Compaction never loses or duplicates a row: not when it runs to the end, not when its process
is SIGKILLed at any point of it (while the merged file is being written, before any old file is
deleted, halfway through the deletions), and the readers a user has (load_trials, pandas, a
pyarrow dataset) give the same rows before and after."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pyarrow.dataset as pads
import pytest

from hpstudy.study.store.compaction import compact
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.study.store.store import Store
from tests.helpers import REPO, epoch_row, row


def _store(root: str) -> None:
    """12 trials: 9 ok/diverged with epochs, 2 failed, and one failed then rerun ok (two files over
    time for one key: the ok row must win)."""
    for i in range(9):
        write_trial(
            root,
            "s",
            row(f"t{i}", "diverged" if i == 4 else "ok", 10.0 + i),
            [epoch_row(epoch=e, train_loss=float(i * 10 + e)) for e in (1, 2)],
        )
    for i in (9, 10):
        write_trial(root, "s", row(f"t{i}", "failed", None))
    write_trial(root, "s", row("t11", "failed", None, when="2026-11-29T09:00:00+00:00"))
    write_trial(
        root, "s", row("t11", "ok", 3.0, when="2026-11-29T11:00:00+00:00"), [epoch_row(epoch=1, train_loss=0.5)]
    )


def _readers(root: str) -> dict:
    """What each reader a user has sees, in a comparable form."""
    by_key = lambda frame: frame.sort_values(["trial_key"] + (["epoch"] if "epoch" in frame else []), ignore_index=True)
    pandas_rows = pd.read_parquet(os.path.join(root, "trials"))
    dataset_rows = pads.dataset(os.path.join(root, "trials"), format="parquet", partitioning="hive").to_table()
    return {
        "load_trials": by_key(load_trials(root, "s")),
        "load_epochs": by_key(load_epochs(root, "s")),
        "pandas": by_key(pandas_rows.assign(study=pandas_rows["study"].astype(str))),
        "dataset_keys": sorted(dataset_rows.column("trial_key").to_pylist()),
    }


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(
        a[sorted(a.columns)], b[sorted(b.columns)], check_dtype=False, check_categorical=False
    )


def _parquet_files(root: str, table: str) -> list:
    folder = os.path.join(root, table, "study=s")
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def test_compaction_merges_finished_trials_into_one_file_and_every_reader_sees_the_same_rows(tmp_path):
    root = str(tmp_path / "store")
    _store(root)
    before = _readers(root)
    # a rerun of a key replaces its file: the raw readers see one row per key too
    assert len(before["pandas"]) == len(before["load_trials"]) == 12
    counts = compact(root, "s")
    assert counts["trials"]["merged_rows"] == 10 and counts["trials"]["unfinished"] == 2
    after = _readers(root)
    for reader in ("load_trials", "load_epochs", "pandas"):
        _same(after[reader], before[reader])
    assert after["dataset_keys"] == before["dataset_keys"]
    # the ten finished trials in one file, each failed trial in its own (a rerun replaces it)
    files = _parquet_files(root, "trials")
    assert len(files) == 3 and {"t9.parquet", "t10.parquet"} < set(files)
    assert len(_parquet_files(root, "epochs")) == 1
    assert compact(root, "s")["trials"]["deleted_files"] == 0  # compacting again changes nothing


_KILLER = textwrap.dedent("""
    import contextlib, os, signal, sys
    import pyarrow.parquet as pq
    import hpstudy.study.store.compaction as compaction
    point, nth = sys.argv[2], int(sys.argv[3])
    seen = {"delete": 0}
    real_io, real_write = compaction.store_io, pq.write_table

    @contextlib.contextmanager
    def store_io(what):
        if what.startswith("delete "):
            seen["delete"] += 1
            if point == "delete" and seen["delete"] == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        with real_io(what):
            yield

    def write_table(table, where, **kw):
        if point == "write":          # half of the merged file written, then killed
            where.write(b"PAR1" + b"x" * 100)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_write(table, where, **kw)

    real_rows = compaction._write_rows

    def write_rows(out, schema, tables):  # the merged file, streamed: half written, then killed
        if point == "write":
            out.write(b"PAR1" + b"x" * 100)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_rows(out, schema, tables)

    compaction.store_io, pq.write_table, compaction._write_rows = store_io, write_table, write_rows
    compaction.compact(sys.argv[1], "s")
""")


def _kill_compaction_then_compact(root: str, point: str, nth: int) -> None:
    """SIGKILL a compaction of `root` at `point`; right after it hpstudy's own readers see every row
    exactly once, and after the next compaction (every run starts with one) every reader sees the
    rows of before."""
    before = _readers(root)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLER, root, point, str(nth)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    mid = _readers(root)
    _same(mid["load_trials"], before["load_trials"])
    _same(mid["load_epochs"], before["load_epochs"])
    compact(root, "s")
    after = _readers(root)
    for reader in ("load_trials", "load_epochs", "pandas"):
        _same(after[reader], before[reader])
    assert after["dataset_keys"] == before["dataset_keys"]


# one kill point in the fast tier, the others (~0.8 s each) in the slow tier
@pytest.mark.parametrize(
    "point,nth",
    [
        pytest.param("write", 0, marks=pytest.mark.slow),
        pytest.param("delete", 1, marks=pytest.mark.slow),
        ("delete", 6),
        pytest.param("delete", 13, marks=pytest.mark.slow),
    ],
)
def test_a_compaction_killed_anywhere_loses_and_duplicates_nothing(tmp_path, point, nth):
    """SIGKILL while the merged file is written, before the first delete, halfway through the trial
    files' deletions and halfway through the epoch files' (trials are done first); the next
    compaction leaves one merged file per table."""
    root = str(tmp_path / "store")
    _store(root)
    _kill_compaction_then_compact(root, point, nth)
    assert len(_parquet_files(root, "trials")) == 3 and len(_parquet_files(root, "epochs")) == 1


@pytest.mark.parametrize(
    "point,nth",
    [
        ("write", 0),
        pytest.param("delete", 1, marks=pytest.mark.slow),
        pytest.param("delete", 2, marks=pytest.mark.slow),
        pytest.param("delete", 3, marks=pytest.mark.slow),
    ],
)
def test_a_compaction_killed_beside_an_earlier_merged_file_loses_and_duplicates_nothing(tmp_path, point, nth):
    """The same kills in a later compaction of a long run: an earlier merged file is left as it is,
    and the next compaction merges what the killed one left (its new merged file and the files it
    did not delete yet) into one."""
    root = str(tmp_path / "store")
    _store(root)
    compact(root, "s")
    earlier = {
        table: [name for name in _parquet_files(root, table) if name.startswith("compact-")]
        for table in ("trials", "epochs")
    }
    for i in (12, 13):
        write_trial(root, "s", row(f"t{i}", "ok", 20.0 + i), [epoch_row(epoch=1, train_loss=float(i))])
    _kill_compaction_then_compact(root, point, nth)
    for table, names in earlier.items():
        assert set(names) < set(_parquet_files(root, table))
    assert len(_parquet_files(root, "trials")) == 4 and len(_parquet_files(root, "epochs")) == 2


def test_a_stale_temporary_file_is_removed_and_a_fresh_one_is_left_to_its_writer(tmp_path):
    """A writer killed mid-write leaves a dot-prefixed temporary file (no reader lists it);
    compaction removes one older than an hour and leaves a younger one, which may be a live write."""
    root = str(tmp_path / "store")
    _store(root)
    folder = tmp_path / "store" / "trials" / "study=s"
    stale, fresh = folder / ".t0.parquet.tmp-old", folder / ".t1.parquet.tmp-new"
    stale.write_bytes(b"PAR1half")
    fresh.write_bytes(b"PAR1half")
    hours_ago = time.time() - 2 * 3600
    os.utime(stale, (hours_ago, hours_ago))
    compact(root, "s")
    assert not stale.exists() and fresh.exists()


def test_a_compaction_merges_only_what_was_stored_since_the_last_one(tmp_path):
    """A long run compacts every 1,000 trials: each compaction reads the files stored since the one
    before (not the study), leaves earlier merged files untouched, and the readers see every row once."""
    root = str(tmp_path / "store")
    _store(root)
    compact(root, "s")
    first = {
        name: os.stat(os.path.join(root, "trials/study=s", name)).st_mtime_ns
        for name in _parquet_files(root, "trials")
        if name.startswith("compact-")
    }
    for i in (12, 13):
        write_trial(root, "s", row(f"t{i}", "ok", 20.0 + i), [epoch_row(epoch=1, train_loss=float(i))])
    before = _readers(root)
    counts = compact(root, "s")
    # the two new trials and the two failed ones (kept apart) are read; the earlier merged file is not
    assert counts["trials"]["files"] == 4 and counts["trials"]["merged_rows"] == 2
    assert counts["trials"]["merged_files_kept"] == counts["epochs"]["merged_files_kept"] == 1
    for name, mtime in first.items():
        assert os.stat(os.path.join(root, "trials/study=s", name)).st_mtime_ns == mtime
    after = _readers(root)
    for reader in ("load_trials", "load_epochs", "pandas"):
        _same(after[reader], before[reader])
    assert len(_parquet_files(root, "trials")) == 4 and len(_parquet_files(root, "epochs")) == 2


def _compactions_at_once(root: str, k: int, *flags: str) -> list:
    """k `hpstudy compact` processes of study s started together: each one's (exit code, stderr)."""
    argv = [sys.executable, "-m", "hpstudy", "compact", "--store", root, "--study", "s", *flags]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [subprocess.Popen(argv, cwd=REPO, **pipes) for _ in range(k)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    return [(p.returncode, err) for p, err in zip(procs, errs)]


def _raw_keys(root: str) -> list:
    """Every trial_key row on disk, as pyarrow reads the files (duplicates included)."""
    store = Store.open(root)
    dataset = pads.dataset(f"{store.base}/trials", filesystem=store.fs, format="parquet", partitioning="hive")
    return dataset.to_table(columns=["trial_key"]).column("trial_key").to_pylist()


@pytest.mark.slow
@pytest.mark.parametrize("where,trials,rounds", [("local", 400, 2), ("s3", 30, 1)])  # moto: ~0.2 s a trial
@pytest.mark.parametrize("wait", [False, True])
def test_compactions_started_at_once_never_fail_nor_leave_a_row_twice(where, trials, rounds, wait, tmp_path, request):
    """Before the study's lease, two `hpstudy compact` at once deleted each other's inputs: one exited 3
    ("cannot delete" / "cannot read") and the partition kept a merged file's rows twice. Now one
    compacts and the others are refused naming it (exit 2), or with --wait compact after it."""
    root = str(tmp_path / "store") if where == "local" else request.getfixturevalue("s3_root")
    written = set()
    for round_ in range(rounds):
        for i in range(trials):
            key = f"r{round_}-t{i}"
            write_trial(root, "s", row(key, "ok", 10.0), [epoch_row(epoch=1, train_loss=1.0)])
            written.add(key)
        done = _compactions_at_once(root, 3, *(["--wait"] if wait else []))
        codes = sorted(code for code, _ in done)
        assert codes == ([0, 0, 0] if wait else [0, 2, 2]), done
        for code, err in done:
            if code == 2:
                line = err.strip()
                assert "\n" not in line and line.startswith("error: study 's' in ") and "or pass --wait" in line
        keys = _raw_keys(root)
        assert len(keys) == len(set(keys)) and set(keys) == written  # every row once, on disk
    assert sorted(load_trials(root, "s")["trial_key"]) == sorted(written)


@pytest.mark.parametrize("group", [1, 2, 5, 1000])
def test_compaction_in_groups_of_any_size_keeps_the_same_rows(group, tmp_path, monkeypatch):
    """It reads GROUP_FILES files per scan in both passes: a trial's rows split over groups (a failed row in one
    group, its rerun in another) are merged as from one read."""
    from hpstudy.study.store import read as store_read

    root = str(tmp_path / "store")
    _store(root)
    before = _readers(root)
    monkeypatch.setattr(store_read, "GROUP_FILES", group)
    counts = compact(root, "s")
    assert counts["trials"]["merged_rows"] == 10 and counts["trials"]["unfinished"] == 2
    after = _readers(root)
    for reader in ("load_trials", "load_epochs", "pandas"):
        _same(after[reader], before[reader])
