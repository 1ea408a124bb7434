"""The GameInstance contract: what a game backend gives the rest of trackmind.

Both the built-in simulator (a batch of cars at once) and the TMInterface backend (one game,
so a batch of one) implement it. Everything above this layer (observation terms, rollouts,
collectors) only speaks this contract, so the learning code does not change with the game.

Conventions: ground plane (x, y), height z, yaw counter-clockwise from +x; car frame is
(forward, left, up). Times are milliseconds of race time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # the contract is the bottom layer: backends (sim, tmi) import it
    from trackmind.sim.track import Track


@dataclass
class CarState:
    """Batched car state (first axis = car). Arrays are fresh copies, safe to keep."""

    position: np.ndarray  # (B, 3) float64, metres
    yaw: np.ndarray  # (B,) float64, radians
    rotation: np.ndarray  # (B, 3, 3) float64, world-from-car rotation
    velocity: np.ndarray  # (B, 3) float64, car frame (forward, left, up), m/s
    angular_velocity: np.ndarray  # (B, 3) float64, car frame (roll, pitch, yaw rates), rad/s
    gear: np.ndarray  # (B,) int64, 0 = reverse/neutral
    rpm: np.ndarray  # (B,) float64
    wheel_contact: np.ndarray  # (B, 4) bool, wheels FL, FR, RL, RR
    wheel_sliding: np.ndarray  # (B, 4) bool
    wall_contact: np.ndarray  # (B,) bool
    race_time_ms: np.ndarray  # (B,) int64
    finished: np.ndarray  # (B,) bool
    progress_m: np.ndarray  # (B,) float64, metres along the reference line from the start
    lateral_m: np.ndarray  # (B,) float64, signed offset from the reference line (left > 0)
    zone_idx: np.ndarray  # (B,) int64, index of the current zone center (see Track)
    checkpoints_passed: np.ndarray  # (B,) int64

    @property
    def speed(self) -> np.ndarray:
        return np.linalg.norm(self.velocity, axis=-1)


@dataclass
class GameObservation:
    """What one step returns: frames and car state of every car."""

    frames: np.ndarray  # (B, 1, H, W) uint8
    car: CarState


# The game's own step: TMNF's physics tick, and an action held for 5 of them (Linesight's
# 50 ms). A training environment may hold each action longer (env.ticks_per_action).
TICK_MS = 10
TICKS_PER_ACTION = 5


@runtime_checkable
class GameInstance(Protocol):
    """A game that runs races: reset, act, advance one action step, observe, rewind."""

    n_cars: int
    frame_shape: tuple[int, int]  # (H, W)
    action_ms: int  # race time covered by one step (TICK_MS * TICKS_PER_ACTION by default)

    def reset(self, cars: np.ndarray | list[int] | None = None, maps=None) -> GameObservation:
        """Put the given cars (all by default) at the start line of their map.

        `maps`: one Track / map spec for all given cars, a list with one per car, or None
        to keep each car's current map.
        """

    def step(self, actions: np.ndarray) -> GameObservation:
        """Apply one action index per car (0..11) and advance one action step."""

    def observe(self) -> GameObservation:
        """Current frames and car state without advancing."""

    def save_state(self, car: int) -> Any:
        """Opaque snapshot of one car (position, velocities, race clock...), for rewinds."""

    def restore_state(self, car: int, state: Any) -> None:
        """Rewind one car to a snapshot taken with save_state."""

    def track(self, car: int) -> Track:
        """The map the car is racing on."""

    def close(self) -> None:
        """Release the game (processes, sockets, windows)."""
