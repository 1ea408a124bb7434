"""Smooth imported lines before any resampling or curvature.

Real circuits and driven lines come as points a few metres apart. Joining them with straight
segments and resampling puts a kink at every original point, whose 3-point radius shrinks
with the resampling step, so a gentle curve reads as a hairpin and the importer refuses it.
A cubic spline through the points, parametrised by chord length, gives a line whose curvature
is that of the road. Points a few metres apart are passed through (a periodic spline for a
circuit); denser points are fitted by least squares with a knot every `KNOT_SPACING_M`, which
smooths the jitter of a driven line (a circuit's lap is then fitted
with its ends wrapped around, so the line runs on through the joint). Both are linear-time
banded solves: a 10 km line of 20,000 points takes a few hundredths of a second. Per-point
values (widths, heights) follow the same parameter, so each stays attached to the point it
was given for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import BSpline, make_interp_spline, make_lsq_spline
from scipy.spatial import cKDTree

# points closer than half this are fitted by least squares with a knot every KNOT_SPACING_M:
# with 2 cm of jitter on points 0.5 m apart, a 50 m circle keeps its radius within 12%
# (2 m knots: within a factor 2); farther apart, each point is passed through
KNOT_SPACING_M = 5.0
EVAL_STEP_M = 0.25  # dense evaluation step, to measure arclength and deviation
END_WEIGHT = 1e3  # an open line's first and last points: the start and finish lines


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
    knot_spacing_m: float = KNOT_SPACING_M,
) -> SmoothLine:
    """Fit a cubic spline to `points` (M, 2) (`fit_spline`) and sample it every ~`spacing_m`.

    `values` (each (M,)) are interpolated linearly in the same chord-length parameter as the
    points they belong to. A closed line's spline runs through its joint; an open line keeps
    its first and last points. Too few points for a cubic: the polyline itself.
    """
    pts, vals = _distinct(
        np.asarray(points, np.float64), [np.asarray(v, np.float64) for v in values]
    )
    if closed and np.linalg.norm(pts[-1] - pts[0]) <= 1e-6:
        pts, vals = pts[:-1], [v[:-1] for v in vals]
    loop = np.vstack([pts, pts[:1]]) if closed else pts
    vals = [np.append(v, v[0]) for v in vals] if closed else vals
    u = chord_parameter(loop)
    spline = fit_spline(pts, u, closed, knot_spacing_m)
    if spline is None:
        dense_u, dense = u, loop
    else:
        dense_u = np.linspace(0.0, u[-1], max(4, int(np.ceil(u[-1] / EVAL_STEP_M)) + 1))
        dense = spline(dense_u)
    dense_s = chord_parameter(dense)
    n = max(3, int(np.ceil(dense_s[-1] / spacing_m)) + 1)
    out_u = np.interp(np.linspace(0.0, dense_s[-1], n), dense_s, dense_u)
    out = spline(out_u) if spline is not None else _polyline_at(loop, u, out_u)
    out_vals = [np.interp(out_u, u, v) for v in vals]
    if closed:  # the last sample is the first again
        out, out_vals = out[:-1], [v[:-1] for v in out_vals]
    else:  # the weighted fit passes within millimetres of the ends: make them exact
        out[[0, -1]] = pts[[0, -1]]
    return SmoothLine(out, out_vals, distance_to_polyline(loop, dense))


def fit_spline(
    pts: np.ndarray, u: np.ndarray, closed: bool, knot_spacing_m: float
) -> BSpline | None:
    """The cubic spline of `pts` at parameters `u` (a circuit's `u` runs one entry past its
    points, to the lap length); None when the points cannot carry one.

    Points at least half `knot_spacing_m` apart (a circuit database's 5 m) are each a detail
    of the road: the spline passes through all of them (periodic for a circuit). Denser
    points (a driven line every 0.5 m) carry jitter finer than any corner: the spline is
    fitted to them by least squares with a knot every `knot_spacing_m`.
    """
    if len(pts) < 4:
        return None
    step = float(np.median(np.diff(u)))
    loop = np.vstack([pts, pts[:1]]) if closed else pts
    if step >= 0.5 * knot_spacing_m:
        try:
            return make_interp_spline(u, loop, k=3, bc_type="periodic" if closed else None)
        except (ValueError, np.linalg.LinAlgError):
            return None
    h = knot_spacing_m
    for _ in range(4):  # knots too dense for the points (Schoenberg-Whitney): spread them
        x, y, w = _fit_data(pts, u, closed, h, step)
        inner = np.arange(x[0] + h, x[-1] - 0.5 * h, h)
        knots = np.concatenate([[x[0]] * 4, inner, [x[-1]] * 4])
        try:
            return _least_squares(x, y, knots, w)
        except (ValueError, np.linalg.LinAlgError):
            h *= 2.0
    return None


def _least_squares(x: np.ndarray, y: np.ndarray, knots: np.ndarray, w: np.ndarray) -> BSpline:
    """make_lsq_spline by its banded normal equations: linear time (SciPy >= 1.13 defaults to
    a QR that takes seconds on a 20,000-point line; older SciPy has only the equations)."""
    try:
        return make_lsq_spline(x, y, knots, k=3, w=w, method="norm-eq")
    except TypeError:  # SciPy < 1.13: no `method`, the normal equations are its way
        return make_lsq_spline(x, y, knots, k=3, w=w)


def _fit_data(pts: np.ndarray, u: np.ndarray, closed: bool, h: float, step: float):
    """(x, y, weights) to fit: a circuit's lap with a few knots' worth wrapped on each side."""
    if not closed:
        w = np.ones(len(pts))
        w[[0, -1]] = END_WEIGHT
        return u, pts, w
    m, lap = len(pts), u[-1]
    pad = min(m - 1, int(np.ceil(4.0 * h / max(step, 1e-9))) + 4)
    x = np.concatenate([u[m - pad : m] - lap, u, u[1 : pad + 1] + lap])
    y = np.vstack([pts[m - pad :], pts, pts[:1], pts[1 : pad + 1]])
    return x, y, np.ones(len(x))


def _polyline_at(line: np.ndarray, u: np.ndarray, at: np.ndarray) -> np.ndarray:
    return np.stack([np.interp(at, u, line[:, k]) for k in range(2)], axis=1)


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
