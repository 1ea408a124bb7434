"""Where a zero-shot race stopped, and what the road asked there that training never did.

    python scripts/failure_points.py docs/results/generalisation/zero-shot-agent.json \
        --dirs maps <racetrack-database>/tracks --training procedural:{101..112} \
        --json docs/results/generalisation/failure-points.json

An evaluation result (scripts/evaluate.py --json) gives each map's finish rate and how far
its furthest race got; several results (checkpoints, runs) are pooled. Every braking zone
of a map's reference lap (a local minimum of the limit speed, at least MIN_DROP_MPS below
the fastest point of the 500 m before it) is described by the speed it starts from, the
speed lost, the distance from that fastest point to the minimum (the braking and the
turn-in), the racing line's corner radius and the road's half-width there, the straight
before it and whether the corner is a chicane (the curvature changes sign within 80 m). A
race that did not finish stopped at the first braking zone after its furthest point; the
table sets that zone beside the extremes of every braking zone of the training maps, and
names the figures outside them. The same is given for the hardest zone (most speed lost) of
each map that finished, and the medians of the zones stopped at are set against those of
every zone a race passed (and the stops per zone met, by kind: tighter or narrower than any
training zone, chicane or not, a chicane at the end of a long straight, braking included, or
not), so that the failures can be told from what the agent already handles.
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

MIN_DROP_MPS = 5.0  # speed lost for a minimum of the limit speed to count as a braking zone
APPROACH_M = 500.0  # the zone's start speed: the fastest point this far before its minimum
CORNER_M = 25.0  # radius and half-width: the tightest / narrowest this far either side
CHICANE_M = 80.0  # a chicane: both turn directions this far either side, sharper than ...
CHICANE_RADIUS_M = 80.0  # ... this radius
STRAIGHT_RADIUS_M = 400.0  # a straight: the racing line's radius above this
NARROW_M = 5.0  # the summary's share of zones narrower than this half-width
LONG_STRAIGHT_M = 300.0  # stops per zone met: chicanes this far or more after the last bend
BEHIND_M = 20.0  # a stop this close after a zone's minimum is still that zone's
FIGURES = ("start_speed", "drop", "braking_m", "radius", "half_width", "straight_m")
# the direction in which a figure is harder: above (+1) or below (-1) the training extreme
HARDER = {
    "start_speed": 1,
    "drop": 1,
    "braking_m": 1,
    "radius": -1,
    "half_width": -1,
    "straight_m": 1,
}


def braking_zones(
    s: np.ndarray, speed: np.ndarray, kappa: np.ndarray, half_width: np.ndarray
) -> list[dict]:
    """The braking zones of a speed profile sampled at arclengths s (see the module doc)."""
    zones = []
    for m in range(1, len(s) - 1):
        if not (speed[m] <= speed[m - 1] and speed[m] < speed[m + 1]):
            continue
        before = np.flatnonzero((s >= s[m] - APPROACH_M) & (s <= s[m]))[::-1]
        i0 = int(before[np.argmax(speed[before])])  # the fastest point nearest the corner
        drop = float(speed[i0] - speed[m])
        if drop < MIN_DROP_MPS:
            continue
        near = np.abs(s - s[m]) <= CORNER_M
        around = np.abs(s - s[m]) <= CHICANE_M
        sharp = kappa[around][np.abs(kappa[around]) > 1.0 / CHICANE_RADIUS_M]
        straight = 0.0
        j = i0
        while j > 0 and abs(kappa[j]) < 1.0 / STRAIGHT_RADIUS_M:
            straight += float(s[j] - s[j - 1])
            j -= 1
        zones.append(
            {
                "s": float(s[m]),
                "start_speed": float(speed[i0]),
                "corner_speed": float(speed[m]),
                "drop": drop,
                "braking_m": float(s[m] - s[i0]),
                "radius": float(1.0 / max(np.abs(kappa[near]).max(), 1e-9)),
                "half_width": float(half_width[near].min()),
                "straight_m": straight,
                "chicane": bool(sharp.size and sharp.min() < 0 < sharp.max()),
            }
        )
    return zones


def stop_zone(zones: list[dict], stop_s: float) -> dict | None:
    """The braking zone a race that got to stop_s failed at: the first whose minimum lies
    ahead of it, or less than BEHIND_M behind (None: no zone left, the race stalled on a
    straight or in a bend without braking)."""
    ahead = [z for z in zones if z["s"] >= stop_s - BEHIND_M]
    return ahead[0] if ahead else None


def outside(zone: dict, extremes: dict[str, float]) -> list[str]:
    """The figures of a zone harder than the hardest of the training maps' zones."""
    return [f for f in FIGURES if HARDER[f] * (zone[f] - extremes[f]) > 0]


def training_extremes(zones: list[dict]) -> dict[str, float]:
    """The hardest value of each figure over a set of braking zones."""
    return {f: (max if HARDER[f] > 0 else min)(z[f] for z in zones) for f in FIGURES}


def summarise(zones: list[dict]) -> dict[str, float]:
    """Median of each figure over some zones, and the share of them that are chicanes."""
    out = {f: round(float(np.median([z[f] for z in zones])), 1) for f in FIGURES}
    out["chicanes"] = round(float(np.mean([z["chicane"] for z in zones])), 2)
    out[f"half_width_under_{NARROW_M:g}m"] = round(
        float(np.mean([z["half_width"] < NARROW_M for z in zones])), 2
    )
    out["zones"] = len(zones)
    return out


