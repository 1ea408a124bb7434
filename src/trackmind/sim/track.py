"""Track geometry: a reference line with left/right widths, walls at the edges, start, finish.

A track is given by its *race line*: the user-level polyline from the start line (first point)
to the finish line (last point). `Track.build` validates it and derives the drivable geometry:
the line resampled every `SAMPLE_SPACING_M`, extended by a straight run-up before the start and
a run-off after the finish, with walls at `width_left` / `width_right` from the line. Every map
source (built-in, procedural, CSV, .npy, .npz) ends here, so validation lives in one place.

A *circuit* is a closed line (its end within `CLOSE_GAP_M` of its start, or `closed=True`):
its race is `laps` laps, unrolled into one drivable line whose run-up is the end of the lap
and whose run-off is its beginning, so arclength, zones and progress run on across laps.
A line with heights may pass over itself where the two roads are `HEIGHT_CLEARANCE_M` apart
in height (a bridge); the car stays on the road it is on because every projection on the
line is searched near the car's own progress, never over the whole line.
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
CLOSE_GAP_M = 8.0  # a line that ends this close to its start is a circuit
MAX_CLOSE_GAP_M = 50.0  # a line said to be closed must end at least this close to its start
MIN_LAP_M = 60.0  # shortest circuit (the run-up and run-off are parts of the lap)
MAX_LAPS = 100
HEIGHT_CLEARANCE_M = 3.0  # road above road at least this far apart in height is a bridge


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
    finish_s: float  # arclength of the finish line (after every lap)
    checkpoints_s: np.ndarray  # (K,) arclengths of checkpoints (lap lines too), before finish
    reference_time_ms: float | None = None  # given for real maps; sim maps compute theirs
    source: str = ""
    race_line: np.ndarray = field(default=None, repr=False)  # (M, 2) user-level line (one lap)
    race_width_left: np.ndarray = field(default=None, repr=False)
    race_width_right: np.ndarray = field(default=None, repr=False)
    laps: int = 1
    closed: bool = False  # a circuit: the start line is also the finish line
    heights: np.ndarray | None = field(default=None, repr=False)  # (N,) metres, None if flat
    race_heights: np.ndarray | None = field(default=None, repr=False)  # (M,)
    crossings: bool = False  # the road passes over itself (height-separated)
    checkpoint_fractions: np.ndarray = field(default=None, repr=False)  # per lap, in (0, 1)
    smoothing_deviation_m: float | None = None  # imported lines: farthest raw point from it

    @property
    def length_m(self) -> float:
        """Race distance from start line to finish line along the reference line (all laps)."""
        return self.finish_s - self.start_s

    @property
    def lap_length_m(self) -> float:
        return self.length_m / self.laps

    @property
    def lap_lines_s(self) -> np.ndarray:
        """Arclengths where a lap ends and the next begins (empty for one lap)."""
        return self.start_s + self.lap_length_m * np.arange(1, self.laps)

    def laps_done(self, progress_m: np.ndarray | float) -> np.ndarray:
        """Laps completed at a progress from the start line (0 .. laps)."""
        p = np.asarray(progress_m, dtype=np.float64)
        return np.clip(np.floor(p / self.lap_length_m + 1e-9), 0, self.laps).astype(np.int64)

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

    def segment_at(self, s: float) -> int:
        """Index of the drivable-line segment that holds arclength s."""
        return int(np.clip(np.searchsorted(self.s, s) - 1, 0, len(self.s) - 2))

    def heading_at(self, s: float) -> float:
        i = self.segment_at(s)
        d = self.points[i + 1] - self.points[i]
        return float(np.arctan2(d[1], d[0]))

    def zone_centers(self, spacing_m: float = 10.0, n_before: int = 1, n_after: int = 45):
        """Virtual checkpoints every `spacing_m` from the start line, across every lap.

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
        if self.heights is not None:  # flat tracks keep the hashes they always had
            h.update(np.ascontiguousarray(self.heights, dtype=np.float64).tobytes())
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
        closed: bool | None = None,
        laps: int = 1,
        heights: np.ndarray | None = None,
    ) -> Track:
        """Validate a race line and derive the drivable track.

        `checkpoints`: an int spreads that many checkpoints evenly over each lap; an array
        gives their fractions of the lap in (0, 1). `closed`: None detects a circuit (the end
        within CLOSE_GAP_M of the start); `laps` > 1 needs a circuit. `heights` (M,) lets the
        line pass over itself where the roads are HEIGHT_CLEARANCE_M apart.
        Raises MapError with a one-line message.
        """
        where = source or name
        line, wl, wr, z = checked_line(line, width_left, width_right, heights, where)
        laps = _laps(laps, where)
        closed = line_is_closed(line, closed, laps, where)
        user = (line, wl, wr, z)
        if closed:  # the lap ends where it began: join the ends (drop a repeated first point)
            if np.linalg.norm(line[-1] - line[0]) <= 1e-6:
                line, wl, wr = line[:-1], wl[:-1], wr[:-1]
                z = None if z is None else z[:-1]
            line, wl, wr = _close(line), _close(wl), _close(wr)
            z = None if z is None else _close(z)
            user = (line[:-1], wl[:-1], wr[:-1], None if z is None else z[:-1])
        race_len = float(np.sum(np.linalg.norm(np.diff(line, axis=0), axis=1)))
        if race_len < 30.0:
            raise MapError(f"{where}: race line is {race_len:.1f} m long, at least 30 m needed")
        if closed and race_len < MIN_LAP_M:
            raise MapError(f"{where}: a circuit lap is {race_len:.1f} m, at least {MIN_LAP_M} m")

        values = [wl, wr] + ([] if z is None else [z])
        pts, _, vals = _resample(line, SAMPLE_SPACING_M, *values)
        if closed:
            idx, n_up, n_race = _circuit_indices(len(pts) - 1, race_len, laps)
            points = pts[idx]
            ext = [v[idx] for v in vals]
        else:
            points, n_up, n_off = with_run_up_and_off(pts, SAMPLE_SPACING_M)
            n_race = len(pts) - 1
            ext = [np.concatenate([np.full(n_up, v[0]), v, np.full(n_off, v[-1])]) for v in vals]
        width_l, width_r = ext[0], ext[1]
        height = ext[2] if z is not None else None
        s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(points, axis=0), axis=1))])
        start_s = float(s[n_up])
        finish_s = float(s[n_up + n_race])
        width_l, width_r = _fit_widths_to_curvature(points, width_l, width_r, where)
        if closed:  # one lap, its ends joined: arc distances wrap around the lap
            lap = slice(n_up, n_up + len(pts) - 1)
            crossings = _check_no_overlap(
                points[lap],
                s[lap],
                np.maximum(width_l, width_r)[lap],
                where,
                None if height is None else height[lap],
                period=s[n_up + len(pts) - 1] - start_s,
            )
        else:
            crossings = _check_no_overlap(points, s, np.maximum(width_l, width_r), where, height)

        fractions = _checkpoint_fractions(checkpoints, race_len, where)
        lap_len = (finish_s - start_s) / laps
        cps = [start_s + (k + fractions) * lap_len for k in range(laps)]
        cps = np.sort(np.concatenate(cps + [start_s + lap_len * np.arange(1, laps)]))
        if reference_time_ms is not None and not (
            np.isfinite(reference_time_ms) and reference_time_ms > 0
        ):
            raise MapError(f"{where}: reference_time_ms must be > 0, got {reference_time_ms}")

        return Track(
            name=name,
            points=_ro(points),
            width_left=_ro(width_l),
            width_right=_ro(width_r),
            s=_ro(s),
            start_s=start_s,
            finish_s=finish_s,
            checkpoints_s=_ro(cps),
            reference_time_ms=reference_time_ms,
            source=source,
            race_line=_ro(user[0]),
            race_width_left=_ro(user[1]),
            race_width_right=_ro(user[2]),
            laps=laps,
            closed=closed,
            heights=None if height is None else _ro(height),
            race_heights=None if user[3] is None else _ro(user[3]),
            crossings=crossings,
            checkpoint_fractions=_ro(fractions),
        )


