"""One writer per study (study/store/lease.py), with real processes on a local disk and on S3 (moto's
server): of drivers racing for a study's lease exactly one holds it at any moment; the others are
refused naming it, or wait and take it in turn; a SIGKILLed holder's lease is taken over once stale
and not before; a paused holder that was taken over finds out and never deletes the new lease; and a
file at the lease path that hpstudy did not write is never deleted."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hpstudy.study.store.layout import StoreError
from hpstudy.study.store.lease import SETTLE_S, STALE_ENV, ForeignLease, Lease, StudyBusy, hold_lease
from tests.helpers import REPO

# A driver stand-in: takes the lease (or is refused), says so with its times, holds it, releases it.
DRIVER = textwrap.dedent(
    """
    import os, sys, time
    from hpstudy.study.store.lease import Lease, StudyBusy
    root, go, wait, hold = sys.argv[1], sys.argv[2], sys.argv[3] == "wait", float(sys.argv[4])
    lease = Lease(root, "s", "test driver")
    print("ready", flush=True)
    while go != "-" and not os.path.exists(go):
        time.sleep(0.001)
    try:
        lease.acquire(wait=wait)
    except StudyBusy as exc:
        print("busy", exc, flush=True)
        sys.exit(2)
    print("held", time.time(), lease.token, flush=True)
    time.sleep(hold)
    if lease.lost is not None:
        print("lost", lease.lost, flush=True)
    end = time.time()
    lease.release()
    print("released", end, flush=True)
    """
)


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """A store root on a local disk, or in a bucket of moto's S3 server."""
    if request.param == "local":
        return str(tmp_path / "store")
    return request.getfixturevalue("s3_root")


def _start(root, go, wait=False, hold=1.0, env=None):
    """A driver process; its output is read when it ends."""
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, root, go, "wait" if wait else "no", str(hold)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **(env or {})),
    )


def _race(root, tmp_path, n, wait, hold, env=None):
    """Start n drivers, let them go at one moment, and return each one's (exit code, output lines)."""
    go = tmp_path / f"go-{time.monotonic_ns()}"
    drivers = [_start(root, str(go), wait, hold, env) for _ in range(n)]
    for driver in drivers:
        assert driver.stdout.readline() == "ready\n"
    go.touch()
    results = []
    for driver in drivers:
        out, err = driver.communicate(timeout=180)
        results.append((driver.returncode, out.splitlines(), err, driver.pid))
    return results


def _lease_exists(root):
    lease = Lease(root, "s", "test")
    return lease.fs.get_file_info(lease.path).type.name != "NotFound"


@pytest.mark.slow  # processes that hold a lease for seconds
def test_of_drivers_racing_for_a_free_lease_one_holds_it_and_the_others_are_refused_naming_it(root, tmp_path):
    for _ in range(3):  # rounds: a released lease is free again
        results = _race(root, tmp_path, 4, wait=False, hold=3.0)
        holders = [r for r in results if r[0] == 0]
        assert len(holders) == 1, [(code, lines, err[-500:]) for code, lines, err, _ in results]
        holder_pid = holders[0][3]
        for code, lines, err, _ in results:
            if code == 0:
                continue
            assert code == 2 and lines[-1].startswith("busy study 's' in "), (lines, err[-2000:])
            assert f"test driver on host {os.uname().nodename}, pid {holder_pid}, started 20" in lines[-1]
            assert "or pass --wait" in lines[-1]
        assert not _lease_exists(root)  # released: deleted


@pytest.mark.slow  # processes that hold a lease for seconds
def test_drivers_that_wait_hold_the_lease_one_after_another(root, tmp_path):
    results = _race(root, tmp_path, 4, wait=True, hold=0.5, env={STALE_ENV: "20"})
    spans = []
    for code, lines, err, _ in results:
        assert code == 0, (lines, err[-2000:])
        held = next(float(line.split()[1]) for line in lines if line.startswith("held "))
        released = float(lines[-1].split()[1])
        spans.append((held, released))
    spans.sort()
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start, spans  # never two holders at once
    assert not _lease_exists(root)


