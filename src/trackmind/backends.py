"""The backends a run can choose, named in one place: the game (`env.backend`), real time
(`env.realtime`) and the collector pool (`collector.backend`).

Each is a ``"module:attribute"`` entry point, imported only when a run chooses it (the
convention of gymnasium's registry). The lower layers name the real game and Ray this way
without importing them, so imports go one way (sim -> game -> env -> agent/replay ->
training -> collectors/fleet/tmi), and an optional feature costs nothing until a run asks for it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from trackmind.errors import require


@dataclass(frozen=True)
class Backend:
    build: str  # entry point that builds it
    schema: str | None = None  # entry point of its config dataclass (check_schema)
    check: str | None = None  # entry point that checks the machine for it before a run starts


# env.backend -> fn(env_cfg, n_cars, maps, instance=, challenges=, key=) -> a game
GAMES: dict[str, Backend] = {
    "sim": Backend(build="trackmind.env.build:make_sim_game"),
    "tminterface": Backend(build="trackmind.tmi.build:make_tminterface_game"),
}
# env.realtime set: fn(game, env_cfg, key) -> the game behind rtgym-style real-time steps
REALTIME = "trackmind.tmi.build:wrap_realtime"
# every run, before any process starts: fn(cfg, cycle) checks the real game and real time
# settings (and that a simulator run carries none)
GAME_RUN_CHECK = "trackmind.tmi.run_check:check_run"

# collector.backend -> CollectorPool class (cfg, shared, n_processes, max_restarts, seed)
COLLECTOR_POOLS: dict[str, Backend] = {
    "local": Backend(
        build="trackmind.collectors.local_pool:LocalCollectorPool",
        schema="trackmind.collectors.spec:CollectorConfig",
        check="trackmind.collectors.spec:check_local_collector",
    ),
    "ray": Backend(
        build="trackmind.collectors.fleet.fleet_pool:RayCollectorPool",
        schema="trackmind.collectors.fleet.settings:RayCollectorConfig",
        check="trackmind.collectors.fleet.settings:validate_ray_collector",
    ),
}


def load(entry: str) -> Any:
    """The attribute an entry point names, its module imported now."""
    module, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module), attr)


def choose(table: dict[str, Backend], name: Any, key: str) -> Backend:
    """The backend `name` from `table`, or a ConfigError at `key` listing the known ones."""
    require(name in table, key, f"unknown backend {name!r} (known: {', '.join(table)})")
    return table[name]
