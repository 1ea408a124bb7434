"""Learner throughput: samples/s of a full IQN learner step per network preset.

    python scripts/bench_learner.py                     # the CPU presets, batch 512, 2 threads
    python scripts/bench_learner.py --presets iqn_linesight iqn_impala --devices cuda
    python scripts/bench_learner.py --quick             # fewer repeats, smaller buffers
    python scripts/bench_learner.py --presets iqn_cpu --threads 4 --amp
    python scripts/bench_learner.py --presets iqn_cpu --precision fp32 bf16 --compile none default
    python scripts/bench_learner.py --presets iqn_linesight --prefetch 0 1   # sampling on a thread

One step of ours is what the learner does per batch: ReplayBuffers.sample (records, frame
gather and the mini-race collate), batch to the device, IQNLightningModule.compute_loss
(stratified taus, online forward, target forward, iqn_loss), backward, gradient clipping
and a RAdam step. Logging, priorities and target updates are left out. Beside it, in the
same process and interleaved repeat by repeat (machines are noisy), runs a plain eager
reference: the same architecture and quantile Huber loss written with plain torch ops in
this file, fed pre-made tensors already on the device, so the ratio shows what our buffer,
collate and network code cost over the bare computation. Figures are medians of repeats.

The buffers are filled with synthetic races (random frames of the preset's image shape,
184 random floats); bytes per transition is the allocated size of buffer + buffer_test per
slot. With CUDA, GPU rows are added (frames travel as uint8, scaled on the device).

`--precision` and `--compile` add a row per combination: autocast to bf16 or fp16 (loss
scaling for fp16 on a GPU) and `learner.compile`, torch.compile of our forward passes (mode
`default`, `reduce-overhead` for CUDA graphs, `max-autotune`; `MODE+loss` compiles the loss
too, learner.compile_loss; `MODE+opt` fuses a graph row's clipping and optimizer,
learner.compile_optimizer), on the CPU as well where torch allows. The reference stays
eager, in the same precision: the ratio then shows what compilation buys over the bare
eager computation. The table names the device.

`--prefetch 0 1` adds a row per depth: with depth >= 1 our step takes its batch from a
BatchPrefetcher (trainer.prefetch_batches), which samples the next batches on a thread while
the step runs (pinned for a GPU); the collate share is then the time the step waited for a
prepared batch, what sampling leaves on the critical path.

`--cuda-graph 0 1` adds rows where our update (IQNLightningModule.device_update:
forwards, loss, backward, clipping and a capturable RAdam step) is captured once as a CUDA
graph and replayed (learner.cuda_graph); `--frames host device` stores the buffer's frames in
host memory or on the GPU (buffer.frames_on, GPU rows only), where the batch's frame gather is
an index_select on the device. On a CPU a graph row runs the same update eagerly (a dry run).
`--side-thread none target split` adds a CPU row per use of the learner's side thread
(training/side_thread.py; default target, as a training run): none, the whole step on one
thread; target (learner.target_thread), the target's forward at s' on the side thread while
the online forward at s runs on the step's own, the same step bit for bit; split
(learner.split_step), each half of the batch through forwards, loss and backward on a thread
of its own, the gradients summed.
`--json PATH` writes the rows; `--profile N` prints where N steps of each row spend their
time (torch.profiler, by device time on a GPU).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from trackmind.agent.network import impala_layers
from trackmind.agent.network_config import NetworkConfig, build_network, network_config
from trackmind.cli import OneLineParser, int_at_least, positive_float
from trackmind.replay.buffers import ReplayBuffers, make_buffers
from trackmind.replay.prefetch import BatchPrefetcher, pinned
from trackmind.training.captured_step import CapturedStep
from trackmind.training.module import GRAPH_INPUTS, IQNLightningModule, schedule_from

CONF = Path(__file__).resolve().parents[1] / "conf"
PRESETS = ("iqn_cpu", "iqn_floats", "iqn_linesight", "iqn_impala")
DEFAULT_PRESETS = PRESETS[:3]  # iqn_impala on request: it is a GPU learner's network
FLOAT_DIM = 184  # the environment's float features (env/obs_terms.py)
LEAK = 0.01
BUDGET_SAMPLES = 5_000  # iqn_cpu on 2 CPU cores
BUDGET_COLLATE = 0.15  # share of the step in sample + collate
BUDGET_BYTES = 1.2  # bytes per transition over one frame's bytes, at 1x120x160


def load_group(group: str, name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / group / f"{name}.yaml"), resolve=True)


# ---- the plain eager reference ------------------------------------------------------------


class PlainIQN(nn.Module):
    """The preset's IQN architecture in plain torch ops (same layers, same input scaling)."""

    def __init__(self, nc: NetworkConfig) -> None:
        super().__init__()
        self.n_actions, self.emb_dim = nc.n_actions, nc.embedding_dim
        self.conv = None
        features = 0
        if nc.image_shape is not None:
            c = nc.image_shape[0]
            if nc.encoder == "impala":  # its stages are plain torch modules already
                layers = impala_layers(c, nc.impala_channels, nc.impala_blocks, nc.impala_pool)
            else:
                layers = []
                for c_out, k, s in zip(nc.conv_channels, nc.conv_kernels, nc.conv_strides):
                    layers += [nn.Conv2d(c, c_out, k, s), nn.LeakyReLU(LEAK)]
                    c = c_out
            self.conv = nn.Sequential(*layers, nn.Flatten())
            with torch.no_grad():
                features = self.conv(torch.zeros(1, *nc.image_shape)).shape[1]
        sizes = [nc.float_dim, *nc.float_hidden]
        self.mlp = nn.Sequential(
            *(m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.LeakyReLU(LEAK)))
        )
        features += sizes[-1]
        self.embed = nn.Linear(nc.embedding_dim, features)
        self.adv = nn.Sequential(
            nn.Linear(features, nc.dense_hidden),
            nn.LeakyReLU(LEAK),
            nn.Linear(nc.dense_hidden, nc.n_actions),
        )
        self.val = nn.Sequential(
            nn.Linear(features, nc.dense_hidden), nn.LeakyReLU(LEAK), nn.Linear(nc.dense_hidden, 1)
        )
        self.register_buffer("mean", torch.zeros(nc.float_dim))
        self.register_buffer("std", torch.ones(nc.float_dim))

    def forward(self, img, floats, taus):
        x = self.mlp((floats - self.mean) / self.std)
        if self.conv is not None:
            x = torch.cat([self.conv((img.float() - 128.0) / 128.0), x], dim=1)
        freqs = torch.arange(1, self.emb_dim + 1, device=taus.device) * math.pi
        emb = F.leaky_relu(self.embed(torch.cos(taus[..., None] * freqs)), LEAK)
        h = (emb * x[:, None, :]).flatten(0, 1)
        a, v = self.adv(h), self.val(h)
        return (v + a - a.mean(dim=1, keepdim=True)).view(*taus.shape, self.n_actions)


