"""`hpstudy status`: whether a driver is live (the study's lease), and per cell the trials stored, running and
pending, read from the store alone; the driver's progress counts each member of a fused group."""

import functools
import json
import os
import socket
import time
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpstudy.cli import hpstudy_main
from hpstudy.study.sampling import expand
from hpstudy.study.spec import parse_spec
from hpstudy.study.store.layout import write_trial
from hpstudy.study.store.lease import hold_lease
from hpstudy.study.store.running import RUNNING, read_running, write_running
from hpstudy.study.store.spec_record import write_spec_record
from tests.helpers import planned_row, small_spec

SPEC = small_spec(name="s", samples=2)
N_TRIALS, N_CELLS = 8, 4  # SPEC's: 2 models x 2 optimizers x 1 length = 4 cells of 2 trials
HEADER = "model          optimizer epochs trials    ok   div  fail running pending"


@functools.cache
def _plan() -> tuple:
    """SPEC's trials and its cells (model, optimizer, epochs), in plan order (expanded as a test runs: its sampler
    imports scipy.stats)."""
    trials = expand(parse_spec(SPEC))
    cells = list(dict.fromkeys((t.model, t.optimizer, t.epochs) for t in trials))
    assert (len(trials), len(cells)) == (N_TRIALS, N_CELLS)
    return trials, cells


def _store(root, statuses):
    """Store the spec's record and one row per (trial, status) given; returns the root."""
    store, (trials, _) = str(root), _plan()
    write_spec_record(store, "s", SPEC, len(trials), [t.key for t in trials])
    for trial, status in zip(trials, statuses):
        if status:
            write_trial(store, "s", planned_row(trial, status=status, top1_err=None if status == "failed" else 5.0))
    return store


def _status(store, capsys):
    assert hpstudy_main(["status", "--store", store, "--study", "s"]) == 0
    return capsys.readouterr().out.splitlines()


def _cells(lines):
    """{cell: (trials, ok, div, fail, running, pending)} from status's per-cell table."""
    table = lines[lines.index(HEADER) + 1 :][:N_CELLS]
    return {(m, o, int(e)): tuple(map(int, rest)) for m, o, e, *rest in (line.split() for line in table)}


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)  # capsys read each time
@given(
    statuses=st.lists(st.sampled_from([None, "ok", "diverged", "failed"]), min_size=N_TRIALS, max_size=N_TRIALS),
    running=st.lists(st.integers(0, 3), min_size=N_CELLS, max_size=N_CELLS),
)
def test_each_cell_is_stored_running_or_pending_and_running_comes_from_the_live_driver(
    tmp_path_factory, capsys, statuses, running
):
    trials, cells = _plan()
    store = _store(tmp_path_factory.mktemp("store"), statuses)
    with hold_lease(store, "s", "hpstudy run"):
        write_running(store, "s", dict(zip(cells, running)))
        lines = _status(store, capsys)
    assert lines[0].startswith(f"driver: live, hpstudy run on host {socket.gethostname()}, pid {os.getpid()}, ")
    by_cell = dict(zip((t.key for t in trials), statuses))
    for cell, want_running in zip(cells, running):
        stored = [by_cell[t.key] for t in trials if (t.model, t.optimizer, t.epochs) == cell]
        not_stored = stored.count(None)
        now = min(want_running, not_stored)  # never more running than not stored
        assert _cells(lines)[cell] == (
            len(stored),
            stored.count("ok"),
            stored.count("diverged"),
            stored.count("failed"),
            now,
            not_stored - now,
        )
    # once the driver is gone its record counts nothing: all that is not stored is pending
    lines = _status(store, capsys)
    assert lines[0] == "driver: none (no run of this study holds its lease)"
    assert all(row[4] == 0 for row in _cells(lines).values())


def test_a_stale_lease_is_no_live_driver_and_its_running_record_counts_nothing(tmp_path, capsys, monkeypatch):
    _, cells = _plan()
    store = _store(tmp_path, [None] * N_TRIALS)
    monkeypatch.setenv("HPSTUDY_LEASE_STALE_S", "0.2")
    with hold_lease(store, "s", "hpstudy run"):
        write_running(store, "s", {cells[0]: 2})
        lease = tmp_path / "leases" / "s.json"
        saved = lease.read_text()
    lease.write_text(saved)  # the lease a killed driver leaves behind
    time.sleep(0.3)
    lines = _status(store, capsys)
    assert lines[0].startswith("driver: none live; the lease of hpstudy run on host ")
    assert lines[0].endswith("s): its driver died, and the next run takes the lease over")
    assert _cells(lines)[cells[0]] == (2, 0, 0, 0, 0, 2)


