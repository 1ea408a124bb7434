"""Greedy races of a run's snapshots alone, as ensembles of recent snapshots, and averaged.

    python scripts/train.py map=technical trainer.max_time_s=1800 \
        'validation.maps=[procedural:201]' validation.every_s=20 validation.snapshots=true
    python scripts/snapshot_ensembles.py outputs/<run> --map technical --from-minute 20 \
        --out docs/results/snapshots/technical-seed0.json
    python scripts/snapshot_ensembles.py --table docs/results/notes/learning-34.json \
        docs/results/snapshots/technical-seed*.json

Why: a technical run's greedy races finish 50-90% of the time in its last 10 minutes, and
their rate swings between 3-minute windows by two to three times what sampling gives
(docs/learning.md, "the greedy policy churns"). Each greedy race is one draw of one weights
version's mistakes. If those mistakes are noise of the last updates, the mean Q of a few
recent versions (an ensemble in time) or their mean weights should finish more often than
any one of them; if they are what the network has learned so far, neither will.

The snapshots are validation/step_N.pt (validation.snapshots=true, one per
validation.every_s). From `--from-minute` on, each snapshot races the map once greedily
(midpoint taus: a race is a deterministic function of the weights in the sim), alone and as
every arm of ARMS over the window of snapshots that ends with it. Since the arms race the
same run's snapshots, they are compared on one training trajectory, free of the seed scatter
and of the machine's speed. `--table` sums several runs' files into a docs table.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import bench_learning

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

# name -> (how the window acts: "ensemble" (mean Q) or "average" (mean weights), members,
# snapshots between two members, the column's name in the table)
ARMS: dict[str, tuple[str, int, int, str]] = {
    "single": ("ensemble", 1, 1, "alone"),
    "ens3": ("ensemble", 3, 1, "last 3, ensemble"),
    "avg3": ("average", 3, 1, "last 3, averaged"),
    "ens5": ("ensemble", 5, 1, "last 5, ensemble"),
    "avg5": ("average", 5, 1, "last 5, averaged"),
    "ens5s2": ("ensemble", 5, 2, "5 of the last 9, ensemble"),
}


def window(i: int, members: int, spacing: int) -> list[int] | None:
    """The snapshot indices of a window ending at snapshot i, oldest first: `members` of
    them, `spacing` apart; None when the run has not made that many snapshots yet."""
    first = i - (members - 1) * spacing
    if members < 1 or spacing < 1 or first < 0:
        return None
    return list(range(first, i + 1, spacing))


def arm_figures(rows: list[dict], arm: str) -> dict | None:
    """An arm's figures over a run's rows: races, finished, the median ratio of the finished
    and the median share of the map covered; None when no row raced the arm."""
    races = [r[arm] for r in rows if arm in r]
    if not races:
        return None
    done = [x["ratio"] for x in races if x["finished"]]
    return {
        "races": len(races),
        "finished": len(done),
        "median_ratio": statistics.median(done) if done else None,
        "median_progress": statistics.median(x["progress"] for x in races),
    }


def training_rate(history: list[dict], from_s: float) -> tuple[int, int]:
    """(finished, races) of a run's own greedy races that ended from `from_s` on."""
    outcomes = bench_learning.late_outcomes(history, from_s)
    return sum(outcomes), len(outcomes)


def cell(f: dict | None) -> str:
    if f is None:
        return "-"
    ratio = "" if f["median_ratio"] is None else f", {f['median_ratio']:.3f}"
    return f"{f['finished']} of {f['races']} ({100 * f['finished'] / f['races']:.0f}%){ratio}"


