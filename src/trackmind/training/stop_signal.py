"""Ctrl-C stops a run between two learner steps, as Lightning stops one on SIGTERM.

Python's own handler raises KeyboardInterrupt wherever the main thread is, and the main
thread writes the run's metrics to MLflow. Interrupted inside a write to a SQLite store,
the transaction is left open and holds the database's lock: the run's end can then not be
recorded ("database is locked", exit 1 instead of 130) and nothing else can write there
until the process exits. So the first Ctrl-C only asks for a stop; the stop is raised after
the current step, where no write is under way, and Lightning then saves last.ckpt and
finishes the records as before. A second Ctrl-C, or a step that does not come within
`grace_s` (a learner waiting for data), interrupts at once, as Python would.
"""

from __future__ import annotations

import logging
import signal
import threading

import lightning as L

log = logging.getLogger(__name__)


class StopAtStepBoundary(L.Callback):
    """Turns the first SIGINT of a fit into a KeyboardInterrupt raised at a step's end."""

    def __init__(self, grace_s: float = 10.0) -> None:
        self.grace_s = float(grace_s)
        self.requested = False
        self._previous = None
        self._timer: threading.Timer | None = None

    def on_fit_start(self, trainer, pl_module) -> None:
        # not where SIGINT is ignored (a background job) or handled by someone else
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum, frame) -> None:
        if self.requested:  # the second Ctrl-C, or the grace timer's
            raise KeyboardInterrupt
        self.requested = True
        log.warning("Ctrl-C: stopping after this learner step (Ctrl-C again stops at once)")
        # a real signal to the main thread: it also breaks a blocking wait (EINTR)
        main = threading.main_thread().ident
        self._timer = threading.Timer(self.grace_s, signal.pthread_kill, (main, signal.SIGINT))
        self._timer.daemon = True
        self._timer.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.requested:
            self._cancel_timer()
            raise KeyboardInterrupt

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # the handler stays: Lightning ignores SIGINT from here on while it shuts down
        self._cancel_timer()

    def on_fit_end(self, trainer, pl_module) -> None:
        self._cancel_timer()
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
