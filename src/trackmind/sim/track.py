"""Track geometry: a reference line with left/right widths, walls at the edges, start, finish.

A track is given by its *race line*: the user-level polyline from the start line (first point)
to the finish line (last point). `Track.build` validates it and derives the drivable geometry:
the line resampled every `SAMPLE_SPACING_M`, extended by a straight run-up before the start and
a run-off after the finish, with walls at `width_left` / `width_right` from the line. Every map
source (built-in, procedural, CSV, .npy, .npz) ends here, so validation lives in one place.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial import cKDTree

SAMPLE_SPACING_M = 1.0  # spacing of the drivable line; keeps wall projection local and exact
RUN_UP_M = 12.0  # drivable straight behind the start line (a wall closes it)
RUN_OFF_M = 40.0  # drivable straight after the finish line (a wall closes it)
MIN_WIDTH_M = 2.5  # narrowest half-width the 2 m wide car can use
MAX_WIDTH_M = 60.0


class MapError(ValueError):
    """A map that cannot be used; the message is one line naming the source and the problem."""


@dataclass(frozen=True)
class Track:
    """Drivable geometry of one map (immutable; arrays are read-only)."""

    name: str
    points: np.ndarray  # (N, 2) drivable line, every SAMPLE_SPACING_M, incl. run-up and run-off
    width_left: np.ndarray  # (N,) distance line -> left wall
    width_right: np.ndarray  # (N,) distance line -> right wall
    s: np.ndarray  # (N,) arclength along the drivable line
    start_s: float  # arclength of the start line
    finish_s: float  # arclength of the finish line
    checkpoints_s: np.ndarray  # (K,) arclengths of checkpoints, all before the finish
    reference_time_ms: float | None = None  # given for real maps; sim maps compute theirs
    source: str = ""
    race_line: np.ndarray = field(default=None, repr=False)  # (M, 2) user-level line
    race_width_left: np.ndarray = field(default=None, repr=False)
    race_width_right: np.ndarray = field(default=None, repr=False)

    @property
    def length_m(self) -> float:
        """Race distance from start line to finish line along the reference line."""
        return self.finish_s - self.start_s

    @property
    def tangents(self) -> np.ndarray:
        d = np.diff(self.points, axis=0)
        d = np.vstack([d, d[-1:]])
        return d / np.linalg.norm(d, axis=1, keepdims=True)

    @property
    def normals(self) -> np.ndarray:
        """Unit normals pointing to the left of the driving direction."""
        t = self.tangents
        return np.stack([-t[:, 1], t[:, 0]], axis=1)

    def point_at(self, s: float | np.ndarray) -> np.ndarray:
        """Point(s) of the line at arclength s (linear interpolation, extrapolated straight)."""
        s = np.asarray(s, dtype=np.float64)
        x = np.interp(s, self.s, self.points[:, 0])
        y = np.interp(s, self.s, self.points[:, 1])
        out = np.stack([x, y], axis=-1)
        t = self.tangents
        before, after = s < self.s[0], s > self.s[-1]
        out[before] = self.points[0] + (s[before] - self.s[0])[..., None] * t[0]
        out[after] = self.points[-1] + (s[after] - self.s[-1])[..., None] * t[-1]
        return out

    def heading_at(self, s: float) -> float:
        i = int(np.clip(np.searchsorted(self.s, s) - 1, 0, len(self.s) - 2))
        d = self.points[i + 1] - self.points[i]
        return float(np.arctan2(d[1], d[0]))

    def zone_centers(self, spacing_m: float = 10.0, n_before: int = 1, n_after: int = 45):
        """Virtual checkpoints every `spacing_m` from the start line.

        Extended by `n_before` zones behind the start and `n_after` zones past the finish (on the
        straight continuation) so that "the next 40 zone centers" always exist.
        Returns (zone_centers (Z, 2), zone_s (Z,)); zone 0 sits n_before zones behind the start.
        """
        if spacing_m <= 0:
            raise MapError(f"{self.name}: zone spacing must be > 0, got {spacing_m}")
        n_race = int(np.ceil(self.length_m / spacing_m))  # zones start..finish, finish included
        before = self.start_s + spacing_m * np.arange(-n_before, n_race)
        after = self.finish_s + spacing_m * np.arange(0, n_after + 1)
        zs = np.concatenate([before, after])
        return self.point_at(zs), zs

    def fingerprint(self) -> str:
        """Stable hash of the geometry (used to cache reference times)."""
        h = hashlib.sha1()
        for a in (self.points, self.width_left, self.width_right, self.checkpoints_s):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        h.update(f"{self.start_s:.6f}/{self.finish_s:.6f}".encode())
        return h.hexdigest()[:16]

    @staticmethod
    def build(
        name: str,
        line: np.ndarray,
        width_left: np.ndarray | float,
        width_right: np.ndarray | float,
        checkpoints: int | np.ndarray | None = None,
        reference_time_ms: float | None = None,
        source: str = "",
    ) -> Track:
        """Validate a race line and derive the drivable track.

        `checkpoints`: an int spreads that many checkpoints evenly; an array gives their
        fractions of the race distance in (0, 1). Raises MapError with a one-line message.
        """
        where = source or name
        line = _as_float_array(line, where, "points")
        if line.ndim != 2 or line.shape[1] != 2:
            raise MapError(f"{where}: points must have shape (N, 2), got {line.shape}")
        if len(line) < 3:
            raise MapError(f"{where}: a track needs at least 3 points, got {len(line)}")
        wl = _widths(width_left, len(line), where, "width_left")
        wr = _widths(width_right, len(line), where, "width_right")
        # drop repeated points (zero-length segments) before resampling
        seg = np.linalg.norm(np.diff(line, axis=0), axis=1)
        keep = np.concatenate([[True], seg > 1e-6])
        line, wl, wr = line[keep], wl[keep], wr[keep]
        if len(line) < 3:
            raise MapError(f"{where}: a track needs at least 3 distinct points")
        race_len = float(np.sum(np.linalg.norm(np.diff(line, axis=0), axis=1)))
        if race_len < 30.0:
            raise MapError(f"{where}: race line is {race_len:.1f} m long, at least 30 m needed")

        pts, s_pts, wl_pts, wr_pts = _resample(line, wl, wr, SAMPLE_SPACING_M)
        points, n_up, n_off = with_run_up_and_off(pts, SAMPLE_SPACING_M)
        width_l = np.concatenate([np.full(n_up, wl_pts[0]), wl_pts, np.full(n_off, wl_pts[-1])])
        width_r = np.concatenate([np.full(n_up, wr_pts[0]), wr_pts, np.full(n_off, wr_pts[-1])])
        s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(points, axis=0), axis=1))])
        start_s = float(s[n_up])
        finish_s = float(s[n_up + len(pts) - 1])
        width_l, width_r = _fit_widths_to_curvature(points, width_l, width_r, where)
        _check_no_overlap(points, s, np.maximum(width_l, width_r), where)

        if checkpoints is None:
            checkpoints = max(1, int((finish_s - start_s) // 250))
        if np.isscalar(checkpoints):
            k = int(checkpoints)
            if k < 0:
                raise MapError(f"{where}: checkpoints must be >= 0, got {k}")
            fractions = np.arange(1, k + 1) / (k + 1)
        else:
            fractions = _as_float_array(checkpoints, where, "checkpoints").reshape(-1)
            if np.any((fractions <= 0) | (fractions >= 1)):
                raise MapError(f"{where}: checkpoint fractions must lie in (0, 1)")
            fractions = np.sort(fractions)
        cps = start_s + fractions * (finish_s - start_s)
        if reference_time_ms is not None and not (
            np.isfinite(reference_time_ms) and reference_time_ms > 0
        ):
            raise MapError(f"{where}: reference_time_ms must be > 0, got {reference_time_ms}")

        def ro(a: np.ndarray) -> np.ndarray:
            a = np.ascontiguousarray(a, dtype=np.float64)
            a.setflags(write=False)
            return a

        return Track(
            name=name,
            points=ro(points),
            width_left=ro(width_l),
            width_right=ro(width_r),
            s=ro(s),
            start_s=start_s,
            finish_s=finish_s,
            checkpoints_s=ro(cps),
            reference_time_ms=reference_time_ms,
            source=source,
            race_line=ro(line),
            race_width_left=ro(wl),
            race_width_right=ro(wr),
        )


def _as_float_array(a, where: str, what: str) -> np.ndarray:
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise MapError(f"{where}: {what} is not numeric ({e})") from None
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise MapError(f"{where}: {what} contains NaN or inf (first at index {tuple(bad)})")
    return arr


def _widths(w, n: int, where: str, what: str) -> np.ndarray:
    arr = _as_float_array(w, where, what)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise MapError(f"{where}: {what} must be a number or have {n} values, got {arr.shape}")
    if np.any(arr <= 0):
        i = int(np.argmax(arr <= 0))
        raise MapError(f"{where}: {what} must be > 0, got {arr[i]} at point {i}")
    if np.any(arr < MIN_WIDTH_M) or np.any(arr > MAX_WIDTH_M):
        i = int(np.argmax((arr < MIN_WIDTH_M) | (arr > MAX_WIDTH_M)))
        raise MapError(
            f"{where}: {what} must lie in [{MIN_WIDTH_M}, {MAX_WIDTH_M}] m, got {arr[i]} "
            f"at point {i}"
        )
    return arr


def with_run_up_and_off(pts: np.ndarray, spacing: float) -> tuple[np.ndarray, int, int]:
    """Extend an evenly spaced line by the straight run-up and run-off every track has.

    Returns (points, n_up, n_off): the extended line and how many points each end added.
    """
    n_up = int(round(RUN_UP_M / spacing))
    n_off = int(round(RUN_OFF_M / spacing))
    up = pts[0] - np.arange(n_up, 0, -1)[:, None] * spacing * _unit(pts[1] - pts[0])
    off = pts[-1] + np.arange(1, n_off + 1)[:, None] * spacing * _unit(pts[-1] - pts[-2])
    return np.vstack([up, pts, off]), n_up, n_off


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def _resample(line, wl, wr, spacing):
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(line, axis=0), axis=1))])
    n = max(3, int(np.ceil(s[-1] / spacing)) + 1)
    s_new = np.linspace(0.0, s[-1], n)
    pts = np.stack([np.interp(s_new, s, line[:, 0]), np.interp(s_new, s, line[:, 1])], axis=1)
    return pts, s_new, np.interp(s_new, s, wl), np.interp(s_new, s, wr)


def curvature(points: np.ndarray) -> np.ndarray:
    """Signed curvature (1/m, left turns positive) at each point of a polyline (3-point circle)."""
    p0, p1, p2 = points[:-2], points[1:-1], points[2:]
    a = np.linalg.norm(p1 - p0, axis=1)
    b = np.linalg.norm(p2 - p1, axis=1)
    c = np.linalg.norm(p2 - p0, axis=1)
    cross = (p1 - p0)[:, 0] * (p2 - p1)[:, 1] - (p1 - p0)[:, 1] * (p2 - p1)[:, 0]
    k = 2.0 * cross / np.maximum(a * b * c, 1e-12)
    return np.concatenate([[k[0]], k, [k[-1]]])


def _fit_widths_to_curvature(points, wl, wr, where):
    """Keep the inner wall outside the centre of curvature so wall projection stays unique.

    The inner width is limited to 90% of the local radius (smoothed over +-3 m); a track
    narrower than MIN_WIDTH_M after that is rejected.
    """
    k = curvature(points)
    kernel = np.ones(7) / 7.0
    k_s = np.convolve(np.abs(k), kernel, mode="same")
    k_max = np.maximum(k_s, np.abs(k))
    radius = 1.0 / np.maximum(k_max, 1e-9)
    limit = 0.9 * radius
    left_inner = k > 0
    wl = np.where(left_inner, np.minimum(wl, limit), wl)
    wr = np.where(~left_inner, np.minimum(wr, limit), wr)
    narrow = np.minimum(wl, wr) < MIN_WIDTH_M * 0.8
    if np.any(narrow):
        i = int(np.argmax(narrow))
        raise MapError(
            f"{where}: turn too tight near point {i} (radius {radius[i]:.1f} m): the road "
            f"would be narrower than {MIN_WIDTH_M * 0.8:.1f} m on the inner side"
        )
    return wl, wr


def _check_no_overlap(points, s, wmax, where):
    """Reject lines that cross themselves or bring two parts of the road into contact.

    Two samples far apart along the line (arc > pi/2 * (w_i + w_j)) cannot be on one circular
    arc at chord < w_i + w_j + 1, so such a pair means the walls of the two parts touch.
    """
    tree = cKDTree(points)
    r = 2.0 * float(wmax.max()) + 1.0
    pairs = tree.query_pairs(r, output_type="ndarray")
    if len(pairs) == 0:
        return
    i, j = pairs[:, 0], pairs[:, 1]
    d = np.linalg.norm(points[i] - points[j], axis=1)
    wsum = wmax[i] + wmax[j]
    arc = np.abs(s[i] - s[j])
    bad = (arc > 0.5 * np.pi * wsum + 2.0 * SAMPLE_SPACING_M) & (d < wsum + 1.0)
    if not np.any(bad):
        return
    k = int(np.argmin(np.where(bad, d, np.inf)))
    a, b = sorted((int(i[k]), int(j[k])))
    kind = "crosses itself" if d[k] < 1.5 * SAMPLE_SPACING_M else "touches itself"
    raise MapError(
        f"{where}: the line {kind}: points at {s[a]:.0f} m and {s[b]:.0f} m are {d[k]:.1f} m "
        f"apart, closer than their road widths ({wsum[k]:.1f} m)"
    )
