"""Choose a run's checkpoint afterwards, on held-out maps: every snapshot raced and ranked.

    python scripts/choose_checkpoint.py outputs/<run> --maps procedural:206-235 narrow:206-235
    python scripts/choose_checkpoint.py outputs/<run> --maps ... --json ranks.json --keep pick.pt
    python scripts/choose_checkpoint.py outputs/<run> --maps ... --average 5 --keep pick.pt
    python scripts/choose_checkpoint.py outputs/<run> --maps ... --average 5 --mirror

A run with `validation.snapshots=true` keeps the weights of every validation in
`<run>/validation/`; with validated.pt, best.pt and agent.pt they are the candidates. The
validation during training races a dozen maps to stay cheap, and its score jumps between
validations; here every candidate races a larger held-out set, one greedy race per map in one
batched race, and is ranked as validation ranks (maps finished, then mean share of the track,
then mean ratio; ties go to the earlier weights). Maps the run trained on are refused: a
choice made on them says nothing about maps never seen. With `--average N`, the uniform
average of every N consecutive snapshots (agent/weight_average.py) races too, named
`avgN:<its last snapshot>`; `--keep` writes the chosen weights, averaged or not, as one
checkpoint. Exit status 2 with one line for a bad run folder, checkpoint, map or N.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from trackmind.cli import OneLineParser
from trackmind.errors import ConfigError

NAMED = ("validated.pt", "best.pt", "agent.pt")


def candidates(run_dir: Path) -> list[Path]:
    """The run's snapshots in step order, then validated.pt, best.pt and agent.pt (those that
    exist); ValueError naming the folder when it holds none."""
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: not a run folder")
    found = sorted((run_dir / "validation").glob("step_*.pt"))
    found += [run_dir / n for n in NAMED if (run_dir / n).is_file()]
    if not found:
        raise ValueError(f"{run_dir}: no checkpoints (validation/step_*.pt, {', '.join(NAMED)})")
    return found


def averaged(snapshots: list[tuple[str, dict]], n: int) -> list[tuple[str, dict]]:
    """(avgN:<last name>, checkpoint) for every window of n consecutive snapshots: the mean
    weights, the last snapshot's config, step and minute (not its races, which other weights
    drove), and the names averaged."""
    from trackmind.agent.weight_average import average_state_dicts

    out = []
    for end in range(n - 1, len(snapshots)):
        window = snapshots[end - n + 1 : end + 1]
        name, last = window[-1]
        try:
            weights = average_state_dicts([c["network"] for _, c in window])
        except ValueError as e:
            raise ValueError(f"--average {n}: {window[0][0]} to {name}: {e}") from None
        record = {k: v for k, v in (last.get("validation") or {}).items() if k != "maps"}
        ckpt = {**last, "network": weights, "validation": record}
        ckpt["averaged"] = [nm for nm, _ in window]
        out.append((f"avg{n}:{name}", ckpt))
    return out


def rank(
    run_dir: Path, maps: list[str], average: int = 1, mirror: bool = False
) -> tuple[list[dict], dict]:
    """(a row per candidate: its step and minute, maps finished, mean progress, median ratio,
    per-map ratios, and `chosen` on the best by validation_score; the chosen checkpoint).
    With `mirror`, every candidate acts on the mean Q of each observation and its mirror."""
    from trackmind.env.build import make_race
    from trackmind.env.map_cycle import loadable_cycle
    from trackmind.evaluation import checkpoint_network, load_checkpoint
    from trackmind.training.factory import recorded_config
    from trackmind.training.validation import ValidationRaces, validation_score

    if average < 1:
        raise ValueError(f"--average: must be at least 1 snapshot, got {average}")
    paths = candidates(run_dir)
    loaded = [(p.name, load_checkpoint(str(p))) for p in paths]
    snapshots = [(n, c) for (n, c), p in zip(loaded, paths) if p.parent.name == "validation"]
    if average > 1:
        if len(snapshots) < average:
            raise ValueError(f"--average {average}: {run_dir} keeps {len(snapshots)} snapshots")
        loaded[len(snapshots) : len(snapshots)] = averaged(snapshots, average)
    first = loaded[0][1]
    cfg = recorded_config(first["config"])
    backend = cfg.env.get("backend", "sim")
    if backend != "sim":
        raise ValueError(f"{paths[0]}: trained on env.backend={backend}; this races the sim")
    cycle, failed = loadable_cycle(list(maps))
    if failed:
        raise ValueError(f"--maps: {failed[0][0]}: {failed[0][1]}")
    trained, _ = loadable_cycle(list(cfg.map["cycle"]))
    trained_names = {e.name for e in trained.entries} if trained is not None else set()
    seen = sorted({e.name for e in cycle.entries} & trained_names)
    if seen:
        raise ConfigError("--maps", f"{', '.join(seen)} is a training map of this run")
    race = make_race(cfg.env, cfg.reward, n_cars=1, maps=cycle.entries[0].track)
    try:
        net, network = checkpoint_network(race, cfg, first)
    finally:
        race.close()
    races = ValidationRaces(cycle.entries, cfg.env, cfg.reward, lambda: net)
    rows = []
    try:
        for name, ckpt in loaded:
            try:
                result = races.run(
                    ckpt["network"], network.n_quantiles_inference, network.greedy_cvar, mirror
                )
            except RuntimeError:
                raise ValueError(f"{name}: weights of another network than {paths[0]}") from None
            record = ckpt.get("validation") or {}
            rows.append(
                {
                    "checkpoint": name,
                    "step": record.get("step"),
                    "minute": record.get("minute"),
                    "score": validation_score(result),
                    **{k.split("/")[1]: v for k, v in result.metrics().items()},
                    "maps": dict(zip(races.names, result.ratios)),
                }
            )
    finally:
        races.close()
    best = max(range(len(rows)), key=lambda i: (rows[i]["score"], -i))
    for i, row in enumerate(rows):
        row["chosen"] = i == best
        del row["score"]
    return rows, loaded[best][1]


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__)
    ap.add_argument("run", type=Path, help="the run's output folder")
    ap.add_argument("--maps", nargs="+", required=True, help="held-out maps (ranges allowed)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows to this file")
    ap.add_argument("--keep", type=Path, default=None, help="write the chosen checkpoint here")
    ap.add_argument(
        "--average",
        type=int,
        default=1,
        metavar="N",
        help="also race the mean weights of every N consecutive snapshots",
    )
    ap.add_argument(
        "--mirror",
        action="store_true",
        help="race on the mean Q of each observation and its mirror image (evaluate.py --mirror)",
    )
    args = ap.parse_args(argv)
    try:
        rows, pick = rank(args.run, args.maps, args.average, args.mirror)
    except ValueError as e:  # MapError and ConfigError are ValueErrors too
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = len(rows[0]["maps"])
    print("| checkpoint | step | finished | progress | ratio median | chosen |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        step = "-" if r["step"] is None else str(r["step"])
        ratio = "-" if r["ratio_median"] != r["ratio_median"] else f"{r['ratio_median']:.3f}"
        print(
            f"| {r['checkpoint']} | {step} | {int(r['finished'])} of {n} | {r['progress']:.0%} "
            f"| {ratio} | {'yes' if r['chosen'] else ''} |"
        )
    chosen = next(r for r in rows if r["chosen"])
    if args.keep:
        import torch

        args.keep.parent.mkdir(parents=True, exist_ok=True)
        torch.save(pick, args.keep)
        print(f"kept {chosen['checkpoint']} as {args.keep}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        out = {"run": str(args.run), "maps": args.maps, "average": args.average}
        out.update(mirror=args.mirror, rows=rows)
        args.json.write_text(json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
