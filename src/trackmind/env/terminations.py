"""TerminationManager and its default terms: finish, stuck, no-progress, timeout.

Each term flags cars; its `outcome` says whether that ends the race (terminated: finish,
stuck) or cuts it (truncated: timeout, and no-progress as Linesight cuts runs that reach no
new zone for 2 s — a cut race keeps bootstrapping, terminal_actions = inf).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackmind.env.manager import Manager, ManagerTerm, as_dict, build_term, register_term
from trackmind.errors import check_schema

OUTCOMES = ("terminated", "truncated")


class TerminationTerm(ManagerTerm):
    """Flags cars whose race this term ends; `outcome` is terminated or truncated."""

    default_outcome = "terminated"

    def __init__(self, outcome: str | None = None) -> None:
        super().__init__()
        outcome = outcome or self.default_outcome
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be 'terminated' or 'truncated', got {outcome!r}")
        self.outcome = outcome

    def _get_term(self) -> np.ndarray:
        raise NotImplementedError


class TerminationManager(Manager):
    """Combines the terms into (terminated, truncated); a finished race is never truncated."""

    def compute(self) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        n = self.env.n_cars
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        fired = {}
        for t in self.terms:
            hit = np.asarray(t._get_term(), bool)
            fired[t.name] = hit
            if t.outcome == "terminated":
                terminated |= hit
            else:
                truncated |= hit
        truncated &= ~terminated
        return terminated, truncated, fired


@register_term("termination", "finish")
class FinishTermination(TerminationTerm):
    """The car crossed the finish line."""

    def _get_term(self) -> np.ndarray:
        return self.env.car.finished


@register_term("termination", "timeout")
class Timeout(TerminationTerm):
    """Race time reached `max_race_ms` (every MDP needs a limit)."""

    default_outcome = "truncated"

    def __init__(self, max_race_ms: int = 300_000, outcome: str | None = None) -> None:
        super().__init__(outcome)
        if int(max_race_ms) <= 0:
            raise ValueError(f"max_race_ms must be > 0, got {max_race_ms}")
        self.max_race_ms = int(max_race_ms)

    def _get_term(self) -> np.ndarray:
        return self.env.car.race_time_ms >= self.max_race_ms


@register_term("termination", "no_progress")
class NoProgress(TerminationTerm):
    """No new zone reached for `window_ms` of race time (Linesight's cut-off)."""

    default_outcome = "truncated"

    def __init__(self, window_ms: int = 2000, outcome: str | None = None) -> None:
        super().__init__(outcome)
        if int(window_ms) <= 0:
            raise ValueError(f"window_ms must be > 0, got {window_ms}")
        self.window_ms = int(window_ms)

    def _get_term(self) -> np.ndarray:
        return self.env.ms_since_new_zone >= self.window_ms


@register_term("termination", "stuck")
class Stuck(TerminationTerm):
    """The car moved less than `min_distance_m` over the last `window_ms` of race time."""

    def __init__(
        self, window_ms: int = 3000, min_distance_m: float = 1.0, outcome: str | None = None
    ) -> None:
        super().__init__(outcome)
        if int(window_ms) <= 0:
            raise ValueError(f"window_ms must be > 0, got {window_ms}")
        if float(min_distance_m) < 0:
            raise ValueError(f"min_distance_m must be >= 0, got {min_distance_m}")
        self.window_ms = int(window_ms)
        self.min_distance_m = float(min_distance_m)
        self._hist: np.ndarray | None = None  # (B, L, 2) positions, ring by step count

    def bind(self, env: Any) -> None:
        super().bind(env)
        self._len = max(1, -(-self.window_ms // env.action_ms))
        self._hist = np.zeros((env.n_cars, self._len, 2))

    def reset(self, cars: np.ndarray) -> None:
        self._hist[cars] = self.env.car.position[cars, None, :2]

    def _get_term(self) -> np.ndarray:
        env = self.env
        k = env.steps % self._len  # (B,) slot of this step; holds the position `len` ago
        rows = np.arange(env.n_cars)
        old = self._hist[rows, k].copy()
        now = env.car.position[:, :2]
        self._hist[rows, k] = now
        moved = np.linalg.norm(now - old, axis=1)
        long_enough = env.steps * env.action_ms >= self.window_ms
        return long_enough & (moved < self.min_distance_m)


@dataclass
class TerminationConfig:
    """``env.termination``: the terms that end a race (each a TermSpec)."""

    terms: Any = None


def build_termination_manager(cfg: Mapping | Any, key: str = "env.termination"):
    """TerminationManager from config: `terms`, each with optional `params` (and outcome)."""
    tc = check_schema(cfg, TerminationConfig, key)
    terms = []
    for name, spec in as_dict(tc.terms, f"{key}.terms").items():
        term, _ = build_term("termination", name, spec, f"{key}.terms.{name}")
        terms.append(term)
    return TerminationManager(terms)


@register_term("termination", "game_lost")
class GameLost(TerminationTerm):
    """The game lost the race (hung, closed, restarted, or released mid-race).

    A real game that hung or closed is restarted by its backend, and the race in progress is
    returned flagged `lost` (trackmind.tmi.observation). This term turns the flag into a cut
    (truncated: the agent did nothing wrong). Games without the flag never fire it.
    """

    default_outcome = "truncated"

    def _get_term(self) -> np.ndarray:
        lost = getattr(self.env.raw, "lost", None)
        if lost is None:
            return np.zeros(self.env.n_cars, bool)
        return np.asarray(lost, bool)
