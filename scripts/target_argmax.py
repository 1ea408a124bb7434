"""How often the target's action at s' is the network's greedy action, by how the taus are drawn.

    python scripts/target_argmax.py outputs/<run>/agent.pt --map technical
    python scripts/target_argmax.py best.pt --map hairpins --counts 4 8 16 --repeats 32
    python scripts/target_argmax.py <run>/agent.pt --map technical \
        --json docs/results/levers/target-taus-noise.json --label "random taus, seed 2"

The IQN target bootstraps from a* = argmax_a of the mean of Z(s', tau, a) over the N' taus
it draws (network.n_quantiles_target, learner.target_taus). That mean is an estimate of Q,
and where actions are close (median action gaps of 0.003-0.005 on technical) its
noise picks another action than the true argmax. This script drives one greedy race with
the checkpoint, and at each of its states compares a* from N' random or stratified taus
(`--repeats` draws each) with the argmax of the mean over `--reference` midpoint taus (the
network's Q, as exactly as it can be read). It prints, per draw and count, the share of
draws that agree, the mean Q lost by the chosen action, and the spread over draws of the
value the target bootstraps (the mean of a*'s quantiles), beside the median action gap.
With --json the rows are also saved under --label in a table file for the docs (rows of
other labels in it are kept).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from trackmind.cli import OneLineParser, int_at_least

COLUMNS = [
    "checkpoint",
    "target taus",
    "N'",
    "a* is the greedy action",
    "mean Q lost by a*",
    "sd of the bootstrapped value",
    "median action gap",
]


def save_rows(path: Path, label: str, rows: list[list]) -> None:
    """Put `rows` (each led by `label`) in the table file at `path`, replacing that label's
    earlier rows and keeping the others."""
    kept = []
    if path.exists():
        kept = [r for r in json.loads(path.read_text())["rows"] if r[0] != label]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"columns": COLUMNS, "rows": kept + rows}, indent=1) + "\n")


def argmax_agreement(q_ref: torch.Tensor, q_draws: torch.Tensor) -> tuple[float, float]:
    """(share of draws whose argmax is q_ref's, mean Q lost by the drawn argmax) for the
    reference values q_ref (S, A) and R draws of estimates of them, q_draws (R, S, A)."""
    best = q_ref.argmax(dim=1)
    chosen = q_draws.argmax(dim=2)  # (R, S)
    agree = (chosen == best).float().mean()
    lost = q_ref.max(dim=1).values - q_ref.gather(1, chosen.t()).t()  # (R, S)
    return float(agree), float(lost.mean())


def value_spread(q_draws: torch.Tensor) -> float:
    """The noise of the bootstrapped value: the standard deviation over R draws of
    max_a q_draws (the mean over the drawn taus of a*'s quantiles), averaged over states;
    q_draws (R, S, A)."""
    return float(q_draws.max(dim=2).values.std(dim=0, unbiased=False).mean())


def action_gaps(q: torch.Tensor) -> torch.Tensor:
    """Best minus second-best action value per state (S,), from q (S, A)."""
    top = q.topk(2, dim=1).values
    return top[:, 0] - top[:, 1]


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--map", required=True, help="a map name, procedural:<seed> or a file")
    ap.add_argument("--counts", type=int_at_least(2), nargs="+", default=[4, 8, 16])
    ap.add_argument("--repeats", type=int_at_least(1), default=16, help="draws per state")
    ap.add_argument("--reference", type=int_at_least(2), default=64, help="midpoint taus")
    ap.add_argument("--max-actions", type=int_at_least(1), default=3000)
    ap.add_argument("--json", type=Path, help="also save the rows in this table file")
    ap.add_argument("--label", help="the rows' checkpoint label in --json (default: the path)")
    args = ap.parse_args(argv)
    odd = [n for n in args.counts if n % 2]
    if odd:
        ap.error(f"--counts must be even (stratified taus are mirrored), got {odd}")
    from trackmind.agent.network import TAU_DRAWS, midpoint_taus
    from trackmind.env.observations import FLOATS
    from trackmind.evaluation import checkpoint_race

    try:
        race, net, _, _ = checkpoint_race(args.checkpoint, args.map)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    torch.manual_seed(0)

    def q_mean(img, floats, taus) -> torch.Tensor:
        with torch.no_grad():
            return net(img, floats, taus).mean(dim=1)

    imgs, floats, qs = [], [], []
    obs, _ = race.reset()
    for _ in range(args.max_actions):
        img = torch.from_numpy(obs["frame"]) if "frame" in obs else None
        f = torch.from_numpy(obs[FLOATS])
        imgs.append(img)
        floats.append(f)
        qs.append(q_mean(img, f, midpoint_taus(1, args.reference)))
        a = int(qs[-1].argmax())
        obs, _, terminated, truncated, _ = race.step(np.array([a]))
        if terminated[0] or truncated[0]:
            break
    race.close()
    img = torch.cat(imgs) if imgs[0] is not None else None
    f = torch.cat(floats)
    s = f.shape[0]
    q_ref = torch.cat(qs)  # the Q the race acted on, one row per state
    gaps = action_gaps(q_ref)
    print(
        f"{s} states of one greedy race on {args.map}; action gap (best - second) median "
        f"{float(gaps.median()):.4f}, 10th percentile {float(gaps.quantile(0.1)):.4f}"
    )
    print("| target taus | N' | a* = greedy action | mean Q lost by a* | sd of a*'s mean |")
    print("|---|---|---|---|---|")
    label, gap = args.label or args.checkpoint, float(gaps.median())
    rows = []
    for n in args.counts:
        for kind, draw in TAU_DRAWS.items():
            q = torch.stack([q_mean(img, f, draw(s, n)) for _ in range(args.repeats)])
            agree, lost = argmax_agreement(q_ref, q)
            spread = value_spread(q)
            print(f"| {kind} | {n} | {agree:.1%} | {lost:.5f} | {spread:.5f} |")
            rows.append(
                [label, kind, n, f"{agree:.1%}", f"{lost:.4f}", f"{spread:.3f}", f"{gap:.4f}"]
            )
    if args.json is not None:
        save_rows(args.json, label, rows)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
