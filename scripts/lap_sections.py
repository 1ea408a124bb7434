"""Where a greedy race loses its time to the reference lap, braking zone by braking zone.

    python scripts/lap_sections.py outputs/<run>/agent.pt outputs/<run>/best.pt --map technical

The reference lap (trackmind.sim.reference) is the limit speed profile of the simulated car on
its racing line. Its braking zones (local minima of the limit speed, scripts/failure_points.py)
cut the lap into sections, each ending at a zone's minimum; the last ends at the finish. For
each checkpoint's greedy race (one race: the sim is deterministic) a section gives the car's top
speed in it and its lowest speed at the corner, beside the profile's, and the seconds the car
lost to the profile there: the difference of the two clocks where each crosses the section's
end, less that difference at its start; and how its steps there used the pedals (throttle,
coast: neither pedal, brake: the brake pressed, with or without throttle). A slow corner
shows as a low corner speed; a straight driven below the profile's speed as a low top speed,
coasting or braking early as those steps before a corner entered at the profile's speed.
"""

from __future__ import annotations

import sys

import numpy as np
from failure_points import CORNER_M, map_zones

from trackmind.cli import OneLineParser
from trackmind.game.actions import ACTION_NAMES
from trackmind.notes import write_notes_table


def reference_clock(s: np.ndarray, line: np.ndarray, speed: np.ndarray) -> np.ndarray:
    """Seconds from the start of the profile to each of its points (the mean speed of each
    step, as trackmind.sim.reference.profile_time)."""
    ds = np.linalg.norm(np.diff(line, axis=0), axis=1)
    vm = np.maximum(0.5 * (speed[:-1] + speed[1:]), 1e-6)
    return np.concatenate([[0.0], np.cumsum(ds / vm)])


def crossing_times(progress: np.ndarray, clock: np.ndarray, marks: np.ndarray) -> np.ndarray:
    """The clock when the progress first reaches each mark, linear between the two samples
    either side of it (the first sample's clock for a mark at or before it); NaN for a mark
    never reached. A car that went back and forth is timed at its first crossing."""
    out = np.full(len(marks), np.nan)
    ahead = np.maximum.accumulate(progress)
    for j, m in enumerate(marks):
        i = int(np.searchsorted(ahead, m, side="left"))
        if i >= len(progress):
            continue
        if i == 0 or progress[i] == progress[i - 1]:
            out[j] = clock[i]
            continue
        f = (m - progress[i - 1]) / (progress[i] - progress[i - 1])
        out[j] = clock[i - 1] + f * (clock[i] - clock[i - 1])
    return out


def section_losses(car_at: np.ndarray, ref_at: np.ndarray) -> np.ndarray:
    """Seconds lost in each section: the car's time over its two ends less the profile's.
    car_at and ref_at are both clocks at the start and the section ends (n + 1 marks)."""
    return np.diff(car_at - ref_at)


def span_speeds(
    progress: np.ndarray, speed: np.ndarray, lo: float, hi: float, corner: float
) -> tuple[float, float]:
    """(top speed between lo and hi, lowest speed within CORNER_M of corner): NaN where the
    race has no sample there."""
    top = speed[(progress >= lo) & (progress <= hi)]
    low = speed[np.abs(progress - corner) <= CORNER_M]
    return (float(top.max()) if top.size else np.nan, float(low.min()) if low.size else np.nan)


def pedal_counts(actions: np.ndarray) -> tuple[int, int, int]:
    """(throttle, coast, brake) steps among these actions: brake if the brake is pressed (with
    or without throttle), throttle if only the throttle, coast if neither."""
    names = [ACTION_NAMES[a] for a in actions]
    brake = sum("brake" in n for n in names)
    throttle = sum("accel" in n and "brake" not in n for n in names)
    return throttle, len(names) - throttle - brake, brake


def sections(zones: list[dict], length_m: float) -> np.ndarray:
    """The section marks: the start (0), each zone's minimum, the finish."""
    return np.array([0.0] + [z["s"] for z in zones] + [length_m])


def main(argv: list[str] | None = None) -> int:
    from trackmind.evaluation import greedy_trace
    from trackmind.sim.mapio import load_map
    from trackmind.sim.reference import reference_lap

    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--map", required=True, help="a built-in, procedural or imported map")
    ap.add_argument("--labels", nargs="+", help="one label per checkpoint (default: its path)")
    ap.add_argument("--json", help="write a notes table {columns, rows, source} here")
    args = ap.parse_args(argv)
    labels = args.labels or args.checkpoints
    if len(labels) != len(args.checkpoints):
        ap.error(f"--labels has {len(labels)} items for {len(args.checkpoints)} checkpoints")
    try:
        track = load_map(args.map)
    except (ValueError, OSError) as e:
        print(f"error: map {args.map}: {e}", file=sys.stderr)
        return 2
    lap = reference_lap(track)
    ref_s = lap.s - track.start_s
    ref_clock = reference_clock(ref_s, lap.line, lap.speed)
    zones = map_zones(track)
    marks = sections(zones, track.length_m)
    ref_at = np.interp(marks, ref_s, ref_clock)
    ref_losses = np.diff(ref_at)
    columns = ["section, to (m)", "reference: s, top > corner m/s"]
    try:
        traces = [greedy_trace(path, args.map) for path in args.checkpoints]
    except ValueError as e:  # a checkpoint that does not load: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    for label, t in zip(labels, traces, strict=True):
        race = f"{t['race_time_s']:.2f} s" if t["finished"] else f"ended at {t['end_m']:.0f} m"
        columns.append(f"{label} ({race}): lost s, top > corner m/s, throttle/coast/brake steps")
    car_at = [crossing_times(t["progress_m"], t["time_s"], marks) for t in traces]
    losses = [section_losses(c, ref_at) for c in car_at]
    rows = []
    for k in range(len(marks) - 1):
        lo, hi = marks[k], marks[k + 1]
        name = f"zone {k + 1}, {hi:.0f}" if k < len(zones) else f"finish, {hi:.0f}"
        top_ref, low_ref = span_speeds(ref_s, lap.speed, lo, hi, hi)
        row = [name, f"{ref_losses[k]:.2f}, {top_ref:.0f} > {low_ref:.0f}"]
        for t, lost in zip(traces, losses, strict=True):
            if np.isnan(lost[k]):
                row.append("-")
                continue
            top, low = span_speeds(t["progress_m"], t["speed"], lo, hi, hi)
            inside = (t["progress_m"] > lo) & (t["progress_m"] <= hi)
            pedals = "/".join(map(str, pedal_counts(t["action"][inside])))
            row.append(f"{lost[k]:+.2f}, {top:.0f} > {low:.0f}, {pedals}")
        rows.append(row)
    total = ["lap", f"{ref_at[-1]:.2f}"]
    total += [f"{lost[~np.isnan(lost)].sum():+.2f}" for lost in losses]
    rows.append(total)
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(row))
    if args.json:
        write_notes_table(args.json, columns, rows, "lap_sections", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