def plain_quantile_huber_loss(z, taus, actions, z_next, rewards, discounts, kappa):
    """Mean over the batch of sum_online mean_target |tau - 1{u<0}| * huber(u) / kappa."""
    rows = torch.arange(z.shape[0], device=z.device)
    z_a = z[rows, :, actions]  # (B, N)
    with torch.no_grad():
        best = z_next.mean(dim=1).argmax(dim=1)
        target = rewards[:, None] + discounts[:, None] * z_next[rows, :, best]  # (B, N')
    u = target[:, None, :] - z_a[:, :, None]
    huber = torch.where(u.abs() <= kappa, 0.5 * u * u / kappa, u.abs() - 0.5 * kappa)
    weight = (taus[:, :, None] - (u < 0).to(u.dtype)).abs()
    return (weight * huber).mean(dim=2).sum(dim=1).mean()


# ---- one step of each ----------------------------------------------------------------------


PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# MODE+loss: the loss compiled too (learner.compile_loss); MODE+opt: the captured step's
# clipping and optimizer fused (learner.compile_optimizer, graph rows); MODE+loss+opt: both
_LOSS = tuple(f"{m}+loss" for m in COMPILE_MODES[1:])  # the loss in a compile mode
COMPILE_CHOICES = COMPILE_MODES + _LOSS + tuple(f"{m}+opt" for m in COMPILE_MODES + _LOSS)


def compile_keys(choice: str, graph: bool = True) -> dict:
    """learner.compile, compile_loss and compile_optimizer of a --compile choice
    (MODE[+loss][+opt]); the optimizer is fused in graph rows only (it needs the graph)."""
    mode, *extra = choice.split("+")
    return {
        "compile": mode,
        "compile_loss": "loss" in extra,
        "compile_optimizer": "opt" in extra and graph,
    }


