"""Default reward terms: progress, time penalty, finish; optional shaping and engineered terms.

Linesight's defaults: -0.06 per 50 ms action (-1.2 per second, so the finishing step pays
only the milliseconds actually raced), +0.01 per metre advanced along the reference line,
and a potential Phi = -0.1 * clip(distance to the zone center ahead, 2, 25).
"""

from __future__ import annotations

import numpy as np

from trackmind.env.manager import register_term
from trackmind.env.rewards import PotentialTerm, RewardTerm


def zone_distance_potential(distance_m: np.ndarray, scale: float, min_m: float, max_m: float):
    """Phi = scale * clip(distance, min_m, max_m): pure, checked by hand in the tests."""
    return scale * np.clip(distance_m, min_m, max_m)


@register_term("reward", "progress")
class ProgressReward(RewardTerm):
    """Metres advanced along the reference line this step (negative when going back)."""

    def __init__(self, per_metre: float = 0.01) -> None:
        super().__init__()
        self.per_metre = float(per_metre)

    def _get_term(self) -> np.ndarray:
        return self.per_metre * (self.env.car.progress_m - self.env.prev_car.progress_m)


@register_term("reward", "time_penalty")
class TimePenalty(RewardTerm):
    """A cost per second of race time; the finishing step pays only the ms actually raced."""

    def __init__(self, per_second: float = -1.2) -> None:
        super().__init__()
        self.per_second = float(per_second)

    def _get_term(self) -> np.ndarray:
        dt_ms = self.env.car.race_time_ms - self.env.prev_car.race_time_ms
        return self.per_second * dt_ms / 1000.0


@register_term("reward", "finish")
class FinishReward(RewardTerm):
    """A bonus on the step that crosses the finish line."""

    def __init__(self, bonus: float = 1.0) -> None:
        super().__init__()
        self.bonus = float(bonus)

    def _get_term(self) -> np.ndarray:
        crossed = self.env.car.finished & ~self.env.prev_car.finished
        return self.bonus * crossed


@register_term("reward", "speed")
class SpeedReward(RewardTerm):
    """Speed (m/s) times `per_mps`: an engineered term, off by default."""

    def __init__(self, per_mps: float = 0.001) -> None:
        super().__init__()
        self.per_mps = float(per_mps)

    def _get_term(self) -> np.ndarray:
        return self.per_mps * self.env.car.speed


@register_term("reward", "wall_contact")
class WallContactPenalty(RewardTerm):
    """`penalty` on every step that touched a wall: an engineered term, off by default."""

    def __init__(self, penalty: float = -0.1) -> None:
        super().__init__()
        self.penalty = float(penalty)

    def _get_term(self) -> np.ndarray:
        return self.penalty * self.env.car.wall_contact


@register_term("reward", "zone_distance")
class ZoneDistanceShaping(PotentialTerm):
    """Potential on the distance to the zone center ahead (closer is better)."""

    def __init__(
        self, scale: float = -0.1, min_m: float = 2.0, max_m: float = 25.0, gamma: float = 1.0
    ) -> None:
        super().__init__(gamma=gamma)
        if not 0 <= float(min_m) <= float(max_m):
            raise ValueError(f"need 0 <= min_m <= max_m, got min_m={min_m}, max_m={max_m}")
        self.scale, self.min_m, self.max_m = float(scale), float(min_m), float(max_m)

    def potential(self) -> np.ndarray:
        ahead = self.env.upcoming_zone_centers(1)[:, 0, :]
        dist = np.linalg.norm(ahead - self.env.car.position[:, :2], axis=1)
        return zone_distance_potential(dist, self.scale, self.min_m, self.max_m)


@register_term("reward", "speed_potential")
class SpeedShaping(PotentialTerm):
    """Potential on forward speed: Phi = scale * v. Pays for accelerating at once.

    From a standstill one 50 ms action of throttle moves the car centimetres, so progress
    alone rewards it only through long bootstrapped chains; this potential rewards the
    speed gained right away, and being a potential it does not change the best policy.
    """

    def __init__(self, scale: float = 0.05, gamma: float = 1.0) -> None:
        super().__init__(gamma=gamma)
        self.scale = float(scale)

    def potential(self) -> np.ndarray:
        return self.scale * self.env.car.velocity[:, 0]
