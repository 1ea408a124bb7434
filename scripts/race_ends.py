"""Where the greedy races of training runs end: the braking zone each unfinished race stopped at.

    python scripts/race_ends.py --map technical --runs 67395d45 1f2aed05 f657e83a \
        --labels defaults defaults defaults --json docs/results/notes/learning-12.json

Reads every greedy race of each MLflow run (its summary.json artifact, as the learning
benchmark does), keeps those of the last --last-min minutes, and assigns each race that did
not finish to the braking zone of the map's reference lap it stopped at (failure_points.py:
the first zone whose slowest point lies ahead, or a few metres behind). Zones that hold at
least --min-share of all the stops get a column each, the rest are summed. A map whose
stops crowd into a few zones fails at corners, not at random; what is done there (too fast,
into the wall) is the next question (scripts/value_audit.py, scripts/wall_contacts.py).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import bench_learning
import failure_points

from trackmind.cli import OneLineParser, positive_float, share
from trackmind.notes import write_notes_table

ROOT = Path(__file__).resolve().parents[1]


def stopped_at(shares: Sequence[float], zones: list[dict], length_m: float) -> list:
    """The zone (its "s" in metres, None: past the last zone) of each unfinished race, from
    the share of the map it covered (failure_points.stop_zone)."""
    stops = (failure_points.stop_zone(zones, share * length_m) for share in shares)
    return [None if z is None else round(z["s"]) for z in stops]


def crowded_zones(counts: Sequence[Counter], min_share: float) -> list:
    """The zones holding at least min_share of all the stops, in map order (None last)."""
    total = Counter()
    for c in counts:
        total.update(c)
    n = sum(total.values())
    keep = [z for z, k in total.items() if n and k / n >= min_share]
    return sorted(keep, key=lambda z: (z is None, z or 0))


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("--map", required=True, help="the runs' map (a built-in name or file)")
    ap.add_argument("--runs", nargs="+", required=True, help="MLflow run ids or their prefixes")
    ap.add_argument("--labels", nargs="+", help="one label per run (default: none)")
    ap.add_argument("--tracking-uri", default=f"sqlite:///{ROOT / 'outputs' / 'mlflow.db'}")
    ap.add_argument("--last-min", type=positive_float(), default=10.0)
    ap.add_argument("--min-share", type=share(), default=0.1)
    ap.add_argument("--json", help="write a notes table {columns, rows, source} here")
    args = ap.parse_args(argv)
    labels = args.labels or [""] * len(args.runs)
    if len(labels) != len(args.runs):
        ap.error(f"--labels has {len(labels)} items for {len(args.runs)} --runs")
    from mlflow.tracking import MlflowClient

    from trackmind.sim.mapio import load_map

    try:
        track = load_map(args.map)
    except (ValueError, OSError) as e:  # ConfigError is a ValueError
        print(f"error: --map {args.map}: {e}", file=sys.stderr)
        return 2
    zones = failure_points.map_zones(track)
    client = MlflowClient(tracking_uri=args.tracking_uri)
    known = {
        r.info.run_id: r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id], max_results=50_000)
    }
    results = []
    for prefix, label in zip(args.runs, labels, strict=True):
        ids = [i for i in known if i.startswith(prefix)]
        if len(ids) != 1:
            print(f"error: --runs {prefix}: {len(ids)} MLflow runs match", file=sys.stderr)
            return 2
        races = bench_learning.greedy_history(ids[0], args.tracking_uri)
        end_s = max(r["wall_s"] for r in races)
        late = bench_learning.late_races(races, end_s - 60 * args.last_min)
        shares = [r["progress"] or 0.0 for r in late if r["time_ms"] is None]
        stops = Counter(stopped_at(shares, zones, track.length_m))
        results.append((ids[0][:8], label, len(late), len(late) - len(shares), stops))
    cols = crowded_zones([r[4] for r in results], args.min_share)
    by_s = {round(z["s"]): z for z in zones}

    def head(z) -> str:
        if z is None:
            return "after the last braking zone"
        zone = by_s[z]
        return (
            f"zone at {z} m ({z / track.length_m:.0%}): {zone['start_speed']:.0f} to "
            f"{zone['corner_speed']:.0f} m/s, radius {zone['radius']:.0f} m"
        )

    columns = ["run", "arm", "greedy races", "finished"] + [head(z) for z in cols] + ["elsewhere"]
    rows = []
    for run, label, n, done, stops in results:
        counted = [stops.get(z, 0) for z in cols]
        rows.append(
            [
                run,
                label,
                n,
                f"{done / n:.0%}" if n else "-",
                *counted,
                sum(stops.values()) - sum(counted),
            ]
        )
    print(" | ".join(columns))
    for r in rows:
        print(" | ".join(map(str, r)))
    if args.json:
        write_notes_table(args.json, columns, rows, "race_ends", argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
