"""RaceIntake: collectors' races into the replay buffers on a thread of the learner's own.

Without it the learner's thread drains the queues itself, and only while the replay ratio
holds it back: unpickling races, the n-step rule and the frames' copy then happen with no
step in flight. On an H200 that was the learner's whole wait (11.7% of its time) while each
collector sat 3 ms a car-action blocked on its full queue. On a thread, races come in while
the GPU runs a step. A rate limiter (`intake_allows`, Reverb's SampleToInsertRatio idea)
keeps the replay ratio: the intake stops taking races once the new data is a few batches
ahead of what the learner has used, so the queues fill and the collectors wait instead of
running the ratio down.

The thread only stores races; race records, best.pt and collector reports stay on the
learner's thread (`absorb`), so nothing there needs a lock beyond the buffers' own.
"""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from collections.abc import Callable, Iterable
from multiprocessing import connection
from typing import Any

IDLE_WAIT_S = 0.05  # longest wait on empty queues before the queue list is read again
POLL_S = 0.002  # the wait's step for queues with nothing to wait on (a Ray fleet's)

NOTHING = object()  # what next_message returns for a queue with no message to give


def next_message(q: Any) -> Any:
    """A collector queue's next message, or NOTHING: empty, or a dead collector's queue
    (the pool renews it)."""
    if q is None:
        return NOTHING
    try:
        return q.get_nowait()
    except (queue_mod.Empty, EOFError, OSError, ValueError):  # ValueError: a closed queue
        return NOTHING


def wait_for_any(queues: Iterable[Any], timeout_s: float) -> None:
    """Return once one of the queues may hold a message, or after `timeout_s`. A
    multiprocessing queue is waited on through its pipe, so an idle intake sleeps instead
    of polling; any other queue (a thread queue) is polled every POLL_S."""
    readers: dict[int, Any] = {}  # by id: a queue listed twice is waited on once
    for q in queues:
        if q is None:  # a dead collector's slot, until the pool renews it
            continue
        reader = getattr(q, "_reader", None)  # multiprocessing.Queue's end of its pipe
        if reader is None:
            time.sleep(min(timeout_s, POLL_S))
            return
        if not getattr(reader, "closed", False):  # a closed pipe would wake the wait at once
            readers[id(reader)] = reader
    if not readers:
        time.sleep(timeout_s)
        return
    try:
        connection.wait(list(readers.values()), timeout_s)
    except (OSError, ValueError):  # a queue closed under us: the pool renews it
        time.sleep(POLL_S)


def intake_allows(
    samples_learned: int, new_transitions: int, ratio: float, ahead_samples: int
) -> bool:
    """May the intake take another race? (pure: while ratio x new data stays within
    `ahead_samples` of the samples learned, so the learner never waits for a stored race.)"""
    return ratio * new_transitions <= samples_learned + ahead_samples


class RaceIntake:
    """A daemon thread: takes messages from `queues()` round-robin while `is_open()`, hands
    each to `take` (which stores a race and returns what the learner's thread must record),
    and queues the results for `absorb`."""

    def __init__(
        self,
        queues: Callable[[], Iterable[Any]],
        take: Callable[[Any], Any],
        is_open: Callable[[], bool],
        idle_wait: Callable[[Iterable[Any], float], None] = wait_for_any,
    ) -> None:
        self.queues, self.take, self.is_open = queues, take, is_open
        self.idle_wait = idle_wait
        self.done: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._room = threading.Event()  # the learner used data: the limiter may open
        self._arrived = threading.Event()  # a message is waiting in `done`
        self._next = 0  # the queue the next round starts at
        self._thread = threading.Thread(target=self._run, name="race-intake", daemon=True)

    def start(self) -> RaceIntake:
        self._thread.start()
        return self

    def made_room(self) -> None:
        """The learner took a batch: the limiter may let races in again."""
        self._room.set()

    def wait(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for a message to arrive (the learner waiting for data)."""
        self._arrived.wait(timeout_s)
        self._arrived.clear()

    def absorb(self, handle: Callable[[Any], None]) -> int:
        """Hand every waiting result to `handle` on the calling thread; how many. Raises
        the thread's error, if it died, so a broken intake never starves a run in silence."""
        n = 0
        while True:
            try:
                item = self.done.get_nowait()
            except queue_mod.Empty:
                break
            handle(item)
            n += 1
        if self.error is not None:
            raise RuntimeError(f"the race intake thread failed: {self.error!r}") from self.error
        return n

    def close(self) -> None:
        self._stop.set()
        self._room.set()
        self._thread.join(timeout=10.0)

    def _run(self) -> None:
        woke_early = False  # the last idle wait came back within POLL_S
        try:
            while not self._stop.is_set():
                if not self.is_open():
                    self._room.wait(0.05)
                    self._room.clear()
                    continue
                if self._take_round():
                    woke_early = False
                    continue
                # an early wake-up that brought nothing: pause, so that a pipe that stays
                # readable (or an idle_wait that returns at once) never makes a busy loop
                if woke_early and self._stop.wait(POLL_S):
                    break
                if self._stop.is_set():
                    break
                start = time.monotonic()
                self.idle_wait(list(self.queues()), IDLE_WAIT_S)
                woke_early = time.monotonic() - start < POLL_S
        except BaseException as e:  # reported to the learner's thread by absorb
            self.error = e
            self._arrived.set()

    def _take_round(self) -> int:
        """One message from each queue that has one (fair to every collector). A round the
        limiter cuts short resumes at the next queue: restarting at the first, a limiter
        that lets one race in at a time served the first few collectors alone (on an H200,
        6 of 13 collectors never delivered a race)."""
        queues = list(self.queues())
        got = 0
        for i in rotation(len(queues), self._next):
            msg = next_message(queues[i])
            if msg is NOTHING:
                continue
            self.done.put(self.take(msg))
            self._arrived.set()
            got += 1
            self._next = i + 1
            if self._stop.is_set() or not self.is_open():
                break
        return got


def rotation(n: int, start: int) -> list[int]:
    """Indices 0..n-1 in turn from `start` (taken modulo n): a round-robin round."""
    return [(start + j) % n for j in range(n)] if n else []
