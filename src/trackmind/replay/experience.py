"""Experience: consecutive transitions of one race that share one array of states.

A transition is (state, action, n-step rewards and gammas, next state, terminal_actions), as
in the seeds. Storing it with its own copies of state and next state images would pay for
every frame about twice; here transition ``j`` starts at state ``j`` of the same Experience
and ends at state ``j + n_steps[j]``, so each frame exists once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Experience:
    """States ``0..S-1`` and transitions ``0..K-1`` (transition j starts at state j).

    frames: (S, 1, H, W) uint8 ((S, 0) for races without images); floats: (S, F) float32;
    potential: (S,) float32, the weighted shaping potential Phi of each state.
    action, n_steps: (K,) int64; rewards, gammas: (K, n) float32 (rewards[j, i] =
    sum_{m<=i} gamma^m r_{j+m}, gammas[j, i] = gamma^(i+1)); terminal_actions: (K,) float32,
    actions left to the end of the race where it ended (finished or lost), inf when it was
    cut and goes on bootstrapping; end_rate: (K,) float32, the reward per action of the rest
    of the mini-race after that end (0 after a finish; a lost race's last reward rate).
    """

    frames: np.ndarray
    floats: np.ndarray
    potential: np.ndarray
    action: np.ndarray
    n_steps: np.ndarray
    rewards: np.ndarray
    gammas: np.ndarray
    terminal_actions: np.ndarray
    end_rate: np.ndarray | None = None

    def __post_init__(self) -> None:
        s, k = len(self.frames), len(self.action)
        if self.end_rate is None:
            object.__setattr__(self, "end_rate", np.zeros(k, np.float32))
        if len(self.floats) != s or len(self.potential) != s:
            raise ValueError(
                f"Experience: {s} frames but {len(self.floats)} floats, "
                f"{len(self.potential)} potentials"
            )
        for name in ("n_steps", "rewards", "gammas", "terminal_actions", "end_rate"):
            if len(getattr(self, name)) != k:
                raise ValueError(f"Experience: {k} actions but {len(getattr(self, name))} {name}")
        if k and (self.n_steps.min() < 1 or int((np.arange(k) + self.n_steps).max()) >= s):
            raise ValueError(
                "Experience: every transition needs 1 <= n_steps and a stored next state"
            )

    @property
    def n_transitions(self) -> int:
        return len(self.action)

    @property
    def n_states(self) -> int:
        return len(self.frames)

    def slice(self, start: int, stop: int) -> Experience:
        """Transitions ``start..stop-1`` with just the states they read (views, no copies)."""
        if not 0 <= start < stop <= self.n_transitions:
            raise ValueError(f"bad transition range {start}:{stop} of {self.n_transitions}")
        last_state = int((np.arange(start, stop) + self.n_steps[start:stop]).max())
        s = slice(start, last_state + 1)
        t = slice(start, stop)
        return Experience(
            frames=self.frames[s],
            floats=self.floats[s],
            potential=self.potential[s],
            action=self.action[t],
            n_steps=self.n_steps[t],
            rewards=self.rewards[t],
            gammas=self.gammas[t],
            terminal_actions=self.terminal_actions[t],
            end_rate=self.end_rate[t],
        )
