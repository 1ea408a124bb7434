"""Build a VecRace (game + managers) from the `env` and `reward` config groups.

Validation happens here, before any game or process starts: unknown keys, unknown terms and
bad parameters raise a ConfigError naming the key (``env.termination.terms.stuck.params``).
Without Hydra (e.g. ``gymnasium.make("trackmind/Race-v0")``) the defaults are conf/env/sim.yaml
and conf/reward/linesight.yaml themselves, installed with the package (trackmind.defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trackmind.env.obs_terms  # noqa: F401  (registers the observation terms)
import trackmind.env.reward_terms  # noqa: F401  (registers the reward terms)
from trackmind.backends import GAMES, REALTIME, choose, load
from trackmind.defaults import env_defaults, reward_defaults
from trackmind.env.manager import as_dict
from trackmind.env.observations import FLOATS, ObservationManager, build_observation_manager
from trackmind.env.race import VecRace
from trackmind.env.rewards import RewardManager, build_reward_manager
from trackmind.env.terminations import TerminationManager, build_termination_manager
from trackmind.errors import check_schema, require

_ENV = env_defaults()  # conf/env/sim.yaml, the one place these defaults are written


@dataclass
class EnvConfig:
    """The ``env`` group's keys (conf/env/sim.yaml, tminterface.yaml); the managers' sections
    are checked by their own schemas (ObservationConfig, TerminationConfig)."""

    backend: str = _ENV["backend"]  # sim | tminterface
    frame_shape: Any = None  # [H, W] (frame_shape_of checks it), null: no frames
    tick_ms: int = _ENV["tick_ms"]
    ticks_per_action: int = _ENV["ticks_per_action"]
    zone_spacing_m: float = _ENV["zone_spacing_m"]
    vehicle: Any = None  # overrides of trackmind.sim.vehicle.VehicleParams
    camera: Any = None  # overrides of trackmind.sim.render.CameraParams
    observation: Any = None
    termination: Any = None
    tminterface: Any = None  # the real game (conf/env/tminterface.yaml, trackmind.tmi.config)
    realtime: Any = None  # rtgym-style real-time steps over any game (trackmind.tmi.realtime)
    render_threads: int = 1  # threads rendering one game's frames (SimGame: numba's threads)

    def __post_init__(self) -> None:
        for name in ("tick_ms", "ticks_per_action", "render_threads"):
            v = getattr(self, name)
            require(v > 0, name, f"must be an integer > 0, got {v!r}")
        zs = self.zone_spacing_m
        require(zs > 0, "zone_spacing_m", f"must be > 0, got {zs!r}")

    @property
    def action_ms(self) -> int:
        return self.tick_ms * self.ticks_per_action


def env_config(env_cfg: Mapping | Any, key: str = "env") -> EnvConfig:
    """The ``env`` group checked (check_schema)."""
    return check_schema(as_dict(env_cfg, key), EnvConfig, key)


def default_env_config() -> dict:
    """conf/env/sim.yaml (a fresh copy)."""
    return env_defaults()


def default_reward_config() -> dict:
    """conf/reward/linesight.yaml (a fresh copy)."""
    return reward_defaults()


def frame_shape_of(env_cfg: Mapping | Any, key: str = "env") -> tuple[int, int] | None:
    """The (H, W) frame size the config asks for; None renders no frames."""
    cfg = as_dict(env_cfg, key)
    fs = cfg.get("frame_shape")
    if fs is None:
        return None
    ok = isinstance(fs, (list, tuple)) and len(fs) == 2
    ok = ok and all(isinstance(v, int) and not isinstance(v, bool) and 8 <= v <= 1024 for v in fs)
    require(ok, f"{key}.frame_shape", f"must be [H, W] with integers in 8..1024 or null, got {fs}")
    return int(fs[0]), int(fs[1])


def build_managers(
    env_cfg: Mapping | Any,
    reward_cfg: Mapping | Any,
    env_key: str = "env",
    reward_key: str = "reward",
) -> tuple[ObservationManager, RewardManager, TerminationManager]:
    """The three managers from config (validated, not yet bound to a game)."""
    env = env_config(env_cfg, env_key)
    obs_cfg = renamed_float_group(as_dict(env.observation, f"{env_key}.observation"))
    obs = build_observation_manager(obs_cfg, f"{env_key}.observation")
    rew = build_reward_manager(reward_cfg, reward_key)
    term = build_termination_manager(env.termination, f"{env_key}.termination")
    return obs, rew, term


def renamed_float_group(obs_cfg: dict) -> dict:
    """Configs saved before the float inputs were keyed `floats` (checkpoints to resume)."""
    terms = obs_cfg.get("terms")
    if not isinstance(terms, Mapping) or "float" not in terms:
        return obs_cfg
    renamed = {k: v for k, v in terms.items() if k != "float"}
    renamed[FLOATS] = _merged(terms["float"], terms.get(FLOATS))  # `floats` overrides win
    return {**obs_cfg, "terms": renamed}


def _merged(base: Any, over: Any) -> Any:
    if not isinstance(base, Mapping) or not isinstance(over, Mapping):
        return base if over is None else over
    out = dict(base)
    for k, v in over.items():
        out[k] = _merged(base.get(k), v)
    return out


def float_dim_of(obs: ObservationManager, key: str = FLOATS) -> int:
    """Length of the float vector the network reads (the `floats` group), 0 without one."""
    try:
        return int(obs.term(key).size)
    except KeyError:
        return 0


def make_sim_game(
    env_cfg: Mapping | Any,
    n_cars: int,
    maps: Any,
    instance: int = 0,
    challenges: Mapping[str, str] | None = None,
    key: str = "env",
):
    """The built-in simulator as the config describes it (`instance` and `challenges` name a
    real game's server and map files: a simulator needs neither)."""
    from trackmind.sim.game import SimGame
    from trackmind.sim.render import CameraParams
    from trackmind.sim.vehicle import VehicleParams

    env = env_config(env_cfg, key)
    require(
        env.backend == "sim", f"{key}.backend", f"make_sim_game needs 'sim', got {env.backend!r}"
    )
    vehicle = VehicleParams.from_config(as_dict(env.vehicle, f"{key}.vehicle"), f"{key}.vehicle")
    camera = check_schema(as_dict(env.camera, f"{key}.camera"), CameraParams, f"{key}.camera")
    return SimGame(
        n_cars,
        maps,
        frame_shape=frame_shape_of(env_cfg, key),
        vehicle=vehicle,
        camera=camera,
        tick_ms=env.tick_ms,
        ticks_per_action=env.ticks_per_action,
        zone_spacing_m=float(env.zone_spacing_m),
        render_threads=render_threads(env, key),
    )


def render_threads(env: EnvConfig, key: str = "env") -> int:
    """`env.render_threads`, checked against the threads numba may start here."""
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    n = env.render_threads
    require(n <= most, f"{key}.render_threads", f"must be <= {most} (NUMBA_NUM_THREADS), got {n}")
    return n


def make_race(
    env_cfg: Mapping | Any | None = None,
    reward_cfg: Mapping | Any | None = None,
    n_cars: int = 1,
    maps: Any = "starter",
    game: Any = None,
    instance: int = 0,
    challenges: Mapping[str, str] | None = None,
) -> VecRace:
    """A VecRace over `game` (default: the game env_cfg describes) with the managers.

    `instance` (the collector index) picks a real game's TMInterface server; `challenges`
    (MapCycle.challenges) tells it which challenge file each map loads.
    """
    env_cfg = default_env_config() if env_cfg is None else env_cfg
    reward_cfg = default_reward_config() if reward_cfg is None else reward_cfg
    obs, rew, term = build_managers(env_cfg, reward_cfg)
    if game is None:
        game = make_game(env_cfg, n_cars, maps, instance=instance, challenges=challenges)
    return VecRace(game, obs, rew, term)


def make_game(
    env_cfg: Mapping | Any,
    n_cars: int,
    maps: Any,
    instance: int = 0,
    challenges: Mapping[str, str] | None = None,
    key: str = "env",
):
    """The game `env.backend` names (trackmind.backends.GAMES), behind real-time steps when
    `env.realtime` is set; the one place a game is chosen."""
    cfg = as_dict(env_cfg, key)
    backend = choose(GAMES, cfg.get("backend", "sim"), f"{key}.backend")
    game = load(backend.build)(cfg, n_cars, maps, instance=instance, challenges=challenges, key=key)
    return game if cfg.get("realtime") is None else load(REALTIME)(game, cfg, key)
