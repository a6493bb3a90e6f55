"""Stopping a run on a signal (study/interruption.py), with real signals to this process."""

import signal

import pytest

from hpstudy.study.interruption import Interruption


def test_the_first_signal_is_noted_a_second_quits_at_once_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with Interruption() as stop:
        signal.raise_signal(signal.SIGTERM)
        assert stop.signum == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert stop.signum == signal.SIGTERM  # the first signal is the one the exit code names
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_while_writing_takes_effect_when_the_write_ends():
    written = []
    with Interruption() as stop:
        signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            with stop.writing():
                signal.raise_signal(signal.SIGINT)
                written.append("row")
        assert written == ["row"] and stop.signum == signal.SIGINT


def test_arming_again_after_ray_replaced_a_handler_still_restores_the_original():
    before = signal.getsignal(signal.SIGTERM)
    with Interruption() as stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as ray.init installs its own
        stop.arm()
        assert signal.getsignal(signal.SIGTERM) == stop._handle
    assert signal.getsignal(signal.SIGTERM) is before
