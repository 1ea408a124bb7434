"""Value audit: the network's Q against the returns its policy really gets, in the sim.

    python scripts/value_audit.py outputs/<run>/agent.pt --map hairpins --from-m 30 --to-m 100
    python scripts/value_audit.py best.pt --map technical --from-m 0 --to-m 400 --every 8

Drives one greedy race (quantile midpoints, as training's greedy races) and, at states
between --from-m and --to-m metres of progress, saves the car and plays the alternatives
from there for one mini-race (the horizon the network's Q is about): the greedy policy
itself, and braking for k actions then greedy. Each printed row compares the network's Q
(plus the state's shaping potential, which its Q leaves out) with those true returns. A Q
far above the greedy return means the network overestimates what its own policy does (the
crash ahead looks harmless); a braking return above the greedy one means the policy brakes
too late. The sim is deterministic, so one rollout per alternative is exact.
"""

from __future__ import annotations

import sys

import numpy as np

from trackmind.cli import OneLineParser, float_in, int_at_least
from trackmind.evaluation import checkpoint_race, observation_q

BRAKE = 6  # game/actions.py: brake


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--map", required=True, help="a map name, procedural:<seed> or a file")
    ap.add_argument("--from-m", type=float_in(0, 1e6), default=0.0)
    ap.add_argument("--to-m", type=float_in(0, 1e6), default=200.0)
    ap.add_argument("--every", type=int_at_least(1), default=4, help="audit every N-th action")
    ap.add_argument("--brake", type=int_at_least(1), nargs="+", default=[4, 8, 12, 16])
    args = ap.parse_args(argv)
    if args.from_m >= args.to_m:
        ap.error(f"--from-m ({args.from_m:g}) must be below --to-m ({args.to_m:g})")
    from trackmind.replay.config import BufferConfig

    try:
        race, net, network, cfg = checkpoint_race(args.checkpoint, args.map)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    k = network.n_quantiles_inference
    horizon = BufferConfig.from_dict(cfg.buffer).horizon_actions(race.action_ms)

    def q_of(obs) -> np.ndarray:
        return observation_q(net, obs, k)[0]

    def mini_race_return(state, plan: list[int]) -> tuple[float, float]:
        obs, _ = race.restore([0], [state])
        total = 0.0
        for i in range(horizon):
            a = plan[i] if i < len(plan) else int(q_of(obs).argmax())
            obs, r, *_ = race.step(np.array([a]))
            total += float(r[0])
            if race.car.finished[0]:
                break
        return total, float(race.car.progress_m[0])

    obs, _ = race.reset()
    audited = []
    for step in range(20_000):
        progress = float(race.car.progress_m[0])
        q = q_of(obs)
        if args.from_m <= progress <= args.to_m and step % args.every == 0:
            phi = float(sum(v[0] for v in race.potentials().values()))
            audited.append((progress, float(race.car.speed[0]), race.game.save_state(0), q, phi))
        obs, _, terminated, truncated, _ = race.step(np.array([int(q.argmax())]))
        if terminated[0] or truncated[0] or race.car.progress_m[0] > args.to_m:
            break
    plans = [("greedy", [])] + [(f"brake {n}", [BRAKE] * n) for n in args.brake]
    head = " | ".join(f"{name} (end m)" for name, _ in plans)
    print(f"| progress m | speed m/s | network Q + Phi | {head} |")
    print("|---" * (3 + len(plans)) + "|")
    gaps = []
    for progress, speed, state, q, phi in audited:
        outcomes = [mini_race_return(state, plan) for _, plan in plans]
        cells = " | ".join(f"{ret:+.2f} ({end:.0f})" for ret, end in outcomes)
        print(f"| {progress:.0f} | {speed:.1f} | {q.max() + phi:+.2f} | {cells} |")
        gaps.append(q.max() + phi - outcomes[0][0])
    if gaps:
        print(
            f"network Q minus the greedy return: mean {np.mean(gaps):+.2f}, "
            f"max {np.max(gaps):+.2f} over {len(gaps)} states"
        )
    race.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