def checked_line(
    line, width_left, width_right, heights, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """A race line's arrays as floats, validated, repeated points dropped; MapError if bad."""
    line = _as_float_array(line, where, "points")
    if line.ndim != 2 or line.shape[1] != 2:
        raise MapError(f"{where}: points must have shape (N, 2), got {line.shape}")
    if len(line) < 3:
        raise MapError(f"{where}: a track needs at least 3 points, got {len(line)}")
    wl = _widths(width_left, len(line), where, "width_left")
    wr = _widths(width_right, len(line), where, "width_right")
    z = None if heights is None else _heights(heights, len(line), where)
    # drop repeated points (zero-length segments) before resampling
    seg = np.linalg.norm(np.diff(line, axis=0), axis=1)
    keep = np.concatenate([[True], seg > 1e-6])
    line, wl, wr = line[keep], wl[keep], wr[keep]
    z = None if z is None else z[keep]
    if len(line) < 3:
        raise MapError(f"{where}: a track needs at least 3 distinct points")
    return line, wl, wr, z


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    a.setflags(write=False)
    return a


def _close(a: np.ndarray) -> np.ndarray:
    return np.concatenate([a, a[:1]])


def _as_float_array(a, where: str, what: str) -> np.ndarray:
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise MapError(f"{where}: {what} is not numeric ({e})") from None
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        at = f"point {bad[0]}" if arr.ndim >= 1 else "its value"
        raise MapError(f"{where}: {what} contains NaN or inf (first at {at})")
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


def _heights(z, n: int, where: str) -> np.ndarray:
    arr = _as_float_array(z, where, "heights")
    if arr.shape != (n,):
        raise MapError(f"{where}: heights must have {n} values (one per point), got {arr.shape}")
    return arr


def _laps(laps, where: str) -> int:
    if isinstance(laps, bool) or not isinstance(laps, (int, np.integer)):
        raise MapError(f"{where}: laps must be an integer >= 1, got {laps!r}")
    if not 1 <= int(laps) <= MAX_LAPS:
        raise MapError(f"{where}: laps must lie in [1, {MAX_LAPS}], got {laps}")
    return int(laps)


def line_is_closed(line: np.ndarray, closed: bool | None, laps: int, where: str) -> bool:
    """A circuit when told so, or when the line ends within CLOSE_GAP_M of its start."""
    gap = float(np.linalg.norm(line[-1] - line[0]))
    if closed is None:
        length = float(np.sum(np.linalg.norm(np.diff(line, axis=0), axis=1)))
        closed = gap <= CLOSE_GAP_M and length >= MIN_LAP_M and gap < 0.1 * length
    elif closed and gap > MAX_CLOSE_GAP_M:
        raise MapError(
            f"{where}: closed: the line ends {gap:.1f} m from its start; a circuit must end "
            f"within {MAX_CLOSE_GAP_M:.0f} m of it"
        )
    if laps > 1 and not closed:
        raise MapError(
            f"{where}: laps = {laps} needs a circuit, but the line ends {gap:.1f} m from its "
            f"start (a closed line ends within {CLOSE_GAP_M:.0f} m of it)"
        )
    return bool(closed)


def _circuit_indices(n_lap: int, lap_m: float, laps: int) -> tuple[np.ndarray, int, int]:
    """Indices into one lap's resampled points (n_lap + 1, last = first) for the unrolled race.

    The run-up is the end of the lap, then `laps` laps, the finish (= start) point, and the
    run-off is the beginning of the lap. Returns (indices, n_up, points in the race - 1).
    """
    spacing = lap_m / n_lap
    n_up = int(round(RUN_UP_M / spacing))
    n_off = int(round(RUN_OFF_M / spacing))
    idx = np.concatenate(
        [
            np.arange(n_lap - n_up, n_lap),
            np.tile(np.arange(n_lap), laps),
            [0],
            np.arange(1, n_off + 1),
        ]
    )
    return idx.astype(np.int64), n_up, n_lap * laps


def _checkpoint_fractions(checkpoints, lap_m: float, where: str) -> np.ndarray:
    if checkpoints is None:
        checkpoints = max(1, int(lap_m // 250))
    if np.isscalar(checkpoints):
        k = int(checkpoints)
        if k < 0:
            raise MapError(f"{where}: checkpoints must be >= 0, got {k}")
        return np.arange(1, k + 1) / (k + 1)
    fractions = _as_float_array(checkpoints, where, "checkpoints").reshape(-1)
    if np.any((fractions <= 0) | (fractions >= 1)):
        raise MapError(f"{where}: checkpoint fractions must lie in (0, 1)")
    return np.sort(fractions)


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


def _resample(line: np.ndarray, spacing: float, *values: np.ndarray):
    """The line every ~`spacing` metres (ends kept), and per-point values interpolated.

    Returns (points, arclengths, [values...]).
    """
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(line, axis=0), axis=1))])
    n = max(3, int(np.ceil(s[-1] / spacing)) + 1)
    s_new = np.linspace(0.0, s[-1], n)
    pts = np.stack([np.interp(s_new, s, line[:, 0]), np.interp(s_new, s, line[:, 1])], axis=1)
    return pts, s_new, [np.interp(s_new, s, v) for v in values]


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


