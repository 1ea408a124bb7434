"""Sticky actions: an exploration race's car repeats its previous action with probability p.

The built-in game is deterministic, so Q-learning finds a line with no margin: technical's
final and best weights finish every greedy race, yet 37-90% of their races with random taus, the
weights read with a little noise (docs/learning.md, "Knife-edge policies"). Machado et al.
(2018, "Revisiting the Arcade Learning Environment") make a deterministic game stochastic the
same way: at each step the game keeps the previous action with probability p (0.25 there),
whatever the agent chose. The agent records what it chose, so its values price a late brake or
a late turn in, and a line that only works with perfect timing is worth less.

Only exploration races stick: greedy races (evaluation) and demonstrations drive as chosen.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trackmind.schedules import Schedule


def sticky_actions(
    chosen: np.ndarray,
    previous: np.ndarray,
    draws: np.ndarray,
    p: float,
    eligible: np.ndarray,
) -> np.ndarray:
    """The actions the game executes: `previous` where the car is eligible, has a previous
    action (>= 0) and its draw in [0, 1) is below p; `chosen` elsewhere."""
    stick = eligible & (previous >= 0) & (draws < p)
    return np.where(stick, previous, chosen).astype(np.int64)


class StickyActions:
    """The previous executed action of each car, and the draws that make it stick.

    `p` is the probability over the run's frames (`frames()`, the collector's counter).
    """

    def __init__(self, p: Schedule, n_cars: int, seed: int, frames: Callable[[], float]) -> None:
        self.p = p
        self.frames = frames
        self.rng = np.random.default_rng([seed, 11])
        self.previous = np.full(n_cars, -1, np.int64)  # -1: the race has no action yet

    def reset(self, cars: np.ndarray) -> None:
        """New races on `cars`: their first action is always the one chosen."""
        self.previous[cars] = -1

    def apply(self, chosen: np.ndarray, eligible: np.ndarray) -> np.ndarray:
        """The executed actions for this step's `chosen` ones (and remember them)."""
        draws = self.rng.random(len(chosen))
        p = self.p(self.frames())
        executed = sticky_actions(np.asarray(chosen), self.previous, draws, p, eligible)
        self.previous[:] = executed
        return executed
