"""What two sets of maps ask of a driver: speed, braking, straights, corners and road width.

    python scripts/map_stats.py --maps procedural:101 ... --against a.csv b.csv ...
    python scripts/map_stats.py --json docs/results/generalisation/distribution.json \
        --label "procedural 101-112" --maps procedural:{101..112} \
        --against-label "racetrack database" --against <racetrack-database>/tracks/*.csv

For each map, from its reference lap (trackmind.sim.reference): the top speed, the largest
braking (the speed lost in one braking zone), the longest straight (radius over 400 m), the
tightest corner of the racing line, and the median half-width of the road. A generalist
trained on one set and raced on the other meets what the second set has and the first
lacks; the table puts the two side by side (median and range).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from trackmind.sim.mapio import load_map
from trackmind.sim.reference import reference_lap
from trackmind.sim.track import Track, curvature

STRAIGHT_RADIUS_M = 400.0
FIGURES = {
    "top_speed": "top speed (m/s)",
    "largest_braking": "largest braking (m/s lost)",
    "longest_straight": "longest straight (m)",
    "tightest_radius": "tightest radius (m)",
    "half_width": "median half-width (m)",
}


def largest_braking(speed: np.ndarray) -> float:
    """The most speed lost along one run of decreasing speed."""
    best, start = 0.0, 0
    for i in range(1, len(speed)):
        if speed[i] > speed[i - 1]:
            start = i
        best = max(best, float(speed[start] - speed[i]))
    return best


def longest_run(flags: np.ndarray, steps: np.ndarray) -> float:
    """The longest distance over consecutive steps whose flag is set."""
    best = run = 0.0
    for flag, step in zip(flags, steps):
        run = run + step if flag else 0.0
        best = max(best, run)
    return float(best)


def map_figures(track: Track) -> dict[str, float]:
    lap = reference_lap(track)
    kappa = np.abs(curvature(lap.line))
    return {
        "top_speed": float(lap.speed.max()),
        "largest_braking": largest_braking(lap.speed),
        "longest_straight": longest_run(kappa[:-1] < 1.0 / STRAIGHT_RADIUS_M, np.diff(lap.s)),
        "tightest_radius": float(1.0 / max(kappa.max(), 1e-9)),
        "half_width": float(np.median(np.minimum(track.width_left, track.width_right))),
    }


def summary(rows: list[dict[str, float]], key: str) -> str:
    values = np.array([r[key] for r in rows])
    return f"{np.median(values):.1f} ({values.min():.1f}-{values.max():.1f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", nargs="+", required=True)
    ap.add_argument("--label", default="maps")
    ap.add_argument("--against", nargs="+", required=True)
    ap.add_argument("--against-label", default="against")
    ap.add_argument("--json", type=Path, help="also write the table to this file")
    args = ap.parse_args(argv)
    sets = {
        args.label: [map_figures(load_map(m)) for m in args.maps],
        args.against_label: [map_figures(load_map(m)) for m in args.against],
    }
    columns = ["figure", *(f"{label} ({len(rows)} maps)" for label, rows in sets.items())]
    table = [
        [what, *(summary(rows, key) for rows in sets.values())] for key, what in FIGURES.items()
    ]
    for row in table:
        print(" | ".join(row))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"columns": columns, "rows": table}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
