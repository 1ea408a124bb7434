"""What a TMInterface SimStateData says about the car, in trackmind's frame.

Trackmania's world has y up. trackmind's has z up with the ground plane (x, y), and the map
importer (`trackmind.sim.mapio.import_npy`) reads game positions (x, y, z) as (x, -z) on the
ground, so one proper rotation W takes every game vector to trackmind: (x, y, z) ->
(x, -z, y). The car's own axes in the game are local (x, y, z) = (left, up, forward);
trackmind's car frame is (forward, left, up). Keeping both conversions here keeps the real
car, the reference lines and the stand-in game in one frame.
"""

from __future__ import annotations

import functools
import struct
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


@dataclass(frozen=True)
class Slot:
    """Where one field of a SimStateData lies: its offset and struct format (all its items)."""

    offset: int
    unpack: struct.Struct

    def read(self, data: bytes | bytearray) -> tuple:
        return self.unpack.unpack_from(data, self.offset)


def field_slot(proxy: Any, name: str) -> Slot:
    """The Slot of field `name` of a tminterface.structs proxy (bytefield's own offsets)."""
    field = getattr(type(proxy), f"{name}_field")
    elem = getattr(field, "_elem_field", field)  # an ArrayField's items
    fmt, count = elem.format, field.size // elem.size
    prefix = fmt[0] if fmt[0] in "@=<>!" else ""
    return Slot(proxy.calc_offset(field), struct.Struct(f"{prefix}{count}{fmt[len(prefix) :]}"))


WHEEL_FIELDS = ("has_ground_contact", "is_sliding", "damper_absorb", "contact_material_id")


@functools.cache
def sim_state_layout() -> dict[str, Slot]:
    """The fields read_kinematics needs, located once from tminterface.structs.

    Everything up to player_info has a fixed size, so the offsets are constants. Read with
    precompiled structs, a state parses in about 40 us against 0.4-0.6 ms through bytefield's
    proxies, which compute every offset again on each access: a tenth of an action at
    Linesight's pace of about 190 actions/s per game.
    """
    from tminterface.structs import SimStateData

    s = SimStateData()
    dyna, mobil = s.dyna.current_state, s.scene_mobil
    slots = {n: field_slot(dyna, n) for n in ("position", "rotation", "linear_speed")}
    slots["angular_speed"] = field_slot(dyna, "angular_speed")
    slots["gear"] = field_slot(mobil.engine, "gear")
    slots["actual_rpm"] = field_slot(mobil.engine, "actual_rpm")
    slots["has_any_lateral_contact"] = field_slot(mobil, "has_any_lateral_contact")
    slots["race_time"] = field_slot(s.player_info, "race_time")
    for i in range(4):
        wheel = s.simulation_wheels[i].real_time_state
        for n in WHEEL_FIELDS:
            slots[f"{n}/{i}"] = field_slot(wheel, n)
    return slots


def read_kinematics(state: Any) -> Kinematics:
    """Parse a tminterface SimStateData (its real byte layout, offsets from tminterface.structs)."""
    data, slots = state.data, sim_state_layout()

    def get(name: str) -> tuple:
        return slots[name].read(data)

    def wheels(name: str) -> list:
        return [get(f"{name}/{i}")[0] for i in range(4)]

    rot = rotation_to_world(np.array(get("rotation"), np.float64).reshape(3, 3))
    vel_world = game_to_world(np.array(get("linear_speed")))
    ang_world = game_to_world(np.array(get("angular_speed")))
    return Kinematics(
        position=game_to_world(np.array(get("position"))),
        rotation=rot,
        velocity=rot.T @ vel_world,
        angular_velocity=rot.T @ ang_world,
        gear=int(get("gear")[0]),
        rpm=float(get("actual_rpm")[0]),
        wheel_contact=np.array(wheels("has_ground_contact"), bool),
        wheel_sliding=np.array(wheels("is_sliding"), bool),
        damper_absorb=np.array(wheels("damper_absorb"), np.float64),
        material_group=MATERIAL_GROUP[[int(m) & 0xFF for m in wheels("contact_material_id")]],
        wall_contact=bool(get("has_any_lateral_contact")[0]),
        race_time_ms=int(get("race_time")[0]),
    )
