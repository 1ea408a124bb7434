"""Simulator throughput: car-steps/s (physics + frame + car state) per core.

    python scripts/bench_env.py                 # full table, CarRacing-v3 beside it if present
    python scripts/bench_env.py --quick         # fewer repeats

One car-step = one 50 ms action (5 physics ticks), the frame rendered and the car state
built, as the environment layer consumes it. The table runs the compiled kernels on one
thread, so its figures are per core; `--threads 1 2` adds 120x160 batch-64 rows with the
frames rendered by that many threads (SimGame's render_threads). gymnasium's CarRacing-v3
(box2d, `pip install -e .[bench]`) runs in the same process for a side-by-side ratio. Each
figure is the median of several repeats.
"""

from __future__ import annotations

import os
import statistics
import time

from trackmind.cli import OneLineParser, int_at_least

os.environ.setdefault("NUMBA_NUM_THREADS", str(os.cpu_count() or 1))

import numpy as np  # noqa: E402

from trackmind.game.contract import TICKS_PER_ACTION  # noqa: E402
from trackmind.sim.game import SimGame  # noqa: E402
from trackmind.sim.maps import builtin_names  # noqa: E402


def bench_sim(
    batch: int, shape, steps: int, repeats: int, seed: int = 0, threads: int = 1
) -> float:
    names = builtin_names()
    maps = [names[i % len(names)] for i in range(batch)]
    game = SimGame(batch, maps=maps, frame_shape=shape, render_threads=threads)
    rng = np.random.default_rng(seed)
    acts = rng.integers(0, 12, size=(steps, batch))
    acts[:, :] = np.where(rng.random((steps, batch)) < 0.6, 0, acts)  # mostly accelerate
    game.step(acts[0])  # compile / warm up
    rates = []
    for _ in range(repeats):
        game.reset()
        t0 = time.perf_counter()
        for k in range(steps):
            game.step(acts[k])
        rates.append(batch * steps / (time.perf_counter() - t0))
    return statistics.median(rates)


def bench_managers(batch: int, shape, steps: int, repeats: int) -> tuple[float, float]:
    """Median time per step of the game inside a VecRace step, and of the whole VecRace step.

    The game's own step is timed inside the same VecRace steps (a wrapper around it), so
    the difference is what the managers add (184 float features, frame, reward and
    termination terms), free of the drift between separate runs on a noisy machine.
    """
    from trackmind.env.build import default_env_config, make_race

    env = default_env_config()
    env["frame_shape"] = list(shape)
    env["ticks_per_action"] = TICKS_PER_ACTION  # the game's own step, as the SimGame rows
    race = make_race(env, n_cars=batch, maps="starter")
    rng = np.random.default_rng(0)
    acts = np.where(rng.random((steps, batch)) < 0.7, 0, rng.integers(0, 12, (steps, batch)))
    game_step = race.game.step
    spent = [0.0]

    def timed_step(a):
        t = time.perf_counter()
        out = game_step(a)
        spent[0] += time.perf_counter() - t
        return out

    race.game.step = timed_step
    game, whole = [], []
    for _ in range(repeats):
        race.reset()
        spent[0] = 0.0
        t0 = time.perf_counter()
        for k in range(steps):
            race.step(acts[k])
        whole.append((time.perf_counter() - t0) / steps)
        game.append(spent[0] / steps)
    return statistics.median(game), statistics.median(whole)


def bench_car_racing(steps: int, repeats: int) -> float | None:
    try:
        import gymnasium as gym

        env = gym.make("CarRacing-v3", continuous=False)
    except Exception as e:  # box2d missing: the optional extra is not installed
        print(f"CarRacing-v3 unavailable ({type(e).__name__}: {e}); install .[bench]")
        return None
    rng = np.random.default_rng(0)
    rates = []
    env.reset(seed=0)
    for _ in range(repeats):
        env.reset(seed=0)
        t0 = time.perf_counter()
        for _ in range(steps):
            _, _, term, trunc, _ = env.step(int(rng.integers(0, 5)))
            if term or trunc:
                env.reset()
        rates.append(steps / (time.perf_counter() - t0))
    env.close()
    return statistics.median(rates)


def main() -> None:
    ap = OneLineParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batches", type=int_at_least(1), nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--threads", type=int_at_least(1), nargs="+", default=[])
    args = ap.parse_args()
    repeats = 3 if args.quick else 5
    shapes = [(120, 160), (48, 64)]
    table: dict = {}
    for shape in shapes:
        for b in args.batches:
            steps = max(20, 4000 // b)
            table[(shape, b)] = bench_sim(b, shape, steps, repeats)
    no_frame = bench_sim(64, None, 200, repeats)
    by_threads = {n: bench_sim(64, (120, 160), 60, repeats, threads=n) for n in args.threads}
    bare, managed = bench_managers(64, (120, 160), 100, repeats + 2)
    cr = bench_car_racing(300 if args.quick else 600, repeats)
    print(f"\ncar-steps/s per core (median of {repeats} repeats)")
    print("| frame | " + " | ".join(f"batch {b}" for b in args.batches) + " |")
    print("|---|" + "---|" * len(args.batches))
    for shape in shapes:
        cells = " | ".join(f"{table[(shape, b)]:,.0f}" for b in args.batches)
        print(f"| {shape[0]}x{shape[1]} | {cells} |")
    print(f"| no frame | batch 64: {no_frame:,.0f} |")
    for n, rate in by_threads.items():
        print(f"120x160 batch 64, frames on {n} thread(s): {rate:,.0f} car-steps/s")
    print(
        f"\nmanagers (obs + reward + termination) at 120x160 batch 64: game step "
        f"{bare * 1e3:.2f} ms, VecRace step {managed * 1e3:.2f} ms, "
        f"overhead {100 * (managed / bare - 1):.1f}%"
    )
    if cr is not None:
        ref = table.get(((120, 160), 64))
        print(f"\nCarRacing-v3 (96x96 RGB, box2d): {cr:,.0f} steps/s")
        if ref:
            print(f"trackmind 120x160 batch 64 / CarRacing-v3 = {ref / cr:.1f}x")


if __name__ == "__main__":
    main()
