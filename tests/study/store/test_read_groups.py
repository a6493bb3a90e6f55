"""The store's readers on partitions of many files, read GROUP_FILES at a time: whatever the group size,
the same rows as the rules say (one per trial, the newest; epochs from a trial's newest file), every
unreadable file skipped and named once, the study from the partition folder."""

import os
import tempfile
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyarrow.fs import LocalFileSystem

from hpstudy.study.store import read as store_read
from hpstudy.study.store.read import load_epochs, load_trials, stored_keys
from hpstudy.study.store.store import Store
from hpstudy.trainers.schema import EPOCH_SCHEMA, FINISHED, STATUSES, TRIAL_SCHEMA
from tests.helpers import epoch_row, row, write_file

START = datetime(2026, 12, 1, tzinfo=timezone.utc)
BAD = ("garbage", "truncated", "incomplete")  # what an unreadable file can be
GROUP_SIZES = (1, 3, 1000)
KEYS = [f"k{i}" for i in range(5)]

# a file: its study, its rows' (key, status) and whether it is readable or one kind of bad
files_strategy = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(STATUSES)), min_size=1, max_size=3),
        st.sampled_from(["good", "good", "good", *BAD]),
    ),
    max_size=12,
)


def _write(path: str, table: pa.Table, kind: str) -> None:
    """`table` as a Parquet file at `path`, or as a file of `kind` that cannot be read whole."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "incomplete":  # a file without a column every row needs, as another tool may write
        table = table.drop_columns(["status" if "status" in table.column_names else "epoch"])
    pq.write_table(table, path)
    if kind in ("garbage", "truncated"):
        data = open(path, "rb").read()
        with open(path, "wb") as out:
            out.write(b"not parquet" if kind == "garbage" else data[: len(data) // 2])


def _read_all(read, group: int):
    """`read()` with GROUP_FILES = group, and the files its warnings name: recorded where the reader warns, not
    with warnings.catch_warnings, whose filters and hook are the process's (another thread leaving its own
    catch_warnings would put them back mid-read)."""
    shown = []
    recorder = SimpleNamespace(warn=lambda message, *args, **kwargs: shown.append(str(message)))
    with mock.patch.object(store_read, "GROUP_FILES", group), mock.patch.object(store_read, "warnings", recorder):
        frame = read()
    named = [message.split("unreadable file ")[1].split(": ")[0] for message in shown]
    return frame, named


def _on_disk(root: str) -> str:
    """The files under `root` and their sizes, for a failure's message: what the reader was given."""
    found = [os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names]
    return ", ".join(f"{os.path.relpath(path, root)} ({os.path.getsize(path)} B)" for path in sorted(found))


@settings(max_examples=40)
@given(files=files_strategy, order=st.randoms(use_true_random=False))
def test_trials_are_the_newest_readable_row_of_each_trial_whatever_the_group_size(files, order):
    times = list(range(sum(len(rows) for _, rows, _ in files)))
    order.shuffle(times)  # the order rows were finished in is not the order of the files' names
    expected, bad, newest = {}, set(), {}
    with tempfile.TemporaryDirectory() as root:
        for i, (study, rows, kind) in enumerate(files):
            stamped = [(key, status, START + timedelta(seconds=times.pop())) for key, status in rows]
            path = f"{root}/trials/study={study}/f{i:02d}.parquet"
            table = pa.Table.from_pylist([dict(row(k, s), finished_at=t) for k, s, t in stamped], schema=TRIAL_SCHEMA)
            _write(path, table, kind)
            if kind != "good":
                bad.add(path)
                continue
            for key, status, when in stamped:
                if when > newest.get((study, key), START - timedelta(1)):
                    newest[study, key], expected[study, key] = when, status
        # every file written is there to read (a failure past this point is the reader's, not the disk's)
        assert len(store_read._list_files(LocalFileSystem(), f"{root}/trials")) == len(files), _on_disk(root)
        for group in GROUP_SIZES:
            frame, named = _read_all(lambda: load_trials(root), group)
            seen = f"group of {group}: read {len(frame)} rows, named {named}; on disk: {_on_disk(root)}"
            assert sorted(named) == sorted(bad), seen  # each unreadable file named, once
            assert dict(zip(zip(frame["study"], frame["trial_key"]), frame["status"])) == expected
            assert len(frame) == len(expected)
            assert dict(zip(zip(frame["study"], frame["trial_key"]), frame["finished_at"])) == newest
            for study in ("a", "b"):
                of_study = {key: status for (s, key), status in expected.items() if s == study}
                frame, _ = _read_all(lambda: load_trials(root, study, columns=["status"]), group)
                assert set(frame["study"]) <= {study}
                assert dict(zip(frame["trial_key"], frame["status"])) == of_study
                keys, _ = _read_all(lambda: stored_keys(root, study), group)
                assert keys == {key for key, status in of_study.items() if status in FINISHED}


