"""SpaceTransformer: a Dict observation <-> one flat Box vector, single or vectorized.

Useful outside the environment: store flat boxes in a replay buffer, rebuild the dict for a
feature extractor that reads each term separately. The box is float32; integer terms such
as uint8 frames survive the round trip exactly (every uint8 value is a float32).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class SpaceTransformer:
    """Converts observations between a gymnasium Dict space and its flattened Box."""

    def __init__(self, dict_space: gym.spaces.Dict) -> None:
        self.dict_space = dict_space
        self.keys = list(dict_space.spaces)
        self.shapes = {k: tuple(dict_space[k].shape) for k in self.keys}
        self.dtypes = {k: dict_space[k].dtype for k in self.keys}
        self.slices, i = {}, 0
        for k in self.keys:
            n = int(np.prod(self.shapes[k]))
            self.slices[k] = slice(i, i + n)
            i += n
        self.dim = i
        low = np.concatenate(
            [np.broadcast_to(dict_space[k].low, self.shapes[k]).ravel() for k in self.keys]
        )
        high = np.concatenate(
            [np.broadcast_to(dict_space[k].high, self.shapes[k]).ravel() for k in self.keys]
        )
        self.box_space = gym.spaces.Box(
            low.astype(np.float32), high.astype(np.float32), dtype=np.float32
        )

    def dict_to_numpy(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """One observation dict -> (dim,) float32."""
        return np.concatenate([np.asarray(obs[k], np.float32).ravel() for k in self.keys])

    def numpy_to_dict(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """(dim,) -> one observation dict with each term's native shape and dtype."""
        x = np.asarray(x)
        if x.shape != (self.dim,):
            raise ValueError(f"expected a box of shape ({self.dim},), got {x.shape}")
        return {
            k: x[self.slices[k]].reshape(self.shapes[k]).astype(self.dtypes[k]) for k in self.keys
        }

    def dict_to_numpy_vectorized(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Dict of (N, ...) -> (N, dim) float32."""
        n = len(obs[self.keys[0]])
        out = np.empty((n, self.dim), np.float32)
        for k in self.keys:
            out[:, self.slices[k]] = np.asarray(obs[k]).reshape(n, -1)
        return out

    def numpy_to_dict_vectorized(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """(N, dim) -> dict of (N, ...) with native shapes and dtypes."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"expected a box of shape (N, {self.dim}), got {x.shape}")
        n = x.shape[0]
        return {
            k: x[:, self.slices[k]].reshape(n, *self.shapes[k]).astype(self.dtypes[k])
            for k in self.keys
        }
