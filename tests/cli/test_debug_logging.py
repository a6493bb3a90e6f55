"""What the library logs, on the command line's terminal (issue #40 item 3): every `hpstudy` command shows
hpstudy's INFO lines on stdout and its warnings on stderr, bare, as the prints they replace did (the console
handler of hpstudy.trainers.console); --debug shows its DEBUG lines too, on stderr (issue #37 item 7); the
hpstudy logger is as before once the command returns."""

import logging

import pytest

from hpstudy import commands
from hpstudy.cli import hpstudy_main
from hpstudy.trainers.console import HANDLER


@pytest.mark.parametrize("debug", [False, True])
def test_a_command_shows_hpstudys_lines_and_debug_its_debug_lines_for_the_command_only(debug, monkeypatch, capsys):
    def run(args):
        hpstudy = logging.getLogger("hpstudy")
        assert HANDLER in hpstudy.handlers and not hpstudy.propagate  # a root handler prints nothing twice
        logging.getLogger("hpstudy.study.ray_session").debug("(raylet) a state dump")
        logging.getLogger("hpstudy.study.runner").info("study s: 2 trials, 0 already stored, 2 to run")
        print("printed between")  # the command's own prints keep their order with the logged lines
        logging.getLogger("hpstudy.study.progress").info("[1 s] 0/2 done")
        logging.getLogger("hpstudy.study.progress").warning("group-000001 (1 trial) failed")
        return 0

    monkeypatch.setitem(commands.COMMANDS, "run", run)
    hpstudy = logging.getLogger("hpstudy")
    handlers, level, propagate = list(hpstudy.handlers), hpstudy.level, hpstudy.propagate
    assert hpstudy_main(["run"] + ["--debug"] * debug) == 0
    out, err = capsys.readouterr()
    assert out == "study s: 2 trials, 0 already stored, 2 to run\nprinted between\n[1 s] 0/2 done\n"
    assert err == "(raylet) a state dump\n" * debug + "group-000001 (1 trial) failed\n"
    assert (hpstudy.handlers, hpstudy.level, hpstudy.propagate) == (handlers, level, propagate)  # as before
    logging.getLogger("hpstudy.study.runner").info("after the command")
    assert capsys.readouterr() == ("", "")
