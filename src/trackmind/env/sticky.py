"""Sticky actions: an exploration race's car repeats its previous action with probability p.

The built-in game is deterministic, so Q-learning finds a line with no margin: technical's
final and best weights finish every greedy race, yet 37-90% of their races with random taus, the
weights read with a little noise (docs/learning.md, "Knife-edge policies"). Machado et al.
(2018, "Revisiting the Arcade Learning Environment") make a deterministic game stochastic the
same way: at each step the game keeps the previous action with probability p (0.25 there),
whatever the agent chose. The agent records what it chose, so its values price a late brake or
a late turn in, and a line that only works with perfect timing is worth less.

Only exploration races stick: greedy races (evaluation) and demonstrations drive as chosen.
The probability is set per map, like demonstrations: a map's cycle row names its own
(`{map: technical, ..., sticky: 0.25}`, 0 where unset), and `exploration.sticky`, when set,
sets every map's at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from trackmind.schedules import Schedule

if TYPE_CHECKING:
    from trackmind.env.map_cycle import CycleEntry


def map_sticky(every: Schedule | None, entry: CycleEntry) -> Schedule | None:
    """The sticky probability of `entry`'s races: `every` map's when set, else the map's own."""
    return entry.sticky if every is None else every


def sticky_on(every: Schedule | None, entries: Sequence[CycleEntry]) -> bool:
    """Whether any exploration race of these maps ever sticks."""
    scheds = [map_sticky(every, e) for e in entries]
    return any(s is not None and any(v > 0 for _, v in s.points) for s in scheds)


def sticky_actions(
    chosen: np.ndarray,
    previous: np.ndarray,
    draws: np.ndarray,
    p: float | np.ndarray,
    eligible: np.ndarray,
) -> np.ndarray:
    """The actions the game executes: `previous` where the car is eligible, has a previous
    action (>= 0) and its draw in [0, 1) is below p (one value, or one per car); `chosen`
    elsewhere."""
    stick = eligible & (previous >= 0) & (draws < p)
    return np.where(stick, previous, chosen).astype(np.int64)


class StickyActions:
    """The previous executed action of each car, and the draws that make it stick.

    `every` is every map's probability (None: each map's own, CycleEntry.sticky) over the
    run's frames (`frames()`, the collector's counter).
    """

    def __init__(
        self, every: Schedule | None, n_cars: int, seed: int, frames: Callable[[], float]
    ) -> None:
        self.every = every
        self.frames = frames
        self.rng = np.random.default_rng([seed, 11])
        self.previous = np.full(n_cars, -1, np.int64)  # -1: the race has no action yet
        self.scheds: list[Schedule | None] = [every] * n_cars  # each car's current map's

    def reset(self, cars: np.ndarray, entries: Sequence[CycleEntry]) -> None:
        """New races on `cars`, on the maps `entries`: their first action is always the one
        chosen, and then each sticks as its map says."""
        self.previous[cars] = -1
        for c, entry in zip(cars, entries):
            self.scheds[int(c)] = map_sticky(self.every, entry)

    def apply(self, chosen: np.ndarray, eligible: np.ndarray) -> np.ndarray:
        """The executed actions for this step's `chosen` ones (and remember them)."""
        draws = self.rng.random(len(chosen))
        now = self.frames()
        p = np.array([0.0 if s is None else s(now) for s in self.scheds])
        executed = sticky_actions(np.asarray(chosen), self.previous, draws, p, eligible)
        self.previous[:] = executed
        return executed
