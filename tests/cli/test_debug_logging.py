"""--debug shows what a run keeps out of the way (issue #37 item 7): hpstudy's loggers at DEBUG on stderr,
for the command only."""

import logging

import pytest

from hpstudy import commands
from hpstudy.cli import hpstudy_main


@pytest.mark.parametrize("debug", [False, True])
def test_debug_puts_hpstudys_debug_lines_on_stderr_for_the_command_only(debug, monkeypatch, capsys):
    def run(args):
        logging.getLogger("hpstudy.study.ray_session").debug("(raylet) a state dump")
        logging.getLogger("hpstudy.study.progress").warning("group-000001 (1 trial) failed")
        return 0

    monkeypatch.setitem(commands.COMMANDS, "run", run)
    hpstudy = logging.getLogger("hpstudy")
    handlers, level = list(hpstudy.handlers), hpstudy.level
    assert hpstudy_main(["run"] + ["--debug"] * debug) == 0
    err = capsys.readouterr().err.splitlines()
    # (without --debug a warning goes to Python's last-resort stderr handler, which pytest's own replaces)
    assert ("(raylet) a state dump" in err) == debug and ("group-000001 (1 trial) failed" in err) == debug
    assert (hpstudy.handlers, hpstudy.level) == (handlers, level)  # as before the command
