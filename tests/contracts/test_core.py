"""Promises of the training/study core that the other tests left unchecked (found by mutation
testing, bench/mutation.sh): which device a trial picks, where its model lives and what a released
trainer frees (no GPU needed: the meta device stands in for an accelerator, spies for CUDA); and
what the store's readers, compaction and probe promise on hand-made stores with known answers."""

import os
import time

import pandas as pd
import pyarrow.fs as pafs
import pytest

from hpstudy.analysis.report_folder import publish
from hpstudy.study.store.compaction import compact
from hpstudy.study.store.layout import StoreError, StoreFault, delete_study, probe_store, write_trial
from hpstudy.study.store.read import load_epochs, load_study, load_trials
from hpstudy.study.store.spec_record import report_location
from hpstudy.study.store.store import Store
from hpstudy.trainers.schema import EPOCH_SCHEMA, TRIAL_SCHEMA
from tests.helpers import epoch_row, row, write_file
from tests.helpers import tiny_trainer as trainer


def test_auto_picks_cuda_when_present_and_named_devices_are_taken_as_named(monkeypatch):
    import torch

    from hpstudy.trainers.loop import resolve_device

    for present, expected in ((True, torch.device("cuda")), (False, torch.device("cpu"))):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: present)
        assert resolve_device("auto") == expected
        assert resolve_device("cpu") == torch.device("cpu") and resolve_device("cuda:1") == torch.device("cuda", 1)


def test_the_model_and_its_optimizer_live_on_the_trials_device(monkeypatch):
    """Whatever device the trial resolves to (meta here: any device but the CPU the model is built
    on), every parameter and buffer of the model, and so every parameter the optimizer steps, is on it."""
    import torch

    monkeypatch.setattr("hpstudy.trainers.loop.resolve_device", lambda name: torch.device("meta"))
    t = trainer(dtype="float64")
    assert t.device == torch.device("meta")
    tensors = [*t.model.parameters(), *t.model.buffers()]
    assert tensors and {x.device.type for x in tensors} == {"meta"}
    assert {p.dtype for p in t.model.parameters()} == {torch.float64}
    stepped = [p for group in t.optimizer.param_groups for p in group["params"]]
    assert stepped and {p.device.type for p in stepped} == {"meta"}


def test_release_empties_the_cuda_cache_on_cuda_devices_only(monkeypatch):
    """A reused Ray actor starts its next trial with the GPU memory of the last one given back:
    release() empties the CUDA cache once on a CUDA trainer, never on a CPU one."""
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty"))
    cpu = trainer()
    cpu.release()
    assert calls == [] and not hasattr(cpu, "model")
    cuda = trainer()
    cuda.device = torch.device("cuda")  # no GPU needed: release only reads the device's type
    cuda.release()
    assert calls == ["empty"] and not hasattr(cuda, "model") and not hasattr(cuda, "optimizer")


KEYS = ["study", "trial_key", "finished_at"]  # what load_trials adds to the columns asked for


def test_load_trials_reads_the_columns_asked_for_and_the_key_columns_only(tmp_path):
    root = str(tmp_path / "store")
    write_trial(root, "s", row("a", err=1.0))
    write_trial(root, "s", row("b", "failed", None))
    status = load_trials(root, "s", columns=["status"])
    assert list(status.columns) == ["status"] + KEYS
    assert sorted(zip(status["trial_key"], status["status"])) == [("a", "ok"), ("b", "failed")]
    with pytest.raises(StoreError, match=r"columns: unknown trials column 'nope'"):
        load_trials(root, "s", columns=["status", "nope"])


def test_a_store_with_unreadable_files_gives_the_readable_rows_and_the_columns_asked_for(tmp_path):
    """The reader falls back to file-by-file reading when a file is corrupt: the readable rows keep
    their study (from the partition folder); with no readable file left, the empty frame still has
    the columns asked for, as a healthy store's has."""
    root = str(tmp_path / "store")
    folder = tmp_path / "store/trials/study=s"
    folder.mkdir(parents=True)
    (folder / "a.parquet").write_bytes(b"PAR1 not a parquet file")
    with pytest.warns(UserWarning, match="skipping unreadable file .*a.parquet"):
        frame = load_trials(root, "s", columns=["status"])
    assert frame.empty and list(frame.columns) == ["status"] + KEYS
    write_trial(root, "s", row("b"))
    with pytest.warns(UserWarning, match="skipping unreadable file"):
        frame = load_trials(root)
    assert list(zip(frame["study"], frame["trial_key"])) == [("s", "b")]


def test_a_uri_root_keeps_its_path_but_the_trailing_slash(tmp_path):
    """Store.open strips the trailing slash of a URI's path, nothing else (a name may end in any
    character), and a trial written through the URI lands in that folder."""
    for name in ("storeX", "store_x", "s.t"):
        store = Store.open(f"file://{tmp_path}/{name}/")
        assert isinstance(store.fs, pafs.LocalFileSystem) and store.base == f"{tmp_path}/{name}"
    write_trial(f"file://{tmp_path}/storeX/", "s", row("a"))
    assert (tmp_path / "storeX/trials/study=s/a.parquet").exists()


