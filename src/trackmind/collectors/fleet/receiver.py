"""Receiver: the learner's end of the Ray rollout fleet, a thread feeding the DataModule.

It pulls batches of items from the ReplayBufferInterface (each holds the metadata of a
wrapper's batch of races and one reference to them), decides on each race from its metadata
alone (a race from a policy more than `max_staleness` versions behind the learner
is dropped and counted, without fetching its data), fetches the rest from the object store
in one call, checks their layout, and puts them on `queue` as messages the ReplayDataModule
drains like local collectors' (queueing.RaceInMemory, CollectorStats). Data reaches it only
as Ray objects of its own cluster; nothing listens for it anywhere else.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading
from typing import Any

import numpy as np
import ray

from trackmind.collectors.fleet.fragment import check_fragment, check_meta, is_stale
from trackmind.queueing import CollectorMessage, CollectorStats, RaceInMemory, put_until_stopped

log = logging.getLogger(__name__)
FETCH_BATCH = 16  # interface items per call (each may hold many races)


def writable(value: Any) -> Any:
    """Copies of the read-only arrays Ray hands out (the buffers turn them into tensors)."""
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return value.copy()
    if isinstance(value, dict):
        return {k: writable(v) for k, v in value.items()}
    return value


class Receiver:
    """Moves races from the interface actor into a local queue the DataModule drains."""

    def __init__(
        self,
        interface: Any,
        shared: Any,
        max_staleness: int,
        known_maps: set[str] | None = None,
        queue_size: int = FETCH_BATCH,
    ) -> None:
        self.interface = interface
        self.shared = shared  # weights_version (staleness) and frames (counted on arrival)
        self.max_staleness = int(max_staleness)
        self.known_maps = known_maps
        self.queue: queue_mod.Queue = queue_mod.Queue(maxsize=int(queue_size))
        self.received = 0
        self.stale_dropped = 0
        self.lost = 0  # races whose data died with their worker before it was fetched
        self.invalid = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ray-receiver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def counters(self) -> dict[str, float]:
        return {
            "collector/received": float(self.received),
            "collector/stale_dropped": float(self.stale_dropped),
            "collector/lost": float(self.lost),
            "collector/invalid": float(self.invalid),
        }

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    ref = self.interface.get_batch.remote(FETCH_BATCH, 0.5)
                    items = ray.get(ref, timeout=30)
                except ray.exceptions.GetTimeoutError:
                    continue
                self.handle(items)
        except BaseException as e:  # the pool raises it in the learner's thread
            if not self._stop.is_set():
                self.error = e

    def handle(self, items: list[Any]) -> None:
        """Sort one batch of interface items into dropped, lost, invalid and delivered."""
        version = int(self.shared.weights_version.value)
        wanted = []  # (reference to a list of fragments, indices worth fetching)
        for item in items:
            kind, metas, box = item if isinstance(item, tuple) and len(item) == 3 else (0, 0, 0)
            if kind == "stats" and isinstance(box, dict):
                self._deliver(CollectorStats(int(metas), box))
                continue
            boxed = isinstance(box, list) and len(box) == 1 and isinstance(box[0], ray.ObjectRef)
            if kind != "races" or not isinstance(metas, list) or not boxed:
                self.invalid += 1
                log.warning("dropped a malformed item from the rollout fleet")
                continue
            fresh = []
            for i, meta in enumerate(metas):
                why = check_meta(meta)
                if why is not None:
                    self.invalid += 1
                    log.warning("dropped a race with bad metadata: %s", why)
                    continue
                self.received += 1
                with self.shared.frames.get_lock():
                    self.shared.frames.value += int(meta["n_steps"])
                if is_stale(version, int(meta["policy_version"]), self.max_staleness):
                    self.stale_dropped += 1
                else:
                    fresh.append(i)
            if fresh:  # an all-stale batch is never fetched
                wanted.append((box[0], fresh))
        for frags, fresh in self._fetch(wanted):
            for i in fresh:
                frag = frags[i] if isinstance(frags, list) and i < len(frags) else None
                why = check_fragment(frag, self.known_maps)
                if why is not None:
                    self.invalid += 1
                    log.warning("dropped a malformed race from the rollout fleet: %s", why)
                    continue
                self._deliver(RaceInMemory(writable(frag.rollout)))

    def _fetch(self, wanted: list[tuple[Any, list[int]]]) -> list[tuple[Any, list[int]]]:
        if not wanted:
            return []
        try:
            values = ray.get([ref for ref, _ in wanted], timeout=60)
            return [(v, fresh) for v, (_, fresh) in zip(values, wanted)]
        except ray.exceptions.RayError:  # one at a time, to keep the batches that survive
            out = []
            for ref, fresh in wanted:
                try:
                    out.append((ray.get(ref, timeout=10), fresh))
                except ray.exceptions.RayError:
                    self.lost += len(fresh)
            return out

    def _deliver(self, msg: CollectorMessage) -> None:
        put_until_stopped(self.queue, msg, self._stop)