def contact_pairs(
    points: np.ndarray, s: np.ndarray, wmax: np.ndarray, period: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of samples far apart along the line whose roads touch: (i, j, distance), i < j.

    Two samples far apart along the line (arc > pi/2 * (w_i + w_j)) cannot be on one circular
    arc at chord < w_i + w_j + 1, so such a pair means the walls of the two parts touch.
    `period`: arc distances wrap around a lap of this length (circuits).
    """
    tree = cKDTree(points)
    r = 2.0 * float(wmax.max()) + 1.0
    pairs = tree.query_pairs(r, output_type="ndarray")
    if len(pairs) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    i, j = pairs.min(axis=1), pairs.max(axis=1)
    d = np.linalg.norm(points[i] - points[j], axis=1)
    wsum = wmax[i] + wmax[j]
    arc = np.abs(s[i] - s[j])
    if period is not None:
        arc = np.minimum(arc, period - arc)
    close = (arc > 0.5 * np.pi * wsum + 2.0 * SAMPLE_SPACING_M) & (d < wsum + 1.0)
    return i[close], j[close], d[close]


def _check_no_overlap(points, s, wmax, where, heights=None, period=None) -> bool:
    """Reject lines that cross themselves or bring two parts of the road into contact.

    Touching parts are allowed where their heights differ by HEIGHT_CLEARANCE_M (one road
    passes over the other). Returns whether the road passes over itself somewhere.
    """
    i, j, d = contact_pairs(points, s, wmax, period)
    if len(i) == 0:
        return False
    over = np.zeros(len(i), dtype=bool)
    if heights is not None:
        over = np.abs(heights[i] - heights[j]) >= HEIGHT_CLEARANCE_M
    bad = ~over
    if not np.any(bad):
        return True
    k = int(np.argmin(np.where(bad, d, np.inf)))
    a, b = int(i[k]), int(j[k])
    wsum = wmax[a] + wmax[b]
    kind = "crosses itself" if d[k] < 1.5 * SAMPLE_SPACING_M else "touches itself"
    at_height = "" if heights is None else " at the same height"
    raise MapError(
        f"{where}: the line {kind}{at_height}: points at {s[a]:.0f} m and {s[b]:.0f} m are "
        f"{d[k]:.1f} m apart, closer than their road widths ({wsum:.1f} m)"
    )