def _held_by_killed_driver(root, tmp_path, stale_s):
    """A driver that took the lease (stale limit `stale_s`) and was SIGKILLed; the time of the kill."""
    driver = _start(root, "-", hold=600, env={STALE_ENV: str(stale_s)})
    assert driver.stdout.readline() == "ready\n"
    assert driver.stdout.readline().startswith("held ")
    time.sleep(stale_s / 3)  # it has renewed the lease at least once
    driver.send_signal(signal.SIGKILL)
    driver.wait(30)
    driver.stdout.close()
    driver.stderr.close()
    return time.time()


@pytest.mark.slow  # processes that hold a lease for seconds
def test_a_sigkilled_drivers_lease_blocks_the_study_until_it_is_stale_then_is_taken_over(root, tmp_path):
    stale_s = 4.0
    killed = _held_by_killed_driver(root, tmp_path, stale_s)
    with pytest.raises(StudyBusy, match="taken over 4 s after its last heartbeat"):
        Lease(root, "s", "rerun").acquire()
    lease = Lease(root, "s", "rerun")
    lease.acquire(wait=True)
    waited = time.time() - killed
    settle = 0 if lease.local else SETTLE_S  # an object store's read-back after the take
    try:
        # its last heartbeat was at most stale_s / 6 before the kill: not before it is stale, and soon after
        assert stale_s * 5 / 6 - 0.5 < waited < stale_s + settle + 1.5, waited
        assert json.loads(_read(root))["token"] == lease.token
    finally:
        lease.release()
    assert not _lease_exists(root)


@pytest.mark.slow  # processes that hold a lease for seconds
def test_of_drivers_racing_for_a_stale_lease_one_takes_it_over(root, tmp_path):
    _held_by_killed_driver(root, tmp_path, 1.5)
    time.sleep(2.0)  # stale
    results = _race(root, tmp_path, 4, wait=False, hold=3.0)
    assert sorted(code for code, *_ in results) == [0, 2, 2, 2], [(c, lines, e[-500:]) for c, lines, e, _ in results]


@pytest.mark.slow  # processes that hold a lease for seconds
def test_a_paused_driver_taken_over_finds_out_and_leaves_the_new_lease(root, tmp_path):
    driver = _start(root, "-", hold=8.0, env={STALE_ENV: "1.5"})
    assert driver.stdout.readline() == "ready\n"
    assert driver.stdout.readline().startswith("held ")
    os.kill(driver.pid, signal.SIGSTOP)  # a laptop asleep, a stopped job
    try:
        lease = Lease(root, "s", "next")
        lease.acquire(wait=True)  # stale after 1.5 s without a heartbeat
    finally:
        os.kill(driver.pid, signal.SIGCONT)
    try:
        out, err = driver.communicate(timeout=60)
        assert driver.returncode == 0, err[-2000:]
        lost = next(line for line in out.splitlines() if line.startswith("lost "))
        assert "no longer holds the lease of study 's'" in lost and "it was taken over by next on host" in lost
        assert json.loads(_read(root))["token"] == lease.token  # its release left the new lease alone
        lease.check()  # still this driver's
    finally:
        lease.release()


def _read(root):
    lease = Lease(root, "s", "test")
    with lease.fs.open_input_stream(lease.path) as f:
        return f.read().decode()


def _write(root, data: bytes):
    lease = Lease(root, "s", "test")
    lease.fs.create_dir(lease.directory, recursive=True)
    with lease.fs.open_output_stream(lease.path) as out:
        out.write(data)


def _stale_lease(**changes) -> dict:
    record = {
        "kind": "hpstudy-study-lease",
        "study": "s",
        "command": "hpstudy run",
        "host": "elsewhere",
        "pid": 1,
        "started_at": "2020-01-01T00:00:00+00:00",
        "token": "0" * 32,
        "heartbeat_at": 1577836800.0,  # 2020: long stale
        "stale_after_s": 180.0,
    }
    return {**record, **changes}


