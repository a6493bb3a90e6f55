"""Hostile store: corrupt files, duplicate rows, full and read-only disks, unsafe names, rows of an
earlier spec. On real files (and on small tmpfs mounts where this process may mount them)."""

import os
import subprocess
import warnings

import pandas as pd
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from hpstudy.cli import hpstudy_main
from hpstudy.study.store.compaction import compact
from hpstudy.study.store.layout import StoreError, StoreFault, probe_store, write_trial
from hpstudy.study.store.read import load_epochs, load_study, load_trials
from hpstudy.study.store.spec_record import load_spec_record, write_spec_record
from hpstudy.trainers.schema import EPOCH_SCHEMA, TRIAL_SCHEMA
from tests.helpers import epoch_row, row, write_file


def at(hour: int) -> str:
    return f"2026-11-29T{hour:02d}:00:00+00:00"


def readers(root: str, study: str = "s") -> dict:
    """(trial_key, status, top1_err) rows as pandas, pyarrow.dataset and load_trials see them."""
    path = f"{root}/trials/study={study}"
    pick = lambda f: sorted(zip(f["trial_key"], f["status"], f["top1_err"].fillna(-1)))
    return {
        "pandas": pick(pd.read_parquet(path)),
        "pyarrow.dataset": pick(pads.dataset(path, format="parquet").to_table().to_pandas()),
        "load_trials": pick(load_trials(root, study)),
    }


