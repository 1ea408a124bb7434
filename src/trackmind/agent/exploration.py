"""Exploration policies: pick actions for a batch of cars from their Q values.

Three policies from the ``exploration/`` config group, all with parameters that follow
the frame counter through schedules:
- ``epsilon_greedy``: a uniform action with probability epsilon, else argmax Q;
- ``linesight``: a uniform action with probability epsilon; otherwise, with probability
  epsilon_boltzmann, argmax(Q + noise_scale * N(0, 1)); else argmax Q (the two
  probabilities are independent settings: the noisy branch has overall probability
  (1 - epsilon) * epsilon_boltzmann, Linesight's code uses epsilon_boltzmann alone);
- ``boltzmann``: a sample from softmax(Q / temperature).
``greedy`` (argmax Q) is used for evaluation races.

Temporally extended random actions (Dabney, Ostrovski & Barreto 2021, "ez-greedy"): with
``hold_max > 1`` the uniform random branch draws a duration n in 1..hold_max with
P(n) proportional to n^-hold_mu and repeats its action for n steps (`ActionHold` keeps the
per-car count). One random 50 ms action barely changes a car's course; braking for half a
second before a hairpin, which single random actions almost never produce, is what the
agent must see to learn that braking there pays.

``was_greedy`` is True where the chosen action equals argmax Q, whatever the draw: the
n-step rule cuts returns at the first action the greedy policy would not have taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import MISSING

from trackmind.errors import ConfigError, check_schema, require
from trackmind.schedules import Schedule, sticky_schedule

PREFIX = "exploration"
POLICIES = ("greedy", "epsilon_greedy", "linesight", "boltzmann")


@dataclass(frozen=True)
class PolicyParams:
    """The exploration settings at one moment (the schedules read at one frame count)."""

    policy: str = "greedy"
    epsilon: float = 0.0
    epsilon_boltzmann: float = 0.0
    noise_scale: float = 0.01
    temperature: float = 1.0
    hold_mu: float = 2.0
    hold_max: int = 1


def hold_pmf(mu: float, max_actions: int) -> np.ndarray:
    """(max_actions,) P(n) for n = 1..max_actions, proportional to n^-mu (a cut zeta law)."""
    if max_actions < 1:
        raise ValueError(f"hold_max must be >= 1, got {max_actions}")
    w = np.arange(1, max_actions + 1, dtype=np.float64) ** -float(mu)
    return w / w.sum()


def sample_hold_lengths(rng: np.random.Generator, size: int, mu: float, max_actions: int):
    """(size,) int64 durations drawn from hold_pmf(mu, max_actions)."""
    cdf = np.cumsum(hold_pmf(mu, max_actions))
    u = rng.random(size) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), max_actions - 1) + 1


class ActionHold:
    """Per car: the random action being held and the steps it still has to run."""

    def __init__(self, n_cars: int) -> None:
        self.left = np.zeros(n_cars, np.int64)
        self.action = np.zeros(n_cars, np.int64)

    def release(self, cars: np.ndarray) -> None:
        """Drop the holds of these cars (their race just began)."""
        self.left[cars] = 0


def _as_numpy(q) -> np.ndarray:
    if hasattr(q, "detach"):  # a torch tensor
        q = q.detach().cpu().numpy()
    q = np.asarray(q, dtype=np.float64)
    if q.ndim != 2:
        raise ValueError(f"Q values must have shape (batch, n_actions), got {q.shape}")
    return q


def softmax_probabilities(q: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(Q / temperature) per row, computed stably."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    z = (q - q.max(axis=1, keepdims=True)) / temperature
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _sample_rows(p: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of the probability matrix p (inverse CDF)."""
    cdf = np.cumsum(p, axis=1)
    u = rng.random((p.shape[0], 1)) * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(axis=1), p.shape[1] - 1)


