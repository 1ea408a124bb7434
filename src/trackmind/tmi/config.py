"""The `env.tminterface` and `env.realtime` config sections and the checks of a real-game run.

Both sections are structured schemas (unknown keys, wrong types and bad ranges are one
ConfigError naming the key) whose defaults are conf/env/tminterface.yaml's, written once.
`check_run` is what plan_run calls before any process starts: the game settings, one car per
game, real maps (a reference line file and a challenge per map), the optional capture
packages, the launch command, and, unless games are started by trackmind, that every
TMInterface server answers within the connection timeout.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from trackmind.defaults import checked_with_defaults, conf_option, env_defaults
from trackmind.errors import ConfigError, require
from trackmind.game.contract import TICK_MS
from trackmind.sim.maps import builtin_names

KEY = "env.tminterface"
RT_KEY = "env.realtime"
CONNECTIONS = ("tminterface", "standin")
MODES = ("lockstep", "realtime")
CAPTURES = ("window", "region", "standin", "none")


@dataclass
class CaptureConfig:
    """How frames are taken (see trackmind.tmi.capture)."""

    method: str = MISSING
    window_title: str = MISSING
    regions: list[list[int]] | None = MISSING  # [[left, top, width, height], ...] per instance

    def __post_init__(self) -> None:
        m = self.method
        require(m in CAPTURES, f"{KEY}.capture.method", f"must be one of {CAPTURES}, got {m!r}")
        for r in self.regions or []:
            ok = len(r) == 4 and r[2] > 0 and r[3] > 0
            require(ok, f"{KEY}.capture.regions", f"each region is [left, top, w, h], got {r}")


@dataclass
class StandinConfig:
    """The simulated stand-in game (connection: standin)."""

    autostart: bool = MISSING  # start a stand-in game when none serves the name
    map: str = MISSING  # the sim map shown before any `map` command
    countdown_ms: int = MISSING
    paced: bool = MISSING  # tick at game_speed x real time (else as fast as possible)

    def __post_init__(self) -> None:
        c = self.countdown_ms
        require(c >= 10, f"{KEY}.standin.countdown_ms", f"must be >= 10, got {c}")


@dataclass
class TMInterfaceConfig:
    """One TMInterface game per collector (conf/env/tminterface.yaml documents each key)."""

    connection: str = MISSING
    server_prefix: str = MISSING
    first_server: int = MISSING
    mode: str = MISSING
    game_speed: float = MISSING
    connect_timeout_s: float = MISSING
    step_timeout_s: float = MISSING
    map_load_timeout_s: float = MISSING
    server_timeout_ms: int = MISSING
    hold_timeout_s: float = MISSING
    launch_command: str | None = MISSING
    kill_command: str | None = MISSING
    launch_timeout_s: float = MISSING
    restart_attempts: int = MISSING
    retry_wait_s: float = MISSING
    map_command: str = MISSING
    probe: bool = MISSING
    projection_window_m: float = MISSING
    capture: CaptureConfig = MISSING
    standin: StandinConfig = MISSING

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            v = getattr(self, name)
            require(v > 0, f"{KEY}.{name}", f"must be > 0, got {v}")

        require(
            self.connection in CONNECTIONS,
            f"{KEY}.connection",
            f"must be one of {CONNECTIONS}, got {self.connection!r}",
        )
        require(self.mode in MODES, f"{KEY}.mode", f"must be one of {MODES}, got {self.mode!r}")
        require(bool(self.server_prefix), f"{KEY}.server_prefix", "must not be empty")
        require(self.first_server >= 0, f"{KEY}.first_server", "must be >= 0")
        for name in (
            "game_speed",
            "connect_timeout_s",
            "step_timeout_s",
            "map_load_timeout_s",
            "hold_timeout_s",
            "launch_timeout_s",
            "projection_window_m",
        ):
            positive(name)
        require(self.retry_wait_s >= 0, f"{KEY}.retry_wait_s", "must be >= 0")
        require(self.restart_attempts >= -1, f"{KEY}.restart_attempts", "must be -1 or >= 0")
        require(
            self.hold_timeout_s * 1000 < self.server_timeout_ms,
            f"{KEY}.hold_timeout_s",
            f"must stay below server_timeout_ms ({self.server_timeout_ms} ms), or TMInterface "
            "drops trackmind while it holds the game",
        )
        require(
            "{challenge}" in self.map_command,
            f"{KEY}.map_command",
            "must contain {challenge}",
        )

    def server(self, instance: int) -> str:
        """TMInterface server name of game instance `instance` (collector index)."""
        return f"{self.server_prefix}{self.first_server + int(instance)}"


@dataclass
class RealTimeConfig:
    """rtgym-style elastic real-time steps (trackmind.tmi.realtime)."""

    enabled: bool = MISSING
    time_step_duration: float = MISSING  # s, nominal duration of a step
    start_obs_capture: float = MISSING  # s after the step starts, the observation is taken
    time_step_timeout_factor: float = MISSING  # elasticity, in time steps
    act_buf_len: int = MISSING  # past actions appended to each observation
    default_action: int = MISSING  # applied at reset and while waiting ("nothing")

    def __post_init__(self) -> None:
        d, c = self.time_step_duration, self.start_obs_capture
        require(d > 0, f"{RT_KEY}.time_step_duration", f"must be > 0 s, got {d}")
        require(
            0 <= c <= d,
            f"{RT_KEY}.start_obs_capture",
            f"must lie in [0, time_step_duration={d}], got {c}",
        )
        f = self.time_step_timeout_factor
        require(f > 0, f"{RT_KEY}.time_step_timeout_factor", f"must be > 0, got {f}")
        n = self.act_buf_len
        require(n >= 1, f"{RT_KEY}.act_buf_len", f"must be >= 1, got {n}")
        a = self.default_action
        require(0 <= a < 12, f"{RT_KEY}.default_action", f"must be an action 0..11, got {a}")


def tminterface_config(env: Mapping) -> TMInterfaceConfig:
    """The validated env.tminterface section (conf/env/tminterface.yaml for what it leaves
    out)."""
    defaults = conf_option("env", "tminterface")["tminterface"]
    return checked_with_defaults(env.get("tminterface"), defaults, TMInterfaceConfig, KEY)


def realtime_config(env: Mapping) -> RealTimeConfig | None:
    """The real-time settings, None when the section is absent or disabled."""
    if env.get("realtime") is None:
        return None
    defaults = conf_option("env", "tminterface")["realtime"]
    rt = checked_with_defaults(env.get("realtime"), defaults, RealTimeConfig, RT_KEY)
    return rt if rt.enabled else None


def is_sim_map(spec: str) -> bool:
    """A built-in or procedural sim map: no real reference line behind it."""
    return spec in builtin_names() or spec.startswith("procedural:")


def _check_executable(command: str, key: str) -> None:
    from trackmind.tmi.launcher import fill

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
    from trackmind.tmi.build import interface_factory
    from trackmind.tmi.client import RaceClient
    from trackmind.tmi.connection import GameUnavailable, connect

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


def check_run(cfg: dict, cycle: Any) -> None:
    """The real-game and real-time parts of a run's config (see the module docstring)."""
    env = cfg["env"]
    rt = realtime_config(env)
    if env.get("backend", "sim") != "tminterface":
        require(env.get("tminterface") is None, KEY, "only used with env.backend=tminterface")
        return
    tmi = tminterface_config(env)
    env = {**env_defaults(), **env}
    require(env["tick_ms"] == TICK_MS, "env.tick_ms", f"the game's physics tick is {TICK_MS} ms")
    action_ms = TICK_MS * int(env["ticks_per_action"])
    col = cfg["collector"]
    require(
        col.get("cars_per_process") == 1,
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
    if tmi.probe and not tmi.launch_command and not autostarted and col.get("backend") == "local":
        probe_servers(tmi, int(col["processes"]), action_ms)
