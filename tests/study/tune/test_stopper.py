"""The Tune stopper (study/tune/stopper.py): the whole run stops on a fault, a node that cannot run
trials or a signal; a signal is announced once."""

import logging
import signal
from types import SimpleNamespace

import pytest

from hpstudy.study.interruption import Interruption
from tests.helpers import logged


@pytest.fixture
def stopping_cleared(request):
    """No earlier session's end has marked the workers as stopping (as at a session's start), nor after."""
    from hpstudy.study import ray_session

    ray_session._STOPPING.clear()
    request.addfinalizer(ray_session._STOPPING.clear)


@pytest.mark.parametrize("cause", ["fault", "stop_reason", "signum"])
def test_each_cause_stops_the_run_and_from_then_hides_what_the_ended_workers_print(cause, caplog, stopping_cleared):
    from hpstudy.study import ray_session
    from hpstudy.study.tune.stopper import RunStopper

    writer = SimpleNamespace(interruption=Interruption(), fault=None, stop_reason=None)
    stopper = RunStopper(writer)
    with caplog.at_level(logging.DEBUG, logger="hpstudy.study.tune.stopper"):
        assert not stopper.stop_all() and not stopper("t0", {"loss": 1.0})
        assert not ray_session._STOPPING.is_set()  # a running study's workers are shown
        if cause == "signum":
            writer.interruption.signum = signal.SIGINT
        else:
            setattr(writer, cause, "the cause")
        assert stopper.stop_all() and not stopper("t0", {"loss": 1.0})  # the run, not a trial, stops
    assert ray_session._STOPPING.is_set()
    assert len(caplog.records) == (cause == "signum")  # only a signal is announced


def test_a_signal_stops_the_run_and_is_announced_once(caplog):
    from hpstudy.study.tune.stopper import RunStopper

    writer = SimpleNamespace(interruption=Interruption(), fault=None, stop_reason=None)
    writer.interruption.signum = signal.SIGTERM
    stopper = RunStopper(writer)
    with caplog.at_level(logging.INFO, logger="hpstudy"):
        assert stopper.stop_all() and stopper.stop_all()
    err = logged(caplog, logging.WARNING)  # a warning: stderr in a terminal
    assert len(err) == 1 and err[0].startswith("SIGTERM: stopping: no new trial starts, running trials are cancelled")
