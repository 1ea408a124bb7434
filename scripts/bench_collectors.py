"""Collector throughput: transitions/s of collector=ray against collector=local.

    python scripts/bench_collectors.py                       # default settings, 3 repeats
    python scripts/bench_collectors.py --seconds 30 --repeats 5 collector.processes=2
    python scripts/bench_collectors.py --backends local --json cap.json collector.device=cuda \
        collector.processes=12 collector.cars_per_process=32 network=iqn_linesight \
        env.ticks_per_action=5                               # one backend's capacity alone

Both backends run in this process with identical settings (the Hydra overrides given, on
top of conf/train.yaml), interleaved repeat by repeat since the machine is shared and noisy:
a pool is started, weights are published at a learner-like pace (`--publish-every-s`), and
after a warm-up (the first race in, plus `--warmup` seconds) the transitions that reach the
replay buffers through ReplayDataModule.drain (the learner's real path, n-step rule
included) are counted for `--seconds`. No learning runs, so collection is what is measured.
Ray is started once, before the first repeat; its start-up time is reported on its own.
Figures are medians; the ratio judged is the median of each repeat's ray/local ratio (the two
ran back to back, so machine drift cancels); the budget: on one machine Ray costs under 15%
(ratio >= 0.85). `--backends local` (or ray) measures one backend alone, with no comparison.

Where a collector's time goes comes from the collectors' own PipelineMonitor reports
(CollectorStats, every ~5 s from each collector, also logged by training runs as
collector/<i>/<stage>_ms_per_action): the medians over the reports received after the first
race of the "game_step" and "inference" stages, in ms per car-action. The shared network is
made where the collectors infer (collector.device), as a training run makes it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from trackmind.cli import OneLineParser, float_in, int_at_least, positive_float

CONF = Path(__file__).resolve().parents[1] / "conf"
BUDGET_RATIO = 0.85
BACKENDS = ("local", "ray")
STAGES = ("game_step", "inference")  # PipelineMonitor stages reported per car-action
STATS_WAIT_S = 12.0  # after the window, how long to wait for a first collector report


def backends_arg(text: str) -> list[str]:
    """An argparse type: backends separated by commas (local, ray), each once."""
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x not in BACKENDS]
    if not names or bad or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected local, ray or local,ray, got {text!r}")
    return names


def stage_medians(reports: list[dict]) -> dict[str, float | None]:
    """Median ms per car-action of each stage over the collectors' reports (None: no report
    named it)."""
    out: dict[str, float | None] = {}
    for stage in STAGES:
        vals = [r[f"{stage}_ms_per_action"] for r in reports if f"{stage}_ms_per_action" in r]
        out[f"{stage}_ms_per_action"] = statistics.median(vals) if vals else None
    return out


def plan(backend: str, overrides: list[str]):
    from trackmind.training.factory import plan_run

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("train", overrides=[f"collector={backend}", *overrides])
    return plan_run(cfg)


def measure(p, seconds: float, warmup: float, publish_every_s: float) -> dict:
    """Start one pool of the plan's backend, count transitions/s after the warm-up, stop it."""
    from trackmind.collectors.protocol import make_collector_pool
    from trackmind.collectors.shared_handles import make_shared, publish_weights, shared_device
    from trackmind.replay.buffers import make_buffers
    from trackmind.training.datamodule import ReplayDataModule

    col = p.collector
    device = shared_device(col, torch.cuda.is_available())  # as a training run places it
    online = p.new_network().to(device)  # a GPU learner publishes device to device
    shared = make_shared(p.new_network(), col.queue_size, device)
    frame = (1, *p.frame_shape) if p.frame_shape is not None else None
    buffers = make_buffers(p.buffer, frame, p.float_dim, ms_per_action=p.ms_per_action)
    dm = ReplayDataModule(buffers, shared, 32, 1.0, gamma=lambda: 0.999)
    pool = make_collector_pool(p.collectors, shared, col.processes, col.max_restarts)
    publish_weights(shared, online)
    pool.start()
    last_publish = time.monotonic()
    reports: list[dict] = []  # the collectors' PipelineMonitor summaries, once the races flow
    seen: dict[int, dict] = {}  # collector -> the report last taken

    def step() -> None:
        nonlocal last_publish
        if time.monotonic() - last_publish >= publish_every_s:
            publish_weights(shared, online)  # what the learner does every N batches
            last_publish = time.monotonic()
        pool.check()
        dm.drain(block_s=0.02)
        for idx, timings in dm.stats.collector_timings.items():  # each report is a new dict
            if seen.get(idx) is not timings:
                seen[idx] = timings
                if dm.transitions_added > 0:
                    reports.append(dict(timings))

    try:
        t0 = time.monotonic()
        while dm.transitions_added == 0:
            step()
            if time.monotonic() - t0 > 180:
                raise RuntimeError(f"no race from collector={col.backend} in 180 s")
        first_race_s = time.monotonic() - t0
        t_warm = time.monotonic() + warmup
        while time.monotonic() < t_warm:
            step()
        n0, t1 = dm.transitions_added, time.monotonic()
        while time.monotonic() - t1 < seconds:
            step()
        rate = (dm.transitions_added - n0) / (time.monotonic() - t1)
        extra = pool.metrics() if hasattr(pool, "metrics") else {}
        t2 = time.monotonic()  # a short window may end before the first report (every ~5 s)
        while not reports and time.monotonic() - t2 < STATS_WAIT_S:
            step()
    finally:
        pool.stop()
    return {
        "transitions_per_s": rate,
        "first_race_s": first_race_s,
        "restarts": pool.restarts,
        "stale_dropped": extra.get("collector/stale_dropped", 0.0),
        "lost": extra.get("collector/lost", 0.0),
        "timings": dict(dm.stats.collector_timings.get(0, {})),  # collector 0's PipelineMonitor
        "device": col.device,
        "shared_device": str(device),
        "reports": len(reports),
        **stage_medians(reports),
    }


