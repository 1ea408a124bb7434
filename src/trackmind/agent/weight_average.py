"""Uniform averages of a network's weights along one run (checkpoint averaging, as SWA does).

Greedy races of a run's snapshots minutes apart finish very different sets of unseen maps
(docs/benchmarks.md): part of that is noise of the last few thousand updates, which an
average of consecutive snapshots removes. The average is a network of the same shape, so it
races, evaluates and ships as any checkpoint does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def average_state_dicts(state_dicts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of same-shaped state dicts, summed in float64 and cast back to
    each tensor's dtype. Tensors that are not floating point (counters) must agree and are
    kept as they are. ValueError for no dicts or dicts of different keys or shapes."""
    if not state_dicts:
        raise ValueError("no weights to average")
    first = state_dicts[0]
    for i, sd in enumerate(state_dicts[1:], start=1):
        if sd.keys() != first.keys():
            diff = sorted(set(sd) ^ set(first))
            raise ValueError(f"weights {i} have other tensors than weights 0: {diff[0]}")
        for key, value in sd.items():
            if value.shape != first[key].shape:
                raise ValueError(
                    f"weights {i}: {key} has shape {tuple(value.shape)}, "
                    f"weights 0 {tuple(first[key].shape)}"
                )
    out = {}
    for key, value in first.items():
        if not value.is_floating_point():
            if any(not torch.equal(sd[key], value) for sd in state_dicts):
                raise ValueError(f"{key}: a non-float tensor differs between the weights")
            out[key] = value.clone()
            continue
        total = torch.zeros(value.shape, dtype=torch.float64)
        for sd in state_dicts:
            total += sd[key].detach().to(torch.float64)
        out[key] = (total / len(state_dicts)).to(value.dtype)
    return out
