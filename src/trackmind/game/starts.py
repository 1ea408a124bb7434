"""Mid-track starts: exploration races that begin from saved states along the map.

On a long map almost every early race ends at the first corner the policy cannot take, so
the later parts of the map are seen rarely and late, and a greedy race must survive every
corner to finish. Linesight's wish list calls the remedy "respawns / mid-track starts": the
game saves a car's state as races pass points along the map, and some exploration races
start from one of those states instead of the start line. Which point: where races end
is where the policy still fails, so start points are drawn in proportion to the recent race
ends a little further on (the car arrives at speed), with a floor for every point reached
(nothing reached is forgotten). Mini-races make such starts sound: a transition's value
only looks `mini_race_duration` ahead, whatever the race's history.

Races that start mid-track are exploration races; their times are not race times (see
RaceStats), and greedy races always start from the start line.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import MISSING

from trackmind.defaults import exploration_extra
from trackmind.errors import require

KEY = "exploration.starts"


@dataclass
class StartsConfig:
    """`exploration.starts`: how many exploration races start mid-track, and from where."""

    # the defaults are the default exploration option's (conf/exploration/fast.yaml `starts`),
    # merged in by from_config: written once, in YAML
    share: float = MISSING  # share of exploration races that start from a saved state (0: off)
    spacing_m: float = MISSING  # a state is saved every this many metres of progress
    lead_m: float = MISSING  # start this far before the drawn point, to arrive at speed
    keep: int = MISSING  # states kept per point (the newest)
    floor: float = MISSING  # share of the draws spread evenly over every point reached
    min_speed: float = MISSING  # m/s: slower states (stuck, against a wall) are not saved

    def __post_init__(self) -> None:
        checks = (
            ("share", 0.0 <= self.share <= 1.0, "a share in [0, 1]"),
            ("spacing_m", self.spacing_m > 0, "a distance > 0"),
            ("lead_m", self.lead_m >= 0, "a distance >= 0"),
            ("keep", self.keep >= 1, "an integer >= 1"),
            ("floor", 0.0 <= self.floor <= 1.0, "a share in [0, 1]"),
            ("min_speed", self.min_speed >= 0, "a speed >= 0"),
        )
        for name, ok, need in checks:
            require(ok, f"{KEY}.{name}", f"must be {need}, got {getattr(self, name)!r}")

    @staticmethod
    def from_config(cfg: Mapping | None) -> StartsConfig:
        """`exploration.starts` checked; keys it leaves out take conf/exploration/fast.yaml's
        values (an exploration option without `starts` has them off: share 0)."""
        return exploration_extra(cfg, "starts", StartsConfig)


def start_point_weights(ends: np.ndarray, reached: np.ndarray, floor: float) -> np.ndarray:
    """Probabilities over points (P,) from recent race ends per point and points reached.

    (1 - floor) in proportion to the ends, `floor` evenly over the reached points; a map with
    no ends yet spreads everything evenly. Zero where nothing was reached.
    """
    reached = reached.astype(bool)
    if not reached.any():
        return np.zeros(len(reached))
    even = reached / reached.sum()
    ends = np.where(reached, np.maximum(ends, 0.0), 0.0)
    if ends.sum() <= 0:
        return even
    return (1.0 - floor) * ends / ends.sum() + floor * even


class StartBank:
    """Saved states along each map and where races end there; draws mid-track starts."""

    def __init__(self, cfg: StartsConfig, seed: int = 0, memory: int = 400) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        self._states: dict[str, dict[int, deque]] = {}
        self._ends: dict[str, deque] = {}
        self.memory = memory  # recent race ends kept per map

    def point_of(self, progress_m: float) -> int:
        return int(np.floor(progress_m / self.cfg.spacing_m))

    def save(self, name: str, point: int, state: Any) -> None:
        points = self._states.setdefault(name, {})
        points.setdefault(point, deque(maxlen=self.cfg.keep)).append(state)

    def race_ended(self, name: str, progress_m: float) -> None:
        self._ends.setdefault(name, deque(maxlen=self.memory)).append(self.point_of(progress_m))

    def draw(self, name: str) -> tuple[Any, int] | None:
        """(a saved state, its point) to start from, or None (nothing saved yet)."""
        points = self._states.get(name)
        if not points:
            return None
        n = max(points) + 1
        reached = np.zeros(n, bool)
        reached[list(points)] = True
        ends = np.bincount(
            [min(p, n - 1) for p in self._ends.get(name, ()) if p >= 0], minlength=n
        ).astype(float)
        w = start_point_weights(ends, reached, self.cfg.floor)
        target = int(self.rng.choice(n, p=w))
        back = int(round(self.cfg.lead_m / self.cfg.spacing_m))
        options = [p for p in points if p <= target]
        if not options:
            return None
        # the saved point closest to `lead_m` before the target, never after it
        point = min(options, key=lambda p: abs((target - p) - back))
        kept = points[point]
        return kept[int(self.rng.integers(len(kept)))], point
