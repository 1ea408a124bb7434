"""CollectorPool: what the learner needs of its collectors, wherever they run.

LocalCollectorPool (processes on this machine, local_pool.py) and RayCollectorPool (actors
on a Ray cluster, fleet/fleet_pool.py) implement it; `make_collector_pool` builds the one
`collector.backend` names (trackmind.backends.COLLECTOR_POOLS).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from trackmind.backends import COLLECTOR_POOLS, choose, load

if TYPE_CHECKING:
    from trackmind.collectors.spec import CollectorSpec


@runtime_checkable
class CollectorPool(Protocol):
    """What the learner needs of its collectors, wherever they run.

    LocalCollectorPool (processes on this machine) and RayCollectorPool (actors on a Ray
    cluster) implement it; CollectorCallback drives it through a fit, the
    DataModule checks it while it waits for data, RaceMetricsCallback reports it.
    """

    restarts: int  # collectors restarted so far
    on_restart: Callable[[int], None] | None  # told the collector index after a restart

    def start(self) -> None: ...

    def check(self) -> list[int]:
        """Restart collectors that died; the indices restarted."""
        ...

    def alive(self) -> int: ...

    def pids(self) -> list[int]: ...

    def metrics(self) -> dict[str, float]:
        """The backend's own figures for MLflow (none for local processes)."""
        ...

    def stop(self, timeout_s: float = 10.0) -> None: ...


def make_collector_pool(
    spec: CollectorSpec, shared: Any, n_processes: int, max_restarts: int, seed: int = 0
) -> CollectorPool:
    """The configured backend's pool (trackmind.backends.COLLECTOR_POOLS): local processes,
    or Ray actors (collector=ray; Ray is an optional feature, imported only then)."""
    pool = choose(COLLECTOR_POOLS, spec.collector.backend, "collector.backend")
    return load(pool.build)(spec, shared, n_processes, max_restarts, seed)
