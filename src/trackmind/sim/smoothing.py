"""Smooth imported lines before any resampling or curvature.

Real circuits and driven lines come as points a few metres apart. Joining them with straight
segments and resampling puts a kink at every original point, whose 3-point radius shrinks
with the resampling step, so a gentle curve reads as a hairpin and the importer refuses it.
A cubic smoothing spline (periodic for a circuit) through the points, parametrised by chord
length, gives a line whose curvature is that of the road. Per-point values (widths, heights)
follow the same parameter, so each stays attached to the point it was given for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import splev, splprep
from scipy.spatial import cKDTree

SMOOTHING_M = 0.01  # rms distance the spline may keep from the raw points: their rounding
EVAL_STEP_M = 0.25  # dense evaluation step, to measure arclength and deviation


@dataclass(frozen=True)
class SmoothLine:
    """A smoothed line every `spacing` metres, its values, and how far it left the raw points."""

    points: np.ndarray  # (N, 2); a closed line's last point is not repeated
    values: list[np.ndarray]  # each (N,)
    max_deviation_m: float  # largest distance from a raw point to the smoothed line


def smooth_line(
    points: np.ndarray,
    *values: np.ndarray,
    closed: bool,
    spacing_m: float = 1.0,
    smoothing_m: float = SMOOTHING_M,
) -> SmoothLine:
    """Fit a smoothing spline through `points` (M, 2) and sample it every ~`spacing_m`.

    `values` (each (M,)) are interpolated linearly in the same chord-length parameter as the
    points they belong to. A closed line gets a periodic spline through its joint; an open
    line's spline passes through its first and last points.
    """
    pts, vals = _distinct(
        np.asarray(points, np.float64), [np.asarray(v, np.float64) for v in values]
    )
    if closed and np.linalg.norm(pts[-1] - pts[0]) <= 1e-6:
        pts, vals = pts[:-1], [v[:-1] for v in vals]
    if closed:  # splprep's periodic fit ignores the last point, which must repeat the first
        pts, vals = np.vstack([pts, pts[:1]]), [np.append(v, v[0]) for v in vals]
    u = chord_parameter(pts)
    k = min(3, len(pts) - 1 - int(closed))
    weights = np.ones(len(pts))
    if not closed:  # an open line keeps its ends: they are the start and finish lines
        weights[[0, -1]] = 1e3
    tck, _ = splprep(
        pts.T, w=weights, u=u, k=k, s=len(pts) * smoothing_m**2, per=int(closed), quiet=2
    )
    dense_u = np.linspace(0.0, u[-1], max(4, int(np.ceil(u[-1] / EVAL_STEP_M)) + 1))
    dense = np.asarray(splev(dense_u, tck)).T
    dense_s = chord_parameter(dense)
    n = max(3, int(np.ceil(dense_s[-1] / spacing_m)) + 1)
    out_u = np.interp(np.linspace(0.0, dense_s[-1], n), dense_s, dense_u)
    out = np.asarray(splev(out_u, tck)).T
    out_vals = [np.interp(out_u, u, v) for v in vals]
    if closed:  # the last sample is the first again
        out, out_vals = out[:-1], [v[:-1] for v in out_vals]
    else:  # the weighted fit passes within nanometres of the ends: make them exact
        out[[0, -1]] = pts[[0, -1]]
    return SmoothLine(out, out_vals, distance_to_polyline(pts, dense))


def chord_parameter(points: np.ndarray) -> np.ndarray:
    """Cumulative distance along a polyline, 0 at its first point."""
    seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
    return np.concatenate([[0.0], np.cumsum(seg)])


def distance_to_polyline(points: np.ndarray, line: np.ndarray) -> float:
    """Largest distance from any of `points` to the polyline `line` (exact, by segments)."""
    _, nearest = cKDTree(line).query(points)
    best = np.full(len(points), np.inf)
    for seg in (nearest - 1, nearest):  # the two segments around the nearest vertex
        a = line[np.clip(seg, 0, len(line) - 1)]
        b = line[np.clip(seg + 1, 0, len(line) - 1)]
        ab = b - a
        t = np.einsum("ij,ij->i", points - a, ab) / np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12)
        foot = a + np.clip(t, 0.0, 1.0)[:, None] * ab
        best = np.minimum(best, np.linalg.norm(points - foot, axis=1))
    return float(best.max())


def _distinct(pts: np.ndarray, vals: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Drop repeated points: a chord-length parameter must increase."""
    keep = np.concatenate([[True], np.linalg.norm(np.diff(pts, axis=0), axis=1) > 1e-6])
    return pts[keep], [v[keep] for v in vals]
