"""What a TMInterface SimStateData says about the car, in trackmind's frame.

Trackmania's world has y up. trackmind's has z up with the ground plane (x, y), and the map
importer (`trackmind.sim.mapio.import_npy`) reads game positions (x, y, z) as (x, -z) on the
ground, so one proper rotation W takes every game vector to trackmind: (x, y, z) ->
(x, -z, y). The car's own axes in the game are local (x, y, z) = (left, up, forward);
trackmind's car frame is (forward, left, up). Keeping both conversions here keeps the real
car, the reference lines and the stand-in game in one frame.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trackmind.game.contract import CarState

# game world -> trackmind world
W = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
# trackmind car axes (forward, left, up) -> game car-local axes (x = left, y = up, z = forward)
P = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])

# TMNF surface ids (EPlugSurfaceMaterialId order) -> the contact_material term's 4 groups:
# 0 road, 1 grass/dirt, 2 ice, 3 other
_ROAD = (0, 1, 7, 16, 18, 19, 26, 30)  # concrete, pavement, turbo, asphalt, wet asphalt/pavement
_LOOSE = (2, 5, 6, 8, 17, 20)  # grass, sand, dirt, dirt road, wet dirt road, wet grass
_ICE = (3,)
MATERIAL_GROUP = np.full(256, 3, np.int64)
MATERIAL_GROUP[list(_ROAD)] = 0
MATERIAL_GROUP[list(_LOOSE)] = 1
MATERIAL_GROUP[list(_ICE)] = 2


def game_to_world(v: np.ndarray) -> np.ndarray:
    """Game vectors (..., 3) in trackmind's world frame."""
    return np.asarray(v, np.float64) @ W.T


def world_to_game(v: np.ndarray) -> np.ndarray:
    """trackmind world vectors (..., 3) in the game's frame."""
    return np.asarray(v, np.float64) @ W


def rotation_to_world(r_game: np.ndarray) -> np.ndarray:
    """Game car orientation (local -> world) as trackmind's world-from-car rotation."""
    return W @ np.asarray(r_game, np.float64) @ P


def rotation_to_game(r_world: np.ndarray) -> np.ndarray:
    """trackmind's world-from-car rotation as the game's orientation matrix."""
    return W.T @ np.asarray(r_world, np.float64) @ P.T


@dataclass
class RealCarState(CarState):
    """CarState plus what only the real game has (read by the wheels/material terms)."""

    damper_absorb: np.ndarray | None = None  # (B, 4) float
    material_group: np.ndarray | None = None  # (B, 4) int, see MATERIAL_GROUP


@dataclass(frozen=True)
class Kinematics:
    """One car's state read from a SimStateData, already in trackmind's frame."""

    position: np.ndarray  # (3,)
    rotation: np.ndarray  # (3, 3) world-from-car
    velocity: np.ndarray  # (3,) car frame
    angular_velocity: np.ndarray  # (3,) car frame
    gear: int
    rpm: float
    wheel_contact: np.ndarray  # (4,) bool
    wheel_sliding: np.ndarray  # (4,) bool
    damper_absorb: np.ndarray  # (4,)
    material_group: np.ndarray  # (4,) int
    wall_contact: bool
    race_time_ms: int

    @property
    def yaw(self) -> float:
        return float(np.arctan2(self.rotation[1, 0], self.rotation[0, 0]))


def _vec(proxy: Any) -> np.ndarray:
    return np.asarray(proxy.to_numpy() if hasattr(proxy, "to_numpy") else proxy, np.float64)


def read_kinematics(state: Any) -> Kinematics:
    """Parse a tminterface SimStateData (real layout, via tminterface.structs)."""
    dyna = state.dyna.current_state
    rot = rotation_to_world(_vec(dyna.rotation).reshape(3, 3))
    vel_world = game_to_world(_vec(dyna.linear_speed))
    ang_world = game_to_world(_vec(dyna.angular_speed))
    mobil = state.scene_mobil
    engine = mobil.engine
    wheels = [state.simulation_wheels[i].real_time_state for i in range(4)]
    return Kinematics(
        position=game_to_world(_vec(dyna.position)),
        rotation=rot,
        velocity=rot.T @ vel_world,
        angular_velocity=rot.T @ ang_world,
        gear=int(engine.gear),
        rpm=float(engine.actual_rpm),
        wheel_contact=np.array([w.has_ground_contact for w in wheels], bool),
        wheel_sliding=np.array([w.is_sliding for w in wheels], bool),
        damper_absorb=np.array([w.damper_absorb for w in wheels], np.float64),
        material_group=MATERIAL_GROUP[[int(w.contact_material_id) & 0xFF for w in wheels]],
        wall_contact=bool(mobil.has_any_lateral_contact),
        race_time_ms=int(state.player_info.race_time),
    )
