"""One training run from a validated RunPlan: wire the parts, fit, summarise.

scripts/train.py validates the Hydra config into a RunPlan (nothing starts on a bad
config) and calls `train(plan)`, which returns the objective a sweep minimises: the best
greedy race time over the reference time, averaged over the maps of the cycle (a map never
finished counts as FAIL_RATIO).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from trackmind.collectors.protocol import CollectorPool, make_collector_pool
from trackmind.collectors.shared_handles import SharedHandles, make_shared, shared_device
from trackmind.logs import tidy_library_output
from trackmind.replay.buffers import make_buffers
from trackmind.replay.config import BufferConfig, frames_device
from trackmind.sim.reference import reference_time_ms
from trackmind.tracking.mlflow_run import close_run, is_mlflow, open_run, start_system_metrics
from trackmind.training.best_weights import (
    BestRaceKeeper,
    WeightHistory,
    WeightPublisher,
    history_budget,
)
from trackmind.training.callbacks import (
    CollectorCallback,
    RaceMetricsCallback,
    StopWhenStarved,
    TrialPruning,
)
from trackmind.training.checkpoint import (
    CheckpointCallback,
    check_network_matches,
    read_checkpoint,
)
from trackmind.training.datamodule import ReplayDataModule
from trackmind.training.factory import RunPlan
from trackmind.training.module import IQNLightningModule
from trackmind.training.progress import RaceProgressBar
from trackmind.training.race_media import BestRaceMedia
from trackmind.training.race_stats import RaceStats
from trackmind.training.schema import TrainerConfig
from trackmind.training.stop_signal import StopAtStepBoundary
from trackmind.training.validation import ValidationCallback, ValidationRaces

log = logging.getLogger(__name__)
FAIL_RATIO = 10.0


def restore_buffers(buffers: Any, path: Path) -> None:
    """The replay buffer saved with the checkpoint; a missing/corrupt one is only a warning."""
    try:
        buffers.load(path)
        log.info("replay buffer restored from %s (%d transitions)", path, len(buffers))
    except (OSError, ValueError) as e:
        log.warning("replay buffer not restored (%s): it refills from the collectors", e)


def objective(stats: RaceStats, maps: list[str]) -> float:
    """Mean over maps of the best greedy ratio (FAIL_RATIO for a map never finished)."""
    vals = []
    for m in maps:
        times = [h["time_ms"] for h in stats.history if h["map"] == m and h["time_ms"] is not None]
        ref = stats.reference_ms.get(m)
        vals.append(min(times) / ref if times and ref else FAIL_RATIO)
    return float(sum(vals) / len(vals)) if vals else FAIL_RATIO


@dataclass
class Learner:
    """The learner's side of a run: the module (online/target networks), the memory it
    shares with the collectors, the replay buffers, and the recent weight versions."""

    module: IQNLightningModule
    shared: SharedHandles
    buffers: Any
    history: WeightHistory


def learner_device(trainer: TrainerConfig) -> str:
    """The learner's torch device type: cuda for a GPU trainer on a machine with CUDA."""
    gpu = trainer.accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available()
    return "cuda" if gpu else "cpu"


def learner_gpu_bytes(trainer: TrainerConfig) -> int | None:
    """The memory of the learner's GPU in bytes; None for a CPU learner."""
    if learner_device(trainer) != "cuda":
        return None
    return torch.cuda.get_device_properties(0).total_memory


def buffer_frames_device(
    config: BufferConfig, gpu_bytes: int | None, frame: tuple[int, ...] | None
) -> str:
    """Where the replay buffers keep their frames (replay.config.frames_device), for a learner
    with `gpu_bytes` of GPU memory (None: a CPU learner)."""
    device = "cpu" if gpu_bytes is None else "cuda"
    frame_bytes = math.prod(frame) if frame is not None else 0
    where = frames_device(config.frames_on, device, config.max_frame_bytes(frame_bytes), gpu_bytes)
    log.info("replay frames stored on %s (buffer.frames_on=%s)", where, config.frames_on)
    return where


