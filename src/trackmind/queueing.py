"""Putting onto a bounded queue without blocking shutdown.

Producers (collector processes, a Ray wrapper's racing thread) wait while the consumer is
busy, which keeps the replay ratio, but must give up as soon as they are asked to stop, or
a full queue would hang the shutdown. Kept free of torch: Ray actors import it.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any, Protocol


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
