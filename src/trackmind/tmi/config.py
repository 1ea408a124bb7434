"""The `env.tminterface` and `env.realtime` config sections and the checks of a real-game run.

Both sections are structured schemas (unknown keys, wrong types and bad ranges are one
ConfigError naming the key) whose defaults are conf/env/tminterface.yaml's, written once.
The checks of a whole real-game run, which reach the game, are in tmi/run_check.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from omegaconf import MISSING

from trackmind.defaults import checked_with_defaults, conf_option
from trackmind.errors import require
from trackmind.sim.maps import builtin_names, generated_family

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
    """A built-in or generated sim map: no real reference line behind it."""
    return spec in builtin_names() or generated_family(spec) is not None
