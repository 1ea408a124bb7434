"""RolloutResults: the record of one race that every layer passes on, defined once.

The rollout (env/rollout.py) fills it per step, the collectors (local processes, Ray
workers) stack its lists into arrays for the queue (`pack_rollout`), the learner's n-step
rule (replay/nstep.py) turns it into transitions (`check_lengths` first), and race statistics
read its race-level keys. Keys are the seeds' names (Linesight's rollout_results).

A race of T actions has T + 1 states: the start and the state after each action.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import numpy as np

# per-step arrays: key -> (dtype, per-step shape, length: "states" T+1 or "actions" T)
STEP_ARRAYS: dict[str, tuple[type, str, str]] = {
    "frames": (np.uint8, "(1, H, W)", "states"),  # empty for float-only networks
    "state_float": (np.float32, "(F,)", "states"),
    "meters_advanced_along_centerline": (np.float64, "()", "states"),
    "current_zone_idx": (np.int64, "()", "states"),
    "car_gear_and_wheels": (np.float32, "(10,)", "states"),  # gear, rpm, contact x4, slide x4
    "positions": (np.float32, "(2,)", "states"),
    "speeds": (np.float64, "()", "states"),
    "actions": (np.int64, "()", "actions"),
    "action_was_greedy": (np.bool_, "()", "actions"),
    "q_values": (np.float32, "(A,)", "actions"),
    "rewards": (np.float64, "()", "actions"),
    "input_w": (np.float64, "()", "actions"),  # the accelerate input of each action
}


class RolloutResults(TypedDict, total=False):
    """One race. Per-step keys are lists while racing and arrays once packed (STEP_ARRAYS)."""

    frames: Any
    state_float: Any
    meters_advanced_along_centerline: Any
    current_zone_idx: Any
    car_gear_and_wheels: Any
    positions: Any
    speeds: Any
    actions: Any
    action_was_greedy: Any
    q_values: Any
    rewards: Any
    input_w: Any
    potentials: dict[str, Any]  # potential name -> (T + 1,) float64 Phi per state
    furthest_zone_idx: int
    race_time: int | None  # ms, None unless finished
    race_time_ms: int  # the race clock when it ended (finished or cut)
    finished: bool
    map: str
    greedy: bool  # a greedy (evaluation) race
    end: list[str]  # the termination terms that fired
    car: int
    mid_track: bool  # started from a saved state: no race time
    demo: bool  # driven by the scripted driver (collectors/demos.py): not the agent's race
    collector: int  # set by the collector that raced it
    weights_version: int  # the weights version that drove it
    policy_version: int  # Ray workers: the version the race started with


def new_rollout_results() -> RolloutResults:
    """An empty record for a race about to start."""
    r: RolloutResults = {k: [] for k in STEP_ARRAYS}  # type: ignore[assignment]
    r["potentials"] = {}
    r["furthest_zone_idx"] = 0
    return r


def pack_rollout(r: Mapping[str, Any]) -> RolloutResults:
    """Stack the per-step lists into arrays of their dtypes: one pickled buffer each on the
    queue. An empty list (no frames) stays as it is."""
    out = dict(r)
    for key, (dtype, shape, _) in STEP_ARRAYS.items():
        values = r.get(key)
        if values is None:
            continue
        if shape == "()":
            out[key] = np.asarray(values, dtype)
        elif len(values):
            out[key] = np.asarray(np.stack(values), dtype)
    out["potentials"] = {k: np.asarray(v, np.float64) for k, v in r["potentials"].items()}
    return out  # type: ignore[return-value]


def check_lengths(r: Mapping[str, Any]) -> int:
    """Number of actions T, after checking the per-step keys hold T or T + 1 entries."""
    t_count = len(r["actions"])
    for key, (_, _, per) in STEP_ARRAYS.items():
        if key not in r or (key == "frames" and not len(r[key])):
            continue  # older records lack some keys; float-only networks have no frames
        expected = t_count + 1 if per == "states" else t_count
        if len(r[key]) != expected:
            raise ValueError(
                f"rollout_results[{key!r}] has {len(r[key])} entries, expected "
                f"{expected} for a race of {t_count} actions"
            )
    return t_count
