"""RolloutManager: creates, feeds and supervises the RolloutWorkerWrapper actors.

The learner hands it each weights version once (a reference to one object in the store)
and it fans the reference out to every wrapper, and to every wrapper it creates later. Each
wrapper's long `run()` call is watched: when it ends (the actor died, was killed, or its
worker raised), the manager records why, kills what is left of it and starts a new wrapper
in its place with the newest weights, until `max_restarts` is spent; the learner reads all
of this through `status()`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import ray

from trackmind.collectors.fleet.wrapper import RolloutWorkerWrapper

log = logging.getLogger(__name__)
WATCH_EVERY_S = 0.5  # a dead wrapper is noticed within this long


def exit_reason(run_ref: Any) -> str:
    """Why a wrapper's run() call ended, in one line."""
    try:
        ray.get(run_ref, timeout=5)
        return "its run() returned before it was asked to stop"
    except ray.exceptions.RayActorError as e:
        return f"its actor died ({type(e).__name__})"
    except ray.exceptions.RayTaskError as e:
        lines = [x for x in str(e).strip().splitlines() if x.strip()]
        return f"its worker failed: {lines[-1] if lines else type(e).__name__}"
    except Exception as e:  # e.g. a timeout fetching the error itself
        return f"unknown ({type(e).__name__}: {e})"


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)
class RolloutManager:
    """The rollout fleet: n wrappers, restarted when they die."""

    def __init__(
        self,
        spec_box: list,
        options: dict[str, Any],
        n_workers: int,
        seed: int,
        interface: Any,
        statistics: Any,
        max_restarts: int,
        restarts_before: int = 0,
    ) -> None:
        # [ObjectRef of the CollectorSpec]: boxed, so this process never unpickles it
        self.spec_box, self.n, self.seed = spec_box, int(n_workers), int(seed)
        self.restarts_before = int(restarts_before)  # by an earlier manager: new seeds
        self.interface, self.statistics = interface, statistics
        self.max_restarts = int(max_restarts)
        self.options = options  # num_cpus, num_gpus of each wrapper (worker_options)
        self.workers: list[Any] = [None] * self.n
        self.runs: list[Any] = [None] * self.n
        self.pid_refs: list[Any] = [None] * self.n
        self.pids: list[int | None] = [None] * self.n
        self.restarts = 0
        self.deaths: list[tuple[int, str]] = []
        self.failed: str | None = None
        self.latest: tuple[int, list, int] | None = None
        self.stopping = False
        self.lock = threading.Lock()
        self.watcher = threading.Thread(target=self._watch, name="watch", daemon=True)

    def start(self) -> None:
        with self.lock:
            for i in range(self.n):
                self._spawn(i)
        self.watcher.start()

    def _spawn(self, i: int) -> None:
        seed = self.seed * 1000 + i * 17 + self.restarts_before + self.restarts  # as local
        w = RolloutWorkerWrapper.options(**self.options).remote(
            self.spec_box[0], i, seed, self.n, self.interface, self.statistics, self.latest
        )
        self.workers[i], self.runs[i] = w, w.run.remote()
        self.pid_refs[i], self.pids[i] = w.pid.remote(), None

    def set_weights(self, version: int, box: list, frames: int) -> None:
        """Fan a new weights version out to every wrapper (the reference, not the data)."""
        with self.lock:
            self.latest = (int(version), box, int(frames))
            workers = [w for w in self.workers if w is not None]
        for w in workers:
            w.set_weights.remote(int(version), box, int(frames))

    def status(self) -> dict[str, Any]:
        with self.lock:
            for i, ref in enumerate(self.pid_refs):
                if ref is not None and ray.wait([ref], timeout=0)[0]:
                    try:
                        self.pids[i] = int(ray.get(ref))
                    except ray.exceptions.RayError:
                        pass
                    self.pid_refs[i] = None
            alive = sum(1 for p, r in zip(self.pids, self.runs) if p is not None and r is not None)
            return {
                "alive": alive,
                "restarts": self.restarts,
                "deaths": list(self.deaths),
                "failed": self.failed,
                "pids": [p for p in self.pids if p is not None],
            }

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask every wrapper to stop, wait for them, then kill what is left."""
        with self.lock:
            self.stopping = True
            workers = [w for w in self.workers if w is not None]
            runs = [r for r in self.runs if r is not None]
        for w in workers:
            w.stop.remote()
        if runs:
            ray.wait(runs, num_returns=len(runs), timeout=timeout_s)
        for w in workers:
            ray.kill(w)

    def _watch(self) -> None:
        while not self.stopping:
            time.sleep(WATCH_EVERY_S)
            with self.lock:
                if self.stopping:
                    return
                runs = {r: i for i, r in enumerate(self.runs) if r is not None}
            if not runs:
                continue
            ended, _ = ray.wait(list(runs), num_returns=len(runs), timeout=0)
            for ref in ended:
                self._replace(runs[ref], exit_reason(ref))

    def _replace(self, i: int, why: str) -> None:
        with self.lock:
            if self.stopping:
                return
            self.deaths.append((i, why))
            old, self.workers[i], self.runs[i], self.pids[i] = self.workers[i], None, None, None
            try:
                ray.kill(old)
            except Exception:
                pass
            if self.restarts >= self.max_restarts:
                self.failed = (
                    f"rollout worker {i} stopped ({why}) and the restart budget "
                    f"({self.max_restarts}) is spent"
                )
                return
            self.restarts += 1
            self._spawn(i)
