"""Stable-Baselines3 on the simulator: what a gymnasium user's first run looks like.

    python scripts/train_sb3.py                      # PPO, starter map, 5 minutes
    python scripts/train_sb3.py --algo DQN --map hairpins --minutes 20

`trackmind/Race-v0` is an ordinary gymnasium env (Dict observation: the frame and the 184
floats), so SB3's MultiInputPolicy trains on it as it is. The reward's potential terms are
paid inside the step (`shaping: env`): SB3 sees only the step reward. The script ends with
one line of figures: environment steps per second, races, and the finished share and best
time of the last 20 races. Stable-Baselines3 comes with the `dev` extra.
"""

from __future__ import annotations

import sys
import time

from trackmind.cli import OneLineParser, positive_float


def make_env(map_spec: str, frame_shape: list[int]):
    import gymnasium as gym

    import trackmind.env  # noqa: F401  (registers trackmind/Race-v0)
    from trackmind.env.build import default_env_config, default_reward_config

    env = default_env_config()
    env["frame_shape"] = frame_shape
    reward = default_reward_config()
    reward["shaping"] = "env"
    reward["terms"]["speed_potential"] = {"weight": 1.0, "params": {"scale": 0.05}}
    return gym.make("trackmind/Race-v0", map=map_spec, env=env, reward=reward)


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("--algo", choices=("PPO", "DQN"), default="PPO")
    ap.add_argument("--map", default="starter", help="a map name, procedural:<seed> or a file")
    ap.add_argument("--minutes", type=positive_float(), default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from trackmind.sim.track import MapError

    try:
        env = make_env(args.map, [48, 64])
    except MapError as e:
        print(f"error: --map: {e}", file=sys.stderr)
        return 2
    races: list[dict] = []

    class Clock(BaseCallback):
        """Stops at the time budget; records every race's end."""

        def __init__(self, seconds: float) -> None:
            super().__init__()
            self.deadline = time.monotonic() + seconds

        def _on_step(self) -> bool:
            for done, info in zip(self.locals["dones"], self.locals["infos"]):
                if done:
                    races.append({"finished": info["finished"], "ms": info["race_time_ms"]})
            return time.monotonic() < self.deadline

    algo = PPO if args.algo == "PPO" else DQN
    model = algo("MultiInputPolicy", env, seed=args.seed, verbose=0)
    t0 = time.monotonic()
    model.learn(total_timesteps=10**9, callback=Clock(60.0 * args.minutes))
    wall = time.monotonic() - t0
    last = races[-20:]
    done = [r["ms"] for r in last if r["finished"]]
    best = f"{min(done) / 1000:.2f} s" if done else "-"
    print(
        f"{args.algo} on {args.map}, {wall / 60:.1f} min: {model.num_timesteps} steps "
        f"({model.num_timesteps / wall:.0f}/s), {len(races)} races, last {len(last)}: "
        f"{len(done)} finished, best {best}"
    )
    env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
