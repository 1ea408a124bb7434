"""Reference time of a map: the physical limit of the simulated car.

A minimum-curvature line inside the walls (least squares on the second differences of the
line, offsets bounded by the walls minus the car's half-width), then a forward-backward
velocity profile along it with the car's own grip, engine and brake limits. No driver can
beat that profile on that line, so race times are reported as a ratio to it. Results are
cached on disk per (geometry, vehicle).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import sparse
from scipy.sparse.linalg import spsolve

from trackmind.sim.track import Track, curvature
from trackmind.sim.vehicle import VehicleParams, drive_accel, resistance_accel, top_speed

REFERENCE_STEP_M = 2.0
CACHE_VERSION = 1


@dataclass(frozen=True)
class ReferenceLap:
    """Racing line and speed profile of a map, and the race time they give."""

    s: np.ndarray  # (N,) centre-line arclength of each line point (start..finish)
    line: np.ndarray  # (N, 2) minimum-curvature line
    speed: np.ndarray  # (N,) m/s, limit speed profile along the line
    time_ms: float  # start line to finish line from standstill


def min_curvature_offsets(
    center: np.ndarray, normals: np.ndarray, lo: np.ndarray, hi: np.ndarray, fix_first: bool = True
) -> np.ndarray:
    """Offsets a (N,) along `normals` minimising sum |P[i-1] - 2 P[i] + P[i+1]|^2.

    P = center + a * normals, lo <= a <= hi. With equal spacing the second difference is
    curvature times spacing squared, so this is the classic minimum-curvature QP. The first
    point is kept on the centre (the car starts there) when fix_first is set.
    """
    n = len(center)
    rows, cols, vals = [], [], []
    b = np.zeros(2 * (n - 2))
    for j, w in ((0, 1.0), (1, -2.0), (2, 1.0)):
        idx = np.arange(n - 2) + j
        for dim in range(2):
            rows.append(2 * np.arange(n - 2) + dim)
            cols.append(idx)
            vals.append(w * normals[idx, dim])
        b += w * center[idx].reshape(-1)
    a_mat = sparse.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(2 * (n - 2), n),
    )
    lo, hi = lo.astype(np.float64).copy(), hi.astype(np.float64).copy()
    if fix_first:
        lo[0] = hi[0] = 0.0
    hess = (a_mat.T @ a_mat + 1e-8 * sparse.identity(n)).tocsc()
    grad0 = a_mat.T @ b
    return _box_qp(hess, grad0, lo, hi)


def _box_qp(hess, c: np.ndarray, lo: np.ndarray, hi: np.ndarray, iters: int = 100) -> np.ndarray:
    """min 1/2 x'Hx + c'x subject to lo <= x <= hi, H sparse positive definite.

    Projected-Newton active set: fix the variables whose bound is pushed on by the gradient,
    solve the free ones exactly (sparse), clip, repeat until the active set stops changing.
    """
    x = np.clip(spsolve(hess, -c), lo, hi)
    active_prev = None
    for _ in range(iters):
        g = hess @ x + c
        at_lo = (x <= lo + 1e-12) & (g > 0)
        at_hi = (x >= hi - 1e-12) & (g < 0)
        fixed = at_lo | at_hi | (lo == hi)
        if active_prev is not None and np.array_equal(fixed, active_prev):
            break
        active_prev = fixed
        free = ~fixed
        if not free.any():
            break
        h_ff = hess[free][:, free]
        rhs = -(c[free] + hess[free][:, fixed] @ x[fixed])
        x = x.copy()
        x[free] = spsolve(h_ff.tocsc(), rhs)
        x = np.clip(x, lo, hi)
    return x


def velocity_profile(
    kappa: np.ndarray,
    ds: np.ndarray,
    a_lat: float,
    accel: Callable[[float], float],
    brake: Callable[[float], float],
    v_start: float = 0.0,
    v_max: float = np.inf,
) -> np.ndarray:
    """Limit speeds (N,) along a path with curvature kappa (N,) and steps ds (N-1,).

    Friction circle of radius a_lat: at speed v the longitudinal budget is
    sqrt(a_lat^2 - (v^2 kappa)^2). Forward pass: accel(v) = engine minus resistance, within
    the budget; backward pass: brake(v) = brakes plus resistance, within the budget.
    The first point starts at v_start.
    """
    kappa = np.abs(np.asarray(kappa, dtype=np.float64))
    cap = np.minimum(np.sqrt(a_lat / np.maximum(kappa, 1e-12)), v_max)
    v = cap.copy()
    v[0] = min(v_start, cap[0])
    for i in range(len(v) - 1):
        budget = np.sqrt(max(a_lat**2 - (v[i] ** 2 * kappa[i]) ** 2, 0.0))
        a = min(accel(v[i]), budget)
        v[i + 1] = min(cap[i + 1], np.sqrt(max(v[i] ** 2 + 2.0 * a * ds[i], 0.0)))
    for i in range(len(v) - 2, -1, -1):
        budget = np.sqrt(max(a_lat**2 - (v[i + 1] ** 2 * kappa[i + 1]) ** 2, 0.0))
        d = min(brake(v[i + 1]), budget)
        v[i] = min(v[i], np.sqrt(v[i + 1] ** 2 + 2.0 * d * ds[i]))
    return v


def profile_time(v: np.ndarray, ds: np.ndarray) -> float:
    """Seconds to run the profile: each step at its mean speed (exact for constant accel)."""
    vm = 0.5 * (v[:-1] + v[1:])
    return float(np.sum(ds / np.maximum(vm, 1e-6)))


def race_frame(track: Track) -> tuple[np.ndarray, ...]:
    """The race every REFERENCE_STEP_M: (s, centre points, unit left normals, width left,
    width right), what a racing line is laid on."""
    n = int(np.ceil(track.length_m / REFERENCE_STEP_M)) + 1
    s = np.linspace(track.start_s, track.finish_s, n)
    center = track.point_at(s)
    normals = np.stack([np.interp(s, track.s, track.normals[:, k]) for k in range(2)], axis=1)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    wl = np.interp(s, track.s, track.width_left)
    wr = np.interp(s, track.s, track.width_right)
    return s, center, normals, wl, wr


def compute_reference(track: Track, vehicle: VehicleParams | None = None) -> ReferenceLap:
    """Minimum-curvature line and limit profile from standstill at the start line."""
    p = vehicle or VehicleParams()
    s, center, normals, wl, wr = race_frame(track)
    margin = p.half_width + 0.1
    a = min_curvature_offsets(center, normals, -(wr - margin), wl - margin)
    line = center + a[:, None] * normals
    ds = np.linalg.norm(np.diff(line, axis=0), axis=1)
    v = _car_profile(line, p, 0.0, p.max_speed)
    return ReferenceLap(s=s, line=line, speed=v, time_ms=1000.0 * profile_time(v, ds))


def _car_profile(line: np.ndarray, p: VehicleParams, v_start: float, v_max: float) -> np.ndarray:
    """velocity_profile along `line` with the car's grip, engine and brakes."""

    def accel(v: float) -> float:
        return float(drive_accel(v, p) - resistance_accel(v, p))

    def brake(v: float) -> float:
        return float(p.brake_decel + resistance_accel(v, p))

    ds = np.linalg.norm(np.diff(line, axis=0), axis=1)
    return velocity_profile(curvature(line), ds, p.lateral_accel_max, accel, brake, v_start, v_max)


