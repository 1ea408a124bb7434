"""The checks of a real-game run, made before any process starts (plan_run calls `check_run`).

The game settings, one car per game, real maps (a reference line file and a challenge per
map), the optional capture packages, the launch command, and, unless games are started by
trackmind, that every TMInterface server answers within the connection timeout. It sits
above config.py and build.py, which it uses, so that neither imports the other's users.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from trackmind.collectors.spec import CollectorConfig
from trackmind.defaults import env_defaults
from trackmind.errors import ConfigError, require
from trackmind.game.contract import TICK_MS
from trackmind.tmi.build import interface_factory
from trackmind.tmi.client import RaceClient
from trackmind.tmi.config import (
    KEY,
    RT_KEY,
    TMInterfaceConfig,
    is_sim_map,
    realtime_config,
    tminterface_config,
)
from trackmind.tmi.connection import GameUnavailable, connect
from trackmind.tmi.launcher import fill


def _check_executable(command: str, key: str) -> None:
    try:
        args = fill(command, server="TMInterface0", index=0, pid=0)
    except (KeyError, IndexError, ValueError) as e:
        raise ConfigError(
            key, f"cannot fill the template ({e}); placeholders: {{server}}, {{index}}, {{pid}}"
        ) from None
    exe = args[0] if args else ""
    require(
        bool(exe) and (shutil.which(exe) is not None or os.path.isfile(exe)),
        key,
        f"program {exe!r} not found",
    )


def _check_capture(tmi: TMInterfaceConfig) -> None:
    method = tmi.capture.method
    needs = {"window": ("mss", "win32gui"), "region": ("mss",)}.get(method, ())
    for module in needs:
        try:
            __import__(module)
        except ImportError:
            package = "pywin32" if module == "win32gui" else module
            raise ConfigError(
                f"{KEY}.capture.method",
                f"{method} capture needs the optional package {package}"
                " (pip install 'trackmind[capture]')"
                + (
                    "; window capture works on Windows only, elsewhere use region"
                    if method == "window"
                    else ""
                ),
            ) from None


def probe_servers(tmi: TMInterfaceConfig, n_games: int, action_ms: int = 50) -> None:
    """ConfigError unless every TMInterface server 0..n_games-1 answers in time."""
    make_iface = interface_factory(tmi, None)
    hint = ""
    if tmi.connection == "tminterface" and sys.platform != "win32":
        hint = " (TMInterface 1.x is reached through Windows shared memory: run trackmind on "
        hint += "Windows, or with Windows Python in the game's Wine prefix)"
    for i in range(n_games):
        client = RaceClient(action_ms=action_ms, server_timeout_ms=tmi.server_timeout_ms)
        try:
            iface = connect(make_iface, tmi.server(i), client, tmi.connect_timeout_s)
        except GameUnavailable as e:
            raise ConfigError(
                KEY,
                f"{e}: start game {i + 1} of {n_games} with TMInterface (servers are named in "
                f"start order) or set env.tminterface.launch_command{hint}",
            ) from None
        client.release()
        iface.close()


def check_run(env: Mapping[str, Any], col: CollectorConfig, cycle: Any) -> None:
    """The real-game and real-time parts of a run's config (see the module docstring):
    the env group, the collectors, the map cycle."""
    rt = realtime_config(env)
    if env.get("backend", "sim") != "tminterface":
        require(env.get("tminterface") is None, KEY, "only used with env.backend=tminterface")
        return
    tmi = tminterface_config(env)
    env = {**env_defaults(), **env}
    require(env["tick_ms"] == TICK_MS, "env.tick_ms", f"the game's physics tick is {TICK_MS} ms")
    action_ms = TICK_MS * int(env["ticks_per_action"])
    require(
        col.cars_per_process == 1,
        "collector.cars_per_process",
        "must be 1 with env.backend=tminterface (one car per game; use collector=tminterface)",
    )
    if rt is not None:
        require(
            tmi.mode == "realtime",
            f"{KEY}.mode",
            "env.realtime needs mode: realtime (the game runs on its own clock)",
        )
        want = action_ms / 1000.0 / tmi.game_speed
        require(
            abs(rt.time_step_duration - want) < 1e-9,
            f"{RT_KEY}.time_step_duration",
            f"must be {want:g} s (ticks_per_action x 10 ms at game_speed {tmi.game_speed:g})",
        )
    for i, e in enumerate(cycle.entries):
        k = f"map.cycle[{i}]"
        require(
            not is_sim_map(e.name),
            f"{k}.map",
            f"{e.name!r} is a simulator map; the real game needs the map's reference line "
            "(.npy from scripts/make_map_from_run.py)",
        )
        require(bool(e.challenge), f"{k}.challenge", "the challenge file the game loads is missing")
    _check_capture(tmi)
    if tmi.launch_command:
        _check_executable(tmi.launch_command, f"{KEY}.launch_command")
    autostarted = tmi.connection == "standin" and tmi.standin.autostart
    if tmi.probe and not tmi.launch_command and not autostarted and col.backend == "local":
        probe_servers(tmi, col.processes, action_ms)
