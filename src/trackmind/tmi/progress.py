"""Progress of a real car along a map's reference line, for CarState.progress_m / zone_idx.

The sim knows each car's arclength; the real game only gives positions. A position is
projected on the Track's drivable line near where the car was last (so a line that comes
back close to itself does not make the car jump ahead); when the best match lies far off or
at the edge of that window (a rewind, a respawn) the whole line is searched.
"""

from __future__ import annotations

import numpy as np

from trackmind.sim.track import Track


def project(
    points: np.ndarray, s: np.ndarray, xy: np.ndarray, lo: int = 0, hi: int | None = None
) -> tuple[float, float, int, float]:
    """Nearest point of the polyline segments lo..hi-1 to xy.

    Returns (arclength, signed lateral offset (left of the line > 0), segment index,
    distance). Segment i runs from points[i] to points[i + 1].
    """
    hi = len(points) - 1 if hi is None else min(hi, len(points) - 1)
    lo = max(0, min(lo, hi - 1))
    a = points[lo:hi]
    d = points[lo + 1 : hi + 1] - a
    seg_len2 = np.maximum(np.einsum("ij,ij->i", d, d), 1e-12)
    rel = xy[None, :] - a
    u = np.clip(np.einsum("ij,ij->i", rel, d) / seg_len2, 0.0, 1.0)
    foot = a + u[:, None] * d
    dist = np.linalg.norm(xy[None, :] - foot, axis=1)
    k = int(np.argmin(dist))
    i = lo + k
    seg_len = np.sqrt(seg_len2[k])
    cross = d[k, 0] * rel[k, 1] - d[k, 1] * rel[k, 0]
    lateral = float(np.sign(cross) * dist[k]) if seg_len > 0 else 0.0
    arclength = float(s[i] + u[k] * (s[i + 1] - s[i]))
    return arclength, lateral, i, float(dist[k])


def zone_index(progress_m: float, spacing_m: float, zones_before_start: int) -> int:
    """The zone counter the sim uses: zone centers passed, zone 0 one spacing behind start."""
    return max(int(np.floor(progress_m / spacing_m)) + zones_before_start, 0)


class LineTracker:
    """Progress and lateral offset of one car on one Track, searched near the last match."""

    def __init__(self, track: Track, window_m: float = 50.0, far_m: float = 30.0) -> None:
        self.track = track
        spacing = float(np.median(np.diff(track.s)))
        self.window = max(2, int(np.ceil(window_m / spacing)))
        self.far_m = float(far_m)
        self._seg: int | None = None
        self._first_lap_end = track.segment_at(track.start_s + track.lap_length_m + window_m) + 2

    def reset(self) -> None:
        """Forget the last match (after a reset or rewind): the next search is global."""
        self._seg = None

    def locate(self, xy: np.ndarray) -> tuple[float, float]:
        """(progress_m from the start line, lateral_m) of a ground position (2,)."""
        t = self.track
        xy = np.asarray(xy, np.float64)[:2]
        found = None
        if self._seg is not None:
            lo = max(0, self._seg - self.window)
            hi = min(len(t.points) - 1, self._seg + self.window)
            found = project(t.points, t.s, xy, lo, hi)
            at_edge = (found[2] == lo and lo > 0) or (found[2] == hi - 1 and hi < len(t.points) - 1)
            if found[3] > self.far_m or at_edge:  # far off, or further than the window
                found = None
        if found is None:  # a circuit's laps repeat the line: look in the first lap
            found = project(t.points, t.s, xy, 0, self._first_lap_end)
        s, lateral, seg, _ = found
        self._seg = seg
        return s - t.start_s, lateral
