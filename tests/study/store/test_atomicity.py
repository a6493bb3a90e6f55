"""The store never loses what it held: a write that fails halfway leaves the old file readable (and
readers never see the half-written one), and a group's error keeps the rows it had already stored."""

import dataclasses
import json

import pyarrow.parquet as pq
import pytest

import hpstudy.study.store.layout
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import StoreFault, write_trial
from hpstudy.study.store.read import load_epochs, load_trials
from hpstudy.study.store.spec_record import load_spec_record, write_spec_record
from hpstudy.study.store.store import Store
from tests.helpers import epoch_row, small_spec, stored_row


def _row(key, err, status="ok"):
    return stored_row(trial_key=key, model="cnn_tiny", optimizer="adamw", status=status, top1_err=err)


def _files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("table", ["epochs", "trials"])
def test_a_trial_rewrite_that_fails_halfway_keeps_the_old_trial(table, tmp_path, monkeypatch):
    root = tmp_path / "store"
    write_trial(str(root), "s", _row("a", 12.0), [epoch_row(epoch=1, train_loss=2.0)])
    before = _files(root)
    original, seen = pq.write_table, []

    def write_half(data, out, **kwargs):
        """Half of a real Parquet file's bytes, then the error of a full disk."""
        whole = tmp_path / "whole.parquet"
        original(data, whole)
        out.write(whole.read_bytes()[: whole.stat().st_size // 2])
        seen.append(load_trials(str(root), "s")["top1_err"].tolist())
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hpstudy.study.store.layout.pq, "write_table", write_half)
    epochs = [epoch_row(epoch=1, train_loss=1.0)] if table == "epochs" else []
    with pytest.raises(StoreFault, match=f"cannot write .*{table}/study=s/a.parquet.*No space left"):
        write_trial(str(root), "s", _row("a", 5.0), epochs)
    monkeypatch.undo()
    assert seen == [[12.0]]  # mid-write, readers see the old row only
    assert _files(root) == before  # no temporary file left behind
    assert load_trials(str(root), "s")["top1_err"].tolist() == [12.0]
    assert load_epochs(str(root), "s")["train_loss"].tolist() == [2.0]


def test_a_spec_record_rewrite_that_fails_halfway_keeps_the_old_record(tmp_path, monkeypatch):
    root = str(tmp_path)
    write_spec_record(root, "s", {"samples": 4}, 8, ["k1", "k2"])
    written = []

    class HalfStream:
        """An output stream that takes half of what it is given, then fails."""

        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()

        def write(self, data):
            self.stream.write(data[: len(data) // 2])
            written.append(load_spec_record(root, "s"))
            raise OSError(5, "Input/output error")

    class HalfWritingFileSystem:
        """The store's filesystem, with output streams that fail halfway."""

        def __init__(self, fs):
            self.fs = fs

        def __getattr__(self, name):
            return getattr(self.fs, name)

        def open_output_stream(self, path, *args, **kwargs):
            return HalfStream(self.fs.open_output_stream(path, *args, **kwargs))

    store = Store.open(root)
    half_writing = dataclasses.replace(store, fs=HalfWritingFileSystem(store.fs))
    with pytest.raises(StoreFault, match="Input/output error"):
        write_spec_record(half_writing, "s", {"samples": 16}, 32, ["k1"])
    monkeypatch.undo()
    assert [r["n_trials"] for r in written] == [8]
    record = load_spec_record(root, "s")
    assert record == {"study": "s", "n_trials": 8, "spec": {"samples": 4}, "trial_keys": ["k1", "k2"]}
    assert _files(tmp_path) == ["specs/s.json"]
    assert json.loads((tmp_path / "specs/s.json").read_text())["n_trials"] == 8


class _Trial:
    """What StoreWriter reads of a Tune trial that errored: its config and its error file."""

    def __init__(self, group, error_file):
        self.config, self.error_file = {"group": group}, str(error_file)

    def get_error(self):
        return None


def test_a_group_error_after_its_rows_were_stored_keeps_them(tmp_path):
    """A fused group reports its rows, then its worker is lost before Tune hears it finished: Tune
    calls on_trial_error. (The race cannot be produced on demand under a real Ray: the callback is
    driven directly, with the real store.)"""
    from hpstudy.study.tune.store_writer import StoreWriter

    spec = parse_spec(small_spec(name="g", models=["cnn_tiny"], optimizers=["adamw"], samples=3))
    trials = expand(spec)
    keys = [t.key for t in trials]
    groups = [{"keys": keys[:2]}, {"keys": keys[2:]}]
    writer = StoreWriter(str(tmp_path), "g", trials, groups)
    rows = [dict(_row(k, 10.0 + i), epoch_log=[epoch_row(epoch=1, train_loss=1.0)]) for i, k in enumerate(keys[:2])]
    writer.on_trial_result(0, [], _Trial(0, ""), {"rows_json": json.dumps(rows, default=str)})
    error = tmp_path / "error.txt"
    error.write_text("worker lost")
    writer.on_trial_error(0, [], _Trial(0, error))
    writer.on_trial_error(0, [], _Trial(1, error))
    stored = load_trials(str(tmp_path), "g").set_index("trial_key")
    assert stored.loc[keys[0], ["status", "top1_err"]].tolist() == ["ok", 10.0]
    assert stored.loc[keys[1], ["status", "top1_err"]].tolist() == ["ok", 11.0]
    assert stored.loc[keys[2], "status"] == "failed" and stored.loc[keys[2], "error"] == "worker lost"
    assert writer.tally.statuses == {"ok": 2, "failed": 1} and writer.tally.keys == set(keys)
