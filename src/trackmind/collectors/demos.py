"""Demonstration races: exploration races driven by the scripted driver, not the network.

A network that starts from nothing meets a long technical map one corner at a time: every
early race ends at the first corner it cannot take, so the states beyond it, and what
braking before it is worth, reach the replay buffer late. Value-based learning from
demonstrations (DQfD, Hester et al. 2018; RLPD, Ball et al. 2023) puts finished races in
the buffer from the start and lets off-policy learning take what it can from them. The
sim's scripted driver (sim/driver.py: pure pursuit of the reference line at a share of its
limit speed, through the same 12 actions) finishes every built-in map at 1.2-1.3x, so it
can demonstrate any map the sim loads, at no cost beyond its races.

A share of the exploration races that start from the start line (a schedule over frames, so
demonstrations can fade out) is driven by the driver at a pace drawn per race, with a small
probability of a uniform random action at each step (recoveries are demonstrated too). The
races go to the buffer like any other; their actions are recorded with the network's Q
values and whether they were its greedy choice. They are not evaluation: the learner keeps
them out of finish rates and best times (RaceStats), like mid-track starts.

The share is set per map: a map's cycle row names its own (`{map: hairpins, demos: 0.25}`,
0 where unset), since what helps one map can slow another (alone, technical drove 1.16x
against 1.13x with a share that lifted hairpins from 77% to 97-100% finished; technical sets
it beside its wall price, env/map_prices.py). A value of
`exploration.demos.share` sets every map's share at once and takes precedence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import MISSING

from trackmind.defaults import exploration_extra
from trackmind.errors import require
from trackmind.game.actions import ACTIONS, N_ACTIONS
from trackmind.game.contract import CarState
from trackmind.schedules import Schedule, share_schedule

if TYPE_CHECKING:
    from trackmind.env.map_cycle import CycleEntry

KEY = "exploration.demos"
PROFILES = ("share", "grip")


@dataclass
class DemosConfig:
    """`exploration.demos`: how many exploration races the scripted driver drives, and how."""

    # share of exploration races from the start line that are demonstrations, on every map:
    # one value or [[frames, share], ...] (linear between points); 0: off; None: each map's
    # own (its cycle row's `demos`, 0 where unset)
    share: Any = MISSING
    pace: list[float] = field(default_factory=lambda: MISSING)  # [low, high] share of the
    # limit speed, drawn uniformly per race
    epsilon: float = MISSING  # probability of a uniform random action at each step
    # what `pace` scales: share, the limit speed profile everywhere (straights too); grip,
    # the tyre grip the profile is computed with (corners at sqrt(pace) of their limit,
    # straights at full throttle, brakes as late as that grip allows: sim/reference.py's
    # grip_profile)
    profile: str = "share"

    def __post_init__(self) -> None:
        self.schedule()
        require(
            self.profile in PROFILES,
            f"{KEY}.profile",
            f"must be one of {', '.join(PROFILES)}, got {self.profile!r}",
        )
        pace = list(self.pace)
        require(
            len(pace) == 2 and 0.0 < pace[0] <= pace[1] <= 1.5,
            f"{KEY}.pace",
            f"must be [low, high] with 0 < low <= high <= 1.5, got {pace!r}",
        )
        require(
            self.profile != "grip" or pace[1] <= 1.0,
            f"{KEY}.pace",
            f"is a share of the tyre grip with profile grip: must be at most 1, got {pace!r}",
        )
        require(
            0.0 <= self.epsilon <= 1.0, f"{KEY}.epsilon", f"must be in [0, 1], got {self.epsilon!r}"
        )

    def schedule(self) -> Schedule | None:
        """Every map's share, or None where each map sets its own."""
        return None if self.share is None else share_schedule(self.share, f"{KEY}.share")

    def share_of(self, entry: CycleEntry) -> Schedule | None:
        """The share of `entry`'s races: every map's when set, else the map's own (None: 0)."""
        return map_share(self.schedule(), entry)

    def enabled_on(self, entries: Sequence[CycleEntry]) -> list[str]:
        """The maps of `entries` with demonstration races at some point (empty: off)."""
        out = []
        for e in entries:
            sched = self.share_of(e)
            if sched is not None and any(v > 0 for _, v in sched.points) and e.name not in out:
                out.append(e.name)
        return out

    @staticmethod
    def from_config(cfg: Mapping | None) -> DemosConfig:
        """`exploration.demos` checked; keys it leaves out take conf/exploration/fast.yaml's
        values. An exploration option without `demos` leaves the share to each map (null), so
        `map=hairpins exploration=linesight` demonstrates as hairpins asks."""
        return exploration_extra({"share": None} if cfg is None else cfg, "demos", DemosConfig)


