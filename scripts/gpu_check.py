"""The GPU box in one call: learner rows, collection capacity and a real run, one table.

    python scripts/gpu_check.py                 # on a CUDA machine (make gpu-check), ~6 min
    python scripts/gpu_check.py --out DIR       # keep the raw files there
    python scripts/gpu_check.py --dry-run       # the same steps on the CPU, tiny budgets
    python scripts/gpu_check.py --report DIR --docs docs/gpu.md   # a saved check's table

Four measurements, each a subprocess with its own time limit, so the whole check ends well
inside 8 minutes:
1. bench_inference.py: the network's forward for a batch of cars (32 taus) alone, fp32, TF32
   and bf16, NCHW and NHWC (inference.json);
2. bench_learner.py, iqn_linesight at batch 512 in bf16, frames on the GPU, convolutions NHWC:
   eager and captured (CUDA graph), each row with the step alone and the sampling alone timed
   and a torch.profiler table, one file pair per --learner-compile MODE (default: the recipe's
   default+opt, learner_default_opt.*; none: learner.*);
3. bench_collectors.py, local backend, the GPU recipe's collectors with no learner, once per
   layout of --capacity (default: the inference server as the recipe runs it, fp32 with TF32
   matmuls, then its forward replayed as CUDA graphs in fp32 and in bf16): the collection
   capacity, with each collector's ms per car-action split into game
   step and inference (for the server: the wait for its answer);
4. train.py experiment=linesight_gpu for --train-s seconds (CSV logger; --run-overrides
   adds to it), with nvidia-smi sampling GPU utilisation and memory beside it.
The folder keeps inference.json, learner.json, collectors_<layout>.json, metrics.csv and
gpu.json, from which `--report` rebuilds the table (docs/gpu.md's is generated so, from
docs/results/gpu/).
The table that ends the output holds the figures issue "The GPU box at full speed" asks for,
beside their targets, and the wall time of Linesight's 5-million-action recipe at replay ratio
32 that those figures imply. Without CUDA it says so in one line (exit 2), unless --dry-run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH = 512
CAPACITY_VARIANTS = {  # file label -> overrides of the recipe's collectors
    "process": ["collector.inference=process"],
    "server": ["collector.inference=server"],
    "server_bf16": ["collector.inference=server", "collector.precision=bf16"],
    "server_graph": ["collector.inference=server", "collector.cuda_graph=true"],
    "server_graph_bf16": [
        "collector.inference=server",
        "collector.cuda_graph=true",
        "collector.precision=bf16",
    ],
}
# the recipe's layout as it is, then its forward replayed as CUDA graphs in both precisions
DEFAULT_CAPACITY = ("server", "server_graph", "server_graph_bf16")
GPU_ONLY = ("collector.precision=bf16", "collector.cuda_graph=true")  # skipped by a dry run
LINESIGHT_ACTIONS = 5_000_000
REPLAY_RATIO = 32
TARGETS = {
    "learner_bench": 400.0,  # batches/s, bench_learner iqn_linesight batch 512
    "capacity": 20_000.0,  # transitions/s, bench_collectors, no learner
    "run_batches": 250.0,  # batches/s in a real run
    "wait_share": 0.10,  # learner_wait_share below
    "gpu_util": 60.0,  # % busy
    "recipe_min": 30.0,  # minutes for 5M actions at replay ratio 32
}


def learner_file(mode: str) -> str:
    """The learner rows' file stem of a compile mode: learner (none), learner_<mode>
    (default+loss: learner_default_loss)."""
    return "learner" if mode == "none" else f"learner_{mode.replace('+', '_')}"


def run_step(name: str, cmd: list[str], limit_s: float, log: Path) -> int:
    """Run one measurement, its output into ``log``; the exit code (124 past its limit)."""
    t0 = time.monotonic()
    print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HYDRA_FULL_ERROR": "1"}
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=limit_s, env=env)
            code = rc.returncode
        except subprocess.TimeoutExpired:
            code = 124
    print(f"   rc={code} after {time.monotonic() - t0:.0f} s (log: {log.name})", flush=True)
    if code != 0:
        print("   " + "\n   ".join(log.read_text(errors="replace").splitlines()[-12:]))
    return code


STEPS = ("inference", "learner", "capacity", "run")  # the four measurements, in order


class GpuSampler:
    """nvidia-smi every half second on a thread: (seconds since start, util %, memory MiB)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._t0 = time.monotonic()

    def _run(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used"]
        query += ["--format=csv,noheader,nounits", "-lms", "500"]
        try:
            proc = subprocess.Popen(query, stdout=subprocess.PIPE, text=True)
        except OSError:
            return
        assert proc.stdout is not None
        for line in proc.stdout:
            if self._stop.is_set():
                break
            try:
                util, mem = (float(x) for x in line.split(",")[:2])
            except ValueError:
                continue
            self.samples.append((time.monotonic() - self._t0, util, mem))
        proc.kill()

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def summary(self, from_s: float) -> dict[str, float | None]:
        """Mean utilisation and peak memory of the samples after ``from_s`` seconds."""
        late = [s for s in self.samples if s[0] >= from_s]
        if not late:
            return {"gpu_util": None, "gpu_mem_mib": None}
        return {
            "gpu_util": statistics.fmean(s[1] for s in late),
            "gpu_mem_mib": max(s[2] for s in late),
        }


def read_metrics(path: Path) -> list[dict[str, str]]:
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []


def column(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


def late_median(values: list[float]) -> float | None:
    """Median of the second half: the run after learning started and settled."""
    return statistics.median(values[len(values) // 2 :]) if values else None


def run_figures(rows: list[dict[str, str]], batch: int) -> dict[str, float | None]:
    """The real run's figures from Lightning's CSV metrics (medians of the second half)."""
    samples = late_median(column(rows, "throughput/samples_per_s"))
    keys = rows[0].keys() if rows else []

    def per_collector(stage: str) -> float | None:
        vals = [late_median(column(rows, k)) for k in keys if k.endswith(f"{stage}_ms_per_action")]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    return {
        "samples_per_s": samples,
        "batches_per_s": None if samples is None else samples / batch,
        "transitions_per_s": late_median(column(rows, "throughput/transitions_per_s")),
        "wait_share": late_median(column(rows, "throughput/learner_wait_share")),
        "sample_share": late_median(column(rows, "throughput/learner_sample_share")),
        # the prefetch thread's ms making a batch: wall, its own CPU, waiting for the lock
        "prefetch_ms": late_median(column(rows, "throughput/prefetch_sample_ms")),
        "prefetch_cpu_ms": late_median(column(rows, "throughput/prefetch_sample_cpu_ms")),
        "lock_wait_ms": late_median(column(rows, "throughput/replay_lock_wait_ms")),
        "game_ms": per_collector("game_step"),
        "inference_ms": per_collector("inference"),
        "queue_ms": per_collector("queue"),  # a full queue: the learner takes races too slowly
        "collectors": float(len([k for k in keys if k.endswith("inference_ms_per_action")])),
        # a run that learns publishes a version every learner.publish_every_batches
        "weights_version": max(column(rows, "weights/version"), default=None),
    }


def recipe_minutes(samples_per_s: float | None, transitions_per_s: float | None) -> float | None:
    """Wall time of 5M actions learned at replay ratio 32: the slower of learning them
    (5M x 32 samples) and collecting them."""
    if not samples_per_s or not transitions_per_s:
        return None
    learn = LINESIGHT_ACTIONS * REPLAY_RATIO / samples_per_s
    collect = LINESIGHT_ACTIONS / transitions_per_s
    return max(learn, collect) / 60.0


def fmt(v: float | None, spec: str = ",.0f") -> str:
    return "n/a" if v is None else format(v, spec)


def verdict(v: float | None, target: float, above: bool = True) -> str:
    if v is None:
        return "n/a"
    return "met" if (v >= target if above else v < target) else "missed"


def table(
    learner: dict,
    capacity: dict[str, dict],
    run: dict,
    gpu: dict,
    device: str,
    inference: dict,
    with_run: bool = True,
) -> str:
    """The check's one table, markdown; without ``with_run``, no rows of the real run (a
    check that left it out)."""
    minutes = recipe_minutes(run.get("samples_per_s"), run.get("transitions_per_s"))
    t = TARGETS
    lines = [
        f"device: {device}",
        "",
        "| figure | value | target | |",
        "|---|---|---|---|",
    ]
    for r in learner.get("rows", []):
        graph = "failed" if r.get("graph_failed") else ("yes" if r["graph"] else "no")
        b = r["ours"] / r["batch"]
        apart = ""
        if "update_ms" in r:
            apart = f"; apart: step {r['update_ms']:.2f} ms, sampling {r['sample_ms']:.2f} ms"
        layout = ", NHWC" if r.get("channels_last") else ""
        mode, *extra = r.get("compile", "none").split("+")
        if mode != "none":
            what = ["forwards"] + ["loss"] * ("loss" in extra)
            what += ["optimizer"] * ("opt" in extra and bool(r["graph"]))
            joined = what[0] if len(what) == 1 else ", ".join(what[:-1]) + f" and {what[-1]}"
            layout += f", compiled {joined} ({mode})"
        lines.append(
            f"| bench_learner {r['preset']}, batch {r['batch']}, {r['precision']}, CUDA graph "
            f"{graph}, frames on {r['frames']}{layout} (eager reference "
            f"{r['ref'] / r['batch']:,.0f}{apart}) "
            f"| {b:,.1f} batches/s | >= {t['learner_bench']:.0f} | "
            f"{verdict(b, t['learner_bench'])} |"
        )
    inf_rows = inference.get("rows", [])
    ends = (
        {min(r["batch"] for r in inf_rows), max(r["batch"] for r in inf_rows)} if inf_rows else ()
    )
    for r in inf_rows:  # one collector's batch and the largest, as collectors run them (NHWC)
        if r["batch"] in ends and r["layout"] == "NHWC":
            graph = ", CUDA graph" if r.get("graph") else ""
            lines.append(
                f"| inference alone ({r['taus']} taus), batch {r['batch']}, {r['precision']}, "
                f"NHWC{graph}: ms per car-action | {r['ms_per_car']:.4f} "
                f"({r['tflops']:.0f} TFLOP/s) | | |"
            )
    for label, c in capacity.items():
        cap = c.get("transitions_per_s")
        layout = " ".join(CAPACITY_VARIANTS.get(label, [label])).replace("collector.", "")
        lines += [
            f"| collection capacity, no learner, {layout} | {fmt(cap)} transitions/s "
            f"| >= {t['capacity']:,.0f} | {verdict(cap, t['capacity'])} |",
            f"| - its collectors' ms per car-action: game step / inference | "
            f"{fmt(c.get('game_step_ms_per_action'), '.3f')} / "
            f"{fmt(c.get('inference_ms_per_action'), '.3f')} | | |",
        ]
    if not with_run:
        return "\n".join(lines)
    if gpu.get("run_overrides"):
        lines.append(f"| real run: overrides | {' '.join(gpu['run_overrides'])} | | |")
    lines += [
        f"| real run: learner batches/s | {fmt(run.get('batches_per_s'), ',.1f')} | >= "
        f"{t['run_batches']:.0f} | {verdict(run.get('batches_per_s'), t['run_batches'])} |",
        f"| real run: samples/s learned | {fmt(run.get('samples_per_s'))} | | |",
        f"| real run: last weights version the collectors were sent (1: never updated) | "
        f"{fmt(run.get('weights_version'))} | > 1 | "
        f"{verdict(run.get('weights_version'), 1.5)} |",
        f"| real run: transitions/s collected | {fmt(run.get('transitions_per_s'))} | | |",
        f"| real run: learner_wait_share | {fmt(run.get('wait_share'), '.3f')} | < "
        f"{t['wait_share']} | {verdict(run.get('wait_share'), t['wait_share'], above=False)} |",
        f"| real run: learner_sample_share | {fmt(run.get('sample_share'), '.3f')} | | |",
    ]
    if run.get("prefetch_ms") is not None:  # runs from before the figures have none
        lines.append(
            f"| real run: prefetch thread ms a batch, wall / its CPU / replay lock wait | "
            f"{fmt(run['prefetch_ms'], '.2f')} / {fmt(run.get('prefetch_cpu_ms'), '.2f')} / "
            f"{fmt(run.get('lock_wait_ms'), '.2f')} | | |"
        )
    lines += [
        f"| real run: collector ms per car-action, game step / inference / queue "
        f"({fmt(run.get('collectors'))} collectors) | {fmt(run.get('game_ms'), '.3f')} / "
        f"{fmt(run.get('inference_ms'), '.3f')} / {fmt(run.get('queue_ms'), '.3f')} | | |",
        f"| real run: GPU busy (mean %, nvidia-smi) | {fmt(gpu.get('gpu_util'), '.0f')} | >= "
        f"{t['gpu_util']:.0f} | {verdict(gpu.get('gpu_util'), t['gpu_util'])} |",
        f"| real run: GPU memory (peak MiB) | {fmt(gpu.get('gpu_mem_mib'))} | | |",
        f"| Linesight's 5M actions at replay ratio 32 (minutes, from the real run) | "
        f"{fmt(minutes, '.1f')} | < {t['recipe_min']:.0f} | "
        f"{verdict(minutes, t['recipe_min'], above=False)} |",
    ]
    return "\n".join(lines)


def device_name(dry_run: bool) -> str:
    import torch

    if dry_run or not torch.cuda.is_available():
        return f"cpu ({os.cpu_count()} cores), dry run"
    return f"{torch.cuda.get_device_name()}, {os.cpu_count()} CPU cores, torch {torch.__version__}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="folder for the raw files (default: a temp dir)")
    ap.add_argument("--train-s", type=float, default=180.0, help="seconds of the real run")
    ap.add_argument("--dry-run", action="store_true", help="the same steps on the CPU, briefly")
    ap.add_argument(
        "--capacity",
        nargs="+",
        choices=tuple(CAPACITY_VARIANTS),
        default=list(DEFAULT_CAPACITY),
        help="collector layouts whose capacity is measured (process: a network per collector)",
    )
    ap.add_argument(
        "--learner-compile",
        nargs="+",
        choices=(
            "none",
            "default",
            "default+loss",
            "default+opt",
            "default+loss+opt",
            "max-autotune-no-cudagraphs",
        ),
        default=["default+opt"],
        help="learner.compile modes of the learner rows, a row each (default: the GPU "
        "recipe's). default fuses the head's elementwise work inside the captured step; "
        "+loss the loss's too (learner.compile_loss); +opt the step's clipping and optimizer "
        "(learner.compile_optimizer); each adds about a minute",
    )
    ap.add_argument(
        "--run-overrides",
        nargs="*",
        default=[],
        help="extra overrides of the real run only, e.g. collector.cuda_graph=true",
    )
    ap.add_argument(
        "--steps",
        nargs="+",
        choices=STEPS,
        default=list(STEPS),
        help="which measurements to run (default: all four); e.g. `--steps run` repeats the "
        "real run alone, with other --run-overrides, into another --out",
    )
    ap.add_argument("--report", type=Path, help="only print the table of a finished check's folder")
    ap.add_argument("--docs", type=Path, help="with --report: write the table into this page")
    args = ap.parse_args(argv)
    if args.report is not None:
        text = report(args.report.resolve())
        if args.docs is not None:
            write_into(args.docs, args.report.resolve(), text)
        print(text)
        return 0
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("gpu-check: no CUDA device here (torch sees none): run it on an NVIDIA GPU machine")
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="trackmind-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    py, t0 = sys.executable, time.monotonic()
    dev = "cpu" if args.dry_run else "cuda"
    print(f"gpu-check on {device_name(args.dry_run)}; files in {out}", flush=True)

    inf = [py, str(ROOT / "scripts" / "bench_inference.py"), "--devices", dev]
    inf += ["--batches", "1", "4"] if args.dry_run else ["--batches", "32", "128", "416"]
    inf += ["--reps", "2" if args.dry_run else "20", "--json", str(out / "inference.json")]
    inf += ["--graph", "0", "1"]
    if "inference" in args.steps:
        run_step("inference alone", inf, 60, out / "inference.txt")

    # a subprocess (and a JSON) per compile mode: a slow compile cannot take the other rows
    for mode in args.learner_compile if "learner" in args.steps else ():
        name = learner_file(mode)
        bench = [py, str(ROOT / "scripts" / "bench_learner.py"), "--devices", dev]
        bench += ["--presets", "iqn_cpu" if args.dry_run else "iqn_linesight"]
        bench += ["--precision", "bf16", "--cuda-graph", "0", "1", "--compile", mode]
        bench += ["--prefetch", "1", "--threads", "1", "--json", str(out / f"{name}.json")]
        bench += ["--profile", "3" if args.dry_run else "20"]  # where each row's step time goes
        if args.dry_run:
            bench += ["--repeats", "1", "--repeat-s", "0.2", "--transitions", "1500"]
        else:
            bench += ["--frames", "device", "--repeats", "3", "--repeat-s", "0.5"]
            bench += ["--transitions", "5000"]
        limit = (40 if args.dry_run else 75) + (0 if mode == "none" else 60)  # a compile: ~1 min
        run_step(f"learner rows, compile {mode}", bench, limit, out / f"{name}.txt")

    recipe = ["experiment=linesight_gpu"]
    if args.dry_run:  # the recipe on this CPU: no GPU trainer, collectors or graph
        recipe += ["trainer.accelerator=cpu", "trainer.precision=32-true", "collector.device=cpu"]
        recipe += ["learner.cuda_graph=false", "learner.compile_optimizer=false"]
        recipe += ["collector.processes=1", "learner.batch_size=32"]
        recipe += ["collector.cuda_graph=false", "learner.compile=none"]
        recipe += ["buffer.learning_starts=500", "network=iqn_cpu"]
    # one network per collector, one server for all, and the server in bf16
    for label in args.capacity if "capacity" in args.steps else ():
        extra = CAPACITY_VARIANTS[label]
        cap_json = out / f"collectors_{label}.json"
        cap = [py, str(ROOT / "scripts" / "bench_collectors.py"), "--backends", "local"]
        cap += ["--json", str(cap_json), "--repeats", "1", *recipe, *extra]
        cap += ["--seconds", "5" if args.dry_run else "8", "--warmup", "2" if args.dry_run else "3"]
        if args.dry_run and any(o in extra for o in GPU_ONLY):
            continue  # bf16 inference and CUDA graphs need a GPU
        run_step(f"collection capacity, {label}", cap, 45, out / f"collectors_{label}.txt")

    run_dir = out / "run"
    train_s = 30.0 if args.dry_run else args.train_s
    train = [py, str(ROOT / "scripts" / "train.py"), *recipe, f"trainer.max_time_s={train_s}"]
    train += ["logger=csv", f"hydra.run.dir={run_dir}", "trainer.progress_bar=false"]
    train += args.run_overrides
    t_train = time.monotonic()
    with GpuSampler() as sampler:
        if "run" in args.steps:
            run_step("real run", train, train_s + 60, out / "train.txt")
    gpu = sampler.summary(from_s=0.4 * (time.monotonic() - t_train))
    metrics_csv = run_dir / "csv" / "version_0" / "metrics.csv"
    if metrics_csv.exists():
        shutil.copy(metrics_csv, out / "metrics.csv")
    info = {"device": device_name(args.dry_run), "batch": 32 if args.dry_run else BATCH}
    info["run_overrides"] = list(args.run_overrides)
    info["steps"] = list(args.steps)
    (out / "gpu.json").write_text(json.dumps({**info, **gpu}, indent=1))
    text = report(out)
    (out / "gpu_check.md").write_text(text + "\n")
    print(f"\n{text}\n\ngpu-check took {time.monotonic() - t0:.0f} s", flush=True)
    return 0


def report(folder: Path) -> str:
    """The table from a check's result files (learner.json, collectors_<layout>.json,
    metrics.csv, gpu.json), so that docs regenerate it from what was measured."""

    def load(name: str) -> dict:
        path = folder / name
        return json.loads(path.read_text()) if path.exists() else {}

    gpu = load("gpu.json")
    capacity = {}
    for path in sorted(folder.glob("collectors_*.json")):
        label = path.stem.removeprefix("collectors_")
        capacity[label] = load(path.name).get("local", {})
    figures = run_figures(read_metrics(folder / "metrics.csv"), int(gpu.get("batch", BATCH)))
    device = gpu.get("device", "n/a")
    learner: dict = {"rows": []}
    for path in sorted(folder.glob("learner*.json")):  # learner.json, learner_<compile>.json
        learner["rows"] += load(path.name).get("rows", [])
    # a check that ran no real run has no rows for it (gpu.json names its steps)
    with_run = "run" in gpu.get("steps", STEPS)
    return table(learner, capacity, figures, gpu, device, load("inference.json"), with_run)


BEGIN, END = "<!-- gpu-check table: begin -->", "<!-- gpu-check table: end -->"


def write_into(page: Path, folder: Path, text: str) -> None:
    """Put `text` in the page's generated block for `folder` (see with_tables)."""
    page.write_text(with_tables(page.read_text(), folder, text))


NOTE = re.compile(r"<!-- generated by scripts/gpu_check\.py --report (\S+): do not edit -->")


def with_tables(doc: str, folder: Path | None = None, text: str | None = None) -> str:
    """A page's text with every generated block (BEGIN ... END) remade from the result folder
    its note names, so that a page can show several checks. With `folder` and `text`, the
    block naming `folder` (or else the first block naming none) gets `text`, and blocks naming
    none stay empty; without, a block naming none is refused."""
    parts = doc.split(BEGIN)
    if len(parts) < 2 or any(END not in part for part in parts[1:]):
        raise SystemExit(f"no '{BEGIN}' ... '{END}' block to fill")
    blocks = [part.split(END, 1) for part in parts[1:]]
    named = [NOTE.search(block) for block, _ in blocks]
    folders = [None if m is None else (ROOT / m.group(1)).resolve() for m in named]
    target = None
    if folder is not None:
        folder = folder.resolve()
        if folder not in folders and None not in folders:
            raise SystemExit(f"no block for {folder}: add an empty '{BEGIN}' ... '{END}' block")
        target = folders.index(folder) if folder in folders else folders.index(None)
        folders[target] = folder
    elif None in folders:
        raise SystemExit(f"a '{BEGIN}' block names no result folder")
    out = [parts[0]]
    for i, ((block, tail), where) in enumerate(zip(blocks, folders, strict=True)):
        if where is None:  # an empty block waiting for its --report DIR --docs
            out.append(f"{BEGIN}{block}{END}{tail}")
            continue
        body = text if i == target else report(where)
        shown = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
        note = f"<!-- generated by scripts/gpu_check.py --report {shown}: do not edit -->"
        out.append(f"{BEGIN}\n{note}\n\n{body}\n\n{END}{tail}")
    return "".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