def grip_profile(line: np.ndarray, vehicle: VehicleParams, grip: float) -> np.ndarray:
    """Limit speeds (N,) along `line` for the car with `grip` times its tyre grip: a corner of
    radius r is taken at sqrt(grip) times its limit speed, a straight at full throttle, and
    each brake starts as late as that grip allows. What a driver who keeps a margin in the
    corners alone would aim at, where a share of the whole profile also lifts on the
    straights."""
    if not 0.0 < grip <= 1.0:
        raise ValueError(f"grip is a share of the tyre grip: must be in (0, 1], got {grip}")
    low = replace(vehicle, mu=vehicle.mu * grip)
    return _car_profile(np.asarray(line, dtype=np.float64), low, 0.0, vehicle.max_speed)


def flying_profile(
    track: Track, vehicle: VehicleParams | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(s, speed): the reference line's limit speeds as on a flying lap, from top speed.

    The standing start is left out, so what remains is what the corners and the braking
    before them allow: at each point, the fastest the car may go and still make every corner
    ahead. The limit_speeds observation reads it.
    """
    p = vehicle or VehicleParams()
    lap = reference_lap(track, p)
    v_top = top_speed(p)
    return lap.s, _car_profile(lap.line, p, v_top, v_top)


def _cache_dir() -> Path:
    root = os.environ.get("TRACKMIND_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "trackmind"
    )
    return Path(root)


def reference_lap(track: Track, vehicle: VehicleParams | None = None) -> ReferenceLap:
    """compute_reference, cached on disk by geometry and vehicle parameters."""
    p = vehicle or VehicleParams()
    key = hashlib.sha1(
        (track.fingerprint() + json.dumps(p.as_dict(), sort_keys=True)).encode()
        + str(CACHE_VERSION).encode()
    ).hexdigest()[:20]
    path = _cache_dir() / f"reference-{key}.npz"
    if path.is_file():
        try:
            with np.load(path) as z:
                return ReferenceLap(z["s"], z["line"], z["speed"], float(z["time_ms"]))
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file is recomputed
    lap = compute_reference(track, p)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, s=lap.s, line=lap.line, speed=lap.speed, time_ms=lap.time_ms)
        os.replace(tmp, path)
    except OSError:
        pass  # read-only home: the value is still returned
    return lap


def reference_time_ms(track: Track, vehicle: VehicleParams | None = None) -> float:
    """The map's reference time: given (real maps) or the sim's physical limit."""
    if track.reference_time_ms is not None:
        return float(track.reference_time_ms)
    return reference_lap(track, vehicle).time_ms