def table(files: list[str]) -> dict:
    """The docs table of several runs' result files: one row per run, then the sums."""
    columns = [
        "run",
        "snapshots",
        *(label for *_, label in ARMS.values()),
        "training's greedy races",
    ]
    rows, totals = [], {a: [0, 0] for a in ARMS}
    train_total = [0, 0]
    for f in files:
        data = json.loads(Path(f).read_text())
        figs = {a: arm_figures(data["rows"], a) for a in ARMS}
        for a, fig in figs.items():
            if fig:
                totals[a][0] += fig["finished"]
                totals[a][1] += fig["races"]
        done, n = data["training"]
        train_total[0] += done
        train_total[1] += n
        rows.append(
            [
                f"{data['label']} (`{data['run_id'][:8]}`)",
                f"{len(data['rows'])} from minute {data['from_minute']:g}",
                *(cell(figs[a]) for a in ARMS),
                f"{done} of {n} ({100 * done / max(n, 1):.0f}%)",
            ]
        )

    def total(d: int, n: int) -> str:
        return f"**{d} of {n} ({100 * d / max(n, 1):.0f}%)**"

    rows.append(["all", "", *(total(*totals[a]) for a in ARMS), total(*train_total)])
    return {"columns": columns, "rows": rows}


def race(ckpt: dict, map_name: str) -> dict:
    from trackmind.evaluation import evaluate

    r = evaluate(ckpt, [map_name], races=1, video=False)[0]
    return {"finished": r["finish_rate"] > 0, "ratio": r["ratio"], "progress": r["progress"]}


def measure(run: Path, map_name: str, from_minute: float, label: str) -> dict:
    """Every arm's races from `from_minute` on; ValueError (one line) for a run without
    snapshots or summary.json, a snapshot that does not load or a map that does not,
    before the first race."""
    from trackmind.agent.weight_average import average_state_dicts
    from trackmind.env.map_cycle import loadable_cycle
    from trackmind.evaluation import load_checkpoint

    paths = sorted((run / "validation").glob("step_*.pt"))
    if not paths:
        raise ValueError(f"{run}/validation: no snapshots (train with validation.snapshots=true)")
    if not (run / "summary.json").is_file():
        raise ValueError(f"{run}: no summary.json (not a finished training run)")
    summary = json.loads((run / "summary.json").read_text())
    failed = loadable_cycle([map_name])[1]
    if failed:
        raise ValueError(f"--map {failed[0][0]}: {failed[0][1]}")
    ckpts = [load_checkpoint(str(p)) for p in paths]
    rows = []
    for i, (path, ckpt) in enumerate(zip(paths, ckpts)):
        minute = ckpt["validation"]["minute"]
        if minute < from_minute:
            continue
        row = {"snapshot": path.name, "minute": minute, "step": ckpt["validation"]["step"]}
        for arm, (kind, members, spacing, _) in ARMS.items():
            idx = window(i, members, spacing)
            if idx is None:
                continue
            weights = [ckpts[j]["network"] for j in idx]
            if kind == "average":
                row[arm] = race({**ckpt, "network": average_state_dicts(weights)}, map_name)
            else:
                row[arm] = race({**ckpt, "members": weights}, map_name)
        rows.append(row)
        print(
            json.dumps(
                {k: v.get("finished", v) if isinstance(v, dict) else v for k, v in row.items()}
            ),
            flush=True,
        )
    return {
        "label": label,
        "map": map_name,
        "from_minute": from_minute,
        "run_id": summary.get("mlflow_run_id") or run.name,
        "training": training_rate(summary["greedy_races"], from_minute * 60),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    from trackmind.cli import OneLineParser

    ap = OneLineParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", help="a run's output dir (with validation/step_*.pt)")
    ap.add_argument("--map", default="technical", help="the map every snapshot races")
    ap.add_argument("--from-minute", type=float, default=20.0, help="first snapshot raced")
    ap.add_argument("--label", default=None, help="the run's name in the table (its dir)")
    ap.add_argument("--out", help="the run's result file (JSON)")
    ap.add_argument("--table", metavar="OUT", help="write the docs table of the files to OUT")
    ap.add_argument("files", nargs="*", help="with --table: the runs' result files")
    args = ap.parse_args(argv)
    if args.table:
        files = ([args.run] if args.run else []) + args.files
        Path(args.table).write_text(json.dumps(table(files), indent=1) + "\n")
        print(f"wrote {args.table}")
        return 0
    if not args.run or not args.out:
        ap.error("give a run's output dir and --out (or --table OUT FILES)")
    try:
        result = measure(
            Path(args.run), args.map, args.from_minute, args.label or Path(args.run).name
        )
    except ValueError as e:
        ap.error(str(e))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
