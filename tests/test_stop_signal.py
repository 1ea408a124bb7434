"""Ctrl-C during fit: a stop between two steps, never inside the step (or an MLflow write)."""

import os
import signal
import time

import pytest

from trackmind.training.stop_signal import StopAtStepBoundary


@pytest.fixture
def python_sigint():
    """Python's own Ctrl-C handler, as a training process has it, restored after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs in the main thread at the next bytecode


def test_first_ctrl_c_waits_for_the_step_end(python_sigint):
    stop = StopAtStepBoundary(grace_s=60)
    stop.on_fit_start(None, None)
    _ctrl_c()  # no KeyboardInterrupt here: the step goes on
    assert stop.requested
    with pytest.raises(KeyboardInterrupt):
        stop.on_train_batch_end(None, None, None, None, 0)
    stop.on_exception(None, None, KeyboardInterrupt())
    assert stop._timer is None


def test_second_ctrl_c_stops_at_once(python_sigint):
    stop = StopAtStepBoundary(grace_s=60)
    stop.on_fit_start(None, None)
    _ctrl_c()
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c()
    stop._cancel_timer()


def test_a_step_that_never_ends_is_interrupted_after_the_grace(python_sigint):
    stop = StopAtStepBoundary(grace_s=0.3)
    stop.on_fit_start(None, None)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        _ctrl_c()
        time.sleep(5)  # a learner waiting for data
    assert 0.25 <= time.monotonic() - started < 3


def test_steps_go_on_without_ctrl_c_and_the_handler_is_given_back(python_sigint):
    stop = StopAtStepBoundary()
    stop.on_fit_start(None, None)
    assert signal.getsignal(signal.SIGINT) == stop._on_sigint
    stop.on_train_batch_end(None, None, None, None, 0)
    stop.on_fit_end(None, None)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_ctrl_c_stays_ignored():
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a job started with `cmd &`
    try:
        stop = StopAtStepBoundary()
        stop.on_fit_start(None, None)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
