"""buffer_collate_function: sampled transition records -> the learner's mini-race batch.

One gather pulls state and next state (frames, floats, potentials) out of the StateStore
for the whole batch; the mini-race re-reading is vectorised (minirace.py). Images stay
uint8: they are 4x smaller to move to the device and are scaled there.

The batch (B = batch size, all on CPU):
    state_img        uint8   (B, *frame_shape)   next_state_img   uint8   (B, *frame_shape)
    state_float      float32 (B, F), [0] = clock next_state_float float32 (B, F), [0] = clock
    action           int64   (B,)                reward           float32 (B,)
    discount         float32 (B,) (0 when terminal; gamma^n otherwise)
    weights          float32 (B,) importance weights (1 without prioritized replay)
    indices          int64   (B,) positions for update_priorities
    terminal         bool    (B,) for logging
    target_max       float32 (B,) only with a value bound: the most the next state's value can
                     be (minirace.value_upper_bound); the learner clips its targets there
A store without frames (float-only networks) gives no state_img / next_state_img keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from trackmind.replay.minirace import (
    mini_race_reread,
    sample_mini_race_clock,
    value_upper_bound,
)

if TYPE_CHECKING:
    from trackmind.replay.states import StateStore


def buffer_collate_function(
    records: Mapping[str, torch.Tensor],
    states: StateStore,
    *,
    horizon_actions: int,
    generator: torch.Generator | None,
    indices: torch.Tensor,
    weights: torch.Tensor | None = None,
    clock: torch.Tensor | None = None,
    value_bound: tuple[float, float] | None = None,
    max_n: int | None = None,
) -> dict[str, torch.Tensor]:
    """The learner's batch from records (state_gid, action, n_steps, rewards, gammas,
    terminal_actions, end_rate). Clocks are drawn from ``generator`` unless ``clock`` is given.
    ``value_bound`` (rate, once) adds the ``target_max`` key. ``max_n`` reads each transition
    with at most that many steps (its partial return, and the state that many steps on)."""
    state_gid = records["state_gid"]
    n_steps = records["n_steps"].to(torch.int64)
    if max_n is not None:
        n_steps = n_steps.clamp(max=int(max_n))
    batch = len(state_gid)
    frames, floats, potential = states.gather(torch.cat((state_gid, state_gid + n_steps)))
    if clock is None:
        clock = sample_mini_race_clock(generator, batch, horizon_actions)
    race = mini_race_reread(
        clock,
        n_steps,
        records["rewards"],
        records["gammas"],
        records["terminal_actions"],
        potential[:batch],
        potential[batch:],
        floats[:batch],
        floats[batch:],
        horizon_actions,
        copy=False,
        end_rate=records.get("end_rate"),
    )
    if weights is None:
        weights = torch.ones(batch, dtype=torch.float32)
    out = {
        "state_float": race.state_float,
        "action": records["action"].to(torch.int64),
        "reward": race.reward,
        "discount": race.discount,
        "next_state_float": race.next_state_float,
        "weights": weights.to(torch.float32),
        "indices": torch.as_tensor(indices, dtype=torch.int64),
        "terminal": race.terminal,
    }
    if value_bound is not None:
        out["target_max"] = value_upper_bound(
            race.next_state_float[:, 0], potential[batch:], horizon_actions, *value_bound
        )
    if states.has_frames:
        out["state_img"], out["next_state_img"] = frames[:batch], frames[batch:]
    return out
