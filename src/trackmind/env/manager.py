"""Manager / ManagerTerm base classes and the term registry (seed 003's term managers).

A manager holds terms built from config; every term receives the environment after
construction (``bind``) and reads what it needs from it (car states, position buffers,
zone centers). Terms are registered by name so that a YAML entry such as

    progress: {weight: 1.0, params: {per_metre: 0.01}}

builds ``ProgressReward(per_metre=0.01)``. Unknown names and bad parameters raise a
ConfigError naming the config key, before anything runs.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackmind.errors import ConfigError, check_known_keys, check_schema, require
from trackmind.schedules import validate_points

_REGISTRY: dict[str, dict[str, type]] = {"observation": {}, "reward": {}, "termination": {}}


def register_term(kind: str, name: str):
    """Class decorator: make a term buildable from config as `name` in managers of `kind`."""

    def deco(cls: type) -> type:
        _REGISTRY[kind][name] = cls
        cls.term_name = name
        return cls

    return deco


def registered_terms(kind: str) -> list[str]:
    return sorted(_REGISTRY[kind])


class ManagerTerm:
    """One piece of an observation, reward or termination; bound to its environment."""

    term_name = "term"

    def __init__(self) -> None:
        self.env: Any = None
        self.name = self.term_name

    def bind(self, env: Any) -> None:
        """Called once the environment exists (terms are built before it)."""
        self.env = env

    def reset(self, cars: np.ndarray) -> None:
        """Forget per-car memory of the given cars (new race). Stateless terms ignore it."""


class Manager:
    """Holds terms and hands each the environment."""

    def __init__(self, terms: list[ManagerTerm]) -> None:
        names = [t.name for t in terms]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate term names: {names}")
        self.terms = terms
        self.env: Any = None

    def bind(self, env: Any) -> None:
        self.env = env
        for t in self.terms:
            t.bind(env)

    def reset(self, cars: np.ndarray) -> None:
        for t in self.terms:
            t.reset(cars)

    def add(self, term: ManagerTerm) -> None:
        """One more term after the manager was built (bound at once if the manager is)."""
        if any(t.name == term.name for t in self.terms):
            raise ValueError(f"duplicate term name: {term.name}")
        self.terms.append(term)
        if self.env is not None:
            term.bind(self.env)

    def term(self, name: str) -> ManagerTerm:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(name)


@dataclass
class TermSpec:
    """One term's entry: its registry name (default: the entry's name) and `params`, the
    keyword arguments of its class (checked against the constructor's signature)."""

    type: str | None = None
    params: Any = None


@dataclass
class RewardTermSpec(TermSpec):
    weight: Any = 1.0  # a number, or [[frames, value], ...]: a schedule over frames played
    weight_kind: str = "linear"  # the schedule's interpolation (trackmind.schedules.KINDS)
    clip: Any = None  # [min, max], null = open

    def __post_init__(self) -> None:
        w = self.weight
        if isinstance(w, int | float) and not isinstance(w, bool):
            require(math.isfinite(w), "weight", f"must be a finite number, got {w}")
        self.weight = validate_points(w, self.weight_kind, "weight")
        clip = self.clip
        if clip is None:
            return
        ok = isinstance(clip, list | tuple) and len(clip) == 2
        ok = ok and all(c is None or isinstance(c, int | float) for c in clip)
        require(ok, "clip", f"must be [min, max] (null = open), got {clip}")
        lo, hi = clip
        require(lo is None or hi is None or lo <= hi, "clip", f"min {lo} is above max {hi}")


def build_term(kind: str, name: str, spec: Any, key: str, schema: type[TermSpec] = TermSpec):
    """Build one registered term from its config entry; returns (term, checked entry)."""
    entry = check_schema(spec, schema, key)
    type_name = entry.type or name
    cls = _REGISTRY[kind].get(type_name)
    if cls is None:
        known = ", ".join(registered_terms(kind))
        raise ConfigError(key, f"unknown {kind} term {type_name!r} (known: {known})")
    params = as_dict(entry.params, f"{key}.params")
    sig = inspect.signature(cls.__init__)
    accepted = {p for p in sig.parameters if p != "self"}
    check_known_keys(params, accepted, f"{key}.params")
    try:
        term = cls(**params)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{key}.params", str(e)) from None
    term.name = name
    return term, entry


def as_dict(cfg: Any, key: str) -> dict:
    """A plain dict from a mapping config node (OmegaConf or dict); None -> {}."""
    if cfg is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if not isinstance(cfg, Mapping):
        raise ConfigError(key, f"expected a mapping, got {type(cfg).__name__}")
    return dict(cfg)
