"""ReplayDataModule: streams learner batches from the replay buffers the collectors fill.

The train dataset is an infinite IterableDataset living in the learner process
(num_workers=0): before each batch it drains the collectors' queue into buffer /
buffer_test through the n-step rule, waits until the buffer holds `learning_starts`
transitions, and keeps the replay ratio (samples learned per new transition) by waiting for
data rather than over-training on what it has. Validation samples buffer_test.
With prefetch_batches > 0 (a GPU learner), a thread samples the next batches while the
learner's step runs (replay.prefetch); `sample_s` is then only the time the learner waited
for a prepared batch, the part of sampling left on its critical path. With `intake_thread`,
races come in on a thread of their own (training.intake) instead of the learner's.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from trackmind.collectors.shared_handles import SharedHandles, read_spool
from trackmind.queueing import (
    CollectorError,
    CollectorMessage,
    CollectorStats,
    RaceFile,
    RaceInMemory,
)
from trackmind.replay.buffers import ReplayBuffers
from trackmind.replay.prefetch import BatchPrefetcher, SampleTimes
from trackmind.training.intake import (
    NOTHING,
    RaceIntake,
    intake_allows,
    next_message,
)
from trackmind.training.race_stats import RaceStats

log = logging.getLogger(__name__)


def replay_ratio_allows(
    samples_learned: int, batch: int, new_transitions: int, ratio: float
) -> bool:
    """May the learner take one more batch? (pure: samples so far + batch <= ratio * data)."""
    return samples_learned + batch <= ratio * new_transitions


class _TrainStream(IterableDataset):
    def __init__(self, dm: ReplayDataModule) -> None:
        self.dm = dm

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        while True:
            batch = self.dm.next_batch()
            if batch is None:  # past the deadline while waiting for data: end the run
                return
            yield batch


class _TestStream(IterableDataset):
    def __init__(self, dm: ReplayDataModule, n_batches: int) -> None:
        self.dm, self.n = dm, n_batches

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for _ in range(self.n):
            batch = self.dm.test_batch()
            if batch is None:
                return
            yield batch


class ReplayDataModule(L.LightningDataModule):
    """Owns the buffers; the learner's only source of data."""

    def __init__(
        self,
        buffers: ReplayBuffers,
        shared: SharedHandles,
        batch_size: int,
        replay_ratio: float,
        gamma: Callable[[], float],
        potential_weights: dict[str, float] | None = None,
        stats: RaceStats | None = None,
        check_collectors: Callable[[], Any] | None = None,
        val_batches: int = 4,
        wait_limit_s: float | None = None,
        on_best_race: Callable[[dict], None] | None = None,
        pin_memory: bool = False,
        prefetch_batches: int = 0,
        intake_thread: bool = False,
        intake_ahead_batches: int = 64,
        host_inputs: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.buffers = buffers
        self.shared = shared
        self.batch_size = int(batch_size)
        self.replay_ratio = float(replay_ratio)
        self.gamma = gamma
        self.potential_weights = potential_weights
        self.stats = stats or RaceStats()
        self.check_collectors = check_collectors or (lambda: None)
        self.val_batches = int(val_batches)
        self.on_best_race = on_best_race or (lambda r: None)  # e.g. keep best.pt
        self.pin_memory = bool(pin_memory)  # a GPU learner: pinned batches, async copies
        self.prefetch_batches = int(prefetch_batches)  # batches sampled ahead on a thread
        self._prefetcher: BatchPrefetcher | None = None
        # entries a training step takes from pinned host memory (IQNLightningModule.host_inputs)
        self.host_inputs = tuple(host_inputs)
        self.intake_thread = bool(intake_thread)  # races stored on a thread of their own
        self.intake_ahead_batches = int(intake_ahead_batches)  # the limiter's credit
        self._intake: RaceIntake | None = None
        # a learner starved of data (collectors gone) ends its stream this long after fit
        # starts; StopWhenStarved then stops the trainer (Lightning's timer checks only
        # between batches)
        self.wait_limit_s = wait_limit_s
        self.deadline: float | None = None  # time.monotonic(), set when fit asks for data
        self.starved = False
        self.transitions_added = 0
        self.transitions_at_start: int | None = None
        self.samples_served = 0  # this session's (the replay ratio counts from here)
        self.samples_served_total = 0  # earlier sessions of a resumed run
        self.wait_s = 0.0  # waiting for data (the replay ratio, learning_starts)
        self.sample_s = 0.0  # sampling batches: buffer gathers and the mini-race collate

    # --- data in ------------------------------------------------------------------------
    def drain(self, block_s: float = 0.0) -> int:
        """Move every waiting message into the buffers/stats; returns races added.

        With block_s > 0, waits up to that long for a first message (polling every queue).
        """
        deadline = time.perf_counter() + block_s
        races = 0
        while True:
            got = 0
            for q in list(self.shared.queues):
                while (msg := next_message(q)) is not NOTHING:
                    got += 1
                    races += self._handle(msg)
            if got or time.perf_counter() >= deadline:
                return races
            time.sleep(0.005)

    def _handle(self, msg: CollectorMessage) -> int:
        """One collector message; 1 if it brought a race into the buffer."""
        return self._record(self._store(msg))

    def _store(self, msg: CollectorMessage) -> tuple[CollectorMessage, dict | None, int]:
        """The buffers' half of a message (the intake thread's, with one): a race read and
        stored. Returns (message, race or None, transitions stored) for `_record`."""
        match msg:
            case RaceInMemory(rollout=r):
                pass
            case RaceFile(path=path):
                try:
                    r = read_spool(path)
                except (OSError, EOFError, pickle.UnpicklingError) as e:
                    log.warning("lost a race file %s: %s", path, e)
                    return msg, None, 0
            case _:
                return msg, None, 0
        self.buffers.update_capacity(self.shared.frames.value)
        n_train, n_test = self.buffers.add_rollout(r, self.gamma(), self.potential_weights)
        self.transitions_added += n_train + n_test
        return msg, r, n_train + n_test

    def _record(self, stored: tuple[CollectorMessage, dict | None, int]) -> int:
        """The learner thread's half: race records, best.pt, collector reports; 1 per race."""
        msg, r, n = stored
        if r is not None:
            if self.stats.add_race(r, n, self.shared.frames.value):
                self.on_best_race(r)
            return 1
        match msg:
            case RaceInMemory() | RaceFile():
                pass  # a lost race file, already reported
            case CollectorStats(collector=c, timings=timings):
                self.stats.collector_timings[c] = timings
            case CollectorError(collector=c, traceback=tb):
                log.error("collector %s failed:\n%s", c, tb)
                self.stats.collector_errors += 1
            case _:
                log.warning("ignored an unknown collector message: %r", type(msg).__name__)
        return 0

    def _intake_open(self) -> bool:
        """The intake's rate limiter: open until learning starts, then while the new data
        stays intake_ahead_batches ahead of the samples learned at the replay ratio."""
        if self.transitions_at_start is None:
            return True
        new = self.transitions_added - self.transitions_at_start
        ahead = self.intake_ahead_batches * self.batch_size
        return intake_allows(self.samples_served, new, self.replay_ratio, ahead)

    def _wait_for_data(self) -> None:
        """Up to 50 ms for races: drained here, or brought by the intake thread."""
        if self._intake is None:
            self.drain(block_s=0.05)
        else:
            self._intake.wait(0.05)
            self._intake.absorb(self._record)

    # --- batches out --------------------------------------------------------------------
    def next_batch(self) -> dict[str, torch.Tensor] | None:
        """The next training batch, once the buffer and the replay ratio allow it.

        None when the run's deadline passes while waiting (`starved`: the stream ends).
        """
        if self._intake is not None:  # records of the races stored since (not waiting)
            self._intake.absorb(self._record)
        t0 = time.perf_counter()
        while True:
            if self.buffers.ready:
                if self.transitions_at_start is None:
                    self.transitions_at_start = self.transitions_added
                    log.info("buffer holds %d transitions: learning starts", len(self.buffers))
                new = self.transitions_added - self.transitions_at_start
                # one batch of credit at the start so learning begins at once
                if replay_ratio_allows(
                    self.samples_served,
                    self.batch_size,
                    new + self.batch_size / self.replay_ratio,
                    self.replay_ratio,
                ):
                    break
            self.check_collectors()
            self._wait_for_data()
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.starved = True
                return None
        t1 = time.perf_counter()
        self.wait_s += t1 - t0
        if self._prefetcher is not None:
            batch = self._prefetcher.take()
        else:
            batch = self.buffers.sample(self.batch_size)
        self.sample_s += time.perf_counter() - t1
        self.samples_served += self.batch_size
        if self._intake is not None:
            self._intake.made_room()
        return batch

    def test_batch(self) -> dict[str, torch.Tensor] | None:
        try:
            return self.buffers.sample_test(self.batch_size)
        except (RuntimeError, ValueError):
            return None

    # --- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Counters a resumed run continues from: the frame counter drives every schedule."""
        return {
            "frames": int(self.shared.frames.value),
            "weights_version": int(self.shared.weights_version.value),
            "transitions_added": int(self.transitions_added),
            "samples_served_total": int(self.samples_served_total + self.samples_served),
            "stats": self.stats.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore the counters; the replay ratio restarts its accounting with this session."""
        with self.shared.frames.get_lock():
            self.shared.frames.value = int(state["frames"])
        with self.shared.weights_version.get_lock():
            self.shared.weights_version.value = int(state["weights_version"])
        self.transitions_added = int(state["transitions_added"])
        self.samples_served_total = int(state.get("samples_served_total", 0))
        self.stats.load_state_dict(state["stats"])

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int):
        """Lightning's move of a batch to the learner's device, less the ``host_inputs`` of a
        training batch that wait in pinned memory: the captured step copies those itself."""
        stay = {}
        if self.host_inputs and torch.device(device).type == "cuda" and isinstance(batch, dict):
            if self.trainer is not None and self.trainer.training:
                stay = {k: v for k, v in batch.items() if k in self.host_inputs and v.is_pinned()}
        if not stay:
            return super().transfer_batch_to_device(batch, device, dataloader_idx)
        rest = {k: v for k, v in batch.items() if k not in stay}
        return {**super().transfer_batch_to_device(rest, device, dataloader_idx), **stay}

    def train_dataloader(self) -> DataLoader:
        if self.wait_limit_s is not None:
            self.deadline = time.monotonic() + float(self.wait_limit_s)
        self.close_prefetcher()
        if self.prefetch_batches > 0:
            self._prefetcher = BatchPrefetcher(
                lambda: self.buffers.sample(self.batch_size),
                depth=self.prefetch_batches,
                pin=self.pin_memory,  # pinned on the thread, off the critical path
                device=self.sample_device,  # a GPU learner: the thread's own CUDA stream
            )
        self.close_intake()
        if self.intake_thread:
            self._intake = RaceIntake(
                lambda: self.shared.queues, self._store, self._intake_open
            ).start()
        # pinned by the DataLoader on the learner's thread only when nothing prefetches
        pin = self.pin_memory and self._prefetcher is None
        return DataLoader(_TrainStream(self), batch_size=None, num_workers=0, pin_memory=pin)

    @property
    def sample_device(self) -> torch.device | None:
        """The learner's device (its trainer's), where batches are consumed; None unattached."""
        trainer = getattr(self, "trainer", None)
        return None if trainer is None else trainer.strategy.root_device

    @property
    def prefetch_times(self) -> SampleTimes | None:
        """The prefetch thread's time making batches (None without the thread)."""
        return None if self._prefetcher is None else self._prefetcher.times

    def close_prefetcher(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def close_intake(self) -> None:
        """Stop the intake thread and record what it stored meanwhile."""
        if self._intake is not None:
            intake, self._intake = self._intake, None
            intake.close()
            intake.absorb(self._record)

    def teardown(self, stage: str) -> None:
        self.close_intake()
        self.close_prefetcher()

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_TestStream(self, self.val_batches), batch_size=None, num_workers=0)