def map_share(every: Schedule | None, entry: CycleEntry) -> Schedule | None:
    """The share of `entry`'s races: `every` map's when set, else the map's own (None: 0)."""
    return entry.demos if every is None else every


def steer_direction(action: int) -> int:
    """+1 left, -1 right, 0 neither (or both) for one of the 12 actions."""
    return int(ACTIONS[action, 2]) - int(ACTIONS[action, 3])


class Demonstrator:
    """Chooses which new races are demonstrations and drives their cars.

    `frames()` is the run's frame counter (the share's schedule reads it). The driver's
    reference laps are computed once per map (and cached on disk by sim/reference.py).
    """

    def __init__(
        self, cfg: DemosConfig, n_cars: int, seed: int, frames: Callable[[], float], vehicle
    ) -> None:
        self.cfg = cfg
        self.share = cfg.schedule()  # None: each map's own (CycleEntry.demos)
        self.frames = frames
        self.vehicle = vehicle
        self.rng = np.random.default_rng([seed, 7])
        self.active = np.zeros(n_cars, bool)
        self.pace = np.ones(n_cars)
        self.steer = np.zeros(n_cars)
        self._laps: dict[str, Any] = {}

    def start(self, cars: np.ndarray, eligible: np.ndarray, entries: Sequence[CycleEntry]) -> None:
        """New races on `cars`, on the maps `entries`; `eligible` marks those that may be
        demonstrations (exploration races from the start line), a share of which (the map's,
        or every map's) the driver takes."""
        now = self.frames()
        scheds = [map_share(self.share, e) for e in entries]
        share = np.array([0.0 if s is None else s(now) for s in scheds])
        draw = self.rng.random(len(cars)) < share
        self.active[cars] = draw & eligible
        lo, hi = self.cfg.pace
        self.pace[cars] = self.rng.uniform(lo, hi, len(cars))
        self.steer[cars] = 0.0

    def _lap(self, track):
        from trackmind.sim.reference import reference_lap

        key = track.fingerprint()
        if key not in self._laps:
            self._laps[key] = reference_lap(track, self.vehicle)
        return self._laps[key]

    def _target(self, track, pace: float) -> tuple[Any, float]:
        """(the lap whose speed profile the driver follows, the share of it): the reference
        lap and the pace; with profile `grip`, the lap at pace times the grip (computed once
        per map and pace to 0.01) and all of it."""
        lap = self._lap(track)
        if self.cfg.profile == "share":
            return lap, pace
        from dataclasses import replace

        from trackmind.sim.reference import grip_profile

        key = (track.fingerprint(), round(float(pace), 2))
        if key not in self._laps:
            speed = grip_profile(lap.line, self.vehicle, key[1])  # pace <= 1: DemosConfig
            self._laps[key] = replace(lap, speed=speed)
        return self._laps[key], 1.0

    def drive(
        self,
        car: CarState,
        tracks: list,
        dt: float,
        actions: np.ndarray,
        q: np.ndarray,
        was_greedy: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(actions, was_greedy) with the demonstration cars' actions replaced by the driver's
        (or, with probability epsilon, a uniform one) and their was_greedy by whether that
        action is argmax Q; the other cars' pass through."""
        from trackmind.sim.driver import LOOKAHEAD_S, pursuit_action, steer_after

        cars = np.flatnonzero(self.active)
        if not len(cars):
            return actions, was_greedy
        actions, was_greedy = actions.copy(), was_greedy.copy()
        for c in cars:
            track = tracks[c]
            lap, share = self._target(track, self.pace[c])
            a, _ = pursuit_action(
                track, lap, self.vehicle, car, c, self.steer[c], dt, share, LOOKAHEAD_S
            )
            if self.rng.random() < self.cfg.epsilon:
                a = int(self.rng.integers(N_ACTIONS))
            actions[c] = a
            key = steer_direction(a)
            self.steer[c] = steer_after(self.steer[c], key, car.velocity[c, 0], self.vehicle, dt)
        was_greedy[cars] = actions[cars] == np.asarray(q)[cars].argmax(axis=1)
        return actions, was_greedy
