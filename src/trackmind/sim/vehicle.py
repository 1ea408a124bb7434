"""Vehicle parameters and the longitudinal/lateral limits they imply.

The magnitudes follow the Trackmania Stadium car: 0-100 km/h in about 2 s, a top speed near
280 km/h, about 3 g of lateral grip. The limit functions here are shared by the physics and
by the reference-time computation, so the reference can never assume a faster car than the
one that is simulated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

import numpy as np

from trackmind.errors import check_schema, require

G = 9.81


@dataclass(frozen=True)
class VehicleParams:
    """Physical constants of the simulated car (SI units, forces per unit mass)."""

    mu: float = 3.0  # tyre grip coefficient: peak lateral acceleration mu * g
    tyre_stiffness: float = 8.0  # B in F = mu Fz tanh(B alpha); saturation near 0.2 rad
    rear_grip: float = 1.15  # rear/front grip ratio > 1: the car understeers at the limit
    rear_stiffness: float = 1.5  # rear/front cornering stiffness ratio (stability)
    wheelbase_front: float = 1.2  # centre of mass -> front axle (m)
    wheelbase_rear: float = 1.4  # centre of mass -> rear axle (m)
    yaw_inertia: float = 1.6  # Iz / m (m^2)
    power: float = 400.0  # engine power per unit mass (W/kg): accel = power / speed
    traction_accel: float = 16.0  # drive acceleration at low speed (m/s^2)
    drag: float = 8.3e-4  # aerodynamic drag: accel = drag * v^2
    rolling: float = 0.1  # rolling resistance (m/s^2)
    engine_brake: float = 1.5  # deceleration when coasting (m/s^2)
    brake_decel: float = 24.0  # deceleration of the brakes (m/s^2)
    reverse_accel: float = 6.0  # acceleration backwards when braking at standstill
    reverse_max_speed: float = 12.0  # m/s
    steer_max: float = 0.5  # full-lock steering angle at standstill (rad)
    steer_speed_ref: float = 25.0  # full lock shrinks as steer_max / (1 + v / steer_speed_ref)
    steer_rate: float = 4.0  # rad/s, both towards lock and back to centre
    drift_rear_grip: float = 0.6  # rear grip factor while accelerating and braking together
    kinematic_below: float = 3.0  # m/s: pure kinematic bicycle below this speed
    dynamic_above: float = 6.0  # m/s: pure dynamic bicycle above this speed
    half_width: float = 1.0  # m (the car is 2 m wide)
    wall_restitution: float = 0.1  # share of the normal speed bounced back by a wall
    wall_friction: float = 0.5  # tangential speed lost per unit normal impact speed
    max_speed: float = 150.0  # hard safety cap (m/s), far above the top speed
    gear_top_speeds: tuple[float, ...] = (14.0, 28.0, 43.0, 60.0, 100.0)  # m/s per gear
    rpm_idle: float = 1000.0
    rpm_max: float = 11000.0

    def __post_init__(self) -> None:
        # a config's list (check_schema, OmegaConf) becomes the tuple the dataclass holds
        gears = tuple(float(x) for x in self.gear_top_speeds)
        object.__setattr__(self, "gear_top_speeds", gears)
        for f in fields(self):
            v = getattr(self, f.name)
            ok = all(np.isfinite(x) and x >= 0 for x in (v if isinstance(v, tuple) else (v,)))
            require(ok, f.name, f"must be finite and >= 0, got {v}")
        require(
            self.dynamic_above > self.kinematic_below,
            "dynamic_above",
            f"must be > kinematic_below ({self.kinematic_below}), got {self.dynamic_above}",
        )

    @property
    def wheelbase(self) -> float:
        return self.wheelbase_front + self.wheelbase_rear

    @property
    def lateral_accel_max(self) -> float:
        return self.mu * G

    @classmethod
    def from_config(cls, section: Mapping | None, key: str = "vehicle") -> VehicleParams:
        """The overrides of `env.vehicle` over these defaults, checked (errors name `key`)."""
        return check_schema(section, cls, key)

    def as_dict(self) -> dict:
        return asdict(self)


def drive_accel(v: np.ndarray | float, p: VehicleParams) -> np.ndarray:
    """Engine acceleration at forward speed v: traction-limited, then power-limited."""
    v = np.maximum(np.asarray(v, dtype=np.float64), 1e-3)
    return np.minimum(p.traction_accel, p.power / v)


def resistance_accel(v: np.ndarray | float, p: VehicleParams) -> np.ndarray:
    """Deceleration from drag and rolling resistance at speed v >= 0."""
    v = np.asarray(v, dtype=np.float64)
    return p.drag * v * v + p.rolling * (v > 0)


def top_speed(p: VehicleParams) -> float:
    """Speed where drive and resistance balance (bisection)."""
    lo, hi = 1.0, p.max_speed
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if drive_accel(mid, p) > resistance_accel(mid, p):
            lo = mid
        else:
            hi = mid
    return lo