def stop_rates(
    stopped: list[dict], passed: list[dict], trained_width: float, trained_radius: float
) -> dict[str, str]:
    """Of the zones of each kind a race met, the share it stopped at ("stops / met");
    trained_width and trained_radius: the narrowest half-width and the tightest racing-line
    radius of the training maps' zones."""
    w, r = trained_width, trained_radius
    kinds = {
        f"radius under {r:.1f} m": lambda z: z["radius"] < r,
        f"radius {r:.1f} m or more": lambda z: z["radius"] >= r,
        "chicane": lambda z: z["chicane"],
        "not a chicane": lambda z: not z["chicane"],
        f"half-width under {NARROW_M:g} m": lambda z: z["half_width"] < NARROW_M,
        f"half-width {NARROW_M:g} m or more": lambda z: z["half_width"] >= NARROW_M,
        f"chicane, half-width under {w:.1f} m": lambda z: z["chicane"] and z["half_width"] < w,
        f"chicane, half-width {w:.1f} m or more": lambda z: z["chicane"] and z["half_width"] >= w,
        f"chicane, {LONG_STRAIGHT_M:g} m or more after the last bend": lambda z: (
            z["chicane"] and z["straight_m"] + z["braking_m"] >= LONG_STRAIGHT_M
        ),
        f"chicane, under {LONG_STRAIGHT_M:g} m after the last bend": lambda z: (
            z["chicane"] and z["straight_m"] + z["braking_m"] < LONG_STRAIGHT_M
        ),
    }
    out = {}
    for kind, has in kinds.items():
        stops = sum(map(has, stopped))
        met = stops + sum(map(has, passed))
        out[kind] = f"{stops} / {met}" + (f" ({stops / met:.1%})" if met else "")
    return out


def map_zones(track: Track) -> list[dict]:
    lap = reference_lap(track)
    half = np.minimum(track.width_left, track.width_right)
    return braking_zones(
        lap.s - track.start_s, lap.speed, curvature(lap.line), np.interp(lap.s, track.s, half)
    )


def resolve(name: str, dirs: list[Path]) -> Track:
    """A result's map name as a Track: generator names as they are, files from dirs."""
    if ":" in name or Path(name).exists():
        return load_map(name)
    for d in dirs:
        if (d / name).exists():
            return load_map(d / name)
    raise SystemExit(f"error: map {name!r} is in none of --dirs {', '.join(map(str, dirs))}")


def row(name: str, result: dict, zone: dict | None, extremes: dict[str, float]) -> list[str]:
    finished = result["finish_rate"] > 0
    where = "finished" if finished else f"{result['progress']:.0%}"
    if zone is None:
        short = Path(name).name if ":" not in name else name
        return [short, where, "-", "-", "-", "-", "-", "-", "-", "no braking zone"]
    harder = outside(zone, extremes)
    return [
        Path(name).name if ":" not in name else name,
        where,
        f"{zone['s']:.0f} m",
        f"{zone['start_speed']:.0f} -> {zone['corner_speed']:.0f}",
        f"{zone['braking_m']:.0f} m",
        f"{zone['radius']:.0f} m",
        f"{zone['half_width']:.1f} m",
        f"{zone['straight_m']:.0f} m",
        "yes" if zone["chicane"] else "no",
        ", ".join(harder) if harder else "none",
    ]


COLUMNS = [
    "map",
    "furthest race",
    "braking zone at",
    "speed (m/s)",
    "from top speed",
    "radius",
    "half-width",
    "straight before",
    "chicane",
    "outside training",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "results", type=Path, nargs="+", help="scripts/evaluate.py --json files (pooled)"
    )
    ap.add_argument("--dirs", nargs="+", type=Path, default=[Path("maps")])
    ap.add_argument("--training", nargs="+", required=True, help="the maps trained on")
    ap.add_argument("--only", default="", help="only the maps whose name contains this")
    ap.add_argument("--json", type=Path, help="also write the table to this file")
    args = ap.parse_args(argv)
    train_zones = [z for m in args.training for z in map_zones(load_map(m))]
    extremes = training_extremes(train_zones)
    rows, failed, done = [], [], []
    zones_of: dict[str, tuple[Track, list[dict]]] = {}  # a map's zones, once for all files
    results = [r for path in args.results for r in json.loads(path.read_text())["maps"]]
    for r in results:
        if args.only not in r["map"]:
            continue
        if r["map"] not in zones_of:
            track = resolve(r["map"], args.dirs)
            zones_of[r["map"]] = (track, map_zones(track))
        track, zones = zones_of[r["map"]]
        if r["finish_rate"] > 0:
            zone = max(zones, key=lambda z: z["drop"]) if zones else None
        else:
            zone = stop_zone(zones, r["progress"] * track.length_m)
        rows.append(row(r["map"], r, zone, extremes))
        if r["finish_rate"] > 0 or zone is None:  # finished, or stopped past the last zone
            done += zones
        if r["finish_rate"] == 0 and zone is not None:
            failed.append(zone)
            done += [z for z in zones if z["s"] < zone["s"]]
    ext = {f: round(v, 1) for f, v in extremes.items()}  # for the page's text
    contrast = {
        "zones of the training maps": summarise(train_zones),
        "zones stopped at": summarise(failed),
        "zones passed": summarise(done),
        "stops per zone met": stop_rates(failed, done, extremes["half_width"], extremes["radius"]),
    }
    print(" | ".join(COLUMNS))
    for cells in rows:
        print(" | ".join(cells))
    print(f"training extremes over {len(train_zones)} braking zones: {ext}")
    for what, figures in contrast.items():
        print(f"{what}: {figures}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        out = {"columns": COLUMNS, "rows": rows, "training_extremes": ext, "medians": contrast}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
