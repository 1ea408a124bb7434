"""Default reward terms: progress, time penalty, finish; optional shaping and engineered terms.

Linesight's defaults: -0.06 per 50 ms action (-1.2 per second, so the finishing step pays
only the milliseconds actually raced), +0.01 per metre advanced along the reference line,
and a potential Phi = -0.1 * clip(distance to the zone center ahead, 2, 25).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from trackmind.env.manager import register_term
from trackmind.env.rewards import PotentialTerm, RewardTerm


def zone_distance_potential(distance_m: np.ndarray, scale: float, min_m: float, max_m: float):
    """Phi = scale * clip(distance, min_m, max_m): pure, checked by hand in the tests."""
    return scale * np.clip(distance_m, min_m, max_m)


def wall_impact_penalty(
    speed_before: np.ndarray,
    speed_after: np.ndarray,
    wall_contact: np.ndarray,
    per_mps: float,
    free_mps: float = 0.0,
    exponent: float = 1.0,
    knee_mps: float = 30.0,
) -> np.ndarray:
    """per_mps times the speed (m/s) lost over a step that touched a wall beyond its first
    free_mps (curved by `exponent`, see impact_cost); 0 on other steps and where the car did
    not slow: the per-contact price with nothing carried in from earlier steps. Pure,
    checked by hand."""
    carried = np.zeros(np.shape(speed_before))
    args = (speed_before, speed_after, wall_contact, per_mps, free_mps, exponent, knee_mps)
    return contact_impact_penalty(carried, *args)[0]


def impact_cost(
    lost: np.ndarray, per_mps: float | np.ndarray, exponent: float, knee_mps: float
) -> np.ndarray:
    """The price of `lost` m/s: per_mps * knee * (lost / knee) ** exponent. Exponent 1 is
    per_mps * lost whatever the knee; above 1 a loss under the knee costs less than that line
    and one over it more (exponent 2, knee 30: a 6 m/s scrape 0.2 of the linear price, a 45
    m/s hit 1.5 of it), with no threshold to ride. Pure, checked by hand."""
    x = np.maximum(np.asarray(lost, float), 0.0)
    return per_mps * knee_mps * (x / knee_mps) ** exponent


def contact_impact_penalty(
    lost_before: np.ndarray,
    speed_before: np.ndarray,
    speed_after: np.ndarray,
    wall_contact: np.ndarray,
    per_mps: float | np.ndarray,
    free_mps: float,
    exponent: float = 1.0,
    knee_mps: float = 30.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The wall price counted over a whole contact: (cost of this step, m/s lost so far in
    the contact). A contact is a run of steps that touch a wall; its loss sums the speed lost
    on each of them, and a step pays what its loss adds to the price of the contact's loss
    beyond its first free_mps (impact_cost). A step off the wall ends the contact (0 lost).
    Pure, checked by hand."""
    lost = np.maximum(np.asarray(speed_before, float) - np.asarray(speed_after, float), 0.0)
    touching = np.asarray(wall_contact, bool)
    before = np.where(touching, np.asarray(lost_before, float), 0.0)
    after = np.where(touching, before + lost, 0.0)
    cost = impact_cost(after - free_mps, per_mps, exponent, knee_mps) - impact_cost(
        before - free_mps, per_mps, exponent, knee_mps
    )
    return cost, after


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


