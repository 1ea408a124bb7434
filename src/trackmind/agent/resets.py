"""Network resets: shrink-and-perturb, as BBF and SR-SPR use them to keep a network that
learns from a small, often re-read buffer able to learn (its plasticity).

A reset moves every weight part of the way back to a fresh initialisation,
``w <- shrink * w + (1 - shrink) * w_fresh`` (Ash & Adams 2020; BBF shrinks to 0.5), and
draws the named modules (the last layers, which overfit first) afresh outright. What the
network knew survives in the shrunk weights and in the replay buffer. The target network
is not reset, but its soft updates carry the reset weights into it within seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def reset_slot(frames: int, every: int, until: int, last: int) -> int | None:
    """The schedule slot (frames // every) whose reset is due now, or None. Resets fall
    every `every` frames (0: never), none at or after `until` (0: no end), so the final
    weights have time to re-learn. `last` is the slot of the last reset (0: none yet): a
    learner that finds several slots passed (a resumed run, a long warm-up) resets once,
    for the latest, instead of once per batch until it catches up."""
    if every <= 0:
        return None
    slot = frames // every
    if slot <= last or (until > 0 and slot * every >= until):
        return None
    return slot


def shrink_perturb_(
    net: nn.Module, fresh: nn.Module, shrink: float, renew: Sequence[str] = ()
) -> list[str]:
    """In place: each parameter of `net` becomes shrink * itself + (1 - shrink) * the same
    parameter of `fresh` (a newly initialised copy), and those of the modules named in
    `renew` (e.g. "advantage") become fresh's outright, buffers too: a renewed layer's
    state, such as a spectral norm's power-iteration vector, belongs to its old weights.
    Other buffers (the float statistics) are left alone. Returns the names of the renewed
    parameters. Raises ValueError for a shrink outside [0, 1] or a
    module name the network does not have."""
    if not 0.0 <= shrink <= 1.0:
        raise ValueError(f"shrink must be in [0, 1], got {shrink!r}")
    modules = dict(net.named_modules())
    unknown = [m for m in renew if m not in modules or m == ""]
    if unknown:
        raise ValueError(f"no module named {', '.join(map(repr, unknown))} in the network")
    prefixes = tuple(f"{m}." for m in renew)
    fresh_params = dict(fresh.named_parameters())
    renewed = []
    with torch.no_grad():
        for name, p in net.named_parameters():
            q = fresh_params[name]
            if name.startswith(prefixes):
                p.copy_(q)
                renewed.append(name)
            else:
                p.mul_(shrink).add_(q, alpha=1.0 - shrink)
        fresh_buffers = dict(fresh.named_buffers())
        for name, buf in net.named_buffers():
            if name.startswith(prefixes):
                buf.copy_(fresh_buffers[name])
    return renewed


def reset_optimizer_state_(opt: torch.optim.Optimizer) -> None:
    """Zero the optimizer's per-parameter state (moments and step counts) in place, as a new
    optimizer would start: the moments of the old weights mislead the reset ones. In place,
    so a captured CUDA graph that reads these tensors stays valid."""
    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor):
                v.zero_()
