"""What storing a race costs the learner's process: reading its spool file, then the n-step
rule and the copy into the replay buffers, per transition.

    python scripts/bench_intake.py                       # 1x120x160 frames, host buffers
    python scripts/bench_intake.py --device cuda         # frames stored on the GPU
    python scripts/bench_intake.py --rate 3616           # its share of one interpreter

Why: on a GPU the learner's process runs three Python threads (the learner's, the batch
prefetch and the race intake) on one interpreter. This says how much of it the intake takes
at a given rate of new transitions (docs/gpu.md). Each figure is the median of the repeats.
"""

from __future__ import annotations

import pickle
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_learner import FLOAT_DIM, synthetic_race

from trackmind.cli import OneLineParser, int_at_least
from trackmind.collectors.shared_handles import read_spool
from trackmind.replay.buffers import make_buffers

N_ACTIONS = 12  # the simulator's action set


def time_intake(
    races: int, actions: int, shape: tuple[int, ...], device: str, spool: Path
) -> tuple[float, float]:
    """(read, store) seconds per transition for `races` races of `actions` actions."""
    rng = np.random.default_rng(0)
    buffers = make_buffers(
        {"capacity_schedule": [[0, 50_000]], "learning_starts": 1},
        shape,
        FLOAT_DIM,  # bench_learner's synthetic races
        seed=0,
        device=device,
    )
    paths = []
    for i in range(races):  # written as write_spool writes them
        path = spool / f"race-{i}.pkl"
        path.write_bytes(pickle.dumps(synthetic_race(rng, actions, shape, N_ACTIONS), protocol=5))
        paths.append(str(path))
    t0 = time.perf_counter()
    loaded = [read_spool(p) for p in paths]
    t1 = time.perf_counter()
    for race in loaded:
        buffers.add_rollout(race, 0.99)
    if device == "cuda":
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    n = races * actions
    return (t1 - t0) / n, (t2 - t1) / n


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actions", type=int_at_least(1), default=400, help="actions per race")
    ap.add_argument("--races", type=int_at_least(1), default=20, help="races per repeat")
    ap.add_argument("--repeats", type=int_at_least(1), default=5)
    ap.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where the replay frames live"
    )
    ap.add_argument("--frame", type=int, nargs=3, default=(1, 120, 160), help="C H W")
    ap.add_argument("--rate", type=float, default=None, help="new transitions a second")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device: cuda, but torch sees no CUDA device here")
    torch.set_num_threads(1)
    reads, stores = [], []
    with tempfile.TemporaryDirectory(prefix="trackmind-intake-") as tmp:
        for _ in range(args.repeats):
            r, s = time_intake(args.races, args.actions, tuple(args.frame), args.device, Path(tmp))
            reads.append(r)
            stores.append(s)
    read_us, store_us = 1e6 * statistics.median(reads), 1e6 * statistics.median(stores)
    frame = "x".join(map(str, args.frame))
    print(f"races of {args.actions} actions, {frame} frames on {args.device}, per transition:")
    print(f"  read (spool file, unpickle): {read_us:.1f} us")
    print(f"  store (n-step rule, buffers): {store_us:.1f} us")
    if args.rate:
        share = args.rate * (read_us + store_us) / 1e6
        print(f"  at {args.rate:,.0f} transitions/s: {share:.1%} of one interpreter")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