@register_term("reward", "wall_impact")
class WallImpactPenalty(RewardTerm):
    """`per_mps` (a cost, <= 0) per m/s of speed lost on a step that touched a wall.

    Why not wall_contact's flat cost: at a hairpin the sim's outer wall takes 30-40 m/s in one
    step, which saves about half a second of braking, so a fixed cost per step touching a wall
    is cheaper than braking and the wall stays the brake (docs/learning.md). Priced per m/s, a
    hit that brakes is dear and a scrape along a wall is cheap. `free_mps` makes the first m/s
    of each step free: a scrape at 50 m/s takes 5-8 m/s (and braking while touching a wall
    counts too), a wall used as a brake 15-35, so an allowance prices the brake alone.
    Engineered: it changes which line is best, towards braking before the corner. Off by
    default. `per: contact` counts the allowance over a whole contact instead of each step:
    per step, a wall brake spread over several steps that each stay near the allowance is
    free, and agents learn to ride the wall so (docs/learning.md). `exponent` > 1 curves the
    price instead (impact_cost): scrapes cheap, hits dear, equal to the linear price at
    `knee_mps`, with no allowance to ride."""

    def __init__(
        self,
        per_mps: float = -0.05,
        free_mps: float = 0.0,
        per: str = "step",
        exponent: float = 1.0,
        knee_mps: float = 30.0,
    ) -> None:
        super().__init__()
        if not float(exponent) >= 1.0:
            raise ValueError(f"exponent curves the price upwards: must be >= 1, got {exponent}")
        if not float(knee_mps) > 0.0:
            raise ValueError(f"knee_mps is a speed loss in m/s: must be > 0, got {knee_mps}")
        self.exponent, self.knee_mps = float(exponent), float(knee_mps)
        if per not in ("step", "contact"):
            raise ValueError(f"per must be 'step' or 'contact', got {per!r}")
        if not float(per_mps) <= 0.0:
            raise ValueError(
                f"per_mps is a cost per m/s lost into a wall: must be <= 0, got {per_mps}"
            )
        if not float(free_mps) >= 0.0:
            raise ValueError(f"free_mps is an allowance in m/s: must be >= 0, got {free_mps}")
        self.per_mps, self.free_mps, self.per = float(per_mps), float(free_mps), per
        self._lost: np.ndarray | None = None  # per car: m/s lost so far in its wall contact
        self._by_map: dict[str, float] | None = None  # track fingerprint -> per_mps
        self._of_track: dict[int, tuple[Any, float]] = {}  # id(track) -> (track, its price)
        self._price: np.ndarray | None = None  # per car, with _by_map: its map's per_mps

    def price_maps(self, prices: Mapping[str, float]) -> None:
        """Price each car by the map it races (track fingerprint -> per_mps; 0 on a map not
        named) instead of one per_mps for all: the maps' own wall prices (env/map_prices.py)."""
        self._by_map = {k: float(v) for k, v in prices.items()}
        self._of_track, self._price = {}, None

    def _map_price(self, track: Any) -> float:
        hit = self._of_track.get(id(track))
        if hit is None:  # keeps the track alive, so its id stays its own
            hit = self._of_track[id(track)] = (track, self._by_map.get(track.fingerprint(), 0.0))
        return hit[1]

    def reset(self, cars: np.ndarray) -> None:
        if self._lost is not None:
            self._lost[cars] = 0.0
        if self._price is not None:
            for c in np.atleast_1d(cars):
                self._price[c] = self._map_price(self.env.tracks[c])

    def car_prices(self, n: int) -> float | np.ndarray:
        """per_mps, or each of the n cars' map's price when the maps set their own."""
        if self._by_map is None:
            return self.per_mps
        if self._price is None or len(self._price) != n:
            self._price = np.array([self._map_price(t) for t in self.env.tracks], float)
        return self._price

    def _get_term(self) -> np.ndarray:
        car, prev = self.env.car, self.env.prev_car
        if self._lost is None or len(self._lost) != len(car.speed):
            self._lost = np.zeros(len(car.speed))
        carried = self._lost if self.per == "contact" else np.zeros(len(car.speed))
        cost, lost = contact_impact_penalty(
            carried,
            prev.speed,
            car.speed,
            car.wall_contact,
            self.car_prices(len(car.speed)),
            self.free_mps,
            self.exponent,
            self.knee_mps,
        )
        if self.per == "contact":
            self._lost = lost
        return cost


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