def test_a_root_that_is_no_path_nor_known_uri_is_refused_with_what_is_allowed():
    with pytest.raises(
        StoreError,
        match=r"--store: bad value 'nosuch://x'; allowed: a local path or a "
        r"filesystem URI such as s3://bucket/prefix \(Unrecognized",
    ):
        Store.open("nosuch://x")


def test_a_report_written_through_a_uri_says_where_it_is_as_that_uri(tmp_path):
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "index.html").write_text("<html/>")
    fs, base, target, location = report_location(f"file://{tmp_path}/store/", "s")
    assert location == f"file://{tmp_path}/store/reports/s"
    publish(fs, target, str(folder), "report folder in the store", root=base)
    assert (tmp_path / "store/reports/s/index.html").read_text() == "<html/>"


def test_deleting_a_study_with_trials_but_no_epochs(tmp_path):
    """delete_study clears both tables' partitions, also when one of them was never written."""
    root = str(tmp_path / "store")
    write_trial(root, "s", row("a"))
    write_trial(root, "t", row("b"), [epoch_row(epoch=1, train_loss=1.0)])
    delete_study(root, "s")
    assert list(load_trials(root)["trial_key"]) == ["b"] and list(load_epochs(root)["trial_key"]) == ["b"]


def test_load_study_epochs_are_a_plain_table_like_load_epochs(tmp_path):
    root = str(tmp_path / "store")
    write_trial(root, "s", row("a"), [epoch_row(epoch=e, train_loss=1.0 / e) for e in (1, 2)])
    write_trial(root, "s", row("b"), [epoch_row(epoch=1, train_loss=3.0)])
    _, epochs, _ = load_study(root, "s")
    assert list(epochs.columns) == list(load_epochs(root, "s").columns)
    assert epochs.index.equals(pd.RangeIndex(3))


def test_every_reader_sees_one_row_per_trial_epoch_when_files_repeat_one(tmp_path):
    """An epoch stored twice with different numbers (two files, or twice in one file, as a crash or
    an older hpstudy may leave them) is one row for load_epochs, and one row after compaction."""
    root = tmp_path / "store"
    epochs = root / "epochs/study=s"
    write_trial(str(root), "s", row("a"))
    rows = lambda loss: [
        dict(epoch_row(epoch=e, train_loss=loss + e), trial_key="a", model="vit_p_tiny", optimizer="adamw")
        for e in (1, 2)
    ]
    write_file(epochs / "a.parquet", rows(1.0) + rows(5.0)[:1], EPOCH_SCHEMA)  # epoch 1 twice in one file
    write_file(epochs / "old.parquet", rows(9.0), EPOCH_SCHEMA)  # and again in an older file
    os.utime(epochs / "old.parquet", (time.time() - 3600, time.time() - 3600))
    loaded = load_epochs(str(root), "s")
    assert sorted(loaded["epoch"]) == [1, 2]
    compact(str(root), "s")
    on_disk = pd.read_parquet(epochs)
    assert sorted(on_disk["epoch"]) == [1, 2] and sorted(load_epochs(str(root), "s")["epoch"]) == [1, 2]


def test_compaction_keeps_the_newest_files_epochs_whatever_the_file_names(tmp_path):
    """Compaction ranks files by age, not by name: the epochs of a trial's newest file win, also
    when an older file's name sorts after it."""
    root = tmp_path / "store"
    for name, loss, age in (("zz-old", 9.0, 7200), ("aa-new", 1.0, 0)):
        rows = [dict(epoch_row(epoch=1, train_loss=loss), trial_key="k", model="vit_p_tiny", optimizer="adamw")]
        path = root / "epochs/study=s" / f"{name}.parquet"
        write_file(path, rows, EPOCH_SCHEMA)
        os.utime(path, (time.time() - age, time.time() - age))
    write_trial(str(root), "s", row("k"))
    compact(str(root), "s")
    assert load_epochs(str(root), "s")["train_loss"].tolist() == [1.0]
    assert pd.read_parquet(root / "epochs/study=s")["train_loss"].tolist() == [1.0]


def test_compaction_moves_an_unfinished_trials_row_to_its_own_file(tmp_path):
    """A failed trial's row kept in a shared file (as an older hpstudy wrote them) moves to
    <trial_key>.parquet in the partition, where a rerun replaces it; nothing is lost."""
    root = tmp_path / "store"
    folder = root / "trials/study=s"
    write_file(folder / "shared.parquet", [row("ok1", err=1.0), row("bad", "failed", None)], TRIAL_SCHEMA)
    compact(str(root), "s")
    assert (folder / "bad.parquet").exists() and not (folder / "shared.parquet").exists()
    assert sorted(zip(load_trials(str(root), "s")["trial_key"], load_trials(str(root), "s")["status"])) == [
        ("bad", "failed"),
        ("ok1", "ok"),
    ]


def test_the_probe_writes_bytes_so_a_full_disk_fails_it(tmpfs):
    """An empty file can still be made on a full disk: the probe must write data to find out that
    no trial can be stored, and leave nothing behind on a disk with room."""
    disk = tmpfs("64k")
    probe_store(str(disk))
    assert os.listdir(disk) == []
    with open(disk / "filler", "wb", buffering=0) as f:
        with pytest.raises(OSError, match="No space left on device"):
            while True:
                f.write(b"x" * 4096)
    with pytest.raises(StoreFault, match="No space left on device"):
        probe_store(str(disk))
    assert os.listdir(disk) == ["filler"]
