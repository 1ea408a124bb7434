"""A real map's reference line and zone centers from a recorded run (pure functions).

Linesight keeps a map's reference line as an (N, 3) .npy of game positions (x, y, z; y up)
every 0.5 m along a driven run (a replay's ghost), and places virtual checkpoints (zone
centers) every 10 m along it, continued straight past both ends so that "the next 40 zone
centers" always exist. These functions build both from the positions of a recorded run;
they follow the conventions of trackmind.sim.track.Track.zone_centers (zone 0 one spacing
behind the start line), so the files agree with what training computes from the line.
"""

from __future__ import annotations

import numpy as np

LINE_SPACING_M = 0.5
ZONE_SPACING_M = 10.0


def check_run(positions: np.ndarray, where: str = "run") -> np.ndarray:
    """Positions as an (N, 3) float array; ValueError (one line) for anything else."""
    arr = np.asarray(positions)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"{where}: expected an N x 3 array of x, y, z positions, got {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{where}: positions must be numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{where}: positions contain NaN or inf")
    return arr


def drop_standstill(positions: np.ndarray, min_step_m: float = 1e-3) -> np.ndarray:
    """Remove points closer than min_step_m to the previous kept point (a car at rest)."""
    keep = [0]
    for i in range(1, len(positions)):
        if np.linalg.norm(positions[i] - positions[keep[-1]]) >= min_step_m:
            keep.append(i)
    return positions[keep]


def arclength(points: np.ndarray) -> np.ndarray:
    """Cumulative distance along a polyline, starting at 0."""
    return np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(points, axis=0), axis=1))])


def points_at(points: np.ndarray, s: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Points at arclengths `query`, continued straight along the end segments outside."""
    query = np.asarray(query, np.float64)
    out = np.stack([np.interp(query, s, points[:, k]) for k in range(points.shape[1])], axis=-1)
    first = (points[1] - points[0]) / (s[1] - s[0])
    last = (points[-1] - points[-2]) / (s[-1] - s[-2])
    before, after = query < s[0], query > s[-1]
    out[before] = points[0] + (query[before] - s[0])[:, None] * first
    out[after] = points[-1] + (query[after] - s[-1])[:, None] * last
    return out


def resample_polyline(points: np.ndarray, spacing_m: float = LINE_SPACING_M) -> np.ndarray:
    """Points every `spacing_m` along the polyline from its first point; the last point is
    kept, so the final step may be shorter (the run ends on the finish line)."""
    if spacing_m <= 0:
        raise ValueError(f"spacing must be > 0, got {spacing_m}")
    pts = np.asarray(points, np.float64)
    if len(pts) < 2:
        raise ValueError(f"a line needs at least 2 distinct points, got {len(pts)}")
    s = arclength(pts)
    if s[-1] <= 0:
        raise ValueError("a line needs at least 2 distinct points")
    query = np.arange(0.0, s[-1], spacing_m)
    if s[-1] - query[-1] > 1e-9:
        query = np.append(query, s[-1])
    return points_at(pts, s, query)


def zone_centers(
    line: np.ndarray, spacing_m: float = ZONE_SPACING_M, n_before: int = 1, n_after: int = 45
) -> np.ndarray:
    """Zone centers every spacing_m from the start: n_before behind it, up to the finish,
    then the finish and n_after more on the straight continuation (Track.zone_centers)."""
    line = np.asarray(line, np.float64)
    s = arclength(line)
    n_race = int(np.ceil(s[-1] / spacing_m))
    before = spacing_m * np.arange(-n_before, n_race)
    after = s[-1] + spacing_m * np.arange(0, n_after + 1)
    return points_at(line, s, np.concatenate([before, after]))


def parse_race_time(text: str) -> int:
    """Milliseconds of a race time written m:ss.cc, ss.cc or as an integer of ms (>= 1000)."""
    t = str(text).strip()
    try:
        if ":" in t:
            minutes, seconds = t.split(":", 1)
            ms = round((int(minutes) * 60 + float(seconds)) * 1000)
        elif "." in t or float(t) < 1000:
            ms = round(float(t) * 1000)
        else:
            ms = int(t)
    except ValueError:
        raise ValueError(f"not a race time: {text!r} (write 0:55.10, 55.10 or 55100)") from None
    if ms <= 0:
        raise ValueError(f"a race time must be > 0, got {text!r}")
    return int(ms)
