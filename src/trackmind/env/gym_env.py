"""gymnasium adapters: `trackmind/Race-v0` (one car) and RaceVectorEnv (the batched sim).

Any gymnasium-compatible agent can train on the simulator through these; trackmind's own
collectors use VecRace directly (they record rollouts and reset races themselves).
"""

from __future__ import annotations

import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from trackmind.env.build import make_race
from trackmind.game.actions import N_ACTIONS


def _take(obs: Any, i: int) -> Any:
    """One car's observation out of a batched dict or box."""
    if isinstance(obs, dict):
        return {k: v[i] for k, v in obs.items()}
    return obs[i]


class RaceEnv(gym.Env):
    """One car racing one map. Observations: Dict (frame, float) or one Box (env config).

    Args:
        map: map spec ("starter", "procedural:7", a .npz file...) or a Track.
        env, reward: config dicts as in conf/env/sim.yaml and conf/reward/*.yaml
            (defaults: the same settings).
        render_mode: "rgb_array" returns the current frame as an (H, W, 3) image.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(
        self,
        map: Any = "starter",
        env: dict | None = None,
        reward: dict | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.race = make_race(env, reward, n_cars=1, maps=map)
        self.render_mode = render_mode
        self.observation_space = self.race.observation_space
        self.action_space = gym.spaces.Discrete(N_ACTIONS)
        self.metadata = {**self.metadata, "render_fps": 1000 // self.race.action_ms}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        maps = (options or {}).get("map")
        obs, info = self.race.reset(maps=maps)
        return _take(obs, 0), {"race_time_ms": int(self.race.car.race_time_ms[0])}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.race.step(np.array([int(action)]))
        car = self.race.car
        out = {
            "race_time_ms": int(car.race_time_ms[0]),
            "finished": bool(car.finished[0]),
            "progress_m": float(car.progress_m[0]),
            "reward_terms": {k: float(v[0]) for k, v in info["reward_terms"].items()},
        }
        return _take(obs, 0), float(reward[0]), bool(terminated[0]), bool(truncated[0]), out

    def render(self):
        if self.render_mode == "rgb_array":
            frame = self.race.frames[0, 0]
            return np.repeat(frame[:, :, None], 3, axis=2)
        return None

    def close(self) -> None:
        self.race.close()


class RaceVectorEnv(gym.vector.VectorEnv):
    """The batched simulator as a gymnasium VectorEnv (autoreset on the next step): what
    ``gym.make_vec("trackmind/Race-v0", num_envs=N)`` builds.

    `map`: one map for every car or a list with one per car (RaceEnv's keyword; `maps`, its
    former name here, still works and warns).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        num_envs: int = 8,
        map: Any = "starter",
        env: dict | None = None,
        reward: dict | None = None,
        maps: Any = None,
    ) -> None:
        if maps is not None:
            warnings.warn(
                "RaceVectorEnv(maps=...) is now map=..., as for RaceEnv",
                DeprecationWarning,
                stacklevel=2,
            )
            map = maps
        self.race = make_race(env, reward, n_cars=num_envs, maps=map)
        self.num_envs = num_envs
        self.single_observation_space = self.race.observation_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.single_action_space = gym.spaces.Discrete(N_ACTIONS)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._needs_reset = np.zeros(num_envs, bool)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, _ = self.race.reset(maps=(options or {}).get("map"))
        self._needs_reset[:] = False
        return obs, {}

    def step(self, actions):
        actions = np.asarray(actions, dtype=np.int64)
        obs, reward, terminated, truncated, info = self.race.step(actions)
        if self._needs_reset.any():  # cars that ended last step start a new race instead
            cars = np.flatnonzero(self._needs_reset)
            obs, _ = self.race.reset(cars)
            reward[cars] = 0.0
            terminated[cars] = False
            truncated[cars] = False
        self._needs_reset = terminated | truncated
        car = self.race.car
        out = {"race_time_ms": car.race_time_ms, "finished": car.finished}
        return obs, reward, terminated, truncated, out

    def close_extras(self, **kwargs) -> None:
        self.race.close()
