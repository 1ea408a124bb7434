"""Environment layer: term managers for observations, rewards, terminations; gymnasium envs.

Importing this package registers ``trackmind/Race-v0`` with gymnasium: ``gym.make`` gives one
car (RaceEnv), ``gym.make_vec`` the batched simulator (RaceVectorEnv, its vector entry point),
both with the same ``map`` keyword.
"""

import gymnasium as gym

if "trackmind/Race-v0" not in gym.registry:
    gym.register(
        id="trackmind/Race-v0",
        entry_point="trackmind.env.gym_env:RaceEnv",
        vector_entry_point="trackmind.env.gym_env:RaceVectorEnv",
    )
