"""What collectors send the learner, and putting it onto a bounded queue without blocking
shutdown.

Producers (collector processes, a Ray wrapper's racing thread) wait while the consumer is
busy, which keeps the replay ratio, but must give up as soon as they are asked to stop, or
a full queue would hang the shutdown. Kept free of torch: Ray actors import it.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class RaceFile:
    """A race a local collector wrote to its spool file; the queue carries only the path."""

    path: str


@dataclass(frozen=True)
class RaceInMemory:
    """A race handed over in this process (collector=ray: fetched from the cluster)."""

    rollout: dict  # RolloutResults (trackmind.env.rollout_results)


@dataclass(frozen=True)
class CollectorStats:
    """A collector's pipeline timings (PipelineMonitor.summary), every few seconds."""

    collector: int
    timings: dict[str, float]


@dataclass(frozen=True)
class CollectorError:
    """A collector's last words: the traceback of what killed it."""

    collector: int
    traceback: str


CollectorMessage = RaceFile | RaceInMemory | CollectorStats | CollectorError


class StopFlag(Protocol):
    def is_set(self) -> bool: ...


def put_until_stopped(
    q: Any, item: Any, stop: StopFlag, check: Callable[[], None] | None = None
) -> bool:
    """Put `item` on `q`, waiting while it is full; False if `stop` is set meanwhile.

    `check` runs before every try and raises to give up (e.g. the consumer thread failed).
    """
    while not stop.is_set():
        if check is not None:
            check()
        try:
            q.put(item, timeout=0.2)
            return True
        except queue.Full:
            continue
    return False
