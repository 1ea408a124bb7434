"""ReplayBufferInterface: the bounded mailbox between the wrappers and the learner.

An async actor on the learner's node holding (kind, metadata, [reference]) items: the race
data stays in the object store until the learner fetches it. `put` waits while the box is
full, so a learner that cannot keep up slows the senders rather than filling memory.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class ReplayBufferInterface:
    """A bounded FIFO of items from every wrapper."""

    def __init__(self, maxsize: int) -> None:
        self.items: asyncio.Queue = asyncio.Queue(maxsize=int(maxsize))

    async def put(self, items: list[Any]) -> None:
        for item in items:
            await self.items.put(item)

    async def get_batch(self, max_items: int, timeout_s: float) -> list[Any]:
        """Up to max_items items, waiting up to timeout_s for the first one."""
        try:
            first = await asyncio.wait_for(self.items.get(), timeout_s)
        except TimeoutError:
            return []
        out = [first]
        while len(out) < max_items and not self.items.empty():
            out.append(self.items.get_nowait())
        return out

    async def size(self) -> int:
        return self.items.qsize()