class Stepper:
    """Clipping, the optimizer's step and autocast (bf16, or fp16 with loss scaling on a GPU),
    shared by both (ours gets its optimizer from IQNLightningModule.configure_optimizers)."""

    def __init__(self, opt, learner: dict, device: torch.device, precision: str) -> None:
        self.opt = opt
        self.params = [p for g in opt.param_groups for p in g["params"]]
        self.clip = float(learner["grad_clip_norm"])
        self.dtype = PRECISIONS[precision]
        fp16_gpu = precision == "fp16" and device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda") if fp16_gpu else None
        self.device = device

    def autocast(self):
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def step(self) -> None:
        """Clip the gradients already computed, then the optimizer's step."""
        torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.opt.step()

    def update(self, loss: torch.Tensor) -> None:
        self.opt.zero_grad(set_to_none=True)
        if self.scaler is None:
            loss.backward()
            self.step()
            return
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.scaler.step(self.opt)
        self.scaler.update()


class Ours:
    """A learner step on our code: buffer sample + collate, compute_loss, update."""

    def __init__(
        self,
        rb: ReplayBuffers,
        module: IQNLightningModule,
        stepper: Stepper,
        batch: int,
        prefetch: int = 0,
        graph: bool = False,
    ) -> None:
        self.rb, self.module, self.stepper, self.batch = rb, module, stepper, batch
        self.sample_s = 0.0
        self.prefetcher = None
        if prefetch > 0:
            pin = stepper.device.type == "cuda"
            self.prefetcher = BatchPrefetcher(
                lambda: rb.sample(batch), prefetch, pin=pin, device=stepper.device
            )
        self.captured = None
        if graph:  # the learner's update as one CUDA graph (learner.cuda_graph)
            module._raw_optimizer = stepper.opt
            self.captured = CapturedStep(
                module.device_update, GRAPH_INPUTS, 3, stepper.dtype, stepper.device
            )

    def step(self) -> None:
        t0 = time.perf_counter()
        if self.prefetcher is not None:
            batch = self.prefetcher.take()
        else:
            batch = self.rb.sample(self.batch)
        self.sample_s += time.perf_counter() - t0
        self.update(batch)

    def update(self, batch: dict) -> None:
        """The step after sampling: batch to the device, forwards, loss, backward, optimizer."""
        if self.captured is not None:  # as the learner: pinned inputs go straight to the graph
            self.captured(batch)
            return
        dev = self.stepper.device
        batch = {k: v.to(dev, non_blocking=True) for k, v in batch.items()}
        if self.module.splits_step:  # backward on two threads, as the learner's update
            with self.stepper.autocast():
                self.module.split_backward(batch, self.stepper.opt)
            self.stepper.step()
            return
        with self.stepper.autocast():
            loss = self.module.compute_loss(batch).loss
        self.stepper.update(loss)


class Reference:
    """The plain eager step on pre-made tensors: forward x2, inline loss, update."""

    def __init__(
        self, nc: NetworkConfig, learner: dict, device, batch: int, precision: str
    ) -> None:
        self.online = PlainIQN(nc).to(device)
        self.target = copy.deepcopy(self.online).requires_grad_(False)
        opt = torch.optim.RAdam(
            self.online.parameters(),
            lr=schedule_from(learner["lr"], "lr")(0),
            eps=float(learner["adam_eps"]),
            weight_decay=float(learner["weight_decay"]),
        )
        self.stepper = Stepper(opt, learner, device, precision)
        self.kappa, self.n = float(learner["kappa"]), nc.n_quantiles_train
        g = torch.Generator().manual_seed(0)
        img = None
        if nc.image_shape is not None:
            img = torch.randint(0, 256, (2, batch, *nc.image_shape), generator=g, dtype=torch.uint8)
        self.img = None if img is None else img.to(device)
        self.floats = torch.randn(2, batch, nc.float_dim, generator=g).to(device)
        self.actions = torch.randint(0, nc.n_actions, (batch,), generator=g).to(device)
        self.rewards = torch.randn(batch, generator=g).to(device)
        self.discounts = torch.full((batch,), 0.99).to(device)
        self.sample_s = 0.0

    def step(self) -> None:
        b, dev = len(self.actions), self.stepper.device
        img, next_img = (None, None) if self.img is None else self.img
        with self.stepper.autocast():
            taus = torch.rand(b, self.n, device=dev)
            z = self.online(img, self.floats[0], taus)
            with torch.no_grad():
                z_next = self.target(next_img, self.floats[1], torch.rand(b, self.n, device=dev))
            loss = plain_quantile_huber_loss(
                z, taus, self.actions, z_next, self.rewards, self.discounts, self.kappa
            )
        self.stepper.update(loss)