@pytest.mark.parametrize(
    "data,why",
    [
        (b"", "Expecting value"),
        (json.dumps(_stale_lease()).encode()[:-20], "Unterminated string"),  # a truncated lease
        (b"\xff\xfe not text", "can't decode"),
        (b'{"owner": "someone else", "expires": 0}', "no \"kind\": 'hpstudy-study-lease'"),
        (json.dumps(_stale_lease(study="other")).encode(), "it names study 'other'"),
        (json.dumps(_stale_lease(heartbeat_at="yesterday")).encode(), "its 'heartbeat_at' is 'yesterday'"),
        (json.dumps(_stale_lease(pid=True)).encode(), "its 'pid' is True"),
        (json.dumps(_stale_lease(stale_after_s=1e400)).encode(), "is not a finite time"),
        (b" " * (65 << 10), "of at most 65536 bytes"),
    ],
)
def test_a_file_at_the_lease_path_that_hpstudy_did_not_write_is_named_and_never_deleted(root, data, why):
    _write(root, data)
    for wait in (False, True):
        with pytest.raises(ForeignLease) as info:
            Lease(root, "s", "run").acquire(wait=wait)
        message = str(info.value)
        assert "leases/s.json is not a lease hpstudy wrote (" in message and why in message, message
        assert "hpstudy never deletes it" in message and "delete it and rerun the same command" in message
    assert _read_bytes(root) == data


def _read_bytes(root):
    lease = Lease(root, "s", "test")
    with lease.fs.open_input_stream(lease.path) as f:
        return f.read()


def test_a_local_link_or_folder_at_the_lease_path_is_never_followed_nor_deleted(tmp_path):
    root = str(tmp_path / "store")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_stale_lease()))  # a stale lease hpstudy would take over, but not through a link
    (tmp_path / "store/leases").mkdir(parents=True)
    os.symlink(elsewhere, tmp_path / "store/leases/s.json")
    with pytest.raises(ForeignLease, match="not a regular file"):
        Lease(root, "s", "run").acquire()
    assert os.path.islink(tmp_path / "store/leases/s.json") and json.loads(elsewhere.read_text()) == _stale_lease()
    os.unlink(tmp_path / "store/leases/s.json")
    (tmp_path / "store/leases/s.json").mkdir()
    with pytest.raises(ForeignLease, match="not a regular file"):
        Lease(root, "s", "run").acquire()
    assert (tmp_path / "store/leases/s.json").is_dir()


def test_a_stale_lease_hpstudy_wrote_is_taken_over_and_a_fresh_one_is_not(root):
    _write(root, json.dumps(_stale_lease()).encode())
    with hold_lease(root, "s", "run") as lease:
        assert json.loads(_read(root))["token"] == lease.token
    fresh = _stale_lease(heartbeat_at=time.time(), host="elsewhere", pid=4242)
    _write(root, json.dumps(fresh).encode())
    with pytest.raises(StudyBusy, match="being written by hpstudy run on host elsewhere, pid 4242, started 2020-01-01"):
        Lease(root, "s", "run").acquire()
    assert json.loads(_read(root)) == fresh


def test_the_heartbeat_renews_the_lease_while_it_is_held(tmp_path, monkeypatch):
    monkeypatch.setenv(STALE_ENV, "1.2")
    root = str(tmp_path)
    with hold_lease(root, "s", "run") as lease:
        first = json.loads(_read(root))
        time.sleep(1.0)
        later = json.loads(_read(root))
        assert later["token"] == first["token"] == lease.token
        assert later["heartbeat_at"] > first["heartbeat_at"] and later["started_at"] == first["started_at"]
        lease.check()
    assert not os.path.exists(tmp_path / "leases/s.json")


@pytest.mark.parametrize("value", ["abc", "0", "-3", "nan", "inf"])
def test_a_bad_stale_limit_is_named(value, tmp_path, monkeypatch):
    monkeypatch.setenv(STALE_ENV, value)
    with pytest.raises(StoreError, match=f"{STALE_ENV}: bad value '{value}'; allowed: a number of seconds > 0"):
        Lease(str(tmp_path), "s", "run")


@pytest.mark.parametrize("holding", [True, False])
def test_sigterm_while_holding_or_waiting_exits_143_and_leaves_no_lease_of_its_own(holding, tmp_path):
    root = str(tmp_path / "store")
    code = (
        "import sys, time\n"
        "from hpstudy.study.store.lease import hold_lease\n"
        "with hold_lease(sys.argv[1], 's', 'term', wait=True):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n"
    )
    other = None if holding else Lease(root, "s", "other")
    if other is not None:
        other.acquire()
    proc = subprocess.Popen([sys.executable, "-c", code, root], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        if holding:
            assert proc.stdout.readline() == "held\n"
        else:
            time.sleep(3)  # imported and waiting
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 143
    finally:
        if other is not None:
            assert json.loads(_read(root))["token"] == other.token  # another's lease stays
            other.release()
    assert not _lease_exists(root)