def build_learner(plan: RunPlan, resumed_state: dict | None) -> Learner:
    """Networks, shared memory, buffers and module; a checkpoint of another architecture
    is refused here, before any process starts."""
    net = plan.new_network()
    device = shared_device(plan.collector, torch.cuda.is_available())  # the collectors'
    shared = make_shared(plan.new_network(), plan.collector.queue_size, device)
    frame = (1, *plan.frame_shape) if plan.frame_shape is not None else None
    gpu_bytes = learner_gpu_bytes(plan.trainer)  # frames and weight history may live there
    buffers = make_buffers(
        plan.buffer,
        frame,
        plan.float_dim,
        ms_per_action=plan.ms_per_action,
        seed=plan.run.seed,
        device=buffer_frames_device(plan.buffer, gpu_bytes, frame),
    )
    history = WeightHistory.sized_for(net, history_budget(gpu_bytes))
    module = IQNLightningModule(
        net,
        plan.learner,
        n_quantiles_train=plan.network.n_quantiles_train,
        n_quantiles_target=plan.network.n_quantiles_target,
        policy_cvar=plan.network.policy_cvar,
        frames=shared.frames_played,
        publish=WeightPublisher(shared, history),
        on_priorities=buffers.update_priorities if buffers.config.prioritized else None,
        float_mirror=plan.float_mirror,
    )
    if resumed_state is not None:
        check_network_matches(resumed_state, module)
    return Learner(module, shared, buffers, history)


def build_data(
    plan: RunPlan, learner: Learner, pool: CollectorPool, on_best_race: Callable[[dict], None]
) -> ReplayDataModule:
    """The DataModule that streams batches from the buffers the collectors fill."""
    entries, trainer = plan.cycle.entries, plan.trainer
    max_time_s = trainer.max_time_s
    stats = RaceStats(
        reference_ms={e.name: reference_time_ms(e.track) for e in entries},
        length_m={e.name: e.track.length_m for e in entries},
    )
    return ReplayDataModule(
        learner.buffers,
        learner.shared,
        batch_size=plan.learner.batch_size,
        replay_ratio=plan.learner.replay_ratio,
        gamma=learner.module.current_gamma,
        potential_weights=plan.potential_weights,
        stats=stats,
        check_collectors=pool.check,
        val_batches=trainer.limit_val_batches,
        # a learner starved of data still stops (Lightning's timer first)
        wait_limit_s=float(max_time_s) + 60.0 if max_time_s else None,
        on_best_race=on_best_race,
        # page-locked batches: Lightning's non_blocking copy to the GPU is then asynchronous
        pin_memory=trainer.accelerator in ("gpu", "cuda") and torch.cuda.is_available(),
        # the next batches sampled on a thread while the learner's step runs
        prefetch_batches=trainer.prefetch_batches,
        # races stored on a thread of their own, while the learner's step runs
        intake_thread=trainer.intake_thread,
        intake_ahead_batches=trainer.intake_ahead_batches,
        # a captured step's inputs stay in pinned memory until it copies them into its graph
        host_inputs=learner.module.host_inputs,
    )


class RestartLog:
    """The pool's `on_restart`: evidence that buffered data survives a collector restart."""

    def __init__(self, dm: ReplayDataModule) -> None:
        self.dm = dm
        self.records: list[dict] = []

    def __call__(self, idx: int) -> None:
        added = self.dm.transitions_added
        self.records.append(
            {"collector": idx, "buffer": len(self.dm.buffers), "transitions_added": added}
        )