def test_a_record_of_another_process_or_an_unreadable_one_counts_nothing(tmp_path):
    store, (_, cells) = str(tmp_path), _plan()
    write_running(store, "s", {cells[0]: 1})
    assert read_running(store, "s", socket.gethostname(), os.getpid()) == {cells[0]: 1}
    assert read_running(store, "s", socket.gethostname(), os.getpid() + 1) == {}
    assert read_running(store, "s", "another-host", os.getpid()) == {}
    mine = {"host": socket.gethostname(), "pid": os.getpid()}
    cell = {"model": "m", "optimizer": "adamw", "epochs": 2, "n": 1}
    damaged = [[{"n": 1}], [dict(cell, epochs=None)], [dict(cell, n=[1])], 5, [["m"]], None, [dict(cell, n="x")]]
    for text in ("{", "[]", *(json.dumps(dict(mine, running=running)) for running in damaged)):
        (tmp_path / RUNNING / "s.json").write_text(text)
        assert read_running(store, "s", socket.gethostname(), os.getpid()) == {}


def test_a_spec_without_a_record_counts_per_model_and_says_there_is_no_driver(tmp_path, capsys):
    """A study stored before records held a spec (rows only): no cell table, the driver line still shown."""
    store, (trials, _) = str(tmp_path), _plan()
    write_trial(store, "s", planned_row(trials[0], status="ok", top1_err=5.0))
    lines = _status(store, capsys)
    assert lines[0] == "driver: none (no run of this study holds its lease)"
    assert HEADER not in lines and lines[1].startswith("model ")


@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=6), states=st.data())
def test_progress_counts_each_member_of_a_running_fused_group_and_records_each_cell(tmp_path_factory, sizes, states):
    """Tune trials of fused groups of `sizes` members, each running or not: running = the members of the running
    ones, recorded per cell in the store; the record is deleted when the run ends."""
    from hpstudy.study.progress import ProgressPrinter, Tally

    store = str(tmp_path_factory.mktemp("store"))
    trials = expand(parse_spec(small_spec(name="s", samples=8)))
    cnn = [t for t in trials if t.model == "cnn_tiny" and t.optimizer == "adamw"]
    groups, at = [], 0
    for size in sizes:
        groups.append({"keys": [t.key for t in cnn[at : at + size]]})
        at = (at + size) % len(cnn)
    writer = SimpleNamespace(tally=Tally(), groups=groups, by_key={t.key: t for t in trials}, store=store, study="s")
    printer = ProgressPrinter(writer, total=len(trials), interval=3600)
    printer.display = "off"
    running = states.draw(st.lists(st.booleans(), min_size=len(sizes), max_size=len(sizes)))
    tune_trials = [
        SimpleNamespace(status="RUNNING" if on else "PENDING", config={"group": i}) for i, on in enumerate(running)
    ]
    printer.on_step_begin(0, tune_trials)
    members = sum(len(g["keys"]) for g, on in zip(groups, running) if on)
    assert printer.running == members
    cell = (cnn[0].model, cnn[0].optimizer, cnn[0].epochs)
    assert read_running(store, "s", socket.gethostname(), os.getpid()) == ({cell: members} if members else {})
    printer.final()
    assert not os.path.exists(os.path.join(store, RUNNING, "s.json"))


def test_status_of_a_recorded_study_counts_its_cells_without_expanding_the_spec(tmp_path, capsys, monkeypatch):
    """The record's trial keys say which rows are the spec's and its cells what each plans: status reads
    them, so it answers in the same time at 100,000 trials as at 10 (bench.scale)."""
    statuses = ["ok", "diverged", "failed", None, "ok", None, None, "ok"]
    store, (trials, cells) = _store(tmp_path, statuses), _plan()

    def no_expansion(*args, **kwargs):
        raise AssertionError("status expanded the spec")

    monkeypatch.setattr("hpstudy.commands.expand_for_store", no_expansion)
    monkeypatch.setattr("hpstudy.study.sampling.expand", no_expansion)
    got = _cells(_status(store, capsys))
    for cell in cells:
        mine = [s for t, s in zip(trials, statuses) if (t.model, t.optimizer, t.epochs) == cell]
        expected = (len(mine), mine.count("ok"), mine.count("diverged"), mine.count("failed"), 0, mine.count(None))
        assert got[cell] == expected, (cell, got[cell], expected)
