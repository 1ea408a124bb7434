"""How far is the reference time from a true bound? Each relaxation of the limit profile, alone.

    python scripts/reference_bounds.py                     # the built-in maps, a table
    python scripts/reference_bounds.py --json docs/results/reference-bounds.json

The reference (trackmind.sim.reference) is the limit speed profile of the simulated car on the
minimum-curvature line, with a friction circle of radius mu g on the car's total force. The
physics (trackmind.sim.physics) is a two-axle bicycle: each axle has its own friction circle,
and braking is split evenly between them. This script recomputes each map's reference with
one assumption relaxed at a time, and prints each time as a ratio to the reference:

- `margin 0`: the line may run with the car's side on the wall (the reference keeps 0.1 m);
- `drag outside grip`: air drag and rolling resistance do not use tyre grip (in the physics
  they do not; the reference counts them inside the circle);
- `shorter line`: the best blend of minimum curvature and minimum length (the classic
  approximation of the minimum-time line) instead of minimum curvature alone;
- `axle grip`: the physics' two friction circles, braking split evenly, so that a car can
  corner harder while braking (at full brakes 20.4 m/s^2 sideways, not 17.0), steady
  cornering still at mu g;
- `axle + yaw`: and cornering up to the sum of the two axles' grip (31.5 m/s^2), which the
  car reaches only for moments, while its yaw rate changes;
- `all`: every relaxation above at once (the best of the lines above, drag outside grip, axle
  grip and yaw), the lowest time a profile of this kind gives.

A greedy race under 1.0x beats the profile by one of these (or by leaning on a wall, which the
profile never does); their sizes say by how much it can.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import sparse

from trackmind.sim import reference as ref
from trackmind.sim.maps import builtin_map, builtin_names
from trackmind.sim.track import Track, curvature
from trackmind.sim.vehicle import G, VehicleParams, drive_accel, resistance_accel

BLENDS = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2)  # weights of the length term tried for `shorter line`
COLUMNS = {  # the table's column for each relaxation's key
    "margin 0": "margin_0",
    "drag outside grip": "drag_outside_grip",
    "shorter line": "shorter_line",
    "axle grip": "axle_grip",
    "axle + yaw": "axle_and_yaw",
    "all": "all",
}


def axle_grips(p: VehicleParams) -> tuple[float, float]:
    """Peak force per unit mass of the front and the rear axle (static loads)."""
    wb = p.wheelbase_front + p.wheelbase_rear
    front = p.mu * G * p.wheelbase_rear / wb
    rear = p.mu * p.rear_grip * G * p.wheelbase_front / wb
    return front, rear


def lateral_capacity(fx: float, front: float, rear: float) -> float:
    """Sideways force left when a longitudinal force fx is split evenly over the two axles."""
    h = 0.5 * abs(fx)
    return float(np.sqrt(max(front**2 - min(h, front) ** 2, 0.0))) + float(
        np.sqrt(max(rear**2 - min(h, rear) ** 2, 0.0))
    )


def longitudinal_budget(lateral: float, limit: float, front: float, rear: float) -> float:
    """The largest |fx| <= limit whose lateral capacity still covers `lateral` (bisection)."""
    if lateral_capacity(0.0, front, rear) < lateral:
        return 0.0
    if lateral_capacity(limit, front, rear) >= lateral:
        return limit
    lo, hi = 0.0, limit
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if lateral_capacity(mid, front, rear) >= lateral else (lo, mid)
    return lo


def racing_line(track: Track, p: VehicleParams, margin: float, blend: float) -> np.ndarray:
    """The reference's line: minimum curvature, plus `blend` x the length term."""
    _, center, normals, wl, wr = ref.race_frame(track)
    n = len(center)
    lo, hi = -(wr - p.half_width - margin), wl - p.half_width - margin
    lo[0] = hi[0] = 0.0  # the car starts on the centre
    hess, grad = _differences(center, normals, 2)
    if blend > 0:
        h1, g1 = _differences(center, normals, 1)
        hess, grad = hess + blend * h1, grad + blend * g1
    offsets = ref._box_qp((hess + 1e-8 * sparse.identity(n)).tocsc(), grad, lo, hi)
    return center + offsets[:, None] * normals