def cpu_has_native_bf16() -> bool:
    """Does this CPU run bf16 matmuls in hardware (AVX512-BF16, AMX)? Else they are emulated."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def make_trainer(tcfg: TrainerConfig, logger: Any, callbacks: list, output_dir: Path) -> L.Trainer:
    """The Lightning Trainer from the `trainer` group (checked by plan_run)."""
    max_time = tcfg.max_time_s
    bf16_cpu = str(tcfg.precision).startswith("bf16") and tcfg.accelerator == "cpu"
    if bf16_cpu and not cpu_has_native_bf16():
        log.warning(
            "trainer.precision=%s: this CPU has no bf16 instructions, so the learner will be "
            "slower than with 32-true",
            tcfg.precision,
        )
    gpu = learner_device(tcfg) == "cuda"
    if gpu:  # TF32 matmuls for fp32 layers (Lightning advises it on tensor-core GPUs)
        torch.set_float32_matmul_precision("high")
    return L.Trainer(
        benchmark=True if gpu else None,  # cuDNN picks the fastest conv kernels per shape
        accelerator=tcfg.accelerator,
        devices=tcfg.devices,
        precision=tcfg.precision,
        max_steps=tcfg.max_steps,
        max_epochs=-1,
        max_time=timedelta(seconds=float(max_time)) if max_time else None,
        val_check_interval=tcfg.val_check_interval,
        check_val_every_n_epoch=None,
        limit_val_batches=tcfg.limit_val_batches,
        num_sanity_val_steps=0,
        log_every_n_steps=tcfg.log_every_n_steps,
        logger=logger if logger is not None else False,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=tcfg.progress_bar,
        enable_model_summary=False,
        default_root_dir=str(output_dir),
    )


def fit(trainer: L.Trainer, module, dm, resume: Path | None, ckpt_cb) -> str | None:
    """trainer.fit; the signal that stopped it ("SIGINT", "SIGTERM") or None.

    Ctrl-C is raised at a step's end (StopAtStepBoundary), SIGTERM likewise by Lightning.
    Lightning saves last.ckpt (CheckpointCallback.on_exception), then turns Ctrl-C into
    SystemExit(1) and re-raises SIGTERM as SIGTERMException: the run's records are then
    finished as for any other end.
    """
    try:
        trainer.fit(
            module,
            datamodule=dm,
            ckpt_path=str(resume) if resume is not None else None,
            weights_only=True if resume is not None else None,
        )
    except (KeyboardInterrupt, SystemExit, SIGTERMException) as e:
        if isinstance(e, SystemExit) and not ckpt_cb.interrupted:
            raise
        stop_signal = "SIGTERM" if isinstance(e, SIGTERMException) else "SIGINT"
        log.warning("%s: stopping; checkpoint, agent.pt and summary.json are kept", stop_signal)
        return stop_signal
    return None


def read_resume(resume: Path | None) -> tuple[dict | None, dict | None]:
    """(the run's saved trackmind record, its weights) from a checkpoint; (None, None)."""
    if resume is None:
        return None, None
    ckpt = read_checkpoint(resume)
    return ckpt["trackmind"], ckpt["state_dict"]


def run_output_dir(output_dir: str | Path, saved: dict | None) -> Path:
    """Where the run writes: a resumed run keeps writing where it started."""
    if saved is not None and Path(saved["output_dir"]).is_dir():
        output_dir = saved["output_dir"]
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out


@dataclass
class RunParts:
    """What a fit is wired from, beside the learner: the pool, the data, the callbacks."""

    output_dir: Path
    learner: Learner
    pool: CollectorPool
    dm: ReplayDataModule
    maps: list[str]
    restarts: RestartLog
    ckpt_cb: CheckpointCallback
    metrics_cb: RaceMetricsCallback
    pruning: TrialPruning
    callbacks: list
    validation: ValidationCallback | None = None


def wire_run(plan: RunPlan, output_dir: Path, learner: Learner) -> RunParts:
    """Collectors, DataModule, best.pt and media, restart records, checkpoints, metrics,
    pruning and the progress bar, connected to one another."""
    cfg, collector = plan.cfg, plan.collector
    pool = make_collector_pool(
        plan.collectors, learner.shared, collector.processes, collector.max_restarts, plan.run.seed
    )
    tracks = {e.name: e.track for e in plan.cycle.entries}
    maps = [e.name for e in plan.cycle.entries]  # a map repeated in the cycle counts again
    lc = plan.logger
    media = BestRaceMedia(output_dir, tracks, lc.media_every_s, plan.ms_per_action, lc.media_share)
    best = BestRaceKeeper(output_dir / "best.pt", cfg, learner.history, learner.module, media)
    dm = build_data(plan, learner, pool, on_best_race=best)
    pool.on_restart = restarts = RestartLog(dm)
    ck = plan.checkpoint
    ckpt_cb = CheckpointCallback(
        output_dir, cfg, ck.every_s, ck.save_buffer, ck.log_to_mlflow, learner.buffers
    )
    epsilon = partial(epsilon_at, plan.collectors.exploration, learner.shared)
    metrics_cb = RaceMetricsCallback(dm, plan.logger.log_every_s, pool, epsilon)
    pruning = TrialPruning(partial(objective, dm.stats, maps))  # in Optuna sweeps
    callbacks = [
        StopAtStepBoundary(),  # first: a Ctrl-C ends the step before anything else runs
        CollectorCallback(pool, learner.shared),
        StopWhenStarved(dm),
        metrics_cb,
        ckpt_cb,
        media,
        pruning,
    ]
    validation = validation_callback(plan, output_dir)
    if validation is not None:
        callbacks.append(validation)
    if plan.trainer.progress_bar:
        callbacks.append(RaceProgressBar(metrics_cb, budget_s=plan.trainer.max_time_s))
    return RunParts(
        output_dir,
        learner,
        pool,
        dm,
        list(tracks),
        restarts,
        ckpt_cb,
        metrics_cb,
        pruning,
        callbacks,
        validation,
    )


def validation_callback(plan: RunPlan, output_dir: Path) -> ValidationCallback | None:
    """validated.pt's keeper when `validation.maps` names held-out maps (None otherwise)."""
    v = plan.validation
    if not v.maps:
        return None
    spec = plan.collectors
    races = ValidationRaces(plan.validation_entries, spec.env, spec.reward, plan.new_network)
    path = output_dir / "validated.pt"
    snapshots = output_dir / "validation" if v.snapshots else None
    return ValidationCallback(
        races, v.every_s, path, plan.cfg, plan.network, snapshots, average=v.average
    )


def write_summary(
    parts: RunParts, trainer: L.Trainer, logger: Any, result: float, **figures: Any
) -> Path:
    """summary.json: what the run did (bench_learning and the tests read it back)."""
    dm, shared, module = parts.dm, parts.learner.shared, parts.learner.module
    ckpt = parts.ckpt_cb.last_path
    summary = {
        "objective": result if math.isfinite(result) else None,
        "global_step": int(trainer.global_step),
        "samples_learned": int(module.samples_learned),
        "resumed_from": figures.pop("resumed_from"),
        "checkpoint": str(ckpt) if ckpt else None,
        "races": dm.stats.races,
        "transitions": dm.stats.transitions,
        "frames": int(shared.frames.value),
        "weights_published": int(shared.weights_version.value),
        "race_weights_versions": sorted(dm.stats.weights_versions),
        "collector_restarts": parts.pool.restarts,
        "restarts": parts.restarts.records,
        "buffer_size": len(parts.learner.buffers),
        "transitions_added": dm.transitions_added,
        "greedy_races": dm.stats.history,
        "last_metrics": parts.metrics_cb.last_metrics,
        "mlflow_run_id": getattr(logger, "run_id", None),
        "stopped_by": figures.pop("stopped_by"),
        "pruned_at_minute": parts.pruning.pruned_at,
        "validation": parts.validation.history if parts.validation is not None else [],
        "pid": os.getpid(),
    }
    path = parts.output_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=1, default=float))
    return path


