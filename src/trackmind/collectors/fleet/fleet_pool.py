"""RayCollectorPool: the Ray rollout fleet behind CollectorPool's interface.

CollectorCallback, the DataModule and the metrics use it as they use the local pool:
`start`, `check` (after every batch and while the learner waits), `alive`, `pids`, `stop`,
`restarts`, `deaths`, `on_restart`, plus `metrics()`. Creating it starts or joins Ray
(a ConfigError names collector.address when that fails, before anything else starts).

Weights: the learner's publish step copies its online network into `shared.network` and
bumps `shared.weights_version` as for local collectors; `check()` sees the new version and
puts the state dict in the object store once, then the RolloutManager fans the reference
out. Data: the Receiver's queue joins `shared.queues`, so the DataModule drains races from
Ray exactly as it drains them from local collectors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import ray

from trackmind.collectors.fleet.connect import check_cluster_fits, connect_ray
from trackmind.collectors.fleet.interface import ReplayBufferInterface
from trackmind.collectors.fleet.manager import RolloutManager
from trackmind.collectors.fleet.receiver import Receiver
from trackmind.collectors.fleet.settings import RayCollectorConfig, worker_options
from trackmind.collectors.fleet.statistics import EpisodeStatistics
from trackmind.collectors.spec import CollectorSpec

log = logging.getLogger(__name__)
CHECK_EVERY_S = 0.2  # publishing new weights
STATUS_EVERY_S = 1.0  # asking the manager how its workers are


def here() -> Any:
    """Schedule an actor on the learner's node (the data it handles ends up here)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return NodeAffinitySchedulingStrategy(node_id=node, soft=True)


