"""LocalCollectorPool: starts, watches, restarts and stops the local collector processes.

Used by CollectorCallback (start at fit start, stop at fit end / on exceptions / Ctrl-C)
and by the DataModule (it checks the pool while it waits for data, so a dead collector is
noticed even when no batch is being learned). Processes are daemonic and watch their
parent, so none outlives the learner even after a kill -9.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from trackmind.collectors.inference_server import make_server_link, server_process_fn
from trackmind.collectors.local_process import collector_process_fn
from trackmind.collectors.shared_handles import SharedHandles, shared_device, spawn_context
from trackmind.collectors.spec import CollectorSpec

log = logging.getLogger(__name__)


class LocalCollectorPool:
    """K collector processes on this machine sharing one SharedHandles bundle; with
    collector.inference=server, one more process (index K) computes every collector's Q
    values (collectors/inference_server.py) and is watched and restarted like a collector."""

    def __init__(
        self,
        spec: CollectorSpec,
        shared: SharedHandles,
        n_processes: int,
        max_restarts: int,
        seed: int = 0,
    ) -> None:
        self.spec = spec
        self.shared = shared
        self.n = int(n_processes)
        self.max_restarts = int(max_restarts)
        self.seed = int(seed)
        self.server = None  # the inference server's link, when collectors use one
        if spec.collector.inference == "server":
            cars = spec.collector.cars_per_process
            self.server = make_server_link(shared.network, self.n, cars, spawn_context())
        self.procs: list[Any] = [None] * (self.n + (self.server is not None))
        self.restarts = 0
        self.deaths: list[tuple[int, int | None]] = []  # (collector, exit code)
        self.on_restart: Callable[[int], None] | None = None  # told the index after a restart
        self._ctx = spawn_context()
        self._started = False

    def _spawn(self, idx: int) -> None:
        p = self._process(idx)
        p.start()
        self.procs[idx] = p

    def _process(self, idx: int) -> Any:
        """Process `idx` (a collector, or the server at index n), made but not started; its
        link is made here, on the calling thread (SharedHandles.link grows shared lists)."""
        seed = self.seed * 1000 + idx * 17 + self.restarts
        link = self.shared.link(idx)
        if self.server is not None and idx == self.n:  # the inference server
            device = shared_device(self.spec.collector, torch.cuda.is_available())
            target, args = server_process_fn, (self.spec, self.server, link, device, seed)
            name = "trackmind-inference-server"
        else:  # a collector; one that asks the server never opens the (GPU) shared network
            if self.server is not None:
                link = dataclasses.replace(link, network=None)
            target, args = collector_process_fn, (self.spec, idx, link, seed, self.server)
            name = f"trackmind-collector-{idx}"
        return self._ctx.Process(target=target, args=args, name=name, daemon=True)

    def start(self) -> None:
        """Spawn every process at once. A spawned child reads its arguments (the collector
        spec, about 0.5 MB with the built-in maps) through a pipe only after importing the
        parent's main module, and Process.start blocks until the pipe is read: one after the
        other, 13 processes took 73 s to start on a 16-core GPU machine."""
        self.shared.stop.clear()
        self.procs = [self._process(i) for i in range(len(self.procs))]
        self._started = True  # stop() reaps whatever started, should another start fail
        with ThreadPoolExecutor(len(self.procs), thread_name_prefix="trackmind-spawn") as pool:
            list(pool.map(lambda p: p.start(), self.procs))
        server = " and an inference server" if self.server is not None else ""
        log.info("started %d collector process(es)%s", self.n, server)

    def check(self) -> list[int]:
        """Restart collectors that died; returns the indices restarted."""
        if not self._started or self.shared.stop.is_set():
            return []
        restarted = []
        for i, p in enumerate(self.procs):
            if p is not None and not p.is_alive():
                code = p.exitcode
                self.deaths.append((i, code))
                if self.restarts >= self.max_restarts:
                    raise RuntimeError(
                        f"collector {i} died (exit code {code}) and the restart budget "
                        f"({self.max_restarts}) is spent"
                    )
                self.restarts += 1
                log.warning("collector %d died (exit code %s): restarting it", i, code)
                self.shared.renew(i)  # it may have died holding its lock or mid-message
                self._spawn(i)
                restarted.append(i)
                if self.on_restart is not None:
                    self.on_restart(i)
        return restarted

    def alive(self) -> int:
        """Collector processes alive (the inference server is not counted)."""
        return sum(1 for p in self.procs[: self.n] if p is not None and p.is_alive())

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None and p.pid is not None]

    def metrics(self) -> dict[str, float]:
        return {}

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask every collector to stop, then terminate and kill what is left."""
        if not self._started:
            return
        self._started = False
        self.shared.stop.set()
        deadline = time.monotonic() + timeout_s
        # drain the queue so collectors blocked on a full queue can see the stop flag
        while any(p is not None and p.is_alive() for p in self.procs):
            self._drain()
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for p in self.procs:
            if p is not None and p.is_alive():
                p.terminate()
                p.join(2.0)
                if p.is_alive():
                    p.kill()
                    p.join(2.0)
        for p in self.procs:
            if p is not None and p.pid is not None:  # started (a failed start leaves some not)
                p.join(0.1)
        self._drain()
        self.shared.cleanup()
        log.info("collectors stopped")

    def _drain(self) -> None:
        for q in self.shared.queues:
            try:
                while True:
                    q.get_nowait()
            except Exception:
                pass