def train(
    plan: RunPlan,
    output_dir: str | Path,
    run_name: str | None = None,
    tags: dict | None = None,
    resume: Path | None = None,
) -> float:
    """Fit, summarise, return the objective; `resume`: a checkpoint of this run to continue."""
    tidy_library_output()
    cfg = plan.cfg
    saved, resumed_state = read_resume(resume)
    output_dir = run_output_dir(output_dir, saved)
    torch.set_num_threads(plan.trainer.torch_threads)
    L.seed_everything(plan.run.seed, workers=False, verbose=False)
    learner = build_learner(plan, resumed_state)
    del resumed_state  # the weights come back through trainer.fit(ckpt_path=...)
    parts = wire_run(plan, output_dir, learner)
    log.info("outputs: %s (checkpoints in %s)", output_dir, parts.ckpt_cb.dir)
    run_tags = dict(tags or {}, output_dir=str(output_dir))
    logger = open_run(plan.logger, cfg, output_dir, run_name, run_tags, saved)
    if saved is not None and saved.get("buffer_file"):
        restore_buffers(learner.buffers, Path(resume).parent / saved["buffer_file"])
    trainer = make_trainer(plan.trainer, logger, parts.callbacks, output_dir)
    sysmon = start_system_metrics(logger, plan.logger) if is_mlflow(logger) else None
    if resume is not None:
        log.info("resuming from %s", resume)
    try:
        stop_signal = fit(trainer, learner.module, parts.dm, resume, parts.ckpt_cb)
    finally:
        parts.pool.stop()
        if sysmon is not None:
            sysmon.finish()
    result = objective(parts.dm.stats, parts.maps)
    if parts.pruning.pruned_at is not None:
        log.info("Optuna pruned this trial after %d minute(s)", parts.pruning.pruned_at)
    agent = output_dir / "agent.pt"  # the final acting network with the config that built it
    torch.save({"network": learner.module.acting.state_dict(), "config": cfg}, agent)
    resumed_from = str(resume) if resume is not None else None
    summary = write_summary(
        parts, trainer, logger, result, resumed_from=resumed_from, stopped_by=stop_signal
    )
    close_run(logger, result, run_files(summary, agent), stopped=stop_signal is not None)
    if stop_signal is not None:
        raise SystemExit(130 if stop_signal == "SIGINT" else 143)
    return result


def run_files(summary: Path, agent: Path) -> list[Path]:
    """What a run logs as MLflow artifacts at its end: summary.json, agent.pt (the final
    weights), best.pt (the weights of its best greedy race, the objective's) if a greedy
    race finished, validated.pt (the best on the validation maps) if it has some, and
    averaged.pt and ensemble.pt (the mean of the last validations' weights, and those weights
    as one ensemble) with `validation.average`."""
    names = ("best.pt", "validated.pt", "averaged.pt", "ensemble.pt")
    kept = [agent.parent / n for n in names]
    return [summary, agent, *(p for p in kept if p.is_file())]


def epsilon_at(explorer: Any, shared: SharedHandles) -> float:
    """The exploration epsilon at the frames played so far (a metric)."""
    return explorer.params(shared.frames.value).epsilon
