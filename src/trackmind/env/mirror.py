"""The race mirrored left to right: every observation has a twin in a mirrored world.

A road reflected across the car's forward axis is a road too, and the car's physics do not
care which way a corner turns. So a transition (s, a, r, s') seen in the mirror, with left and
right swapped in the state, the action and the frame, is another valid transition with the
same reward. Two uses: training on a share of each batch mirrored (`learner.mirror_share`,
data augmentation by a symmetry), and acting on the mean of Q(s, a) and Q(mirror(s),
mirror(a)) (`evaluate.py --mirror`), a policy that takes left and right corners alike. On the
generalisation recipe the first lost and the second won (docs/benchmarks.md, "Mirror images").

A float feature mirrors by a permutation (left and right wheels, the left and right keys of
the previous actions) and a sign (lateral components of vectors in the car frame). Each
observation term says how it mirrors (`VectorlikeTerm.mirror`); this module holds the pure
functions over those maps, the observation and the batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trackmind.game.actions import ACTIONS

if TYPE_CHECKING:  # the environment side needs no torch
    import torch

_LEFT, _RIGHT = 2, 3  # key columns of ACTIONS


def mirrored_actions(actions: np.ndarray = ACTIONS) -> np.ndarray:
    """Index of each action's mirror (left and right keys swapped), e.g. accel+left ->
    accel+right. ValueError when the action set is not closed under the swap."""
    keys = np.asarray(actions)
    swapped = keys.copy()
    swapped[:, [_LEFT, _RIGHT]] = keys[:, [_RIGHT, _LEFT]]
    out = np.empty(len(keys), np.int64)
    for i, row in enumerate(swapped):
        match = np.flatnonzero((keys == row).all(axis=1))
        if len(match) != 1:
            raise ValueError(f"action {i} ({keys[i].tolist()}) has no mirror in the action set")
        out[i] = match[0]
    return out


MIRRORED_ACTIONS = mirrored_actions()  # of the 12 Trackmania actions


@dataclass(frozen=True)
class FloatMirror:
    """How a float vector mirrors: mirrored[i] = sign[i] * x[perm[i]]."""

    perm: np.ndarray  # (n,) int64, a permutation of range(n)
    sign: np.ndarray  # (n,) float32, +1 or -1

    def __post_init__(self) -> None:
        n = len(self.perm)
        if sorted(np.asarray(self.perm).tolist()) != list(range(n)):
            raise ValueError(f"perm must be a permutation of range({n})")
        if len(self.sign) != n or not np.all(np.abs(self.sign) == 1):
            raise ValueError(f"sign must hold {n} values of +1 or -1")

    @property
    def size(self) -> int:
        return len(self.perm)

    def apply(self, x: np.ndarray) -> np.ndarray:
        """x (..., n) mirrored (numpy; the learner uses mirror_batch on tensors)."""
        return (np.asarray(x)[..., self.perm] * self.sign).astype(np.float32)


def unchanged(n: int) -> FloatMirror:
    """A feature block the mirror leaves alone (speeds along the car, clocks, gears)."""
    return FloatMirror(np.arange(n, dtype=np.int64), np.ones(n, np.float32))


def lateral_flipped(n: int, components: int, lateral: Sequence[int]) -> FloatMirror:
    """`n // components` vectors of `components` values each, whose `lateral` components
    change sign (the left axis of a position, roll and yaw of an angular velocity)."""
    sign = np.ones((n // components, components), np.float32)
    sign[:, list(lateral)] = -1.0
    return FloatMirror(np.arange(n, dtype=np.int64), sign.ravel())


def pairs_swapped(n: int, block: int, pairs: Sequence[tuple[int, int]]) -> FloatMirror:
    """`n // block` blocks of `block` values each, whose `pairs` of positions swap (left and
    right keys of each previous action, left and right wheels of each wheel feature)."""
    perm = np.arange(n, dtype=np.int64).reshape(-1, block)
    for a, b in pairs:
        perm[:, [a, b]] = perm[:, [b, a]]
    return FloatMirror(perm.ravel(), np.ones(n, np.float32))


def concatenated(parts: Sequence[FloatMirror]) -> FloatMirror:
    """The mirror of blocks laid end to end (the floats group's member terms)."""
    perms, offset = [], 0
    for p in parts:
        perms.append(p.perm + offset)
        offset += p.size
    return FloatMirror(
        np.concatenate(perms).astype(np.int64) if perms else np.zeros(0, np.int64),
        np.concatenate([p.sign for p in parts]).astype(np.float32),
    )


def mirror_observation(obs: Mapping[str, np.ndarray], floats: FloatMirror) -> dict:
    """A race observation {frame (B, 1, H, W), floats (B, F)} seen in the mirror (the keys
    of env/observations.py's default terms)."""
    out = {"floats": floats.apply(obs["floats"])}
    if "frame" in obs:
        out["frame"] = np.ascontiguousarray(obs["frame"][..., ::-1])
    return out


def mirror_batch(
    batch: Mapping[str, torch.Tensor],
    mask: torch.Tensor,
    perm: torch.Tensor,
    sign: torch.Tensor,
    action_map: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """The batch with the samples where `mask` (B,) is true mirrored: floats by perm and
    sign, frames flipped left to right, actions mapped; reward, discount and the rest stay
    (the mirrored race earns the same). A new dict; the input is not changed."""
    import torch

    out = dict(batch)
    m = mask.reshape(-1, 1)
    for key in ("state_float", "next_state_float"):
        x = batch[key]
        out[key] = torch.where(m, x[:, perm] * sign, x)
    for key in ("state_img", "next_state_img"):
        img = batch.get(key)
        if img is not None:
            out[key] = torch.where(m.reshape(-1, *([1] * (img.dim() - 1))), img.flip(-1), img)
    out["action"] = torch.where(mask, action_map[batch["action"]], batch["action"])
    return out
