"""The n-step rule: from one race's rollout_results to stored transitions.

Transition t starts at state t with action t and ends n_t actions later, where

    n_t = min(n, T - t, j_t)

T is the number of actions of the race and j_t the offset (>= 1) of the first non-greedy
action after t (no cut when ``cut_at_non_greedy`` is off). The action at t itself may be
exploratory: it is the action whose value the transition teaches. The later actions in the
n-step return must come from the greedy policy, or the target would mix in the value of
random actions; so the transition stops at the state in which the first later
non-greedy action was taken. Example, n = 3, greedy flags [G, X, G, G]: t = 0 stops at
state 1 (n_0 = 1), t = 1 goes on to state 4 (n_1 = 3).

rewards[t, i] = sum_{m <= min(i, n_t - 1)} gamma^m r_{t+m} (frozen after n_t: those entries
are never read, since the mini-race reduced n never exceeds n_t); gammas[t, i] =
gamma^(i+1); terminal_actions[t] = T - t if the race ended at state T (finished or lost),
else inf. Potentials are Phi(s) per state: the weighted sum of the rollout's potentials.

A lost race is one cut by a termination term of ``lost_ends`` (no progress for 2 s, stuck):
the car stopped in a wall or turned round, and its race is over. It ends there like a finish,
but the rest of each mini-race that reaches its end is paid at end_rate, the mean reward of
the race's last ``lost_rate_actions`` actions (the time penalty of a car standing still, in
whatever reward terms are configured): the crash costs what losing the race costs, at once,
instead of a bootstrapped guess of the cut state's value (which overestimates states the
network rarely sees). A race cut for time (timeout) still bootstraps.

``lost_penalty`` is paid once more on a lost race's last action, so every transition whose
return reaches the cut pays it. Without it the crash costs only the progress the rest of its
mini-race would have made (a few reward units), and a corner cut with a few percent of
crash risk pays when it saves a tenth of a second.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from trackmind.env.rollout_results import RolloutResults, check_lengths
from trackmind.replay.experience import Experience
from trackmind.replay.split import chunk_test_mask, runs


def n_step_lengths(greedy: np.ndarray, n_steps: int, cut_at_non_greedy: bool) -> np.ndarray:
    """(T,) int64 n_t = min(n, T - t, offset of the first non-greedy action after t)."""
    greedy = np.asarray(greedy, dtype=bool)
    t_count = len(greedy)
    t = np.arange(t_count)
    lengths = np.minimum(n_steps, t_count - t)
    if cut_at_non_greedy:
        non_greedy = np.append(np.flatnonzero(~greedy), t_count)
        first_after = non_greedy[np.searchsorted(non_greedy, t, side="right")]
        lengths = np.minimum(lengths, first_after - t)
    return lengths.astype(np.int64)


def n_step_returns(
    rewards: np.ndarray, lengths: np.ndarray, n_steps: int, gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """(T, n) float32 partial discounted returns and (T, n) float32 gammas (see module doc)."""
    r = np.asarray(rewards, dtype=np.float64)
    t_count = len(r)
    padded = np.concatenate((r, np.zeros(n_steps)))
    t = np.arange(t_count)
    out = np.empty((t_count, n_steps), dtype=np.float64)
    acc = np.zeros(t_count, dtype=np.float64)
    for i in range(n_steps):
        acc = acc + np.where(i < lengths, gamma**i * padded[t + i], 0.0)
        out[:, i] = acc
    gammas = np.broadcast_to(gamma ** np.arange(1, n_steps + 1, dtype=np.float64), out.shape)
    return out.astype(np.float32), gammas.astype(np.float32)


def terminal_actions(t_count: int, ended: bool) -> np.ndarray:
    """(T,) float32 actions left to the race's end (T - t), or inf for a race that was cut."""
    if ended:
        return (t_count - np.arange(t_count)).astype(np.float32)
    return np.full(t_count, np.inf, dtype=np.float32)


def is_lost(rollout_results: RolloutResults, lost_ends: Sequence[str]) -> bool:
    """True for a race that did not finish and was cut by one of the `lost_ends` terms."""
    if rollout_results["finished"]:
        return False
    return bool(set(rollout_results.get("end") or ()) & set(lost_ends))


def lost_race_rate(rewards: np.ndarray, window: int) -> float:
    """Mean reward of the last `window` actions (all of them for a shorter race)."""
    r = np.asarray(rewards, dtype=np.float64)
    return float(r[-window:].mean()) if len(r) else 0.0


def lost_race_rewards(rewards: np.ndarray, lost: bool, penalty: float) -> np.ndarray:
    """(T,) float64 rewards with `penalty` taken off the last one of a lost race."""
    r = np.array(rewards, dtype=np.float64)
    if lost and len(r):
        r[-1] -= penalty
    return r


