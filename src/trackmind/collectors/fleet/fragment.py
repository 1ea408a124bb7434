"""SampleFragment: the unit a RolloutWorkerWrapper ships, and the staleness rule.

A fragment here is one car's whole race (packed rollout_results): the learner's n-step rule
and its mini-races read a race from start to end, so cutting races into fixed-length
chunks would only make the learner glue them back. The steps are buffered per environment
(per car) while the race runs and emitted when it ends. `policy_version` is the weights
version the race started with, i.e. the oldest policy that drove any of its steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackmind.env.rollout_results import RolloutResults, check_lengths

# what the learner needs of a rollout, and the per-step arrays whose lengths must agree
REQUIRED = ("actions", "rewards", "state_float", "map", "finished", "race_time", "potentials")


def is_stale(learner_version: int, policy_version: int, max_staleness: int) -> bool:
    """Data from a policy more than max_staleness versions behind the learner's is dropped."""
    return learner_version - policy_version > max_staleness


@dataclass
class SampleFragment:
    """One race of one car of one EnvWorker, with the policy versions that drove it."""

    worker: int
    env: int
    car: int
    policy_version: int  # weights version at race start (the oldest policy in the race)
    weights_version: int  # version held at race end (what local collectors record)
    n_steps: int  # actions in the race
    rollout: RolloutResults  # packed (arrays stacked)

    def meta(self) -> dict[str, int]:
        """What the learner needs to decide on the fragment before fetching its data."""
        return {
            "worker": self.worker,
            "policy_version": self.policy_version,
            "n_steps": self.n_steps,
        }


def check_meta(meta: Any) -> str | None:
    """None when the metadata is well formed, else why not."""
    if not isinstance(meta, Mapping):
        return f"metadata is a {type(meta).__name__}"
    for k in ("worker", "policy_version", "n_steps"):
        v = meta.get(k)
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < -1:
            return f"metadata {k} = {v!r}"
    return None


def check_fragment(frag: Any, known_maps: set[str] | None = None) -> str | None:
    """None when `frag` is a SampleFragment whose rollout the buffers can take, else why not."""
    if not isinstance(frag, SampleFragment):
        return f"not a SampleFragment but a {type(frag).__name__}"
    r = frag.rollout
    if not isinstance(r, dict):
        return f"rollout is a {type(r).__name__}"
    missing = [k for k in REQUIRED if k not in r]
    if missing:
        return f"rollout lacks {', '.join(missing)}"
    if known_maps is not None and r["map"] not in known_maps:
        return f"unknown map {r['map']!r}"
    t = frag.n_steps
    if t < 1:
        return f"{t} steps"
    try:
        actions = check_lengths(r)  # per-step keys: T actions, T + 1 states
    except ValueError as e:
        return str(e)
    if actions != t:
        return f"{actions} actions for a fragment of {t} steps"
    return None