def fmt_ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def report_line(res: dict) -> str:
    """A repeat's figures in one line."""
    return (
        f"{res['transitions_per_s']:8.0f} transitions/s (first race after "
        f"{res['first_race_s']:.1f} s); ms per car-action: game step "
        f"{fmt_ms(res['game_step_ms_per_action'])}, inference "
        f"{fmt_ms(res['inference_ms_per_action'])} ({res['reports']} collector reports)"
    )


def summary(runs: list[dict]) -> dict:
    """Medians over the repeats of one backend."""
    out: dict = {"transitions_per_s": statistics.median(x["transitions_per_s"] for x in runs)}
    for stage in STAGES:
        vals = [x[f"{stage}_ms_per_action"] for x in runs]
        vals = [v for v in vals if v is not None]
        out[f"{stage}_ms_per_action"] = statistics.median(vals) if vals else None
    return out


def main() -> None:
    ap = OneLineParser(description=__doc__.split("\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides applied to every backend")
    ap.add_argument(
        "--seconds", type=positive_float(), default=20.0, help="measured window per repeat"
    )
    ap.add_argument(
        "--warmup", type=float_in(0, 3600), default=5.0, help="seconds after the first race"
    )
    ap.add_argument("--repeats", type=int_at_least(1), default=3)
    ap.add_argument("--publish-every-s", type=positive_float(), default=0.5)
    ap.add_argument(
        "--backends",
        type=backends_arg,
        default=list(BACKENDS),
        help="local,ray (default: ray against local) or one of them alone",
    )
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args = ap.parse_args()

    from trackmind.errors import ConfigError

    try:
        plans = {b: plan(b, args.overrides) for b in args.backends}
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    owned, ray_start_s = False, None
    if "ray" in plans:
        from trackmind.collectors.fleet.connect import connect_ray

        t0 = time.monotonic()
        owned = connect_ray(plans["ray"].collector)
        ray_start_s = time.monotonic() - t0
    runs: dict[str, list[dict]] = {b: [] for b in args.backends}
    try:
        for r in range(args.repeats):
            order = args.backends if r % 2 == 0 else args.backends[::-1]
            for backend in order:
                res = measure(plans[backend], args.seconds, args.warmup, args.publish_every_s)
                runs[backend].append(res)
                print(f"repeat {r + 1} {backend:5s} {report_line(res)}", flush=True)
    finally:
        if owned:
            import ray

            ray.shutdown()
    med = {b: summary(v) for b, v in runs.items()}
    col = plans[args.backends[0]].collector
    print()
    started = f"; Ray started in {ray_start_s:.1f} s" if ray_start_s is not None else ""
    print(
        f"settings: processes={col.processes} cars_per_process={col.cars_per_process} "
        f"device={col.device} (shared network on "
        f"{runs[args.backends[0]][0]['shared_device']}) "
        f"overrides={' '.join(args.overrides) or '(none)'}; {args.repeats} repeats of "
        f"{args.seconds:g} s{started}"
    )
    print(
        "| backend | transitions/s (median) | repeats | game step ms/car-action "
        "| inference ms/car-action |"
    )
    print("|---|---|---|---|---|")
    for b in args.backends:
        each = ", ".join(f"{x['transitions_per_s']:.0f}" for x in runs[b])
        m = med[b]
        print(
            f"| collector={b} | {m['transitions_per_s']:.0f} | {each} "
            f"| {fmt_ms(m['game_step_ms_per_action'])} | {fmt_ms(m['inference_ms_per_action'])} |"
        )
    result: dict = {
        **med,  # per backend: transitions_per_s and <stage>_ms_per_action, repeats' medians
        "runs": runs,
        "median": {b: m["transitions_per_s"] for b, m in med.items()},  # transitions/s
        "settings": {"overrides": args.overrides, "seconds": args.seconds},
        "ray_start_s": ray_start_s,
    }
    if set(args.backends) == set(BACKENDS):
        ratio = med["ray"]["transitions_per_s"] / med["local"]["transitions_per_s"]
        # each repeat's two backends ran back to back: their ratio cancels the machine's drift
        paired = statistics.median(
            r["transitions_per_s"] / loc["transitions_per_s"]
            for r, loc in zip(runs["ray"], runs["local"], strict=True)
        )
        verdict = "within" if paired >= BUDGET_RATIO else "OVER"
        overhead = 100 * (1 - paired)
        print(f"ray / local of the medians = {ratio:.3f}")
        print(
            f"ray / local, median of the repeats' ratios = {paired:.3f} "
            f"(Ray overhead {overhead:.1f}%, {verdict} the 15% budget)"
        )
        result.update(ratio=ratio, paired_ratio=paired)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
