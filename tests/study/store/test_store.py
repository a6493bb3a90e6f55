import pandas as pd
import pyarrow.parquet as pq
import pytest

from hpstudy.study.store.compaction import compact
from hpstudy.study.store.layout import StoreError, write_trial
from hpstudy.study.store.read import load_epochs, load_trials, stored_keys
from hpstudy.study.store.store import Store
from hpstudy.trainers.errors import SchemaError
from hpstudy.trainers.schema import EPOCH_SCHEMA, TRIAL_SCHEMA
from tests.helpers import epoch_row, row


def test_layout_and_pandas_reads_the_hive_tree(tmp_path):
    root = str(tmp_path / "store")
    write_trial(root, "s1", row("a"), [epoch_row(epoch=1, train_loss=2.0), epoch_row(epoch=2, train_loss=1.0)])
    write_trial(root, "s1", row("b", "diverged", 90.0))
    write_trial(root, "s2", row("c", "failed", None))
    assert sorted(p.name for p in (tmp_path / "store/trials/study=s1").iterdir()) == ["a.parquet", "b.parquet"]
    assert (tmp_path / "store/epochs/study=s1/a.parquet").exists()
    frame = pd.read_parquet(root + "/trials")
    assert sorted(zip(frame["study"].astype(str), frame["trial_key"])) == [("s1", "a"), ("s1", "b"), ("s2", "c")]
    # one explicit schema: ok, diverged and failed rows concatenate with the same columns and types
    assert pq.read_schema(tmp_path / "store/trials/study=s2/c.parquet") == TRIAL_SCHEMA
    assert pq.read_schema(tmp_path / "store/epochs/study=s1/a.parquet") == EPOCH_SCHEMA
    trials = load_trials(root)
    assert list(trials.columns) == TRIAL_SCHEMA.names + ["study"]
    assert load_trials(root, "s1")["trial_key"].tolist() == ["a", "b"]
    epochs = load_epochs(root, "s1")
    assert epochs["epoch"].tolist() == [1, 2] and set(epochs["model"]) == {"vit_p_tiny"}
    assert stored_keys(root, "s1") == {"a", "b"} and stored_keys(root, "s2") == set()


def test_rewrite_replaces_and_no_temp_files_remain(tmp_path):
    root = str(tmp_path)
    write_trial(root, "s", row("a", "failed", None))
    write_trial(root, "s", row("a", "ok", 5.0, when="2026-11-29T11:00:00+00:00"))
    assert load_trials(root)["status"].tolist() == ["ok"]
    assert [p.name for p in (tmp_path / "trials/study=s").iterdir()] == ["a.parquet"]