def _differences(center: np.ndarray, normals: np.ndarray, order: int):
    """Hessian and linear term of sum |k-th difference of (center + a normals)|^2 in a."""
    weights = {1: (-1.0, 1.0), 2: (1.0, -2.0, 1.0)}[order]
    n, m = len(center), len(center) - order
    rows, cols, vals = [], [], []
    b = np.zeros(2 * m)
    for j, w in enumerate(weights):
        idx = np.arange(m) + j
        for dim in range(2):
            rows.append(2 * np.arange(m) + dim)
            cols.append(idx)
            vals.append(w * normals[idx, dim])
        b += w * center[idx].reshape(-1)
    a = sparse.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(2 * m, n)
    )
    return a.T @ a, a.T @ b


def lap_time(
    line: np.ndarray,
    p: VehicleParams,
    budget: Callable[[float, float], float],
    cap_accel: float,
    drag_in_grip: bool,
) -> float:
    """Forward-backward limit profile along `line`; `budget(lateral, limit)` is the grip left
    for a longitudinal force, `cap_accel` the sideways acceleration of steady cornering."""
    ds = np.linalg.norm(np.diff(line, axis=0), axis=1)
    kappa = np.abs(curvature(line))
    cap = np.minimum(np.sqrt(cap_accel / np.maximum(kappa, 1e-12)), p.max_speed)
    v = cap.copy()
    v[0] = 0.0
    for i in range(len(v) - 1):
        drag = float(resistance_accel(v[i], p))
        drive = float(drive_accel(v[i], p))
        lat = v[i] ** 2 * kappa[i]
        a = budget(lat, drive - drag) if drag_in_grip else budget(lat, drive) - drag
        v[i + 1] = min(cap[i + 1], np.sqrt(max(v[i] ** 2 + 2.0 * a * ds[i], 0.0)))
    for i in range(len(v) - 2, -1, -1):
        drag = float(resistance_accel(v[i + 1], p))
        lat = v[i + 1] ** 2 * kappa[i + 1]
        d = budget(lat, p.brake_decel + drag) if drag_in_grip else budget(lat, p.brake_decel) + drag
        v[i] = min(v[i], np.sqrt(v[i + 1] ** 2 + 2.0 * d * ds[i]))
    return ref.profile_time(v, ds)


def relaxations(track: Track, p: VehicleParams | None = None) -> dict[str, float]:
    """The reference time and each relaxation's time as a ratio to it."""
    p = p or VehicleParams()
    circle = p.lateral_accel_max
    front, rear = axle_grips(p)

    def circle_budget(lat: float, limit: float) -> float:
        return min(limit, float(np.sqrt(max(circle**2 - lat**2, 0.0))))

    def axle_budget(lat: float, limit: float) -> float:
        return longitudinal_budget(lat, limit, front, rear)

    line = racing_line(track, p, 0.1, 0.0)
    base = lap_time(line, p, circle_budget, circle, True)
    shorter = min(
        lap_time(racing_line(track, p, 0.1, b), p, circle_budget, circle, True) for b in BLENDS
    )
    yaw = lap_time(line, p, axle_budget, front + rear, False)
    every = min(
        yaw,
        *(
            lap_time(racing_line(track, p, m, b), p, axle_budget, front + rear, False)
            for m, b in [(0.0, 0.0), *((m, b) for m in (0.0, 0.1) for b in BLENDS)]
        ),
    )
    return {
        "reference_s": base,
        "margin_0": lap_time(racing_line(track, p, 0.0, 0.0), p, circle_budget, circle, True)
        / base,
        "drag_outside_grip": lap_time(line, p, circle_budget, circle, False) / base,
        "shorter_line": shorter / base,
        "axle_grip": lap_time(line, p, axle_budget, circle, False) / base,
        "axle_and_yaw": yaw / base,
        "all": every / base,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", nargs="+", default=builtin_names())
    ap.add_argument("--json", type=Path, help="also write the table's numbers to this file")
    args = ap.parse_args(argv)
    rows = []
    for name in args.maps:
        r = relaxations(builtin_map(name))
        rows.append({"map": name, **{k: round(v, 4) for k, v in r.items()}})
        print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    if args.json:
        columns = ["map", "reference", *COLUMNS]
        table = [
            [r["map"], f"{r['reference_s']:.2f} s", *(f"{r[k]:.3f}" for k in COLUMNS.values())]
            for r in rows
        ]
        result = {
            "command": "python scripts/reference_bounds.py --json " + str(args.json),
            "columns": columns,
            "rows": table,
            "values": rows,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
