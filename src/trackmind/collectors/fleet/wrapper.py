"""RolloutWorkerWrapper: the Ray actor that owns one RolloutWorker and ships its races.

`run()` races until `stop()` (a threaded actor: weights and stop calls arrive meanwhile).
The worker's progress handler drops races already too stale for the newest weights this
wrapper knows of, and queues the rest; a sender thread takes them off that queue in batches
(what arrives within SEND_EVERY_S), puts each batch in the object store as one object (owned
here, fetched by the learner) and hands its reference with the races' metadata to the
ReplayBufferInterface, so racing never waits on the network unless the learner is full.
Batching matters: every actor call costs about a millisecond of CPU on each side. Every
race, shipped or dropped, is also reported to EpisodeStatistics, every few seconds.
"""

from __future__ import annotations

import os
import queue as queue_mod
import threading
import time
from typing import TYPE_CHECKING, Any

import ray

from trackmind.collectors.fleet.fragment import SampleFragment, is_stale
from trackmind.queueing import put_until_stopped

if TYPE_CHECKING:
    from trackmind.collectors.fleet.settings import RayCollectorConfig
    from trackmind.collectors.spec import CollectorSpec

SEND_BATCH = 32  # fragments per call to the interface at most ...
SEND_EVERY_S = 0.25  # ... gathered for this long: few, larger calls (each costs ~ms of CPU)
IN_FLIGHT = 2  # calls to the interface not yet accepted before the sender waits
EPISODES_EVERY_S = 2.0  # reports to EpisodeStatistics


def episode_row(frag: SampleFragment, dropped: bool) -> dict[str, Any]:
    """What EpisodeStatistics keeps of a race."""
    r = frag.rollout
    return {
        "worker": frag.worker,
        "map": r["map"],
        "finished": bool(r["finished"]),
        "race_time_ms": r["race_time"],
        "greedy": bool(r.get("greedy", False)),
        # a race from a saved state or driven by the scripted driver is not the agent's race
        "own": not (r.get("mid_track") or r.get("demo")),
        "n_steps": frag.n_steps,
        "dropped": dropped,
    }


@ray.remote(max_restarts=0, max_concurrency=4)
class RolloutWorkerWrapper:
    """One RolloutWorker, its outgoing queue and sender thread."""

    def __init__(
        self,
        spec: CollectorSpec,
        index: int,
        seed: int,
        n_workers: int,
        interface: Any,
        statistics: Any,
        weights: tuple[int, list, int] | None = None,
    ) -> None:
        self.spec, self.index, self.seed, self.n_workers = spec, int(index), int(seed), n_workers
        self.interface, self.statistics = interface, statistics
        col: RayCollectorConfig = spec.collector  # type: ignore[assignment]
        self.max_staleness = col.max_staleness
        self._latest = weights  # (version, [ObjectRef of the state dict], frames)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._inbox: queue_mod.Queue = queue_mod.Queue(col.queue_size)
        self._episodes: list[dict] = []
        self._send_error: BaseException | None = None
        self.stale_dropped = 0
        self.sent = 0

    def pid(self) -> int:
        return os.getpid()

    def set_weights(self, version: int, box: list, frames: int) -> None:
        """A newer weights version (its reference, boxed so Ray does not fetch it here)."""
        with self._lock:
            if self._latest is None or version > self._latest[0]:
                self._latest = (int(version), box, int(frames))

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> dict[str, int]:
        """Race until stopped; returns counts. An exception here reaches the manager."""
        from trackmind.collectors.fleet.worker import RolloutWorker  # torch: only where it races

        worker = RolloutWorker(self.spec, self.index, self.seed, self.n_workers)
        sender = threading.Thread(target=self._send_loop, name="sender", daemon=True)
        sender.start()
        try:
            worker.run(self._progress, self._stop.is_set, self._weights, self._on_stats)
        finally:
            self._stop.set()
            sender.join(5.0)
            worker.close()
        self._check_sender()
        return {"sent": self.sent, "stale_dropped": self.stale_dropped}

    # --- the racing thread -------------------------------------------------------------
    def _weights(self, held: int):
        with self._lock:
            latest = self._latest
        if latest is None or latest[0] <= held:
            return None
        version, box, frames = latest
        return version, ray.get(box[0], timeout=120), frames

    def _progress(self, frag: SampleFragment) -> bool:
        newest = self._latest[0] if self._latest is not None else frag.policy_version
        dropped = is_stale(newest, frag.policy_version, self.max_staleness)
        with self._lock:
            self._episodes.append(episode_row(frag, dropped))
        if dropped:  # the learner would drop it too: save the transfer
            self.stale_dropped += 1
            return True
        return self._enqueue(("race", frag))

    def _on_stats(self, timings: dict) -> None:
        self._enqueue(("stats", timings))

    def _enqueue(self, item: tuple) -> bool:
        return put_until_stopped(self._inbox, item, self._stop, self._check_sender)

    def _check_sender(self) -> None:
        if self._send_error is not None:
            raise RuntimeError(f"sender thread failed: {self._send_error!r}")

    # --- the sender thread -------------------------------------------------------------
    def _send_loop(self) -> None:
        in_flight: list = []
        last_flush = time.monotonic()
        try:
            while not (self._stop.is_set() and self._inbox.empty()):
                batch = self._collect()
                if batch:
                    in_flight.append(self._send(batch))
                in_flight = self._settle(in_flight, IN_FLIGHT - 1 if batch else IN_FLIGHT)
                if time.monotonic() - last_flush > EPISODES_EVERY_S:
                    self._flush_episodes()
                    last_flush = time.monotonic()
            self._settle(in_flight, 0)
            self._flush_episodes()
        except BaseException as e:  # noticed by the racing thread, which then fails
            self._send_error = e

    def _collect(self) -> list[tuple]:
        """The next batch: what arrives within SEND_EVERY_S of a first item."""
        try:
            batch = [self._inbox.get(timeout=0.2)]
        except queue_mod.Empty:
            return []
        deadline = time.monotonic() + SEND_EVERY_S
        while len(batch) < SEND_BATCH and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                batch.append(self._inbox.get(timeout=left))
            except queue_mod.Empty:
                break
        return batch

    def _send(self, batch: list[tuple]) -> Any:
        """One call to the interface: the races as one stored object, plus any timings."""
        frags = [payload for kind, payload in batch if kind == "race"]
        items: list[tuple] = [("stats", self.index, t) for kind, t in batch if kind == "stats"]
        if frags:  # the reference travels boxed; the learner fetches the object once
            items.append(("races", [f.meta() for f in frags], [ray.put(frags)]))
        self.sent += len(frags)
        return self.interface.put.remote(items)

    def _settle(self, in_flight: list, keep: int) -> list:
        """Wait until at most `keep` calls are unaccepted (the learner may be full).

        After a stop, waits 2 s at most: the learner is not draining any more.
        """
        waited_after_stop = 0.0
        while len(in_flight) > keep:
            done, in_flight = ray.wait(in_flight, num_returns=1, timeout=0.5)
            if done:
                ray.get(done)  # an interface that is gone fails the sender
            elif self._stop.is_set():
                waited_after_stop += 0.5
                if waited_after_stop >= 2.0:
                    return []
        return in_flight

    def _flush_episodes(self) -> None:
        with self._lock:
            rows, self._episodes = self._episodes, []
        if rows:
            self.statistics.record.remote(rows)  # fire and forget