def test_corrupt_and_truncated_files_are_skipped_with_a_warning(tmp_path):
    root = str(tmp_path)
    for key in "abc":
        write_trial(root, "s", row(key))
    good = (tmp_path / "trials/study=s/b.parquet").read_bytes()
    (tmp_path / "trials/study=s/b.parquet").write_bytes(good[: len(good) // 2])
    (tmp_path / "trials/study=s/zz.parquet").write_bytes(b"garbage")
    with pytest.warns(UserWarning) as record:
        frame = load_trials(root)
    assert sorted(frame["trial_key"]) == ["a", "c"]
    messages = " ".join(str(w.message) for w in record)
    assert "b.parquet" in messages and "zz.parquet" in messages
    # a half-written temporary file (dot-prefixed) is invisible to readers
    (tmp_path / "trials/study=s/.d.parquet.tmp-1").write_bytes(good[:10])
    (tmp_path / "trials/study=s/b.parquet").unlink()
    (tmp_path / "trials/study=s/zz.parquet").unlink()
    assert sorted(load_trials(root)["trial_key"]) == ["a", "c"]
    assert sorted(pd.read_parquet(root + "/trials")["trial_key"]) == ["a", "c"]


def test_compact_keeps_what_readers_see(tmp_path):
    root = str(tmp_path)
    for i in range(6):
        write_trial(root, "s", row(f"k{i}", err=float(i)), [epoch_row(epoch=1, train_loss=float(i))])
    write_trial(root, "other", row("x"))
    before, before_epochs = load_trials(root), load_epochs(root)
    counts = compact(root, "s")
    assert {t: (c["files"], c["merged_rows"], c["deleted_files"]) for t, c in counts.items()} == {
        "trials": (6, 6, 6),
        "epochs": (6, 6, 6),
    }
    assert len(list((tmp_path / "trials/study=s").iterdir())) == 1
    after = load_trials(root)
    key = ["study", "trial_key"]
    pd.testing.assert_frame_equal(
        before.sort_values(key).reset_index(drop=True), after.sort_values(key).reset_index(drop=True)
    )
    assert len(load_epochs(root)) == len(before_epochs)
    assert len(pd.read_parquet(root + "/trials")) == 7
    # a trial stored after compaction (e.g. a failed one retried) supersedes the compacted row
    write_trial(root, "s", row("k0", err=0.5, when="2026-11-29T12:00:00+00:00"))
    assert load_trials(root, "s").set_index("trial_key").loc["k0", "top1_err"] == 0.5


@pytest.mark.slow
def test_s3_store_round_trip(s3_root):
    write_trial(s3_root, "s", row("a"), [epoch_row(epoch=1, train_loss=1.0)])
    write_trial(s3_root, "s", row("b", "diverged", 90.0))
    trials = load_trials(s3_root)
    assert sorted(trials["trial_key"]) == ["a", "b"] and set(trials["study"]) == {"s"}
    assert load_epochs(s3_root, "s")["train_loss"].tolist() == [1.0]
    assert stored_keys(s3_root, "s") == {"a", "b"}
    assert compact(s3_root, "s")["trials"]["merged_rows"] == 2
    assert sorted(load_trials(s3_root)["trial_key"]) == ["a", "b"]


@pytest.mark.parametrize(
    "change,message",
    [
        ({"top1_error": 1.0}, "trial row: unknown key 'top1_error'"),
        ({"drop": "wall_s"}, "trial row: missing key 'wall_s'"),
    ],
)
def test_a_row_with_an_unknown_or_missing_key_is_refused_naming_it(change, message, tmp_path):
    bad = row("a")
    bad.pop(change.pop("drop", None), None)
    bad.update(change)
    with pytest.raises(SchemaError, match=message):
        write_trial(str(tmp_path), "s", bad)
    with pytest.raises(SchemaError, match="epoch row: unknown key 'loss'"):
        write_trial(str(tmp_path), "s", row("b"), [dict(epoch_row(epoch=1), loss=1.0)])
    assert not (tmp_path / "trials").exists()  # nothing half-stored


@pytest.mark.parametrize("bad", [None, b"results", 3, 1.5, ["results"]])
def test_a_store_that_is_no_text_is_refused_naming_the_field_by_every_entry(bad, tmp_path):
    """Every store function takes an open Store or a URI: anything else is one StoreError naming the field,
    never a folder named after its repr (`./None`)."""
    calls = [
        lambda: Store.open(bad),
        lambda: Store.of(bad),
        lambda: load_trials(bad),
        lambda: write_trial(bad, "s", row("a")),
        lambda: compact(bad, "s"),
        lambda: stored_keys(bad, "s"),
    ]
    for call in calls:
        with pytest.raises(StoreError, match=r"^--store: bad value .*; allowed: a path or URI of UTF-8 text$"):
            call()
    assert not any(tmp_path.iterdir())


def test_an_open_store_is_the_same_object_through_every_function_and_reads_what_its_uri_reads(tmp_path):
    root = str(tmp_path / "store")
    store = Store.open(root)
    assert Store.of(store) is store and str(store) == root and store.base == root
    store.write_trial("s", row("a"), [epoch_row(epoch=0)])
    write_trial(root, "s", row("b"))
    assert sorted(store.load_trials("s")["trial_key"]) == sorted(load_trials(root, "s")["trial_key"]) == ["a", "b"]
    assert store.studies() == ["s"] and store.stored_keys("s") == stored_keys(root, "s") == {"a", "b"}
    assert list(store.load_epochs("s")["trial_key"]) == ["a"]
    store.write_trial("t", row("c"), [epoch_row(epoch=0), epoch_row(epoch=1)])  # another study's rows
    assert list(store.load_epochs("s")["trial_key"]) == ["a"] and len(store.load_epochs()) == 3
    store.delete_study("t")
    assert store.studies() == ["s"] and list(store.load_epochs()["trial_key"]) == ["a"]