class RayCollectorPool:
    """n RolloutWorkerWrapper actors under one RolloutManager, for one learner."""

    def __init__(
        self,
        spec: CollectorSpec,
        shared: Any,
        n_processes: int,
        max_restarts: int,
        seed: int = 0,
    ) -> None:
        self.spec = spec
        self.col: RayCollectorConfig = spec.collector  # type: ignore[assignment]
        self.shared = shared
        self.n = int(n_processes)
        self.max_restarts = int(max_restarts)
        self.seed = int(seed)
        self.restarts = 0
        self.deaths: list[tuple[int, Any]] = []
        self.on_restart: Callable[[int], None] | None = None
        self.owns_ray = connect_ray(self.col)
        check_cluster_fits(self.col)
        self._spec_box: list | None = None  # [ObjectRef of the spec]: put once, on start
        self.manager: Any = None  # the actors, once started
        self.interface: Any = None
        self.statistics: Any = None
        self.receiver: Receiver | None = None
        self._started = False
        self._status: dict[str, Any] = {"alive": 0, "pids": []}
        self._status_ref: Any = None
        self._restarts_before = 0  # by earlier managers (a manager that died counts one)
        self._deaths_seen = 0
        self._published = -1
        self._weights_box: list | None = None
        self._last_check = 0.0
        self._last_status = 0.0
        self._episodes: dict[str, float] = {}
        self._episodes_ref: Any = None

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        maps = {e.name for e in self.spec.cycle}
        # the manager passes the spec on without unpickling it (no torch in its process)
        self._spec_box = [ray.put(self.spec)]
        size = self.col.queue_size * self.n
        self.interface = ReplayBufferInterface.options(scheduling_strategy=here()).remote(size)
        self.statistics = EpisodeStatistics.options(scheduling_strategy=here()).remote()
        self.receiver = Receiver(
            self.interface, self.shared, self.col.max_staleness, known_maps=maps
        )
        self.receiver.start()
        self.shared.queues.append(self.receiver.queue)
        self._new_manager()
        self._started = True
        log.info("started %d Ray rollout worker(s)", self.n)

    def _new_manager(self) -> None:
        budget = self.max_restarts - self._restarts_before
        self.manager = RolloutManager.options(scheduling_strategy=here()).remote(
            self._spec_box,
            worker_options(self.col),
            self.n,
            self.seed,
            self.interface,
            self.statistics,
            budget,
            self._restarts_before,
        )
        self._deaths_seen = 0
        self._status_ref = None
        self._publish(force=True)
        self.manager.start.remote()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the workers and helpers; shut Ray down if this pool started it."""
        if self._started:
            self._started = False
            try:
                ray.get(self.manager.stop.remote(timeout_s), timeout=timeout_s + 5)
            except Exception as e:  # a dead manager's workers are gone with it
                log.warning("stopping the rollout manager: %s", e)
            if self.receiver is not None:
                self.receiver.stop()
                if self.receiver.queue in self.shared.queues:
                    self.shared.queues.remove(self.receiver.queue)
            for actor in (self.manager, self.interface, self.statistics):
                try:
                    ray.kill(actor)
                except Exception:
                    pass
            log.info("Ray rollout workers stopped")
        if self.owns_ray and ray.is_initialized():
            ray.shutdown()
            self.owns_ray = False

    # --- supervision (learner thread) ---------------------------------------------------
    def check(self) -> list[int]:
        """Publish new weights, read the manager's status; returns workers restarted."""
        if not self._started:
            return []
        now = time.monotonic()
        if now - self._last_check < CHECK_EVERY_S:
            return []
        self._last_check = now
        if self.receiver is not None and self.receiver.error is not None:
            raise RuntimeError(f"receiving races from Ray failed: {self.receiver.error!r}")
        self._publish()
        if now - self._last_status < STATUS_EVERY_S:
            return []
        self._last_status = now
        return self._poll_status()

    def _publish(self, force: bool = False) -> None:
        version = int(self.shared.weights_version.value)
        if version == self._published and not force:
            return
        state = {k: t.detach().cpu().numpy() for k, t in self.shared.network.state_dict().items()}
        self._weights_box = [ray.put(state)]  # kept alive here while the fleet may fetch it
        self.manager.set_weights.remote(version, self._weights_box, int(self.shared.frames.value))
        self._published = version

    def _poll_status(self) -> list[int]:
        if self._status_ref is None:
            self._status_ref = self.manager.status.remote()
            return []
        if not ray.wait([self._status_ref], timeout=0)[0]:
            return []
        try:
            st = ray.get(self._status_ref)
        except ray.exceptions.RayActorError as e:
            return self._manager_died(e)
        self._status_ref = self.manager.status.remote()
        self._status = st
        restarted = []
        for idx, why in st["deaths"][self._deaths_seen :]:
            log.warning("rollout worker %d stopped (%s): restarting it", idx, why)
            self.deaths.append((idx, why))
            restarted.append(idx)
        self._deaths_seen = len(st["deaths"])
        self.restarts = self._restarts_before + int(st["restarts"])
        if st["failed"]:
            raise RuntimeError(st["failed"])
        for idx in restarted:
            if self.on_restart is not None:
                self.on_restart(idx)
        return restarted

    def _manager_died(self, e: Exception) -> list[int]:
        self.deaths.append((-1, f"the rollout manager died ({type(e).__name__})"))
        self._restarts_before = self.restarts + 1
        self.restarts = self._restarts_before
        if self.restarts > self.max_restarts:
            raise RuntimeError(
                f"the rollout manager died and the restart budget ({self.max_restarts}) is spent"
            )
        log.warning("the rollout manager died: starting a new fleet")
        self._new_manager()
        if self.on_restart is not None:
            self.on_restart(-1)
        return [-1]

    # --- what the learner reports -------------------------------------------------------
    def alive(self) -> int:
        return int(self._status.get("alive", 0)) if self._started else 0

    def pids(self) -> list[int]:
        """Process ids of the wrapper actors (on this machine when Ray runs locally)."""
        return list(self._status.get("pids", []))

    def metrics(self) -> dict[str, float]:
        """Receiver counters and EpisodeStatistics' figures (the latest it answered)."""
        if self._started:
            self._refresh_metrics()
        out = dict(self._episodes)
        if self.receiver is not None:
            out.update(self.receiver.counters())
        return out

    def _refresh_metrics(self, wait_s: float = 0.0) -> None:
        if self._episodes_ref is not None:
            if not ray.wait([self._episodes_ref], timeout=wait_s)[0]:
                return
            try:
                self._episodes = ray.get(self._episodes_ref)
            except ray.exceptions.RayError as e:
                log.warning("EpisodeStatistics did not answer: %s", e)
        self._episodes_ref = self.statistics.summary.remote()
