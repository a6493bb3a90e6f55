"""run_edf.py and hpstudy command lines that need no Ray: dry runs, bad flags, status, compact."""

import json
import os
import shutil
import socket
from types import SimpleNamespace

import pandas as pd
import pyarrow.fs as pafs
import pytest
import yaml

from hpstudy.analysis.report_folder import ReportError, publish
from hpstudy.cli import hpstudy_main, run_edf_main
from hpstudy.commands import fetch_hint, print_summary, run_exit_code
from hpstudy.service import RunSettings, check_before_trials, check_settings, check_store_report_dir, spec_change_note
from hpstudy.study.sampling import expand
from hpstudy.study.spec import SpecError, parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.read import load_trials
from hpstudy.study.store.spec_record import report_location, write_spec_record
from hpstudy.study.store.store import Store
from tests.helpers import image_folder, make_trials, small_spec, stored_row, write_spec


def test_dry_run_prints_the_plan(tmp_path, capsys):
    config = write_spec(tmp_path, small_spec(name="plan"))
    assert run_edf_main(["--config", config, "--store", str(tmp_path / "s"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "study plan: 12 trials, 12 to run" in out
    assert "vit_c_tiny     adamw" in out and "[0.0005, 0.005]" in out and "trial-hours" in out
    assert not (tmp_path / "s").exists()  # a dry run writes nothing


def test_a_dry_run_warns_of_what_a_run_would_refuse_and_prints_the_memory_plan(tmp_path, capsys):
    """No dataset and too few CPUs here: a run stops, the dry run says so and plans anyway."""
    raw = small_spec(
        name="far",
        dataset={"name": "imagefolder", "path": str(tmp_path / "imagenet"), "image_size": 16},
        resources={"cpu": 64, "gpu": 1},
    )
    raw["recipe"] = {k: v for k, v in raw["recipe"].items() if k != "device"}
    config = write_spec(tmp_path, raw)
    argv = ["--config", config, "--store", str(tmp_path / "s"), "--num-cpus", "2"]
    assert run_edf_main(argv + ["--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"warning: dataset.path: dataset 'imagefolder': path '{tmp_path / 'imagenet'}' does not exist or "
        f"is not a folder; expected train/<class>/*.JPEG and val/<class>/*.JPEG (ImageNet layout) (a run "
        f"stops here; the dry run's plan does not need it)"
    )
    assert out[1].startswith("warning: resources.cpu: bad value 64; allowed: <= 2")
    assert out[2].startswith("study far: 12 trials") and "memory per trial (estimate; budget 40.0 GB" in "\n".join(out)
    assert [line.split()[0] for line in out[-2:]] == ["vit_c_tiny", "cnn_tiny"]
    assert run_edf_main(argv) == 2  # the run itself refuses, naming the path
    assert "error: dataset.path: dataset 'imagefolder'" in capsys.readouterr().err


@pytest.mark.slow
def test_the_paper_spec_plans_without_imagenet(capsys):
    """README: `run_edf.py --config paper_lr_wd --dry-run` prints the memory plan on any machine."""
    assert run_edf_main(["--config", "paper_lr_wd", "--dry-run", "--store", "/nonexistent-hpstudy-store"]) == 0
    out = capsys.readouterr().out
    assert ("warning: dataset.path: dataset 'imagefolder': path '/data/imagenet'" in out) == (
        not os.path.isdir("/data/imagenet")
    )
    assert "study paper_lr_wd: 1152 trials" in out and out.count("batch 2048 / accum_steps 8") == 9


def test_bundled_default_dry_run(capsys):
    assert run_edf_main(["--dry-run", "--store", "/nonexistent-hpstudy-store"]) == 0
    assert "study demo_digits: 32 trials" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--max-concurrent", "0"], "--max-concurrent: bad value 0; allowed: an integer >= 1"),
        (["--config", "/no/such.yaml"], "--config: '/no/such.yaml' is not a file"),
        (["--num-cpus", "-1"], "--num-cpus: bad value -1"),
    ],
)
def test_bad_flags_fail_before_anything_runs(argv, message, capsys):
    assert run_edf_main(argv + ["--dry-run"]) == 2
    assert message in capsys.readouterr().err


SETTING_EDGES = {  # field -> (the smallest value allowed, the largest refused)
    "max_concurrent": (1, 0),
    "num_cpus": (1, 0),
    "compact_every": (0, -1),
    "progress_interval": (1e-9, 0.0),
}


@pytest.mark.parametrize("field", sorted(SETTING_EDGES))
def test_each_run_setting_takes_its_smallest_allowed_value_and_refuses_the_next_below(field, tmp_path):
    allowed, refused = SETTING_EDGES[field]
    check_settings(RunSettings(store=str(tmp_path), **{field: allowed}))
    with pytest.raises(SpecError, match=rf"^--{field.replace('_', '-')}: bad value {refused}; allowed: "):
        check_settings(RunSettings(store=str(tmp_path), **{field: refused}))


def test_store_that_is_a_file_is_rejected(tmp_path, capsys):
    store = tmp_path / "file"
    store.write_text("x")
    assert run_edf_main(["--store", str(store), "--dry-run"]) == 2
    assert "--store" in capsys.readouterr().err


def test_hpstudy_status_and_compact(tmp_path, capsys):
    store = str(tmp_path)
    for i, status in enumerate(["ok", "ok", "diverged", "failed"]):
        write_trial(
            store,
            "s",
            stored_row(
                trial_key=f"k{i}",
                model="cnn_tiny",
                optimizer="sgd",
                status=status,
                top1_err=None if status == "failed" else 10.0 + i,
            ),
        )
    write_spec_record(store, "s", {"name": "s"}, 4)
    assert hpstudy_main(["status", "--store", store, "--study", "s"]) == 0
    # 4 rows, 2 ok, 1 diverged, 1 failed; best 10, median of 10, 11, 12 (the failed row has no error)
    assert capsys.readouterr().out.splitlines() == [
        NO_DRIVER,
        SUMMARY_HEADER,
        "cnn_tiny           4     2     1     1    10.00    11.00",
    ]
    assert hpstudy_main(["compact", "--store", store, "--study", "s"]) == 0
    out = capsys.readouterr().out
    assert (
        "trials: 4 files read (0 merged by earlier compactions left as they are); 3 rows of finished trials "
        "merged (3 files deleted); 1 unfinished trials"
    ) in out
    assert "epochs: 0 files read (0 merged" in out
    assert len(load_trials(store, "s")) == 4


SUMMARY_HEADER = "model              n    ok   div  fail     best   median"
NO_DRIVER = "driver: none (no run of this study holds its lease)"


def test_status_counts_the_specs_rows_stored_ok_or_diverged_and_the_earlier_specs_apart(tmp_path, capsys):
    """The record names k0..k4: k0..k3 stored (ok, diverged, failed, ok), k4 not; k9 from an earlier spec."""
    store = str(tmp_path)
    for key, status, err in [
        ("k0", "ok", 10.0),
        ("k1", "diverged", 12.0),
        ("k2", "failed", None),
        ("k3", "ok", 11.0),
        ("k9", "ok", 30.0),
    ]:
        write_trial(
            store, "s", stored_row(trial_key=key, model="cnn_tiny", optimizer="sgd", status=status, top1_err=err)
        )
    write_spec_record(store, "s", {"name": "s"}, 5, [f"k{i}" for i in range(5)])
    assert hpstudy_main(["status", "--store", store, "--study", "s"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        NO_DRIVER,
        "3/5 trials of the spec stored as ok/diverged",
        SUMMARY_HEADER,
        "cnn_tiny           4     2     1     1    10.00    11.00",
        "1 rows from an earlier spec of study 's' (not counted above, not in the report):",
        SUMMARY_HEADER,
        "cnn_tiny           1     1     0     0    30.00    30.00",
    ]


def test_the_summary_lists_models_in_alphabetical_order(capsys):
    trials = pd.DataFrame(
        {
            "model": ["vit_c_tiny", "cnn_tiny", "vit_c_tiny", "vit_p_tiny", "vit_p_tiny"],
            "status": ["ok", "ok", "failed", "failed", "failed"],
            "top1_err": [20.0, 5.0, None, None, None],
        }
    )
    print_summary(trials)
    assert capsys.readouterr().out.splitlines() == [
        SUMMARY_HEADER,
        "cnn_tiny           1     1     0     0     5.00     5.00",
        "vit_c_tiny         2     1     0     1    20.00    20.00",
        "vit_p_tiny         2     0     0     2        -        -",  # no error to show: a dash, not nan
    ]


def test_status_of_a_study_counts_only_that_studys_rows(tmp_path, capsys):
    store = str(tmp_path)
    for study, key, err in [("s", "k0", 10.0), ("t", "k1", 30.0), ("t", "k2", 40.0)]:
        write_trial(
            store, study, stored_row(trial_key=key, model="cnn_tiny", optimizer="sgd", status="ok", top1_err=err)
        )
    assert hpstudy_main(["status", "--store", store, "--study", "s"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        NO_DRIVER,
        SUMMARY_HEADER,
        "cnn_tiny           1     1     0     0    10.00    10.00",
    ]


def test_a_report_folder_in_the_store_that_links_out_of_it_is_refused_before_a_run(tmp_path):
    """<store>/reports a symbolic link to an empty folder elsewhere: a run would write through it."""
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    store.mkdir()
    elsewhere.mkdir()
    (store / "reports").symlink_to(elsewhere)
    with pytest.raises(ReportError, match=f"report folder in the store: '{store}/reports' is a symbolic link"):
        check_store_report_dir(str(store), "s")


@pytest.mark.parametrize(
    "value,code,message",
    [
        ("off", 0, "fuse off"),
        ("false", 0, "fuse off"),
        ("no", 0, "fuse off"),
        ("'off'", 0, "fuse off"),
        (
            "on",
            2,
            "error: fuse: bad value True; allowed: off, auto or an integer K >= 1 (YAML reads on/yes/true as "
            "true: write auto or K)",
        ),
        ("true", 2, "error: fuse: bad value True"),
    ],
)
def test_fuse_takes_yamls_booleans_for_off_and_refuses_on(value, code, message, tmp_path, capsys):
    text = yaml.safe_dump(small_spec(name="fz")).replace("fuse: 'off'", f"fuse: {value}")
    assert f"fuse: {value}\n" in text
    (tmp_path / "fz.yaml").write_text(text)
    assert run_edf_main(["--config", str(tmp_path / "fz.yaml"), "--store", str(tmp_path / "s"), "--dry-run"]) == code
    out = capsys.readouterr()
    assert message in (out.out if code == 0 else out.err)


def test_a_report_goes_into_the_store_and_replaces_the_earlier_one(tmp_path):
    store, first, second = tmp_path / "store", tmp_path / "first", tmp_path / "second"
    first.mkdir()
    (first / "index.html").write_text("one")
    (first / "old.svg").write_text("<svg/>")
    fs, base, folder, location = report_location(str(store), "s")
    assert (folder, location) == (f"{store}/reports/s", f"{store}/reports/s")
    publish(fs, folder, str(first), "report folder in the store", root=base)
    assert (store / "reports/s/old.svg").read_text() == "<svg/>"
    second.mkdir()
    (second / "index.html").write_text("two")
    publish(fs, folder, str(second), "report folder in the store", root=base)
    files = sorted(p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file())
    assert files == ["reports/s/.hpstudy-report.json", "reports/s/index.html"]
    assert (store / "reports/s/index.html").read_text() == "two"


def test_a_cluster_run_says_how_to_fetch_its_report(capsys):
    local = fetch_hint("/home/ubuntu/results/reports/demo/index.html")
    assert f"on the head node ({socket.gethostname()})" in local
    assert "ray rsync-down cluster.yaml /home/ubuntu/results/reports/demo/ ./demo-report/" in local
    assert fetch_hint("s3://bucket/hpstudy/reports/demo/index.html") == (
        "the report is in the store: s3://bucket/hpstudy/reports/demo/ (copy it with your storage's own tools)"
    )


@pytest.mark.parametrize(
    "statuses,total,code,last",
    [
        (["ok", "diverged"], 2, 0, None),
        (["ok", "failed"], 2, 1, None),
        (["ok", "diverged"], 3, 1, "incomplete: 2/3 stored, 1 not run to the end; rerun the same command to resume"),
    ],
)
def test_exit_code_is_0_only_when_every_trial_of_the_spec_is_stored(statuses, total, code, last, capsys):
    stored = pd.DataFrame({"trial_key": [f"k{i}" for i in range(len(statuses))], "status": statuses})
    assert run_exit_code(stored, total) == code
    err = capsys.readouterr().err.strip()
    assert (err.splitlines()[-1] if err else None) == last


def test_the_status_line_shows_the_devices_trials_ran_on():
    from hpstudy.study.progress import ProgressPrinter, Tally

    tally = Tally()
    for i, row in enumerate(
        [
            {"model": "cnn_tiny", "status": "ok", "top1_err": 5.0, "device": "cuda:0 (NVIDIA A100-SXM4-40GB)"},
            {"model": "cnn_tiny", "status": "ok", "top1_err": 4.0, "device": "cpu"},
            {"model": "vit_p_tiny", "status": "failed", "top1_err": None, "device": None},
        ]
    ):
        tally.add(dict(row, trial_key=f"k{i}"))
    line = ProgressPrinter(SimpleNamespace(tally=tally), total=4).line()
    assert "3/4 done (ok 2, diverged 0, failed 1)" in line and "| on cpu 1, cuda 1 |" in line
    assert line.endswith("| best top-1: cnn_tiny 4.00%")  # a failed trial has no error to be best


@pytest.mark.slow
def test_the_report_of_an_s3_store_is_written_into_the_bucket(s3_root, capsys):
    for row in make_trials(models=("cnn_tiny",), optimizers=("adamw",), n=4).to_dict("records"):
        write_trial(s3_root, "s", stored_row(**{k: v for k, v in row.items() if k != "study"}))
    write_spec_record(s3_root, "s", {"name": "s"}, 4)
    assert hpstudy_main(["report", "--store", s3_root, "--study", "s"]) == 0
    bucket = s3_root.removeprefix("s3://").split("/")[0]
    assert f"report: s3://{bucket}/results/reports/s/index.html\n" in capsys.readouterr().out
    store = Store.open(s3_root)
    listed = store.fs.get_file_info(pafs.FileSelector(f"{store.base}/reports/s", recursive=True))
    stored = {info.base_name for info in listed}
    assert {"index.html", "report.json"} <= stored


def test_hpstudy_prepare_writes_then_reuses_only_verified_arrays(tmp_path, capsys):
    source, out = image_folder(tmp_path / "imgs", n=2), str(tmp_path / "prep")
    argv = ["prepare", "--data", source, "--out", out, "--train-size", "16", "--image-size", "12", "--workers", "1"]
    assert hpstudy_main(argv) == 0
    assert capsys.readouterr().out == (
        f"prepared {out}: 4 train images at 16 px, 4 val images at 12 px, 2 classes; "
        f"use dataset: {{name: prepared, path: {out}}}\n"
    )
    assert hpstudy_main(argv) == 0
    assert capsys.readouterr().out.startswith(f"reused {out}: 4 train images")
    with open(f"{out}/val_x.npy", "r+b") as f:  # a flipped bit on the node's disk
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    assert hpstudy_main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: prepared data: {out}/val_x.npy fails its checksum; rebuild the "
        f"folder: delete {out} and run `hpstudy prepare` again\n"
    )
    shutil.rmtree(out)
    assert hpstudy_main(argv) == 0 and capsys.readouterr().out.startswith(f"prepared {out}")


def test_query_shows_the_recipe_fields_a_study_samples_and_the_rows_past_a_damaged_record(tmp_path, capsys):
    from hpstudy.study.sampling import expand
    from hpstudy.study.spec import parse_spec
    from tests.helpers import planned_row

    raw = small_spec(name="smooth", models=["cnn_tiny"], optimizers=["adamw"], samples=2)
    raw["space"]["adamw"] = dict(raw["space"]["adamw"], label_smoothing={"choice": [0.0, 0.2]})
    spec, store = parse_spec(raw), str(tmp_path / "s")
    trials = expand(spec)
    for trial in trials:
        write_trial(
            store, "smooth", planned_row(trial, status="ok", top1_err=10.0, config_json=json.dumps(trial.config))
        )
    write_spec_record(store, "smooth", spec.source, len(trials), [t.key for t in trials])
    argv = ["query", "status == 'ok'", "--store", store, "--study", "smooth", "--columns", "trial_key,label_smoothing"]
    assert hpstudy_main(argv) == 0
    shown = {line.split()[0]: float(line.split()[1]) for line in capsys.readouterr().out.splitlines()[1:]}
    assert shown == {t.key: t.config["label_smoothing"] for t in trials}
    with open(tmp_path / "s" / "specs" / "smooth.json", "w") as damaged:
        damaged.write("{not json")
    assert hpstudy_main(argv[:-2] + ["--columns", "trial_key"]) == 0  # the rows are still read
    assert len(capsys.readouterr().out.splitlines()) == len(trials) + 1


def _held_elsewhere(store: str):
    """The lease of study `s`, held by this process as another driver of the study would hold it."""
    from hpstudy.study.store.lease import hold_lease

    return hold_lease(store, "s", "hpstudy run")


def test_a_run_or_compaction_of_a_study_another_driver_writes_is_refused_naming_it(tmp_path, capsys):
    """Nothing of the study is read into a plan or written: the lease comes before the note, the spec
    record and the first compaction."""
    store = str(tmp_path / "store")
    write_trial(store, "s", stored_row(trial_key="k0", model="cnn_tiny", optimizer="sgd", status="ok", top1_err=1.0))
    config = write_spec(tmp_path, small_spec(name="s", models=["cnn_tiny"], optimizers=["sgd"], samples=1))
    before = sorted(p.relative_to(store).as_posix() for p in (tmp_path / "store").rglob("*") if p.is_file())
    with _held_elsewhere(store):
        for argv in (["run", "--config", config, "--store", store], ["compact", "--store", store, "--study", "s"]):
            assert hpstudy_main(argv) == 2
            out, err = capsys.readouterr()
            assert out == "" and err.count("\n") == 1, (out, err)
            assert err.startswith(f"error: study 's' in {store} is being written by hpstudy run on host ")
            assert f", pid {os.getpid()}, started 20" in err and "; wait for it to end, or pass --wait" in err
        held = sorted(p.relative_to(store).as_posix() for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert held == sorted(before + ["leases/.s.guard", "leases/s.json"])  # no spec record, nothing compacted
    assert not (tmp_path / "store/leases/s.json").exists()  # released


def test_compact_needs_a_store_and_never_deletes_a_lease_file_it_did_not_write(tmp_path, capsys):
    missing = str(tmp_path / "typo")
    assert hpstudy_main(["compact", "--store", missing, "--study", "s"]) == 2
    assert capsys.readouterr().err == f"error: --store: no store at '{missing}' ({missing} does not exist)\n"
    assert not os.path.exists(missing)  # no lease written into a mistyped store
    store = str(tmp_path / "store")
    write_trial(store, "s", stored_row(trial_key="k0", model="cnn_tiny", optimizer="sgd", status="ok", top1_err=1.0))
    (tmp_path / "store/leases").mkdir()
    (tmp_path / "store/leases/s.json").write_text('{"owner": "a lock of another tool"}')
    assert hpstudy_main(["compact", "--store", store, "--study", "s", "--wait"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: store: {store}/leases/s.json is not a lease hpstudy wrote")
    assert err.rstrip().endswith("if none runs, delete it and rerun the same command")
    assert (tmp_path / "store/leases/s.json").read_text() == '{"owner": "a lock of another tool"}'
    assert len(load_trials(store, "s")) == 1


def test_a_local_run_counts_the_cpus_it_is_given_and_a_cluster_run_none_of_this_machines(tmp_path):
    """--num-cpus caps a local Ray below this machine's CPUs: a trial asking for more is refused before any
    runs, naming the cap; with --address the cluster's CPUs are not this machine's to check."""
    cpus = os.cpu_count() or 1
    check_before_trials(parse_spec(small_spec(resources={"cpu": cpus})), str(tmp_path), None, None, "none")
    two = parse_spec(small_spec(resources={"cpu": 2}))
    with pytest.raises(SpecError, match=r"^resources.cpu: bad value 2; allowed: <= 1 \(CPUs of the local Ray;"):
        check_before_trials(two, str(tmp_path), None, 1, "none")
    check_before_trials(parse_spec(small_spec(resources={"cpu": cpus + 1})), str(tmp_path), "auto", 1, "none")


def test_a_changed_spec_is_noted_with_its_earlier_rows_and_the_same_spec_is_not(tmp_path):
    store = Store.open(str(tmp_path))
    earlier = parse_spec(small_spec(samples=2))
    keys = [t.key for t in expand(earlier)]
    write_spec_record(store, earlier.name, earlier.source, len(keys), keys)
    for key in keys[:3]:
        write_trial(store, earlier.name, stored_row(trial_key=key, model="cnn_tiny", status="ok", top1_err=5.0))
    assert spec_change_note(store, earlier) is None
    keyless = Store.open(str(tmp_path / "older"))  # a record from before records held the trial keys
    write_spec_record(keyless, earlier.name, earlier.source, len(keys))
    assert spec_change_note(keyless, earlier) is None  # the same spec, told by the spec itself
    rest = (
        "they stay in the store, but this run's summary, `hpstudy status` and the report leave them out (--fresh "
        "deletes them; a new name keeps the studies apart)"
    )
    changed = parse_spec(small_spec(samples=2, epochs=[2]))
    assert spec_change_note(store, changed) == (
        f"note: study 'e2e' in {store} was run with a different spec; 3 stored rows come from that earlier spec: {rest}"
    )
    # a spec that only adds trials leaves no stored row out: nothing to note
    assert spec_change_note(store, parse_spec(small_spec(samples=3))) is None
    one = Store.open(str(tmp_path / "one"))
    write_spec_record(one, earlier.name, earlier.source, len(keys), keys)
    write_trial(one, earlier.name, stored_row(trial_key=keys[0], model="cnn_tiny", status="ok", top1_err=5.0))
    assert spec_change_note(one, changed) == (
        f"note: study 'e2e' in {one} was run with a different spec; 1 stored row comes from that earlier spec: {rest}"
    )
