"""BatchPrefetcher: the learner's next batches sampled (and pinned) on a thread.

Sampling a batch (index draws, frame gathers, the mini-race collate) is CPU work that a GPU
learner otherwise waits for at every step. torch's gathers and copies release the GIL, so one
thread prepares the next ``depth`` batches while the learner's step runs on the device, and
the collate leaves the critical path. On a CPU learner the thread competes with the learner's
own threads for the same cores, so runs there keep it off (trainer.prefetch_batches: 0).

On a GPU the thread samples on a CUDA stream of its own. On the learner's stream the batch's
index copy and frame gather (frames stored on the GPU) would queue behind the step in flight,
so the thread could not start the next batch until that step ended and the GPU would idle while
the rest of the batch is collated. On a side stream the gather runs beside the step; ``take``
makes the learner's stream wait for the batch's event and marks its tensors as used there
(``record_stream``), so the caching allocator never hands their memory out too early.

Batches come out in the order they were sampled; a prefetched batch was drawn from the buffer
as it was up to ``depth`` steps earlier (and with the priorities of then), which replay does
not notice. The buffers must be safe to sample from this thread while races and priority
updates arrive on the learner's: ReplayBuffers holds one lock for that.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass

import torch

Batch = dict[str, torch.Tensor]
Ready = tuple[Batch, "torch.cuda.Event | None"]


def pinned(batch: Batch) -> Batch:
    """The batch's host tensors in page-locked memory, so a non_blocking copy to the GPU is
    asynchronous (tensors already on a device, frames stored there, stay as they are)."""
    return {k: v.pin_memory() if v.device.type == "cpu" else v for k, v in batch.items()}


@dataclass
class SampleTimes:
    """What the thread spent on the batches it made: wall seconds, and its own CPU seconds.
    Wall beyond CPU is time it waited: for the GIL, the buffers' lock, or a copy."""

    batches: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0


class BatchPrefetcher:
    """Keeps ``depth`` batches of ``sample()`` in flight on one worker thread."""

    def __init__(
        self,
        sample: Callable[[], Batch],
        depth: int = 1,
        pin: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if depth < 1:
            raise ValueError(f"prefetch depth must be >= 1, got {depth}")
        self.sample = sample
        self.depth = int(depth)
        self.pin = bool(pin)
        dev = torch.device(device) if device is not None else None
        self.device = dev if dev is not None and dev.type == "cuda" else None
        # the thread's own CUDA stream (None on a CPU learner)
        self.stream = torch.cuda.Stream(self.device) if self.device is not None else None
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            1, thread_name_prefix="trackmind-prefetch"
        )
        self._pending: deque[Future[Ready]] = deque()
        self.times = SampleTimes()  # written by the thread only

    def _make(self) -> Ready:
        t0, c0 = time.perf_counter(), time.thread_time()
        done = None
        with nullcontext() if self.stream is None else torch.cuda.stream(self.stream):
            batch = self.sample()
            batch = pinned(batch) if self.pin else batch
            if self.stream is not None:
                done = torch.cuda.Event()
                done.record(self.stream)
        t = self.times
        t.batches, t.wall_s = t.batches + 1, t.wall_s + time.perf_counter() - t0
        t.cpu_s += time.thread_time() - c0
        return batch, done

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
        batch, done = self._pending.popleft().result()
        self._fill()
        if done is not None:  # the learner's stream: after the gather, and owning the memory
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(done)
            for v in batch.values():
                if v.device.type == "cuda":
                    v.record_stream(stream)
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
