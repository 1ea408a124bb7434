"""Stable-Baselines3 trains on `trackmind/Race-v0`: the way most people first try a gymnasium env.

SB3's MultiInputPolicy keys an nn.ModuleDict by the observation's keys, so a key that is an
attribute of nn.Module (`float` was one) breaks it at construction. SB3 is a test-only
dependency (the `dev` extra).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import DQN, PPO

import trackmind.env  # noqa: F401  (registers trackmind/Race-v0)
from trackmind.env.build import default_env_config, default_reward_config
from trackmind.env.observations import FLOATS


def small_env() -> gym.Env:
    """The starter map at SB3's smallest image size, shaping paid inside the step."""
    env = default_env_config()
    env["frame_shape"] = [48, 64]
    reward = default_reward_config()
    reward["shaping"] = "env"  # SB3 sees only the step reward: potentials go in it
    return gym.make("trackmind/Race-v0", map="starter", env=env, reward=reward)


@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_sb3_multi_input_policy_trains_and_acts(algo):
    env = small_env()
    assert set(env.observation_space.spaces) == {"frame", FLOATS}
    if algo == "PPO":
        model = PPO("MultiInputPolicy", env, n_steps=128, batch_size=64, n_epochs=1, seed=0)
    else:
        model = DQN(
            "MultiInputPolicy", env, buffer_size=1000, learning_starts=100, batch_size=32, seed=0
        )
    model.learn(total_timesteps=300)
    assert model.num_timesteps >= 300
    obs, _ = env.reset(seed=1)
    total = 0.0
    for _ in range(20):
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        assert np.isfinite(reward) and info["race_time_ms"] > 0
        if terminated or truncated:
            break
    assert np.isfinite(total)
    env.close()