@settings(max_examples=40)
@given(
    files=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from(["k0", "k1", "k2"]),
            st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True),
            st.sampled_from(["good", "good", "good", *BAD]),
        ),
        max_size=10,
    ),
    order=st.randoms(use_true_random=False),
)
def test_each_trials_epochs_come_from_its_newest_readable_file_whatever_the_group_size(files, order):
    ages = list(range(len(files)))
    order.shuffle(ages)  # which file is newest is not the order of the files' names
    newest, bad = {}, set()
    with tempfile.TemporaryDirectory() as root:
        for i, (study, key, epochs, kind) in enumerate(files):
            path = f"{root}/epochs/study={study}/f{i:02d}.parquet"
            rows = [epoch_row(trial_key=key, model="m", optimizer="o", epoch=e, train_loss=float(i)) for e in epochs]
            _write(path, pa.Table.from_pylist(rows, schema=EPOCH_SCHEMA), kind)
            mtime = 10**18 + ages[i] * 10**9
            os.utime(path, ns=(mtime, mtime))
            if kind != "good":
                bad.add(path)
            elif mtime > newest.get((study, key), (0,))[0]:
                newest[study, key] = (mtime, i, sorted(epochs))
        expected = sorted((s, k, e, float(i)) for (s, k), (_, i, epochs) in newest.items() for e in epochs)
        assert len(store_read._list_files(LocalFileSystem(), f"{root}/epochs")) == len(files), _on_disk(root)
        for group in GROUP_SIZES:
            frame, named = _read_all(lambda: load_epochs(root), group)
            seen = f"group of {group}: read {len(frame)} rows, named {named}; on disk: {_on_disk(root)}"
            assert sorted(named) == sorted(bad), seen
            got = zip(frame["study"], frame["trial_key"], frame["epoch"], frame["train_loss"])
            assert sorted(got) == expected
            assert store_read.FILE not in frame.columns


def _ends_early(stops_after: int, inside: bool):
    """pyarrow's `dataset` whose scans return the rows of at most `stops_after` of its files (never all) and, if
    `inside`, the first row of the next one (not its last), and no error: what pyarrow 18's scan can do when one
    file fails (CI's floors leg: a scan of 12 files returned 1 row)."""
    real_dataset = store_read.pads.dataset

    def dataset(files, schema, **kwargs):
        def to_table(columns, **scan):
            stop = min(stops_after, len(files) - 1)
            fields = [schema.field(c) if c in schema.names else pa.field(c, pa.string()) for c in columns]
            parts = [pa.schema(fields).empty_table()]
            if stop:
                parts.append(real_dataset(files[:stop], schema=schema, **kwargs).to_table(columns=columns, **scan))
            if inside:
                try:
                    parts.append(
                        real_dataset([files[stop]], schema=schema, **kwargs)
                        .to_table(columns=columns, batch_size=1, **scan)
                        .slice(0, 1)
                    )
                except pa.ArrowException:  # the bad file: nothing of it
                    pass
            return pa.concat_tables([part.cast(parts[0].schema) for part in parts])

        return SimpleNamespace(to_table=to_table)

    return mock.patch.object(store_read.pads, "dataset", dataset)


def _one_bad_among(root: str, n_files: int, bad_at: int, kind: str) -> str:
    """`n_files` two-row trial files of study s (trial keys k<i>a, k<i>b), the one at `bad_at` of `kind`; its path."""
    for i in range(n_files):
        rows = [dict(row(f"k{i}{half}"), finished_at=START) for half in "ab"]
        _write(
            f"{root}/trials/study=s/f{i}.parquet",
            pa.Table.from_pylist(rows, schema=TRIAL_SCHEMA),
            kind if i == bad_at else "good",
        )
    return f"{root}/trials/study=s/f{bad_at}.parquet"


def _keys_but(n_files: int, bad_at: int) -> list:
    return sorted(f"k{i}{half}" for i in range(n_files) if i != bad_at for half in "ab")


scan_ends_early = dict(
    n_files=st.integers(1, 8),
    bad_at=st.integers(0, 7),
    kind=st.sampled_from(BAD),
    stops_after=st.integers(0, 7),
    inside=st.booleans(),
    group=st.sampled_from(GROUP_SIZES),
)


@settings(max_examples=40)
@given(**scan_ends_early)
def test_a_scan_that_ends_early_without_raising_loses_no_row_and_names_the_bad_file(
    n_files, bad_at, kind, stops_after, inside, group
):
    """Wherever the scan stops, before a file or inside one, the readers return every readable row, in the order
    of the files, and name the bad file."""
    bad_at = min(bad_at, n_files - 1)
    with tempfile.TemporaryDirectory() as root:
        bad = _one_bad_among(root, n_files, bad_at, kind)
        with _ends_early(stops_after, inside):
            frame, named = _read_all(lambda: load_trials(root, "s"), group)
        assert named == [bad]
        assert list(frame["trial_key"]) == _keys_but(n_files, bad_at)  # equal finished_at: the files' order


