"""BatchPrefetcher: the learner's next batches sampled (and pinned) on a thread.

Sampling a batch (index draws, frame gathers, the mini-race collate) is CPU work that a GPU
learner otherwise waits for at every step. torch's gathers and copies release the GIL, so one
thread prepares the next ``depth`` batches while the learner's step runs on the device, and
the collate leaves the critical path. On a CPU learner the thread competes with the learner's
own threads for the same cores, so runs there keep it off (trainer.prefetch_batches: 0).

Batches come out in the order they were sampled; a prefetched batch was drawn from the buffer
as it was up to ``depth`` steps earlier (and with the priorities of then), which replay does
not notice. The buffers must be safe to sample from this thread while races and priority
updates arrive on the learner's: ReplayBuffers holds one lock for that.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

Batch = dict[str, torch.Tensor]


def pinned(batch: Batch) -> Batch:
    """The batch's host tensors in page-locked memory, so a non_blocking copy to the GPU is
    asynchronous (tensors already on a device, frames stored there, stay as they are)."""
    return {k: v.pin_memory() if v.device.type == "cpu" else v for k, v in batch.items()}


class BatchPrefetcher:
    """Keeps ``depth`` batches of ``sample()`` in flight on one worker thread."""

    def __init__(self, sample: Callable[[], Batch], depth: int = 1, pin: bool = False) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be >= 1, got {depth}")
        self.sample = sample
        self.depth = int(depth)
        self.pin = bool(pin)
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            1, thread_name_prefix="trackmind-prefetch"
        )
        self._pending: deque[Future[Batch]] = deque()

    def _make(self) -> Batch:
        batch = self.sample()
        return pinned(batch) if self.pin else batch

    def _fill(self) -> None:
        if self._pool is None:
            raise RuntimeError("the prefetcher is closed")
        while len(self._pending) < self.depth:
            self._pending.append(self._pool.submit(self._make))

    def take(self) -> Batch:
        """The oldest prepared batch (waits for it), then the queue is topped up again.

        An exception raised while sampling comes out here, on the learner's thread.
        """
        self._fill()
        batch = self._pending.popleft().result()
        self._fill()
        return batch

    def close(self) -> None:
        """Drop the batches not taken and stop the thread (waits for a sample under way)."""
        for f in self._pending:
            f.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> BatchPrefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
