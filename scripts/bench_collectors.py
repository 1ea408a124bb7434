"""Collector throughput: transitions/s of collector=ray against collector=local.

    python scripts/bench_collectors.py                       # default settings, 3 repeats
    python scripts/bench_collectors.py --seconds 30 --repeats 5 collector.processes=2

Both backends run in this process with identical settings (the Hydra overrides given, on
top of conf/train.yaml), interleaved repeat by repeat since the machine is shared and noisy:
a pool is started, weights are published at a learner-like pace (`--publish-every-s`), and
after a warm-up (the first race in, plus `--warmup` seconds) the transitions that reach the
replay buffers through ReplayDataModule.drain (the learner's real path, n-step rule
included) are counted for `--seconds`. No learning runs, so collection is what is measured.
Ray is started once, before the first repeat; its start-up time is reported on its own.
Figures are medians; the ratio judged is the median of each repeat's ray/local ratio (the two
ran back to back, so machine drift cancels); the budget: on one machine Ray costs under 15%
(ratio >= 0.85).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from trackmind.cli import OneLineParser, float_in, int_at_least, positive_float

CONF = Path(__file__).resolve().parents[1] / "conf"
BUDGET_RATIO = 0.85


def plan(backend: str, overrides: list[str]):
    from trackmind.training.factory import plan_run

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("train", overrides=[f"collector={backend}", *overrides])
    return plan_run(cfg)


def measure(p, seconds: float, warmup: float, publish_every_s: float) -> dict:
    """Start one pool of the plan's backend, count transitions/s after the warm-up, stop it."""
    from trackmind.replay.buffers import make_buffers
    from trackmind.training.datamodule import ReplayDataModule
    from trackmind.training.factory import build_network_from
    from trackmind.training.pool import make_collector_pool
    from trackmind.training.shared import make_shared, publish_weights

    cfg, ccfg = p.cfg, p.cfg["collector"]

    def net():
        return build_network_from(cfg, p.frame_shape, p.float_dim, p.float_mean, p.float_std)

    online = net()
    shared = make_shared(net(), int(ccfg["queue_size"]))
    frame = (1, *p.frame_shape) if p.frame_shape is not None else None
    buffers = make_buffers(cfg["buffer"], frame, p.float_dim, ms_per_action=p.ms_per_action)
    dm = ReplayDataModule(buffers, shared, 32, 1.0, gamma=lambda: 0.999)
    pool = make_collector_pool(cfg, shared, int(ccfg["processes"]), int(ccfg["max_restarts"]))
    publish_weights(shared, online)
    pool.start()
    last_publish = time.monotonic()

    def step() -> None:
        nonlocal last_publish
        if time.monotonic() - last_publish >= publish_every_s:
            publish_weights(shared, online)  # what the learner does every N batches
            last_publish = time.monotonic()
        pool.check()
        dm.drain(block_s=0.02)

    try:
        t0 = time.monotonic()
        while dm.transitions_added == 0:
            step()
            if time.monotonic() - t0 > 180:
                raise RuntimeError(f"no race from collector={ccfg['backend']} in 180 s")
        first_race_s = time.monotonic() - t0
        t_warm = time.monotonic() + warmup
        while time.monotonic() < t_warm:
            step()
        n0, t1 = dm.transitions_added, time.monotonic()
        while time.monotonic() - t1 < seconds:
            step()
        rate = (dm.transitions_added - n0) / (time.monotonic() - t1)
        extra = pool.metrics() if hasattr(pool, "metrics") else {}
    finally:
        pool.stop()
    return {
        "transitions_per_s": rate,
        "first_race_s": first_race_s,
        "restarts": pool.restarts,
        "stale_dropped": extra.get("collector/stale_dropped", 0.0),
        "lost": extra.get("collector/lost", 0.0),
        "timings": dict(dm.stats.collector_timings.get(0, {})),  # collector 0's PipelineMonitor
    }


def main() -> None:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides applied to both backends")
    ap.add_argument(
        "--seconds", type=positive_float(), default=20.0, help="measured window per repeat"
    )
    ap.add_argument(
        "--warmup", type=float_in(0, 3600), default=5.0, help="seconds after the first race"
    )
    ap.add_argument("--repeats", type=int_at_least(1), default=3)
    ap.add_argument("--publish-every-s", type=positive_float(), default=0.5)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()

    import ray

    from trackmind.distributed.connect import connect_ray

    plans = {b: plan(b, args.overrides) for b in ("local", "ray")}
    t0 = time.monotonic()
    owned = connect_ray(plans["ray"].cfg["collector"])
    ray_start_s = time.monotonic() - t0
    runs: dict[str, list[dict]] = {"local": [], "ray": []}
    try:
        for r in range(args.repeats):
            for backend in ("local", "ray") if r % 2 == 0 else ("ray", "local"):
                res = measure(plans[backend], args.seconds, args.warmup, args.publish_every_s)
                runs[backend].append(res)
                print(
                    f"repeat {r + 1} {backend:5s} {res['transitions_per_s']:8.0f} transitions/s "
                    f"(first race after {res['first_race_s']:.1f} s)",
                    flush=True,
                )
    finally:
        if owned:
            ray.shutdown()
    med = {b: statistics.median(x["transitions_per_s"] for x in v) for b, v in runs.items()}
    ratio = med["ray"] / med["local"]
    # each repeat's two backends ran back to back: their ratio cancels the machine's drift
    paired = statistics.median(
        r["transitions_per_s"] / loc["transitions_per_s"]
        for r, loc in zip(runs["ray"], runs["local"], strict=True)
    )
    ccfg = plans["ray"].cfg["collector"]
    print()
    print(
        f"settings: processes={ccfg['processes']} cars_per_process={ccfg['cars_per_process']} "
        f"overrides={' '.join(args.overrides) or '(none)'}; {args.repeats} repeats of "
        f"{args.seconds:g} s; Ray started in {ray_start_s:.1f} s"
    )
    print("| backend | transitions/s (median) | repeats |")
    print("|---|---|---|")
    for b in ("local", "ray"):
        each = ", ".join(f"{x['transitions_per_s']:.0f}" for x in runs[b])
        print(f"| collector={b} | {med[b]:.0f} | {each} |")
    verdict = "within" if paired >= BUDGET_RATIO else "OVER"
    overhead = 100 * (1 - paired)
    print(f"ray / local of the medians = {ratio:.3f}")
    print(
        f"ray / local, median of the repeats' ratios = {paired:.3f} "
        f"(Ray overhead {overhead:.1f}%, {verdict} the 15% budget)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "runs": runs,
                    "median": med,
                    "ratio": ratio,
                    "paired_ratio": paired,
                    "ray_start_s": ray_start_s,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