def combine_potentials(
    potentials: Mapping[str, Sequence[float]],
    weights: Mapping[str, float] | None,
    n_states: int,
) -> np.ndarray:
    """(n_states,) float32 Phi(s) = sum_k w_k Phi_k(s); a term without a weight counts 1x.

    A weight naming no potential of the rollout is an error: a typo would otherwise turn a
    shaping term off without a word.
    """
    weights = dict(weights or {})
    unknown = sorted(set(weights) - set(potentials))
    if unknown:
        raise ValueError(f"potential_weights name unknown potentials {unknown}")
    total = np.zeros(n_states, dtype=np.float64)
    for name, values in potentials.items():
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (n_states,):
            raise ValueError(f"potentials[{name!r}] has shape {arr.shape}, expected ({n_states},)")
        total += weights.get(name, 1.0) * arr
    return total.astype(np.float32)


def experience_from_rollout(
    rollout_results: RolloutResults,
    n_steps: int,
    gamma: float,
    potential_weights: Mapping[str, float] | None = None,
    cut_at_non_greedy: bool = True,
    lost_ends: Sequence[str] = (),
    lost_rate_actions: int = 10,
    lost_penalty: float = 0.0,
) -> Experience:
    """All transitions of one race under the n-step rule (frames kept once, by state)."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    t_count = check_lengths(rollout_results)
    lengths = n_step_lengths(rollout_results["action_was_greedy"], n_steps, cut_at_non_greedy)
    finished = bool(rollout_results["finished"])
    lost = is_lost(rollout_results, lost_ends)
    rate = lost_race_rate(rollout_results["rewards"], lost_rate_actions) if lost else 0.0
    paid = lost_race_rewards(rollout_results["rewards"], lost, lost_penalty)
    rewards, gammas = n_step_returns(paid, lengths, n_steps, gamma)
    frames = rollout_results.get("frames", ())
    return Experience(
        frames=np.stack(frames).astype(np.uint8, copy=False)
        if len(frames)
        else np.empty((t_count + 1, 0), np.uint8),
        floats=np.stack(rollout_results["state_float"]).astype(np.float32, copy=False),
        potential=combine_potentials(
            rollout_results.get("potentials") or {}, potential_weights, t_count + 1
        ),
        action=np.asarray(rollout_results["actions"], dtype=np.int64),
        n_steps=lengths,
        rewards=rewards,
        gammas=gammas,
        terminal_actions=terminal_actions(t_count, finished or lost),
        end_rate=np.full(t_count, rate, np.float32),
    )


class ExperienceSink(Protocol):
    """Anything that stores Experiences (a TransitionBuffer)."""

    def add(self, experience: Experience) -> int: ...


def fill_buffer_from_rollout_with_n_steps_rule(
    buffer: ExperienceSink,
    buffer_test: ExperienceSink | None,
    rollout_results: RolloutResults,
    n_steps: int,
    gamma: float,
    *,
    potential_weights: Mapping[str, float] | None = None,
    cut_at_non_greedy: bool = True,
    lost_ends: Sequence[str] = (),
    lost_rate_actions: int = 10,
    lost_penalty: float = 0.0,
    test_fraction: float = 0.05,
    chunk_length: int = 64,
    rng: np.random.Generator | None = None,
) -> tuple[int, int]:
    """Add one race to buffer / buffer_test; returns (n_added_buffer, n_added_test).

    Chunks of ``chunk_length`` consecutive transitions go to buffer_test with probability
    ``test_fraction`` (``rng`` draws them; no buffer_test means everything to buffer). Each
    run of same-side chunks is added as one Experience, so states are shared inside a run and
    duplicated only at the few run boundaries.
    """
    if not 0.0 <= test_fraction < 1.0 or math.isnan(test_fraction):
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    exp = experience_from_rollout(
        rollout_results,
        n_steps,
        gamma,
        potential_weights,
        cut_at_non_greedy,
        lost_ends=lost_ends,
        lost_rate_actions=lost_rate_actions,
        lost_penalty=lost_penalty,
    )
    if exp.n_transitions == 0:
        return 0, 0
    if buffer_test is None or test_fraction == 0.0:
        mask = np.zeros(exp.n_transitions, dtype=bool)
    else:
        rng = rng if rng is not None else np.random.default_rng()
        mask = chunk_test_mask(exp.n_transitions, chunk_length, test_fraction, rng)
    added = [0, 0]
    for start, stop, is_test in runs(mask):
        target = buffer_test if is_test else buffer
        target.add(exp.slice(start, stop))  # type: ignore[union-attr]
        added[is_test] += stop - start
    return added[0], added[1]