# ---- setup and timing ----------------------------------------------------------------------


def fill_buffers(
    nc: NetworkConfig, transitions: int, gamma: float, seed: int = 0, device: str = "cpu"
):
    """ReplayBuffers of ``transitions`` slots filled with synthetic races of 500 actions,
    their frames stored on ``device``."""
    shape = nc.image_shape
    cfg = {"capacity_schedule": [[0, transitions]], "learning_starts": 1}
    rb = make_buffers(cfg, shape, FLOAT_DIM, seed=seed, device=device)
    rng = np.random.default_rng(seed)
    added = 0
    while added < transitions:
        t = min(500, transitions - added)
        rb.add_rollout(synthetic_race(rng, t, shape, nc.n_actions), gamma)
        added += t
    return rb


def synthetic_race(
    rng: np.random.Generator, actions: int, shape: tuple[int, ...] | None, n_actions: int
) -> dict:
    """A race record as collectors send it: actions+1 frames (none without `shape`) and
    states, random actions and rewards, finished or not."""
    return {
        "frames": rng.integers(0, 256, (actions + 1, *shape), dtype=np.uint8) if shape else (),
        "state_float": rng.standard_normal((actions + 1, FLOAT_DIM), dtype=np.float32),
        "actions": rng.integers(0, n_actions, actions),
        "action_was_greedy": rng.random(actions) < 0.9,
        "rewards": rng.standard_normal(actions),
        "potentials": {},
        "finished": bool(rng.random() < 0.5),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(runner, steps: int, device) -> tuple[float, float]:
    """Seconds for ``steps`` steps and the part of them spent in sample + collate."""
    runner.sample_s = 0.0
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        runner.step()
    sync(device)
    return time.perf_counter() - t0, runner.sample_s


def bench_preset(name: str, devices: list[str], args, learner: dict) -> list[dict]:
    """Rows for one preset: a buffer per frame location, then ours and the reference on
    each device."""
    raw = load_group("network", name)
    frame = None if raw["image_shape"] is None else tuple(raw["image_shape"][1:])
    nc = network_config(raw, FLOAT_DIM, frame)
    transitions = args.transitions or default_transitions(nc, args.quick)
    gamma = schedule_from(learner["gamma"], "gamma")(0)
    buffers: dict[str, ReplayBuffers] = {}

    def buffer_on(device: str) -> ReplayBuffers:
        if device not in buffers:
            buffers[device] = fill_buffers(nc, transitions, gamma, device=device)
        return buffers[device]

    rows = []
    for row_keys in combos(devices, args):
        device, precision, mode, prefetch, graph, frames, channels_last, side = row_keys
        # every combination compiles anew: dynamo's per-function cache (8 entries) would
        # otherwise fill up over the rows and run the later "compiled" ones eagerly
        torch.compiler.reset()
        if graph and precision == "fp16":
            print(f"{name}: no CUDA graph row in fp16 (loss scaling syncs the host)")
            continue
        rb = buffer_on(device.type if frames == "device" else "cpu")
        net = build_network(nc, FLOAT_DIM, frame).to(device)
        # learner.compile and learner.cuda_graph, as a training run sets them
        compiled = {**learner, **compile_keys(mode, graph), "cuda_graph": graph}
        compiled["target_thread"] = side == "target"
        compiled["split_step"] = side == "split"
        module = IQNLightningModule(net, compiled, nc.n_quantiles_train, nc.n_quantiles_target)
        module.to(device)
        stepper = Stepper(module.configure_optimizers(), learner, device, precision)
        if not channels_last:  # undo what configure_optimizers does on a GPU (before any step)
            for n in (module.online_network, module.target_network):
                n.to(memory_format=torch.contiguous_format)
        ours = Ours(rb, module, stepper, args.batch, prefetch, graph)
        ref = Reference(nc, learner, device, args.batch, precision)
        n_ours = sum(p.numel() for p in module.online_network.parameters())
        n_ref = sum(p.numel() for p in ref.online.parameters())
        assert n_ours == n_ref, f"{name}: the reference has {n_ref} parameters, ours {n_ours}"
        ours_s, ref_s, shares, steps = interleave(ours, ref, device, args)
        apart = time_apart(ours, device, args.batch)
        if args.profile:
            print_profile(
                ours,
                device,
                args.profile,
                f"{name} {device.type} {precision} graph {int(graph)} frames {frames} "
                f"channels_last {int(channels_last)} side thread {side}",
            )
        if ours.prefetcher is not None:
            ours.prefetcher.close()
        rows.append(
            {
                "preset": name,
                "device": device.type,
                "precision": precision,
                "compile": mode,
                "prefetch": prefetch,
                "graph": graph,
                "graph_failed": ours.captured.failed if ours.captured is not None else None,
                "frames": frames,
                "batch": args.batch,
                "ours": args.batch / statistics.median(ours_s),
                "ref": args.batch / statistics.median(ref_s),
                "share": statistics.median(shares),
                "bytes": rb.bytes_per_transition(),
                "frame_bytes": math.prod(nc.image_shape) if nc.image_shape else None,
                "transitions": transitions,
                "steps": steps,
                "channels_last": channels_last,
                "side_thread": side,
                **apart,
            }
        )
        print(
            f"{name} on {device.type}, {precision}, compile {mode}, prefetch {prefetch}, "
            f"graph {int(graph)}, frames on {frames}, channels_last {int(channels_last)}, "
            f"side thread {side}: "
            f"{rows[-1]['ours']:,.0f} samples/s ({rows[-1]['ours'] / args.batch:,.1f} batches/s);"
            f" apart: sample {apart['sample_ms']:.2f} ms, update {apart['update_ms']:.2f} ms",
            flush=True,
        )
        del ours, ref, module, net, stepper
    return rows


def print_profile(ours: Ours, device: torch.device, steps: int, label: str) -> None:
    """torch.profiler over `steps` of our steps: the ops and kernels that take the time (on a
    GPU sorted by device time: where a step's milliseconds go, graph or not)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        for _ in range(steps):
            ours.step()
        sync(device)
    key = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    print(f"\nprofile of {steps} steps, {label}:")
    print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))


def combos(devices: list[str], args) -> list[tuple]:
    """(device, precision, compile, prefetch, graph, frames, channels_last, side_thread) of
    each row. Frames on the device are GPU rows only; a CPU "graph" row runs the update it
    would capture, eagerly (a dry run of the GPU rows). The side thread is a CPU switch: a GPU
    row runs without it (none), as a GPU run does."""
    out = []
    for d in devices:
        gpu = d == "cuda"
        for p in precisions(args, d):
            for c in args.compile:
                for q in args.prefetch:
                    for g in args.cuda_graph:  # on a CPU: the same update, eager
                        for f in args.frames if gpu else ["host"]:
                            for cl in args.channels_last if gpu else [0]:
                                for t in ["none"] if gpu else args.side_thread:
                                    row = (torch.device(d), p, c, q, bool(g), f, bool(cl))
                                    out.append((*row, t))
    return out


def precisions(args, device: str) -> list[str]:
    """The precisions of a device's rows: --precision, or with --amp fp16 on the GPU only."""
    if args.amp:
        return ["fp16"] if device == "cuda" else ["fp32"]
    return args.precision


def interleave(ours: Ours, ref: Reference, device, args):
    """Seconds a step of each, repeat by repeat (alternating which goes first), and the
    sample + collate share of ours; every repeat runs about ``repeat_s`` of our steps."""
    for runner in (ours, ref):  # warm up: allocations, first-call costs
        time_steps(runner, 1, device)
    steps = max(1, round(args.repeat_s / time_steps(ours, 1, device)[0]))
    ours_s, ref_s, shares = [], [], []
    for r in range(args.repeats):
        for runner in (ours, ref) if r % 2 == 0 else (ref, ours):
            total, sample = time_steps(runner, steps, device)
            if runner is ours:
                ours_s.append(total / steps)
                shares.append(sample / total)
            else:
                ref_s.append(total / steps)
    return ours_s, ref_s, shares, steps


def time_apart(ours: Ours, device, batch: int, n: int = 10) -> dict[str, float]:
    """Milliseconds of sampling alone and of the update alone (on one fixed batch), each
    synchronised: which of the two bounds the overlapped step, and the GPU step's own time
    (for a graph row, its replay)."""

    def median_ms(fn) -> float:
        times = []
        for _ in range(n):
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    fixed = ours.rb.sample(batch)
    if ours.prefetcher is not None and ours.prefetcher.pin:  # as the prefetched batches are
        fixed = pinned(fixed)
    return {
        "sample_ms": median_ms(lambda: ours.rb.sample(batch)),
        "update_ms": median_ms(lambda: ours.update(fixed)),
    }


def default_transitions(nc: NetworkConfig, quick: bool) -> int:
    """20k transitions; 10k for 120x160 frames (memory, fill time); a quarter with --quick."""
    big = nc.image_shape is not None and math.prod(nc.image_shape) > 10_000
    return (10_000 if big else 20_000) // (4 if quick else 1)


def print_table(rows: list[dict], args) -> None:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\nlearner step at batch {args.batch}, {args.threads} torch threads, median of "
        f"{args.repeats} interleaved repeats (load average {load}: other work skews the figures)"
    )
    print(f"devices: {device_names(sorted({r['device'] for r in rows}))}")
    print(
        "| preset | device | precision | compile | graph | frames | prefetch | ours samples/s "
        "| batches/s | eager ref samples/s | ratio | collate share | sample ms | update ms "
        "| bytes/transition | x frame | side thread |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        frame = f"{r['bytes'] / r['frame_bytes']:.2f}" if r["frame_bytes"] else "no frame"
        print(
            f"| {r['preset']} | {r['device']} | {r['precision']} | {r['compile']} "
            f"| {graph_label(r)}{' NHWC' if r.get('channels_last') else ''} | {r['frames']} "
            f"| {r['prefetch']} | {r['ours']:,.0f} | {r['ours'] / args.batch:,.1f} "
            f"| {r['ref']:,.0f} "
            f"| {r['ours'] / r['ref']:.2f} | {100 * r['share']:.1f}% | {r['sample_ms']:.2f} "
            f"| {r['update_ms']:.2f} | {r['bytes']:,.0f} "
            f"| {frame} | {r.get('side_thread', 'none')} |"
        )
    for r in rows:
        print(
            f"{r['preset']} {r['device']}: buffer of {r['transitions']:,} transitions, "
            f"{r['steps']} steps a repeat"
        )
        if r.get("graph_failed"):
            print(f"  CUDA graph capture failed: {r['graph_failed']}")


def graph_label(row: dict) -> str:
    """yes (captured), no (eager), or failed (capture failed: the step ran eagerly)."""
    if not row["graph"]:
        return "no"
    return "failed" if row.get("graph_failed") else "yes"


def device_names(devices: list[str]) -> str:
    """What the rows ran on, in words: the CPU model and the GPU's name."""
    names = []
    for d in devices:
        if d == "cuda":
            names.append(f"cuda = {torch.cuda.get_device_name()}")
        else:
            names.append(f"cpu = {cpu_model()}, {os.cpu_count()} cores")
    return "; ".join(names)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def print_budgets(rows: list[dict]) -> None:
    """The issue's budgets (2 CPU cores) next to the figures, pass or not (fp32, eager)."""
    cpu = [
        r
        for r in rows
        if r["device"] == "cpu"
        and r["precision"] == "fp32"
        and r["compile"] == "none"
        and r["prefetch"] == 0
    ]
    print("\nbudgets (2 CPU cores):")
    for r in cpu:
        if r["preset"] == "iqn_cpu":
            ok = r["ours"] >= BUDGET_SAMPLES
            print(f"- iqn_cpu >= {BUDGET_SAMPLES:,} samples/s: {r['ours']:,.0f} {verdict(ok)}")
    for r in cpu:
        ok = r["share"] < BUDGET_COLLATE
        print(
            f"- {r['preset']} collate < {BUDGET_COLLATE:.0%} of the step: "
            f"{100 * r['share']:.1f}% {verdict(ok)}"
        )
    for r in cpu:
        if r["frame_bytes"] is None:
            print(f"- {r['preset']}: {r['bytes']:,.0f} bytes/transition (no frame)")
            continue
        x = r["bytes"] / r["frame_bytes"]
        if r["frame_bytes"] >= 120 * 160:
            print(f"- {r['preset']} <= {BUDGET_BYTES}x frame bytes: {x:.2f}x {verdict(x <= 1.2)}")
        else:
            print(
                f"- {r['preset']}: {x:.2f}x its {r['frame_bytes']:,}-byte frame (the budget is "
                f"for 1x120x160; 184 float32 features alone are {4 * FLOAT_DIM} bytes)"
            )


def verdict(ok: bool) -> str:
    return "(ok)" if ok else "(OVER BUDGET)"


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller buffers")
    ap.add_argument("--presets", nargs="+", default=list(DEFAULT_PRESETS), choices=PRESETS)
    ap.add_argument("--batch", type=int_at_least(1), default=512)
    ap.add_argument(
        "--threads", type=int_at_least(1), default=2, help="torch threads (the learner's cores)"
    )
    ap.add_argument(
        "--repeats", type=int_at_least(1), help="timed repeats of each (default 7, quick 3)"
    )
    ap.add_argument(
        "--transitions", type=int_at_least(1), help="buffer size (default 20k; 10k at 120x160)"
    )
    ap.add_argument(
        "--repeat-s", type=positive_float(), help="seconds of steps a repeat (2, quick 0.5)"
    )
    ap.add_argument("--devices", nargs="+", choices=("cpu", "cuda"), help="default: all found")
    ap.add_argument(
        "--precision",
        nargs="+",
        choices=tuple(PRECISIONS),
        default=None,
        help="autocast precisions, a row each (fp16 is loss-scaled on a GPU; default fp32)",
    )
    ap.add_argument(
        "--compile",
        nargs="+",
        choices=COMPILE_CHOICES,
        default=["none"],
        help="torch.compile modes of our networks, a row each (none: eager; MODE+loss: the "
        "loss compiled too)",
    )
    ap.add_argument(
        "--prefetch",
        nargs="+",
        type=int_at_least(0),
        default=[0],
        help="batches sampled ahead on a thread, a row each (0: in the step)",
    )
    ap.add_argument(
        "--cuda-graph",
        nargs="+",
        type=int,
        choices=(0, 1),
        default=[0],
        help="GPU rows: 1 captures our update as one CUDA graph (learner.cuda_graph), a row each",
    )
    ap.add_argument(
        "--frames",
        nargs="+",
        choices=("host", "device"),
        default=["host"],
        help="GPU rows: the buffer's frames in host memory or on the GPU, a row each",
    )
    ap.add_argument(
        "--channels-last",
        nargs="+",
        type=int,
        choices=(0, 1),
        default=[1],
        help="GPU rows: 1 keeps our conv weights channels_last (NHWC), as a GPU learner does; "
        "0 in NCHW (the first conv's GEMM still gives NHWC); a row each",
    )
    ap.add_argument(
        "--side-thread",
        nargs="+",
        choices=("none", "target", "split"),
        default=["target"],
        help="CPU rows: the step on one thread, the target's forward on a side thread "
        "(learner.target_thread), or half the batch there (learner.split_step); a row each",
    )
    ap.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    ap.add_argument(
        "--profile",
        type=int_at_least(1),
        help="profile this many steps of each row (torch.profiler, top ops by time)",
    )
    ap.add_argument("--amp", action="store_true", help="fp16 autocast on the GPU, fp32 on the CPU")
    args = ap.parse_args(argv)
    if args.amp and args.precision:
        ap.error("--amp and --precision: give one of them")
    args.precision = args.precision or ["fp32"]
    args.repeats = args.repeats or (3 if args.quick else 7)
    args.repeat_s = args.repeat_s or (0.5 if args.quick else 2.0)
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in devices and not torch.cuda.is_available():
        ap.error("--devices cuda: CUDA is not available")
    torch.set_num_threads(args.threads)
    if "cuda" in devices:  # as a GPU training run sets them (training/run.py)
        torch.backends.cudnn.benchmark = True
        torch.set_float32_matmul_precision("high")
    learner = load_group("learner", "iqn")
    rows = [row for name in args.presets for row in bench_preset(name, devices, args, learner)]
    print_table(rows, args)
    print_budgets(rows)
    if args.json:
        names = device_names(sorted({r["device"] for r in rows}))
        args.json.write_text(json.dumps({"devices": names, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
