"""Values that change with the number of frames played: lr, gamma, epsilon, buffer size.

A schedule is a list of (frames, value) points. Between points the value is interpolated
linearly, geometrically ("exponential", for quantities that span decades such as lr or
epsilon) or held ("staircase"); outside the points it stays at the nearest end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trackmind.errors import ConfigError, require

KINDS = ("linear", "exponential", "staircase")

Points = Sequence[tuple[float, float]]


def schedule_value(points: Points, frames: float, kind: str = "linear") -> float:
    """The schedule's value after ``frames`` frames (points already validated)."""
    f0, v0 = points[0]
    if frames <= f0:
        return float(v0)
    for f1, v1 in points[1:]:
        if frames < f1:
            if kind == "staircase":
                return float(v0)
            w = (frames - f0) / (f1 - f0)
            if kind == "exponential":
                return float(v0 * (v1 / v0) ** w)
            return float(v0 + w * (v1 - v0))
        f0, v0 = f1, v1
    return float(points[-1][1])


def validate_points(points: object, kind: str, key: str) -> list[tuple[float, float]]:
    """Points as a list of float pairs, or ConfigError naming ``key``.

    A bare number is a constant schedule; frames must be strictly increasing, values finite
    (and positive for the exponential kind, whose interpolation is geometric).
    """
    require(kind in KINDS, f"{key}_kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    if isinstance(points, int | float) and not isinstance(points, bool):
        points = [(0, points)]
    try:
        pairs = [(float(f), float(v)) for f, v in points]  # type: ignore[union-attr]
    except (TypeError, ValueError) as e:
        raise ConfigError(key, f"must be a list of [frames, value] pairs, got {points!r}") from e
    require(len(pairs) > 0, key, "needs at least one [frames, value] point")
    for i, (f, v) in enumerate(pairs):
        require(math.isfinite(f) and math.isfinite(v), key, f"point {i} is not finite: {f}, {v}")
        require(f >= 0, key, f"point {i} has negative frames {f:g}")
        if kind == "exponential":
            require(v > 0, key, f"exponential schedule needs positive values, point {i} is {v:g}")
        if i > 0:
            prev = pairs[i - 1][0]
            require(f > prev, key, f"frames must increase strictly: {prev:g} then {f:g}")
    return pairs


class Schedule:
    """A validated schedule, called with the frame counter."""

    def __init__(self, points: Points, kind: str = "linear") -> None:
        self.points = list(points)
        self.kind = kind

    @classmethod
    def from_config(cls, points: object, kind: str = "linear", key: str = "schedule") -> Schedule:
        """Build from config values; errors name ``key`` (e.g. ``exploration.epsilon``)."""
        return cls(validate_points(points, kind, key), kind)

    def __call__(self, frames: float) -> float:
        return schedule_value(self.points, frames, self.kind)

    def __repr__(self) -> str:
        return f"Schedule({self.points!r}, kind={self.kind!r})"


def share_schedule(points: object, key: str) -> Schedule:
    """A linear schedule of a share (one value or [[frames, share], ...]), every value in
    [0, 1], or ConfigError naming ``key``."""
    sched = Schedule.from_config(points, "linear", key)
    for f, v in sched.points:
        require(0.0 <= v <= 1.0, key, f"value {v:g} at frame {f:g} must be in [0, 1]")
    return sched


def sticky_schedule(points: object, key: str) -> Schedule:
    """A sticky-action probability (env/sticky.py): a share schedule whose values stay below 1
    (a car that always repeats would never act), or ConfigError naming ``key``."""
    sched = share_schedule(points, key)
    for f, v in sched.points:
        require(v < 1.0, key, f"value {v:g} at frame {f:g} must be below 1")
    return sched
