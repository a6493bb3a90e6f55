"""The Tune stopper (study/tune_stopper.py): the whole run stops on a fault, a node that cannot run
trials or a signal; a signal is announced once."""

import logging
import signal
from types import SimpleNamespace

import pytest

from hpstudy.study.interruption import Interruption
from hpstudy.study.tune_stopper import RunStopper
from tests.helpers import logged


@pytest.mark.parametrize("cause", ["fault", "stop_reason"])
def test_a_store_fault_or_a_node_that_cannot_run_trials_stops_the_run(cause, caplog):
    writer = SimpleNamespace(interruption=Interruption(), fault=None, stop_reason=None)
    stopper = RunStopper(writer)
    with caplog.at_level(logging.DEBUG, logger="hpstudy"):
        assert not stopper.stop_all() and not stopper("t0", {"loss": 1.0})
        setattr(writer, cause, "the cause")
        assert stopper.stop_all() and not stopper("t0", {"loss": 1.0})  # the run, not a trial, stops
    assert not caplog.records


def test_a_signal_stops_the_run_and_is_announced_once(caplog):
    writer = SimpleNamespace(interruption=Interruption(), fault=None, stop_reason=None)
    writer.interruption.signum = signal.SIGTERM
    stopper = RunStopper(writer)
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        assert stopper.stop_all() and stopper.stop_all()
    err = logged(caplog, logging.WARNING)  # a warning: stderr in a terminal
    assert len(err) == 1 and err[0].startswith("SIGTERM: stopping: no new trial starts, running trials are cancelled")
