"""Wall contacts of a checkpoint's greedy race: where, and how much speed each one took.

    python scripts/wall_contacts.py outputs/<run>/agent.pt outputs/<run>/best.pt --map technical

Drives one greedy race per checkpoint (quantile midpoints, as training's greedy races; the
sim is deterministic, so one race is the race) and lists every action step that touched a
wall with the car's progress and its speed before and after the step. A large drop in one
step (40 to 15 m/s, where the brakes take about 2.4 m/s a step) is the wall used as a brake:
a corner entered too fast that the wall slows down, which works or stops the car depending
on the angle, and so turns small changes of the weights into lost races.
"""

from __future__ import annotations

import sys

import numpy as np

from trackmind.cli import OneLineParser, positive_float
from trackmind.notes import write_notes_table


def hard_hits(contacts: list[tuple[float, float, float]], min_drop: float) -> list:
    """The contacts (progress m, speed before, speed after) that took min_drop m/s or more."""
    return [c for c in contacts if c[1] - c[2] >= min_drop]


def drive(checkpoint: str, map_name: str) -> dict:
    from trackmind.evaluation import greedy_trace

    t = greedy_trace(checkpoint, map_name)
    touched = np.flatnonzero(t["wall_contact"])
    contacts = [
        (round(t["progress_m"][i]), round(t["speed_before"][i], 1), round(t["speed"][i], 1))
        for i in touched
    ]
    return {
        "finished": t["finished"],
        "time_s": t["race_time_s"],
        "end_m": round(t["end_m"]),
        "contacts": contacts,
    }


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--map", required=True)
    ap.add_argument("--labels", nargs="+", help="one label per checkpoint (default: its path)")
    ap.add_argument("--min-drop", type=positive_float(), default=10.0, help="m/s lost in one step")
    ap.add_argument("--json", help="write a notes table {columns, rows, source} here")
    args = ap.parse_args(argv)
    labels = args.labels or args.checkpoints
    if len(labels) != len(args.checkpoints):
        ap.error(f"--labels has {len(labels)} items for {len(args.checkpoints)} checkpoints")
    columns = [
        "checkpoint",
        "greedy race",
        "steps touching a wall",
        f"hits taking {args.min_drop:g} m/s or more in a step: where (m), speed before > after",
    ]
    rows = []
    for path, label in zip(args.checkpoints, labels, strict=True):
        try:
            r = drive(path, args.map)
        except ValueError as e:  # a checkpoint or map that does not load: one line
            print(f"error: {e}", file=sys.stderr)
            return 2
        race = f"finished in {r['time_s']:.2f} s" if r["finished"] else f"ended at {r['end_m']} m"
        hits = hard_hits(r["contacts"], args.min_drop)
        where = ", ".join(f"{m} m: {a:.0f} > {b:.0f}" for m, a, b in hits) or "-"
        rows.append([label, race, len(r["contacts"]), where])
        print(" | ".join(map(str, rows[-1])))
    if args.json:
        write_notes_table(args.json, columns, rows, "wall_contacts", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
