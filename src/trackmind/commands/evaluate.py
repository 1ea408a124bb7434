"""Greedy races of a trained agent on any map: race time, ratio to reference, finish rate.

    python scripts/evaluate.py outputs/<run>/agent.pt                      # its training maps
    python scripts/evaluate.py agent.pt --maps hairpins procedural:42 --races 3
    python scripts/evaluate.py agent.pt --maps starter --trace             # actions and Q
    python scripts/evaluate.py agent.pt --plot-dir outputs/eval            # plots and GIFs
    python scripts/evaluate.py agent.pt --maps a01                         # a registered map
    python scripts/evaluate.py agent.pt --taus random --races 5            # Linesight's acting
    python scripts/evaluate.py agent.pt --maps circuits/*.csv --json zero_shot.json
    python scripts/evaluate.py agent.pt --maps circuits/*.csv --mirror     # Q and its mirror's
    python scripts/evaluate.py agent.pt --hold distance_to_finish=700      # without that input
    python scripts/evaluate.py run/validation/step_*.pt --mirror           # one ensemble

The checkpoint carries the config it was trained with (network, env, reward), so the same
observations are built, in the same game: the sim, or the real game for an agent trained
with env=tminterface. Maps may be any built-in, procedural or imported map, including maps
the agent never saw, or the name of a conf/map option (its cycle's maps, with their
challenge files and reference times: how real-game maps are registered). Greedy actions use
the quantile midpoints as taus, as training's greedy races do, so in the sim a race depends
on the weights alone: best.pt repeats the race it was kept for (its time is printed beside),
and more races only differ in the real game or with `--taus random`. A bad checkpoint is one
line and exit status 2; maps that cannot be loaded are skipped, the others raced, and each
bad map ends the output with one line (exit status 2). Several checkpoints race as one
ensemble, which acts on the mean of their Q values (the snapshots of a run, or runs of
several seeds).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trackmind.cli import OneLineParser, int_at_least, name_equals_number, share
from trackmind.defaults import conf_path
from trackmind.evaluation import evaluate, load_ensemble, map_entries
from trackmind.tmi.connection import GameUnavailable

MAP_CONF = conf_path() / "map"


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__)
    ap.add_argument(
        "checkpoint", nargs="+", help="a checkpoint; several race as one ensemble (mean Q)"
    )
    ap.add_argument(
        "--maps",
        nargs="+",
        default=None,
        help="maps or conf/map options (default: the training map cycle)",
    )
    ap.add_argument("--races", type=int_at_least(1), default=1)
    ap.add_argument("--trace", action="store_true", help="print actions and Q along a race")
    ap.add_argument("--plot-dir", default=None, help="write a trajectory plot + GIF per map here")
    ap.add_argument("--no-video", action="store_true", help="with --plot-dir: no GIF")
    ap.add_argument(
        "--taus",
        choices=("midpoint", "random"),
        default="midpoint",
        help="taus of the greedy Q: fixed midpoints (as training's greedy races) or random",
    )
    ap.add_argument(
        "--cvar",
        type=share(),
        default=None,
        help="risk of the greedy Q: the mean of the lowest CVAR share of quantiles, in (0, 1] "
        "(default: the checkpoint's network.greedy_cvar, 1 = the mean)",
    )
    ap.add_argument(
        "--mirror",
        action="store_true",
        help="act on the mean Q of each observation and its mirror image (left and right "
        "swapped): a policy that takes left and right corners alike",
    )
    ap.add_argument(
        "--hold",
        type=name_equals_number,
        nargs="+",
        default=[],
        metavar="TERM=VALUE",
        help="the policy sees VALUE in place of this float term all race long (an ablation; "
        "e.g. distance_to_finish=700, its cap: the finish never near)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    args = ap.parse_args(argv)
    try:
        ckpt = load_ensemble(args.checkpoint)
        if args.maps:
            maps = map_entries(args.maps, MAP_CONF)
        else:  # the training cycle, with its challenge files and reference times
            maps = list(ckpt["config"]["map"]["cycle"])
        rows = evaluate(
            ckpt,
            maps,
            args.races,
            args.trace,
            args.plot_dir,
            not args.no_video,
            args.taus == "midpoint",
            args.cvar,
            mirror=args.mirror,
            hold=dict(args.hold),
        )
    except (ValueError, GameUnavailable) as e:  # MapError and ConfigError are ValueErrors too
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = [r for r in rows if "error" in r]
    rows = [r for r in rows if "error" not in r]
    if rows:
        print("| map | finish rate | best time | reference | ratio | progress | last end |")
        print("|---|---|---|---|---|---|---|")
    for r in rows:
        best = f"{r['best_s']:.2f} s" if r["best_s"] else "-"
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
        print(
            f"| {r['map']} | {r['finish_rate']:.2f} | {best} | {r['reference_s']:.2f} s | "
            f"{ratio} | {r['progress']:.0%} | {', '.join(r['end'])} |"
        )
    if args.json:
        write_rows(args.json, " ".join(args.checkpoint), rows, failed)
    kept = ckpt.get("race") if len(args.checkpoint) == 1 else None  # not an ensemble's
    if isinstance(kept, dict) and kept.get("race_time_ms"):  # best.pt: the race it was kept for
        exact = "" if kept.get("exact", True) else "; later weights, that version was gone"
        print(
            f"kept for a greedy race on {kept['map']} in training: "
            f"{kept['race_time_ms'] / 1000:.2f} s (weights version {kept.get('version')}{exact})"
        )
    for r in failed:  # every map that could be raced was; these could not be loaded
        print(f"error: map {r['map']}: {r['error']}", file=sys.stderr)
    return 2 if failed else 0


def write_rows(path: Path, checkpoint: str, rows: list[dict], failed: list[dict]) -> None:
    """The evaluation as a result file: per map its finish rate, best time, ratio, progress
    and how its last race ended (scripts/make_docs.py tables it)."""
    keys = ("map", "finish_rate", "best_s", "reference_s", "ratio", "progress", "end")
    out = {
        "checkpoint": str(checkpoint),
        "maps": [{k: r.get(k) for k in keys} for r in rows],
        "errors": [{"map": r["map"], "error": str(r["error"])} for r in failed],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=float) + "\n")


if __name__ == "__main__":
    sys.exit(main())
