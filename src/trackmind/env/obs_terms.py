"""Default observation terms: the frame and the 184 float features of the IQN inputs.

The float layout follows the Linesight network's inputs (see docs/env.md):

    [0]        mini_race_clock      0 when acting; the replay collate writes the clock here
    [1:21]     previous_actions     last 5 actions x (accel, brake, left, right)
    [21:33]    wheels               per wheel: sliding, ground contact, damper absorb
    [33:37]    gearbox              gearbox state, gear, rpm, gear change counter
    [37:53]    contact_material     per wheel one-hot of 4 material groups
    [53:62]    car_dynamics         angular velocity, velocity, world-up, in the car frame
    [62:182]   zone_centers         next 40 zone centers (10 m apart) in the car frame
    [182]      distance_to_finish   metres along the reference line, capped at 700
    [183]      freewheeling         1 when the engine is not driven (no accelerate key)

Opt-in, appended after them: limit_speeds (the next 40 zones' limit speeds, see the class).

Features the simulator cannot give are constant and documented here: damper absorb (0: the
sim has no suspension), gearbox state and gear change counter (0), contact material (every
wheel on road, group 0), world-up in the car frame ((0, 0, 1): the sim is flat). The real
game backend fills them.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numba as nb
import numpy as np

from trackmind.env.manager import register_term
from trackmind.env.mirror import (
    FloatMirror,
    lateral_flipped,
    pairs_swapped,
    unchanged,
)
from trackmind.env.observations import ObservationTerm, VectorlikeTerm
from trackmind.game.actions import ACTIONS


@register_term("observation", "frame")
class FrameTerm(ObservationTerm):
    """The grayscale frame (1, H, W) uint8, as the game renders or captures it."""

    dtype = np.dtype(np.uint8)

    def _get_obs(self, raw: Any) -> tuple[np.ndarray, dict]:
        return raw.frames, {}

    def get_native_shape(self) -> tuple[int, ...]:
        h, w = self.env.frame_shape
        return (1, int(h), int(w))

    def space(self) -> gym.spaces.Box:
        return gym.spaces.Box(0, 255, self.get_native_shape(), np.uint8)


@register_term("observation", "mini_race_clock")
class MiniRaceClock(VectorlikeTerm):
    """Slot for the mini-race clock (actions since the mini-race start); 0 when acting."""

    size = 1

    def _vector(self, raw: Any) -> np.ndarray:
        return np.zeros((self.env.n_cars, 1), np.float32)

    @property
    def mean(self) -> np.ndarray:
        return np.array([70.0], np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.array([40.0], np.float32)

    def mirror(self) -> FloatMirror:
        return unchanged(self.size)


@register_term("observation", "previous_actions")
class PreviousActions(VectorlikeTerm):
    """The keys of the last `n` actions, most recent first (zeros before the race began)."""

    def __init__(self, n: int = 5, normalize: bool = False) -> None:
        super().__init__(normalize=normalize)
        if not 1 <= int(n) <= 16:
            raise ValueError(f"n must be in 1..16, got {n}")
        self.n = int(n)
        self.size = 4 * self.n

    def _vector(self, raw: Any) -> np.ndarray:
        hist = self.env.action_history[:, : self.n]  # (B, n), -1 = no action yet
        keys = ACTIONS[np.maximum(hist, 0)].astype(np.float32)
        keys[hist < 0] = 0.0
        return keys.reshape(len(hist), -1)

    @property
    def mean(self) -> np.ndarray:
        return np.full(self.size, 0.5, np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.full(self.size, 0.5, np.float32)

    def mirror(self) -> FloatMirror:
        return pairs_swapped(self.size, 4, [(2, 3)])  # (accel, brake, left, right) per action


@register_term("observation", "wheels")
class Wheels(VectorlikeTerm):
    """Per wheel: sliding, ground contact, damper absorb (0 in the sim: no suspension)."""

    size = 12

    def _vector(self, raw: Any) -> np.ndarray:
        car = raw.car
        b = len(car.wheel_contact)
        damper = getattr(car, "damper_absorb", None)
        damper = np.zeros((b, 4)) if damper is None else damper
        return np.concatenate([car.wheel_sliding, car.wheel_contact, damper], axis=1)

    @property
    def mean(self) -> np.ndarray:
        return np.r_[np.full(8, 0.5), np.zeros(4)].astype(np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.r_[np.full(8, 0.5), np.full(4, 0.1)].astype(np.float32)

    def mirror(self) -> FloatMirror:
        # per feature the wheels in the order front left, front right, rear left, rear right
        return pairs_swapped(self.size, 4, [(0, 1), (2, 3)])


@register_term("observation", "gearbox")
class Gearbox(VectorlikeTerm):
    """Gearbox state (0 in the sim), gear, rpm, gear change counter (0 in the sim)."""

    size = 4

    def _vector(self, raw: Any) -> np.ndarray:
        car = raw.car
        out = np.zeros((len(car.gear), 4), np.float32)
        out[:, 1] = car.gear
        out[:, 2] = car.rpm
        return out

    @property
    def mean(self) -> np.ndarray:
        return np.array([0.0, 2.5, 6000.0, 0.0], np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.array([1.0, 1.5, 3000.0, 1.0], np.float32)

    def mirror(self) -> FloatMirror:
        return unchanged(self.size)


@register_term("observation", "contact_material")
class ContactMaterial(VectorlikeTerm):
    """Per wheel one-hot of 4 material groups (road, grass/dirt, ice, other); sim: road."""

    size = 16

    def _vector(self, raw: Any) -> np.ndarray:
        groups = getattr(raw.car, "material_group", None)
        b = len(raw.car.gear)
        if groups is None:  # the sim: every wheel on road
            return np.tile(np.eye(4, dtype=np.float32)[[0, 0, 0, 0]].ravel(), (b, 1))
        return np.eye(4, dtype=np.float32)[np.asarray(groups)].reshape(b, 16)

    @property
    def mean(self) -> np.ndarray:
        return np.full(16, 0.5, np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.full(16, 0.5, np.float32)

    def mirror(self) -> FloatMirror:
        wheels = np.arange(16, dtype=np.int64).reshape(4, 4)  # wheel-major: 4 groups each
        return FloatMirror(wheels[[1, 0, 3, 2]].ravel(), np.ones(16, np.float32))


@register_term("observation", "car_dynamics")
class CarDynamics(VectorlikeTerm):
    """Angular velocity, velocity and the world-up vector, all in the car frame."""

    size = 9

    def _vector(self, raw: Any) -> np.ndarray:
        car = raw.car
        up = car.rotation[:, 2, :]  # row 2 of world-from-car = world z in car coordinates
        return np.concatenate([car.angular_velocity, car.velocity, up], axis=1)

    @property
    def mean(self) -> np.ndarray:
        return np.array([0, 0, 0, 30, 0, 0, 0, 0, 1], np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.array([0.5, 0.5, 1.0, 25, 3, 1, 0.5, 0.5, 0.5], np.float32)

    def mirror(self) -> FloatMirror:
        # angular velocity is a pseudovector: reflecting the left axis flips roll and yaw;
        # velocity and world-up flip their left component
        sign = np.array([-1, 1, -1, 1, -1, 1, 1, -1, 1], np.float32)
        return FloatMirror(np.arange(9, dtype=np.int64), sign)


@register_term("observation", "zone_centers")
class ZoneCenters(VectorlikeTerm):
    """The next `n` zone centers (virtual checkpoints) in the car frame (forward, left, up)."""

    def __init__(self, n: int = 40, normalize: bool = False) -> None:
        super().__init__(normalize=normalize)
        if int(n) < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = int(n)
        self.size = 3 * self.n

    def _vector(self, raw: Any) -> np.ndarray:
        car, env = raw.car, self.env
        out = np.empty((len(car.position), 3 * self.n), np.float32)
        _zones_in_car_frame(
            env.zone_table,
            env.zone_offsets,
            env.zone_counts,
            car.zone_idx,
            car.position,
            car.rotation,
            self.n,
            out,
        )
        return out

    def _scale(self) -> np.ndarray:
        return np.repeat(10.0 * np.arange(1, self.n + 1), 3).astype(np.float32)

    @property
    def mean(self) -> np.ndarray:
        m = np.zeros((self.n, 3), np.float32)
        m[:, 0] = 0.8 * 10.0 * np.arange(1, self.n + 1)
        return m.ravel()

    @property
    def std(self) -> np.ndarray:
        return 0.5 * self._scale()

    def mirror(self) -> FloatMirror:
        return lateral_flipped(self.size, 3, [1])  # (forward, left, up) per zone


@nb.njit(cache=True)
def _zones_in_car_frame(zones, off, count, zone_idx, pos, rot, n, out):  # pragma: no cover
    """out[b, 3k:3k+3] = R_b^T (center_{zone_idx+1+k} - pos_b), centers clamped to the list."""
    for b in range(out.shape[0]):
        for k in range(n):
            i = min(zone_idx[b] + 1 + k, count[b] - 1)
            dx = zones[off[b] + i, 0] - pos[b, 0]
            dy = zones[off[b] + i, 1] - pos[b, 1]
            dz = -pos[b, 2]
            for j in range(3):
                out[b, 3 * k + j] = dx * rot[b, 0, j] + dy * rot[b, 1, j] + dz * rot[b, 2, j]


@register_term("observation", "distance_to_finish")
class DistanceToFinish(VectorlikeTerm):
    """Metres left along the reference line, capped (far finishes all look alike)."""

    size = 1

    def __init__(self, cap_m: float = 700.0, normalize: bool = False) -> None:
        super().__init__(normalize=normalize)
        if not float(cap_m) > 0:
            raise ValueError(f"cap_m must be > 0, got {cap_m}")
        self.cap_m = float(cap_m)

    def _vector(self, raw: Any) -> np.ndarray:
        left = self.env.race_length_m - raw.car.progress_m
        return np.clip(left, 0.0, self.cap_m)[:, None]

    @property
    def mean(self) -> np.ndarray:
        return np.array([self.cap_m / 2], np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.array([self.cap_m / 3.5], np.float32)

    def mirror(self) -> FloatMirror:
        return unchanged(self.size)


@register_term("observation", "limit_speeds")
class LimitSpeeds(VectorlikeTerm):
    """Limit speed (m/s) of the road up to each of the next `n` zone centers.

    The fastest the car may go there and still make every corner ahead: the reference line's
    profile on a flying lap (sim/reference.flying_profile), with the game's car where it has
    one (the simulator), the simulated car's figures otherwise. A narrow chicane 300 m ahead
    moves the zone centers by a metre or two; here it is one low number. Opt-in: add
    `+env.observation.terms.floats.group.limit_speeds={}` and `network.float_dim=null`.
    """

    def __init__(self, n: int = 40, normalize: bool = False) -> None:
        super().__init__(normalize=normalize)
        if int(n) < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = int(n)
        self.size = self.n
        self._per_track: dict[int, tuple[Any, np.ndarray]] = {}
        self._table = np.zeros(0)
        self._built_for: np.ndarray | None = None

    def _vector(self, raw: Any) -> np.ndarray:
        env = self.env
        if self._built_for is not env.zone_table:
            self._build(env)
        return self._table[env.upcoming_zone_rows(self.n)].astype(np.float32)

    def _build(self, env: Any) -> None:
        """Lay each map's per-zone limits out like the race's zone table (same offsets)."""
        from trackmind.sim.reference import flying_profile  # the QP's scipy, on first use

        vehicle = getattr(env.game, "vehicle", None)
        table = np.zeros(len(env.zone_table))
        for c, track in enumerate(env.tracks):
            cached = self._per_track.get(id(track))
            off, count = int(env.zone_offsets[c]), int(env.zone_counts[c])
            if cached is None:
                zone_s = env.zone_arclengths[off : off + count]
                s, v = flying_profile(track, vehicle)
                cached = (track, zone_minima(zone_s, s, v, env.zone_spacing_m))
                self._per_track[id(track)] = cached  # keeps track alive: its id stays unique
            table[off : off + count] = cached[1]
        self._table, self._built_for = table, env.zone_table

    @property
    def mean(self) -> np.ndarray:
        return np.full(self.n, 40.0, np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.full(self.n, 20.0, np.float32)

    def mirror(self) -> FloatMirror:
        return unchanged(self.size)


def zone_minima(zone_s: np.ndarray, s: np.ndarray, v: np.ndarray, spacing_m: float) -> np.ndarray:
    """Per zone k, the least of the profile v(s) over (zone_s[k] - spacing_m, zone_s[k]].

    The profile is linear between its samples, so the least is at a sample inside the window
    or at one of its ends; beyond the profile's ends it holds its end values.
    """
    zone_s = np.asarray(zone_s, dtype=np.float64)
    out = np.minimum(np.interp(zone_s - spacing_m, s, v), np.interp(zone_s, s, v))
    lo = np.searchsorted(s, zone_s - spacing_m, side="right")
    hi = np.searchsorted(s, zone_s, side="right")
    for k in np.flatnonzero(hi > lo):
        out[k] = min(out[k], float(v[lo[k] : hi[k]].min()))
    return out


@register_term("observation", "freewheeling")
class Freewheeling(VectorlikeTerm):
    """1 when the last action did not press accelerate (the engine is not driving)."""

    size = 1

    def _vector(self, raw: Any) -> np.ndarray:
        last = self.env.action_history[:, 0]
        accel = np.where(last >= 0, ACTIONS[np.maximum(last, 0), 0], 0)
        return (accel == 0).astype(np.float32)[:, None]

    @property
    def mean(self) -> np.ndarray:
        return np.array([0.5], np.float32)

    @property
    def std(self) -> np.ndarray:
        return np.array([0.5], np.float32)

    def mirror(self) -> FloatMirror:
        return unchanged(self.size)
