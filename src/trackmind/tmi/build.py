"""The real game from the `env` config, and real-time steps over any game.

`trackmind.env.build.make_game` chooses the game (trackmind.backends names these two
builders): `make_tminterface_game` builds game instance `instance` (the collector index, so
each collector gets its own TMInterface server), `wrap_realtime` puts a game behind the
rtgym-style real-time stepper when `env.realtime` is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trackmind.env.build import env_config, frame_shape_of
from trackmind.env.manager import as_dict
from trackmind.errors import require
from trackmind.game.contract import TICK_MS
from trackmind.sim.mapio import load_map
from trackmind.sim.track import Track
from trackmind.tmi.config import (
    RealTimeConfig,
    TMInterfaceConfig,
    realtime_config,
    tminterface_config,
)
from trackmind.tmi.connection import InterfaceFactory, standin_factory, tminterface_factory


def standin_settings(tmi: TMInterfaceConfig, frame_shape: tuple[int, int] | None) -> dict:
    """StandinGame keyword arguments from the env.tminterface.standin section."""
    s = tmi.standin
    return {
        "map_spec": s.map,
        "frame_shape": frame_shape,
        "countdown_ms": s.countdown_ms,
        "paced": s.paced,
        "speed": tmi.game_speed,
    }


def interface_factory(
    tmi: TMInterfaceConfig, frame_shape: tuple[int, int] | None
) -> InterfaceFactory:
    """The interface objects the connection setting asks for."""
    if tmi.connection == "tminterface":
        return tminterface_factory()
    autostart = standin_settings(tmi, frame_shape) if tmi.standin.autostart else None
    return standin_factory(autostart)


def make_tminterface_game(
    env_cfg: Mapping | Any,
    n_cars: int,
    maps: Any,
    instance: int = 0,
    challenges: Mapping[str, str] | None = None,
    key: str = "env",
):
    """A TMInterfaceGame on server `<server_prefix><first_server + instance>`."""
    from trackmind.tmi.capture import make_capture
    from trackmind.tmi.game import TMInterfaceGame
    from trackmind.tmi.launcher import CommandLauncher, StandinLauncher

    require(n_cars == 1, "collector.cars_per_process", "must be 1 with a TMInterface game")
    cfg = as_dict(env_cfg, key)
    env = env_config(cfg, key)
    tmi = tminterface_config(cfg)
    frame_shape = frame_shape_of(cfg, key)
    server = tmi.server(instance)
    spec = maps[0] if isinstance(maps, (list, tuple)) else maps
    track = spec if isinstance(spec, Track) else load_map(spec)
    capture = make_capture(tmi.capture, frame_shape, instance, server, f"{key}.tminterface.capture")
    launcher = None
    if tmi.launch_command and tmi.connection == "standin":
        launcher = StandinLauncher(server, standin_settings(tmi, frame_shape))
    elif tmi.launch_command:
        launcher = CommandLauncher(tmi.launch_command, server, instance, tmi.kill_command)
    return TMInterfaceGame(
        server,
        track,
        interface_factory(tmi, frame_shape),
        tmi,
        action_ms=TICK_MS * env.ticks_per_action,
        zone_spacing_m=float(env.zone_spacing_m),
        challenges=challenges,
        capture=capture,
        launcher=launcher,
    )


def wrap_realtime(game: Any, env_cfg: Mapping | Any, key: str = "env"):
    """The game behind rtgym-style elastic real-time steps (`env.realtime`); the game itself
    when the section is disabled."""
    from trackmind.tmi.realtime import RealTimeGame

    rt: RealTimeConfig | None = realtime_config(as_dict(env_cfg, key))
    if rt is None:
        return game
    return RealTimeGame(
        game,
        time_step_duration=rt.time_step_duration,
        start_obs_capture=rt.start_obs_capture,
        time_step_timeout_factor=rt.time_step_timeout_factor,
        act_buf_len=rt.act_buf_len,
        default_action=rt.default_action,
    )