@pytest.mark.filterwarnings("ignore:hpstudy store. unreadable file")  # the quarantine's: asserted on below
@settings(max_examples=40)
@given(**scan_ends_early)
def test_a_compaction_whose_scans_end_early_deletes_no_row_it_did_not_write(
    n_files, bad_at, kind, stops_after, inside, group
):
    """A compaction reads through the same scans, then deletes the files it merged: with scans that end early it
    still keeps every readable row and moves only the bad file to the quarantine."""
    from hpstudy.study.store.compaction import QUARANTINE, compact

    bad_at = min(bad_at, n_files - 1)
    with tempfile.TemporaryDirectory() as root:
        bad = _one_bad_among(root, n_files, bad_at, kind)
        with _ends_early(stops_after, inside), mock.patch.object(store_read, "GROUP_FILES", group):
            counts = compact(root, "s")
        assert counts["trials"]["quarantined"] == 1
        assert os.path.exists(f"{root}/{QUARANTINE}/{bad[len(root) + 1 :]}")
        assert sorted(load_trials(root, "s")["trial_key"]) == _keys_but(n_files, bad_at)


def test_a_file_without_rows_is_read_again_alone_not_its_whole_group(tmp_path, monkeypatch):
    """A scan returns no last row for a file without rows (another tool may write one): only that file is read
    again on its own, not the group."""
    folder = tmp_path / "trials/study=s"
    for i in range(5):
        write_file(folder / f"k{i}.parquet", [row(f"k{i}")], TRIAL_SCHEMA)
    pq.write_table(TRIAL_SCHEMA.empty_table(), folder / "empty.parquet")
    again = []
    real = store_read._read_files
    monkeypatch.setattr(
        store_read, "_read_files", lambda fs, d, files, *a: again.append(files) or real(fs, d, files, *a)
    )
    assert sorted(load_trials(str(tmp_path), "s")["trial_key"]) == [f"k{i}" for i in range(5)]
    assert again == [[str(folder / "empty.parquet")]]


@pytest.mark.parametrize("n_files,group", [(7, 3), (6, 3), (5, 1000), (1, 1)])
def test_a_partition_of_one_row_files_is_one_chunk_per_group_not_per_file(n_files, group, tmp_path, monkeypatch):
    folder = tmp_path / "trials/study=s"
    folder.mkdir(parents=True)
    for i in range(n_files):
        write_file(folder / f"k{i}.parquet", [row(f"k{i}")], TRIAL_SCHEMA)
    monkeypatch.setattr(store_read, "GROUP_FILES", group)
    store = Store.open(str(tmp_path))
    files = store_read._list_files(store.fs, f"{store.base}/trials")
    table = store_read._read_groups(store.fs, f"{store.base}/trials", files, "trials", None)
    assert table.num_rows == n_files and table.column("trial_key").num_chunks == -(-n_files // group)
    assert set(table.column("study").to_pylist()) == {"s"}


@pytest.mark.parametrize("columns", [None, ["status"], ["model", "top1_err"]])
def test_an_empty_partition_reads_as_no_rows_with_the_columns_asked_for(columns, tmp_path):
    (tmp_path / "trials/study=s").mkdir(parents=True)
    (tmp_path / "epochs/study=s").mkdir(parents=True)
    frame = load_trials(str(tmp_path), "s", columns=columns)
    assert frame.empty
    assert set(frame.columns) == {*(columns or TRIAL_SCHEMA.names), "study", "trial_key", "finished_at"}
    assert load_epochs(str(tmp_path), "s").empty


key_text = st.one_of(st.none(), st.text(max_size=6), st.sampled_from(KEYS), st.integers(), st.just("\ud800"))


@settings(max_examples=200)
@given(
    keys=st.lists(key_text, max_size=30),
    among=st.lists(st.text(max_size=6) | st.sampled_from(KEYS) | st.just("\ud800"), max_size=30),
    dtype=st.sampled_from(["object", "string[pyarrow]", "string[python]"]),
)
def test_keys_among_is_pandas_isin_for_any_keys_and_dtype(keys, among, dtype):
    """The hash lookup the readers use for trial keys says what `isin` says: unicode (a lone surrogate too), empty,
    repeated and missing keys, integers in an object column, every string dtype a frame can hold them in."""
    import numpy as np
    import pandas as pd

    if dtype != "object":
        keys = [k for k in keys if not isinstance(k, int)]  # a string dtype holds no integers
    if dtype == "string[pyarrow]":
        keys = [k for k in keys if k != "\ud800"]  # nor, in Arrow, a lone surrogate
    column = pd.Series(keys, dtype=dtype)
    expected = column.astype(object).isin(set(among)).to_numpy(bool)  # Arrow's isin cannot take a lone surrogate
    assert np.array_equal(store_read.keys_among(column, among), expected)
