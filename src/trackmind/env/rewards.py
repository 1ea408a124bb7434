"""RewardManager: the reward of a step is the sum of clipped, weighted RewardTerms.

A term's contribution is clip(value, clip_min, clip_max) * weight (seed 003). A weight may be
a schedule over the frames played (a price that comes in, or fades, as training goes on): the
manager then follows the collector's frame counter and sets the weight before every step.
Potential terms (reward shaping, Ng et al. 1999) are special: their reward is
gamma * Phi(s') - Phi(s), and the IQN pipeline applies that at replay time with the mini-race
discount, so the manager can either add them to the step reward (`shaping: env`, for gymnasium
users) or leave them out and report Phi(s) for the rollout to record (`shaping: collate`, the
default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackmind.env.manager import Manager, ManagerTerm, RewardTermSpec, as_dict, build_term
from trackmind.errors import ConfigError, check_schema, require
from trackmind.schedules import Schedule


class RewardTerm(ManagerTerm):
    """Computes one reward component for every car; the manager clips and weights it."""

    is_potential = False

    def __init__(self) -> None:
        super().__init__()
        self.weight = 1.0
        self.weight_schedule: Schedule | None = None  # sets `weight` from the frames played
        self.clip_min: float | None = None
        self.clip_max: float | None = None

    def _get_term(self) -> np.ndarray:
        raise NotImplementedError

    def calculate_reward_term(self) -> np.ndarray:
        """clip(term, clip_min, clip_max) * weight, shape (B,)."""
        v = np.asarray(self._get_term(), dtype=np.float64)
        if self.clip_min is not None or self.clip_max is not None:
            v = np.clip(v, self.clip_min, self.clip_max)
        return v * self.weight


class PotentialTerm(RewardTerm):
    """A shaping term from a potential Phi(state): reward = gamma * Phi(s') - Phi(s)."""

    is_potential = True

    def __init__(self, gamma: float = 1.0) -> None:
        super().__init__()
        if not 0.0 <= float(gamma) <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        self.gamma = float(gamma)
        self._phi_prev: np.ndarray | None = None

    def potential(self) -> np.ndarray:
        """Phi of every car's current state, shape (B,)."""
        raise NotImplementedError

    def reset(self, cars: np.ndarray) -> None:
        phi = self.potential()
        if self._phi_prev is None or len(self._phi_prev) != len(phi):
            self._phi_prev = phi.copy()
        self._phi_prev[cars] = phi[cars]

    def _get_term(self) -> np.ndarray:
        phi = self.potential()
        out = self.gamma * phi - self._phi_prev
        self._phi_prev = phi
        return out


class RewardManager(Manager):
    """Sums the weighted, clipped terms; optionally normalises the sum."""

    def __init__(
        self,
        terms: list[RewardTerm],
        shaping: str = "collate",
        normalizer: RewardNormalizer | None = None,
    ) -> None:
        super().__init__(terms)
        if shaping not in ("collate", "env"):
            raise ValueError(f"shaping must be 'collate' or 'env', got {shaping!r}")
        self.shaping = shaping
        self.normalizer = normalizer
        self.scheduled = [t for t in terms if t.weight_schedule is not None]
        self.frames: Callable[[], float] | None = None

    def follow(self, frames: Callable[[], float]) -> None:
        """Read the frames played from `frames` before every step (scheduled weights); a
        manager that follows nothing keeps each schedule's weight at frame 0."""
        self.frames = frames

    def compute(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Reward of every car for the step just taken, and each term's contribution."""
        if self.scheduled and self.frames is not None:
            played = self.frames()
            for t in self.scheduled:
                t.weight = t.weight_schedule(played)
        parts: dict[str, np.ndarray] = {}
        total = None
        for t in self.terms:
            if t.is_potential and self.shaping == "collate":
                continue
            v = t.calculate_reward_term()
            parts[t.name] = v
            total = v if total is None else total + v
        if total is None:
            total = np.zeros(self.env.n_cars)
        if self.normalizer is not None:
            total = self.normalizer(total)
        return total, parts

    def potentials(self) -> dict[str, np.ndarray]:
        """Weighted Phi(s) of every potential term for the current states (for rollouts)."""
        return {t.name: t.weight * t.potential() for t in self.terms if t.is_potential}


class RewardNormalizer:
    """Running mean/variance normalisation: r' = (r - mu) / (sqrt(var) + eps), then update."""

    def __init__(self, eps: float = 1e-8) -> None:
        self.eps = float(eps)
        self.count = 0
        self.mean = 0.0
        self.var = 1.0

    def __call__(self, rewards: np.ndarray) -> np.ndarray:
        r = np.asarray(rewards, dtype=np.float64)
        out = (r - self.mean) / (np.sqrt(self.var) + self.eps)
        self.update(r)
        return out

    def update(self, batch: np.ndarray) -> None:
        """Merge a batch into the running moments (Chan et al. parallel update)."""
        b = np.asarray(batch, dtype=np.float64).ravel()
        if b.size == 0:
            return
        n_b, mean_b, var_b = b.size, float(b.mean()), float(b.var())
        if self.count == 0:
            self.count, self.mean, self.var = n_b, mean_b, var_b
            return
        n = self.count + n_b
        delta = mean_b - self.mean
        m2 = self.var * self.count + var_b * n_b + delta**2 * self.count * n_b / n
        self.mean += delta * n_b / n
        self.var = m2 / n
        self.count = n

    def state_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean, "var": self.var}

    def load_state_dict(self, d: Mapping) -> None:
        self.count, self.mean, self.var = int(d["count"]), float(d["mean"]), float(d["var"])


@dataclass
class RewardConfig:
    """The ``reward`` group: `terms` (each a RewardTermSpec), how potentials are applied
    (`collate`: in the mini-race collate, `env`: in the environment's rewards), and an
    optional running normalisation."""

    terms: Any = None
    shaping: str = "collate"
    normalize: bool = False

    def __post_init__(self) -> None:
        sh = self.shaping
        require(sh in ("collate", "env"), "shaping", f"must be 'collate' or 'env', got {sh!r}")


def build_reward_manager(cfg: Mapping | Any, key: str = "reward") -> RewardManager:
    """RewardManager from config: `terms` (weight, clip, params each), shaping, normalize."""
    rc = check_schema(cfg, RewardConfig, key)
    terms = []
    for name, spec in as_dict(rc.terms, f"{key}.terms").items():
        term, entry = build_term("reward", name, spec, f"{key}.terms.{name}", RewardTermSpec)
        points = entry.weight  # validated [(frames, value), ...]; one point: a constant
        term.weight = float(points[0][1])
        if len(points) > 1:
            if term.is_potential:  # Phi(s) and Phi(s') must carry the same weight
                msg = "a potential (shaping) term's weight must be one number, not a schedule"
                raise ConfigError(f"{key}.terms.{name}.weight", msg)
            term.weight_schedule = Schedule(points, entry.weight_kind)
        if entry.clip is not None:
            term.clip_min, term.clip_max = entry.clip
        terms.append(term)
    return RewardManager(terms, rc.shaping, RewardNormalizer() if rc.normalize else None)
