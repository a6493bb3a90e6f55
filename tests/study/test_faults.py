"""The crash hook of the recovery tests (study/faults.py): a worker dies while its key's budget lasts."""

import os

from hpstudy.study.faults import CRASH_DIR_ENV, crash_if_asked


def _exit_status_in_a_child(key):
    """The exit status of a forked child that calls crash_if_asked(key) and then exits 0."""
    pid = os.fork()
    if pid == 0:
        crash_if_asked(key)
        os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_worker_dies_once_per_unit_of_its_keys_budget(tmp_path, monkeypatch):
    (tmp_path / "k").write_text("2")
    assert _exit_status_in_a_child("k") == 0  # no $HPSTUDY_CRASH_DIR: the hook does nothing
    monkeypatch.setenv(CRASH_DIR_ENV, str(tmp_path))
    assert [_exit_status_in_a_child("k") for _ in range(3)] == [1, 1, 0]
    assert (tmp_path / "k").read_text() == "0"
    assert _exit_status_in_a_child("other") == 0 and not (tmp_path / "other").exists()