def files(folder) -> list:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_compact_moves_unreadable_files_to_quarantine_and_deletes_only_what_it_merged(tmp_path):
    root = str(tmp_path)
    for key in "abc":
        write_trial(root, "s", row(key), [epoch_row(epoch=1, train_loss=1.0)])
    trials = tmp_path / "trials/study=s"
    good = (trials / "b.parquet").read_bytes()
    (trials / "b.parquet").write_bytes(good[: len(good) // 2])
    (trials / "zz.parquet").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="moved to"):
        counts = compact(root, "s")
    assert counts["trials"] == {
        "files": 2,
        "merged_rows": 2,
        "unfinished": 0,
        "dropped_rows": 0,
        "deleted_files": 2,
        "merged_files_kept": 0,
        "quarantined": 2,
    }
    # the unreadable files are kept, byte for byte, with a note saying why
    quarantine = tmp_path / "quarantine/trials/study=s"
    assert (quarantine / "b.parquet").read_bytes() == good[: len(good) // 2]
    assert files(quarantine) == ["b.parquet", "b.parquet.note.txt", "zz.parquet", "zz.parquet.note.txt"]
    assert "b.parquet: unreadable, moved here by hpstudy compact" in (quarantine / "b.parquet.note.txt").read_text()
    # b's epochs were readable but b is not stored as finished: its epoch file stays as it was
    assert "b.parquet" in files(tmp_path / "epochs/study=s")
    assert counts["epochs"]["merged_rows"] == 2 and counts["epochs"]["unfinished"] == 1
    assert [k for k, _, _ in readers(root)["pandas"]] == ["a", "c"]
    assert len(set(map(str, readers(root).values()))) == 1


def test_a_corrupt_merged_file_goes_to_quarantine_and_the_next_trials_still_merge(tmp_path):
    root = str(tmp_path)
    write_trial(root, "s", row("a"), [epoch_row(epoch=1, train_loss=1.0)])
    compact(root, "s")
    merged = next((tmp_path / "trials/study=s").glob("compact-*.parquet"))
    merged.write_bytes(merged.read_bytes()[:40])  # truncated on disk
    write_trial(root, "s", row("b"), [epoch_row(epoch=1, train_loss=1.0)])
    with pytest.warns(UserWarning, match="moved to"):
        counts = compact(root, "s")
    assert counts["trials"]["quarantined"] == 1 and counts["trials"]["merged_rows"] == 1
    assert files(tmp_path / "quarantine/trials/study=s") == [merged.name, merged.name + ".note.txt"]
    assert [k for k, _, _ in readers(root)["pandas"]] == ["b"]


def test_a_failed_then_compacted_then_retried_trial_is_one_row_for_every_reader(tmp_path):
    root = str(tmp_path)
    write_trial(root, "s", row("k0", "failed", None, when=at(9)))
    for key in ("k1", "k2"):
        write_trial(root, "s", row(key, when=at(9)))
    counts = compact(root, "s")["trials"]
    assert (counts["merged_rows"], counts["unfinished"]) == (2, 1)
    assert files(tmp_path / "trials/study=s")[1:] == ["k0.parquet"]  # beside one compact-*.parquet
    write_trial(root, "s", row("k0", "ok", 4.0, when=at(11)))  # the rerun retries it
    seen = readers(root)
    assert seen["pandas"] == [("k0", "ok", 4.0), ("k1", "ok", 10.0), ("k2", "ok", 10.0)]
    assert seen["pandas"] == seen["pyarrow.dataset"] == seen["load_trials"]
    compact(root, "s")  # k0's rerun replaced its failed row: merged beside the earlier merged file
    assert [name.startswith("compact-") for name in files(tmp_path / "trials/study=s")] == [True, True]
    assert readers(root)["pandas"] == seen["pandas"]


def test_compaction_keeps_one_row_per_trial_key_finished_first_then_newest(tmp_path):
    root, part = str(tmp_path), tmp_path / "trials/study=s"
    # an old compacted file holding everything, duplicates included, as compaction used to write
    write_file(
        part / "compact-old.parquet",
        [
            row("k0", "ok", 5.0, when=at(9)),
            row("k0", "failed", None, when=at(10)),  # ok beats a newer failure
            row("k1", "ok", 7.0, when=at(9)),
            row("k1", "ok", 6.0, when=at(10)),  # the newest ok wins
            row("k2", "failed", None, when=at(9)),
        ],
        TRIAL_SCHEMA,
    )
    write_trial(root, "s", row("k2", "failed", None, when=at(12)))
    write_file(
        tmp_path / "epochs/study=s/compact-old.parquet",
        [dict(epoch_row(epoch=e, train_loss=9.0), trial_key="k1", model="m", optimizer="o") for e in (1, 2)],
        EPOCH_SCHEMA,
    )
    write_file(
        tmp_path / "epochs/study=s/k1.parquet",  # a newer file of k1's epochs wins whole
        [dict(epoch_row(epoch=1, train_loss=1.0), trial_key="k1", model="m", optimizer="o")],
        EPOCH_SCHEMA,
    )
    os.utime(tmp_path / "epochs/study=s/compact-old.parquet", (1, 1))
    os.utime(part / "compact-old.parquet", (1, 1))
    counts = compact(root, "s")
    assert counts["trials"]["dropped_rows"] == 3 and counts["trials"]["unfinished"] == 1
    assert readers(root)["pandas"] == [("k0", "ok", 5.0), ("k1", "ok", 6.0), ("k2", "failed", -1)]
    assert len(set(map(str, readers(root).values()))) == 1
    assert "k2.parquet" in files(part) and "compact-old.parquet" not in files(part)
    assert pq.read_table(part / "k2.parquet").column("finished_at")[0].as_py().hour == 12
    assert load_epochs(root, "s")[["epoch", "train_loss"]].values.tolist() == [[1, 1.0]]
    assert [name.startswith("compact-") for name in files(tmp_path / "epochs/study=s")] == [True]


def test_compacting_a_compacted_study_changes_nothing(tmp_path):
    root = str(tmp_path)
    for key in ("a", "b"):
        write_trial(root, "s", row(key), [epoch_row(epoch=1, train_loss=1.0)])
    write_trial(root, "s", row("c", "failed", None))
    compact(root, "s")
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.parquet")}
    counts = compact(root, "s")
    assert counts["trials"]["deleted_files"] == counts["epochs"]["deleted_files"] == 0
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.parquet")} == before


@pytest.mark.parametrize(
    "call",
    [
        lambda root: write_trial(root, "..", row("a")),
        lambda root: load_trials(root, "../x"),
        lambda root: compact(root, ".."),
        lambda root: load_spec_record(root, "../../etc/passwd"),
        lambda root: write_spec_record(root, "a/b", {}, 0),
    ],
)
def test_unsafe_study_names_are_refused_by_every_store_function(call, tmp_path):
    with pytest.raises(StoreError, match="--study: bad value .*; allowed: 1 to 128 letters"):
        call(str(tmp_path / "store"))
    assert not (tmp_path / "store").exists()


def _stored_with_an_earlier_spec(root):
    """Rows a, b of the recorded spec and c of an earlier one; epochs of a and c."""
    for key in "abc":
        write_trial(
            root,
            "s",
            row(key, err={"a": 1.0, "b": 2.0, "c": 3.0}[key]),
            [epoch_row(epoch=1, train_loss=1.0)] if key != "b" else (),
        )
    write_spec_record(root, "s", {"name": "s"}, 2, ["a", "b"])


def test_load_study_covers_the_recorded_spec_and_counts_earlier_rows_apart(tmp_path):
    root = str(tmp_path)
    _stored_with_an_earlier_spec(root)
    with pytest.warns(UserWarning, match="1 rows from an earlier spec of study 's' are not in these figures"):
        trials, epochs, record = load_study(root, "s")
    assert sorted(trials["trial_key"]) == ["a", "b"] and epochs["trial_key"].tolist() == ["a"]
    assert record["earlier_spec_rows"] == 1 and record["n_trials"] == 2
    # a spec none of whose trials is stored yet has nothing to report
    write_spec_record(root, "s", {"name": "s"}, 1, ["z"])
    with pytest.raises(StoreError, match="none of the 3 stored trials of study 's'"):
        load_study(root, "s")
    # a record written before trial keys were kept cannot tell: every row counts
    write_spec_record(root, "s", {"name": "s"}, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(load_study(root, "s")[0]["trial_key"]) == ["a", "b", "c"]


def test_status_counts_the_recorded_spec_and_lists_earlier_rows_separately(tmp_path, capsys):
    root = str(tmp_path)
    _stored_with_an_earlier_spec(root)
    assert hpstudy_main(["status", "--store", root, "--study", "s"]) == 0
    current, earlier = capsys.readouterr().out.split("1 rows from an earlier spec of study 's'")
    assert "2/2 trials of the spec stored as ok/diverged" in current
    assert "vit_p_tiny         2     2" in current and "1.00     1.50" in current  # n 2; best 1, median 1.5
    assert "vit_p_tiny         1     1" in earlier and "3.00" in earlier


def test_a_full_disk_stops_writes_with_the_path_and_leaves_no_temporary_file(tmpfs):
    disk = tmpfs("24k")
    root = str(disk / "store")
    stored = []
    with pytest.raises(StoreFault) as info:
        for i in range(20):
            write_trial(root, "s", row(f"k{i}"), [epoch_row(epoch=1, train_loss=1.0)])
            stored.append(f"k{i}")
    assert 1 <= len(stored) < 20
    assert f"cannot write {root}/" in str(info.value) and "No space left on device" in str(info.value)
    assert not [p for p in disk.rglob("*") if ".tmp-" in p.name]
    assert sorted(load_trials(root, "s")["trial_key"]) == stored  # what was stored stays whole
    with pytest.raises(StoreFault, match="No space left on device"):
        compact(root, "s")  # cannot write its merged file ...
    assert sorted(load_trials(root, "s")["trial_key"]) == stored  # ... so it deleted nothing
    assert not [p for p in disk.rglob("*") if ".tmp-" in p.name]
    subprocess.run(["mount", "-o", "remount,size=1m", str(disk)], check=True)
    write_trial(root, "s", row("again"))  # freed: writes work again
    assert len(load_trials(root, "s")) == len(stored) + 1


def test_a_read_only_store_fails_the_probe(tmpfs):
    disk = tmpfs("64k", "ro")
    with pytest.raises(StoreFault, match=f"cannot write {disk}/.*Read-only file system"):
        probe_store(str(disk))
    with pytest.raises(StoreFault, match="cannot write /proc/hpstudy/"):
        probe_store("/proc/hpstudy")
    probe_store(str(disk.parent / "writable"))  # a writable one passes ...
    assert os.listdir(disk.parent / "writable") == []  # ... and keeps nothing


@pytest.mark.slow
def test_an_unreachable_s3_store_stops_before_any_trial(tmp_path, capsys, monkeypatch):
    from hpstudy.cli import run_edf_main
    from tests.helpers import free_port, spec_text

    for name, value in {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    store = f"s3://nobucket/x?endpoint_override=127.0.0.1:{free_port()}&scheme=http&region=us-east-1"
    config = tmp_path / "h.yaml"
    config.write_text(spec_text())
    assert run_edf_main(["--config", str(config), "--store", store]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: store: cannot write nobucket/x/.probe-") and "Could not connect" in err
    assert store in err and "no trial was run" in err and "Traceback" not in err
