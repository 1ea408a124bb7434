"""A figure-eight without heights: lift one road over the other where the line crosses once.

Circuit databases give the line on the ground plane only, so a circuit that passes over
itself (a figure-eight with a bridge) arrives as a line that crosses itself. When a closed
line crosses itself exactly once, cleanly and at a wide angle, the later pass is raised by
a bridge, which is what lets `Track.build` tell the two roads apart. Anything else (two
crossings, parallel roads touching, an overlap along the line) is left for `Track.build`
to refuse with its one-line message.
"""

from __future__ import annotations

import numpy as np

from trackmind.sim.smoothing import chord_parameter
from trackmind.sim.track import HEIGHT_CLEARANCE_M, contact_pairs

MIN_CROSSING_DEG = 30.0  # flatter crossings are roads running into each other, not a bridge
BRIDGE_HEIGHT_M = 2.0 * HEIGHT_CLEARANCE_M
BRIDGE_MARGIN_M = 5.0  # flat deck beyond the part of the road that meets the other
BRIDGE_RAMP_M = 40.0  # cosine ramp from the ground to the deck


def bridge_heights(
    points: np.ndarray, width_left: np.ndarray, width_right: np.ndarray
) -> np.ndarray | None:
    """Heights (N,) for one lap of a closed line (N, 2), or None if no single clean crossing.

    None also when the line does not meet itself at all (it needs no heights).
    """
    loop = np.vstack([points, points[:1]])
    s_loop = chord_parameter(loop)
    period, s = float(s_loop[-1]), s_loop[:-1]
    i, j, d = contact_pairs(points, s, np.maximum(width_left, width_right), period)
    if len(i) == 0:
        return None
    runs = _circular_runs(np.unique(np.concatenate([i, j])), len(points))
    if len(runs) != 2:
        return None
    a, b = int(i[np.argmin(d)]), int(j[np.argmin(d)])
    if crossing_angle_deg(points, a, b) < MIN_CROSSING_DEG:
        return None
    member = np.zeros(len(points), dtype=np.int64)  # which run each index of a pair is in
    for k, run in enumerate(runs, start=1):
        member[run] = k
    if np.any(member[i] == member[j]):  # one pass touches itself: not a crossing of two roads
        return None
    n = float(len(points))
    deck = runs[int(np.argmax([_circular_centre(r.astype(np.float64), n) for r in runs]))]
    return deck_profile(s, period, s[deck])


def crossing_angle_deg(points: np.ndarray, a: int, b: int) -> float:
    """Angle in [0, 90] degrees between the line's directions at samples a and b."""
    n = len(points)

    def tangent(k: int) -> np.ndarray:
        t = points[(k + 1) % n] - points[(k - 1) % n]
        return t / np.linalg.norm(t)

    cos = abs(float(np.dot(tangent(a), tangent(b))))
    return float(np.degrees(np.arccos(np.clip(cos, 0.0, 1.0))))


def deck_profile(s: np.ndarray, period: float, deck_s: np.ndarray) -> np.ndarray:
    """Heights along a lap: BRIDGE_HEIGHT_M over the deck (its arclengths ± margin), cosine
    ramps of BRIDGE_RAMP_M either side, 0 elsewhere. Arc distances wrap around the lap."""
    centre = _circular_centre(deck_s, period)
    offset = (deck_s - centre + period / 2) % period - period / 2
    lo, hi = offset.min() - BRIDGE_MARGIN_M, offset.max() + BRIDGE_MARGIN_M
    x = (s - centre + period / 2) % period - period / 2  # each sample's offset from the deck
    outside = np.maximum(lo - x, x - hi).clip(min=0.0)
    ramp = 0.5 * (1.0 + np.cos(np.pi * np.minimum(outside / BRIDGE_RAMP_M, 1.0)))
    return BRIDGE_HEIGHT_M * ramp


def _circular_runs(idx: np.ndarray, n: int, gap: int = 3) -> list[np.ndarray]:
    """Split sorted indices on a circle of n into runs of neighbours (at most `gap` apart)."""
    breaks = np.flatnonzero(np.diff(idx) > gap) + 1
    runs = np.split(idx, breaks)
    if len(runs) > 1 and idx[0] + n - idx[-1] <= gap:  # the first and last runs meet at 0
        runs = [np.concatenate([runs[-1], runs[0]]), *runs[1:-1]]
    return runs


def _circular_centre(x: np.ndarray, period: float) -> float:
    """Centre of values on a circle (a run that wraps around 0 has its centre near 0)."""
    angle = 2 * np.pi * x / period
    c = np.arctan2(np.sin(angle).mean(), np.cos(angle).mean())
    return float((c % (2 * np.pi)) * period / (2 * np.pi))