def select_actions(
    q, params: PolicyParams, rng: np.random.Generator, hold: ActionHold | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Actions (B,) int64 and was_greedy (B,) bool for Q values (B, A), numpy or torch.

    With `hold` (and params.hold_max > 1) cars holding a random action repeat it, and new
    uniform draws start a hold of a sampled duration (see the module doc)."""
    q = _as_numpy(q)
    b, n_actions = q.shape
    greedy = q.argmax(axis=1)
    if params.policy == "greedy":
        actions = greedy
    elif params.policy == "boltzmann":
        actions = _sample_rows(softmax_probabilities(q, params.temperature), rng)
    elif params.policy in ("epsilon_greedy", "linesight"):
        actions = greedy.copy()
        r = rng.random(b)
        uniform = r < params.epsilon
        actions[uniform] = rng.integers(0, n_actions, int(uniform.sum()))
        holding = None
        if hold is not None and params.hold_max > 1:
            holding = hold.left > 0
            uniform &= ~holding
            new = np.flatnonzero(uniform)
            hold.action[new] = actions[new]
            hold.left[new] = sample_hold_lengths(rng, len(new), params.hold_mu, params.hold_max)
        if params.policy == "linesight":
            # the same draw, rescaled on [epsilon, 1), decides the noisy branch
            eps = params.epsilon
            noisy = ~uniform & (r < eps + (1.0 - eps) * params.epsilon_boltzmann)
            noise = rng.standard_normal((int(noisy.sum()), n_actions))
            actions[noisy] = (q[noisy] + params.noise_scale * noise).argmax(axis=1)
        if holding is not None:
            actions[holding] = hold.action[holding]
            hold.left[holding | uniform] -= 1
    else:
        raise ValueError(f"unknown exploration policy {params.policy!r}")
    actions = actions.astype(np.int64)
    return actions, actions == greedy


@dataclass
class GreedyConfig:
    """The ``exploration`` group's keys for policy: greedy (one schema per policy below, chosen
    by ``policy``; check_schema refuses the keys a policy does not take)."""

    policy: str = "greedy"
    starts: Any = None  # mid-track starts: the collectors' (game/starts.py StartsConfig)
    demos: Any = None  # demonstration races: the collectors' (collectors/demos.py DemosConfig)
    # probability that an exploration race's car repeats its previous action instead of the
    # chosen one (env/sticky.py), on every map: one value or [[frames, p], ...]; None: each
    # map's own (its cycle row's `sticky`, 0 where unset)
    sticky: Any = None

    def __post_init__(self) -> None:
        if self.sticky is not None:
            sticky_schedule(self.sticky, f"{PREFIX}.sticky")


@dataclass
class BoltzmannConfig(GreedyConfig):
    temperature: Any = MISSING  # [[frames, value], ...] (or one value), positive
    temperature_kind: str = "linear"

    def __post_init__(self) -> None:
        super().__post_init__()
        _schedule(self.temperature, self.temperature_kind, "temperature", False)


@dataclass
class EpsilonGreedyConfig(GreedyConfig):
    epsilon: Any = MISSING  # [[frames, probability], ...] (or one value)
    epsilon_kind: str = "linear"
    hold_mu: float = 2.0
    hold_max: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        _schedule(self.epsilon, self.epsilon_kind, "epsilon", True)
        hm = self.hold_max
        require(hm >= 1, f"{PREFIX}.hold_max", f"must be an integer >= 1 (1: no holds), got {hm!r}")
        mu = self.hold_mu
        require(mu >= 0, f"{PREFIX}.hold_mu", f"must be a number >= 0, got {mu!r}")


@dataclass
class LinesightConfig(EpsilonGreedyConfig):
    epsilon_boltzmann: Any = MISSING
    epsilon_boltzmann_kind: str = "linear"
    noise_scale: float = 0.01

    def __post_init__(self) -> None:
        super().__post_init__()
        _schedule(self.epsilon_boltzmann, self.epsilon_boltzmann_kind, "epsilon_boltzmann", True)
        ns = self.noise_scale
        require(ns >= 0, f"{PREFIX}.noise_scale", f"must be a number >= 0, got {ns!r}")


SCHEMAS: dict[str, type[GreedyConfig]] = {
    "greedy": GreedyConfig,
    "epsilon_greedy": EpsilonGreedyConfig,
    "linesight": LinesightConfig,
    "boltzmann": BoltzmannConfig,
}


@dataclass(frozen=True)
class Exploration:
    """An exploration policy whose parameters follow the frame counter."""

    policy: str
    epsilon: Schedule | None = None
    epsilon_boltzmann: Schedule | None = None
    noise_scale: float = 0.01
    temperature: Schedule | None = None
    hold_mu: float = 2.0
    hold_max: int = 1
    sticky: Schedule | None = None  # every map's sticky actions (None: each map's own)

    def params(self, frames: float, explore: bool = True) -> PolicyParams:
        """Settings after ``frames`` frames; explore=False gives greedy (evaluation races)."""
        if not explore or self.policy == "greedy":
            return PolicyParams("greedy")

        def read(s: Schedule | None, default: float) -> float:
            return s(frames) if s is not None else default

        return PolicyParams(
            policy=self.policy,
            epsilon=read(self.epsilon, 0.0),
            epsilon_boltzmann=read(self.epsilon_boltzmann, 0.0),
            noise_scale=self.noise_scale,
            temperature=read(self.temperature, 1.0),
            hold_mu=self.hold_mu,
            hold_max=self.hold_max,
        )


def _schedule(points: Any, kind: str, name: str, probability: bool) -> Schedule:
    """A schedule of probabilities (in [0, 1]) or of positive values (temperatures)."""
    key = f"{PREFIX}.{name}"
    sched = Schedule.from_config(points, kind, key)
    for f, v in sched.points:
        ok = 0.0 <= v <= 1.0 if probability else v > 0
        need = "a probability in [0, 1]" if probability else "positive"
        require(ok, key, f"value {v:g} at frame {f:g} must be {need}")
    return sched


def build_exploration(cfg: Mapping) -> Exploration:
    """An Exploration from the ``exploration`` config group, or ConfigError naming the key."""
    policy = cfg.get("policy")
    if policy not in SCHEMAS:
        raise ConfigError(
            f"{PREFIX}.policy", f"must be one of {', '.join(SCHEMAS)}, got {policy!r}"
        )
    c = check_schema(cfg, SCHEMAS[policy], PREFIX)
    every = None if c.sticky is None else sticky_schedule(c.sticky, f"{PREFIX}.sticky")
    common = {"sticky": every}
    if isinstance(c, BoltzmannConfig):
        temperature = _schedule(c.temperature, c.temperature_kind, "temperature", False)
        return Exploration(policy, temperature=temperature, **common)
    if not isinstance(c, EpsilonGreedyConfig):
        return Exploration("greedy", **common)
    epsilon = _schedule(c.epsilon, c.epsilon_kind, "epsilon", True)
    common |= {"epsilon": epsilon, "hold_mu": float(c.hold_mu), "hold_max": int(c.hold_max)}
    if not isinstance(c, LinesightConfig):
        return Exploration(policy, **common)
    eps_b = _schedule(c.epsilon_boltzmann, c.epsilon_boltzmann_kind, "epsilon_boltzmann", True)
    return Exploration(policy, epsilon_boltzmann=eps_b, noise_scale=float(c.noise_scale), **common)
