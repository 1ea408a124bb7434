"""Mini-races: re-read a stored transition as part of a race that ends ``horizon`` actions on.

At sampling time each transition gets a clock t (actions already spent in its mini-race).
The Q-value then means "sum of rewards until the mini-race ends", a finite horizon, which
is what makes gamma = 1 workable. The clock goes into state_float[0] (the slot collectors
leave at 0 when acting: a fresh mini-race starts at every state).

Clock distribution: t = max(|v| - 5, 0) with v uniform on the integers [-(H // 4), H + 5),
H the horizon in actions. For H = 140: v in [-35, 145), 180 values; t = 0 has 11/180
(|v| <= 5), t = 1..30 have 2/180 each (v = +-(t + 5)), t = 31..139 have 1/180 each. The
low bound scales as a quarter of the horizon (the early clocks, near a mini-race start, get
double weight over that first quarter), the high bound as H + 5 so that t never reaches H.

Re-reading, for a transition of stored length n (its n_steps) and clock t:
    reduced_n = n - max(0, t + n - H)            (the steps that fit before the horizon)
    ended     = terminal_actions <= reduced_n    (the race ends inside the steps)
    terminal  = t + n >= H  or  ended
    discount  = 0 if terminal else gammas[reduced_n - 1]
    reward    = rewards[reduced_n - 1] + discount * Phi(s') - Phi(s)
                + (end_rate * (H - t - terminal_actions) if ended else 0)
    state_float[0] = t;  next_state_float[0] = t + reduced_n = min(t + n, H)
The next state's clock uses reduced_n, so it never leaves [0, H]; it only differs from
t + n when the transition is terminal, where discount 0 makes the next state unused.

The last term closes a race that ended before its mini-race did: a finish has end_rate 0
(nothing is left to pay), a lost race (cut for making no progress: see nstep.py) pays its
end_rate for each of the H - t - terminal_actions actions left, as if it stayed where it
stopped. Without it the cut state's value would be bootstrapped, and a network that rarely
sees such states overestimates them: the crash that ended the race then looks harmless.

Value bound: with gamma = 1 the potentials telescope and vanish at the mini-race's end
(discount 0), so the value of s' at clock t' is its raw return minus Phi(s'). When no action
earns more than ``rate`` of raw reward (and a finish at most ``once`` more), that value is at
most B(s') = (H - t') * rate + once - Phi(s'). The learner clips its bootstrapped quantiles
there (agent/loss.py). With the default reward the clock costs 1.2 a second and progress pays
0.01 a metre, so rate = 0 holds below 120 m/s along the reference line.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

CLOCK_OFFSET = 5


def clock_bounds(horizon_actions: int) -> tuple[int, int]:
    """Bounds [low, high) of the uniform integer v behind the clock."""
    if horizon_actions < 1:
        raise ValueError(f"mini-race horizon must be >= 1 action, got {horizon_actions}")
    return -(horizon_actions // 4), horizon_actions + CLOCK_OFFSET


def sample_mini_race_clock(
    generator: torch.Generator | None, size: int, horizon_actions: int = 140
) -> torch.Tensor:
    """(size,) int64 clocks t = max(|v| - 5, 0), v uniform on [-(H // 4), H + 5)."""
    low, high = clock_bounds(horizon_actions)
    v = torch.randint(low, high, (size,), generator=generator)
    return v.abs_().sub_(CLOCK_OFFSET).clamp_(min=0)


def mini_race_clock_pmf(horizon_actions: int = 140) -> np.ndarray:
    """(H,) exact probabilities of each clock value, by counting the values of v."""
    low, high = clock_bounds(horizon_actions)
    t = np.maximum(np.abs(np.arange(low, high)) - CLOCK_OFFSET, 0)
    return np.bincount(t, minlength=horizon_actions) / (high - low)


def value_upper_bound(
    next_clock: torch.Tensor,
    next_state_potential: torch.Tensor,
    horizon_actions: int,
    rate: float,
    once: float = 0.0,
) -> torch.Tensor:
    """(B,) float32 B(s') = (H - t') * rate + once - Phi(s'): the most the rest of a mini-race
    can pay from s' when no action earns more than ``rate`` raw reward (module doc)."""
    left = (horizon_actions - next_clock.to(torch.int64)).clamp_(min=0).to(torch.float32)
    return left * float(rate) + float(once) - next_state_potential.to(torch.float32)


class MiniRace(NamedTuple):
    """One batch re-read as mini-races (all (B,) except the (B, F) floats)."""

    state_float: torch.Tensor
    next_state_float: torch.Tensor
    reward: torch.Tensor
    discount: torch.Tensor
    terminal: torch.Tensor
    reduced_n: torch.Tensor


def mini_race_reread(
    clock: torch.Tensor,
    n_steps: torch.Tensor,
    rewards: torch.Tensor,
    gammas: torch.Tensor,
    terminal_actions: torch.Tensor,
    state_potential: torch.Tensor,
    next_state_potential: torch.Tensor,
    state_float: torch.Tensor,
    next_state_float: torch.Tensor,
    horizon_actions: int,
    copy: bool = True,
    end_rate: torch.Tensor | None = None,
) -> MiniRace:
    """Apply the re-reading of the module doc to a batch; vectorised, no Python loop.

    clock, n_steps: (B,) int64; rewards, gammas: (B, n) float32; terminal_actions and the
    potentials and ``end_rate`` (zeros when not given): (B,) float32; floats (B, F)
    float32. With ``copy=False`` the clocks are written into the given float tensors (the
    collate passes fresh gathers).
    """
    clock = clock.to(torch.int64)
    n_steps = n_steps.to(torch.int64)
    end = clock + n_steps
    reduced_n = n_steps - (end - horizon_actions).clamp_(min=0)
    ended = terminal_actions <= reduced_n
    terminal = (end >= horizon_actions) | ended
    pick = (reduced_n - 1).unsqueeze(1)
    gamma_n = gammas.gather(1, pick).squeeze(1)
    discount = torch.where(terminal, torch.zeros_like(gamma_n), gamma_n)
    reward = rewards.gather(1, pick).squeeze(1) + discount * next_state_potential - state_potential
    if end_rate is not None:
        left = (horizon_actions - clock).to(reward.dtype) - terminal_actions
        reward = reward + torch.where(ended, end_rate * left, torch.zeros_like(reward))
    if copy:
        state_float = state_float.clone()
        next_state_float = next_state_float.clone()
    state_float[:, 0] = clock.to(state_float.dtype)
    next_state_float[:, 0] = (clock + reduced_n).to(next_state_float.dtype)
    return MiniRace(state_float, next_state_float, reward, discount, terminal, reduced_n)
