"""The 12 keyboard actions of Trackmania: combinations of accelerate, brake, left, right."""

from __future__ import annotations

import numpy as np

# columns: accelerate, brake, left, right
ACTIONS = np.array(
    [
        [1, 0, 0, 0],  # accel
        [1, 0, 1, 0],  # accel + left
        [1, 0, 0, 1],  # accel + right
        [0, 0, 0, 0],  # nothing
        [0, 0, 1, 0],  # left
        [0, 0, 0, 1],  # right
        [0, 1, 0, 0],  # brake
        [0, 1, 1, 0],  # brake + left
        [0, 1, 0, 1],  # brake + right
        [1, 1, 0, 0],  # accel + brake
        [1, 1, 1, 0],  # accel + brake + left
        [1, 1, 0, 1],  # accel + brake + right
    ],
    dtype=np.int8,
)
ACTION_NAMES = [
    "accel",
    "accel+left",
    "accel+right",
    "nothing",
    "left",
    "right",
    "brake",
    "brake+left",
    "brake+right",
    "accel+brake",
    "accel+brake+left",
    "accel+brake+right",
]
N_ACTIONS = len(ACTIONS)


def validate_actions(actions, n_cars: int) -> np.ndarray:
    """Actions as an int64 array of shape (n_cars,); a one-line error for anything else."""
    a = np.asarray(actions)
    if a.shape == () and n_cars == 1:
        a = a.reshape(1)
    if a.shape != (n_cars,):
        raise ValueError(f"actions must have shape ({n_cars},), got {a.shape}")
    if a.dtype.kind not in "iu":
        if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise ValueError(f"actions must be integers in [0, {N_ACTIONS - 1}], got {a}")
    if np.any((a < 0) | (a >= N_ACTIONS)):
        bad = a[(a < 0) | (a >= N_ACTIONS)][0]
        raise ValueError(f"invalid action index {bad}: valid actions are 0..{N_ACTIONS - 1}")
    return a.astype(np.int64)
