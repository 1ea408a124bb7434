"""Schemas of the run-level groups: map, trainer, logger, checkpoint, collector.

Every group is a dataclass whose fields are its keys, checked by the one function
`trackmind.errors.check_schema` (OmegaConf merge: unknown keys and wrong types refused;
`__post_init__`: ranges). Groups that configure one part keep their schema beside it:
learner (training.module.LearnerConfig), buffer (replay.config.BufferConfig), collector=ray
(distributed.config), the real game (tmi.config). plan_run checks all of them before
anything starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from trackmind.errors import require

ACCELERATORS = ("cpu", "gpu", "cuda", "auto")
# Lightning's precision names (the short ones are its aliases)
PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16", "16-mixed", "16", "bf16-true", "16-true")


@dataclass
class RunConfig:
    """train.yaml's own keys (the groups have their schemas)."""

    seed: int = 0
    run_name: str | None = None  # MLflow run name; default: the overrides of the run
    resume: str | None = None  # a checkpoint, a run's output dir or an MLflow run id


def check_trainer_machine(tcfg: Mapping, cuda_devices: int) -> None:
    """The trainer's settings against this machine: a GPU asked for must be here."""
    acc, dev = tcfg["accelerator"], tcfg["devices"]
    on_gpu = acc in ("gpu", "cuda") or (acc == "auto" and cuda_devices > 0)
    require(
        on_gpu or not isinstance(dev, list),
        "trainer.devices",
        f"{dev} names a GPU, but the learner runs on the CPU here (devices: 1)",
    )
    if acc in ("gpu", "cuda"):
        require(
            cuda_devices > 0,
            "trainer.accelerator",
            f"{acc} asked for, but torch finds no CUDA GPU on this machine (use trainer=cpu)",
        )
        index = dev[0] if isinstance(dev, list) else 0
        require(
            index < cuda_devices,
            "trainer.devices",
            f"GPU number {index} asked for, but this machine has {cuda_devices}",
        )


@dataclass
class TrainerConfig:
    """Lightning Trainer settings of the learner (conf/trainer)."""

    accelerator: str = "cpu"
    devices: Any = 1
    precision: str = "32-true"
    max_time_s: float | None = 1800.0  # wall clock of the run
    max_steps: int = -1  # learner batches (-1: until max_time_s)
    val_check_interval: int = 1000
    limit_val_batches: int = 4
    log_every_n_steps: int = 25
    torch_threads: int = 2
    prefetch_batches: int = 0  # batches sampled ahead on a thread (a GPU learner)
    progress_bar: bool = True

    def __post_init__(self) -> None:
        require(
            self.accelerator in ACCELERATORS,
            "trainer.accelerator",
            f"must be one of {', '.join(ACCELERATORS)}, got {self.accelerator!r}",
        )
        require(
            str(self.precision) in PRECISIONS,
            "trainer.precision",
            f"must be one of {', '.join(PRECISIONS)}, got {self.precision!r}",
        )
        d = self.devices
        one = d == 1 or (
            isinstance(d, list) and len(d) == 1 and isinstance(d[0], int) and d[0] >= 0
        )
        require(
            one and not isinstance(d, bool),
            "trainer.devices",
            f"must be 1, or [i] for GPU number i: the learner runs in one process, got {d!r}",
        )
        mt, ms = self.max_time_s, self.max_steps
        require(mt is None or mt > 0, "trainer.max_time_s", f"must be > 0 or null, got {mt!r}")
        require(ms == -1 or ms > 0, "trainer.max_steps", f"must be -1 or > 0, got {ms!r}")
        require(
            mt is not None or ms > 0,
            "trainer",
            "set max_time_s or max_steps, or the run never ends",
        )
        for name in ("val_check_interval", "limit_val_batches", "log_every_n_steps"):
            v = getattr(self, name)
            require(v >= 1, f"trainer.{name}", f"must be an integer >= 1, got {v!r}")
        require(
            self.torch_threads >= 1,
            "trainer.torch_threads",
            f"must be an integer >= 1, got {self.torch_threads!r}",
        )
        require(
            self.prefetch_batches >= 0,
            "trainer.prefetch_batches",
            f"must be an integer >= 0, got {self.prefetch_batches!r}",
        )


@dataclass
class MapConfig:
    """The ``map`` group: the cycle of maps (each item an env.map_cycle.CycleEntryConfig)."""

    cycle: Any = MISSING


@dataclass
class LoggerConfig:
    """Where metrics go (conf/logger): MLflow, CSV files or nowhere."""

    backend: str = "mlflow"
    tracking_uri: str | None = None
    experiment_name: str = "trackmind"
    artifact_location: str | None = None  # default: <sqlite db dir>/mlartifacts
    log_every_s: float = 10.0
    system_metrics_every_s: float = 10.0  # 0: off
    media_every_s: float = 120.0  # draw new best greedy races (plot + GIF) at most this often

    def __post_init__(self) -> None:
        require(
            self.backend in ("mlflow", "csv", "none"),
            "logger.backend",
            f"must be mlflow, csv or none, got {self.backend!r}",
        )
        require(
            self.backend != "mlflow" or bool(self.tracking_uri),
            "logger.tracking_uri",
            "MLflow needs a tracking URI (sqlite:///outputs/mlflow.db or http://127.0.0.1:5000)",
        )
        require(
            self.media_every_s > 0,
            "logger.media_every_s",
            f"must be > 0, got {self.media_every_s}",
        )
        require(self.log_every_s > 0, "logger.log_every_s", f"must be > 0, got {self.log_every_s}")
        require(
            self.system_metrics_every_s >= 0,
            "logger.system_metrics_every_s",
            f"must be >= 0, got {self.system_metrics_every_s}",
        )


@dataclass
class CheckpointConfig:
    """Periodic checkpoints of the learner (train.yaml `checkpoint`)."""

    every_s: float | None = 300.0  # null: only at the end of the run
    save_buffer: bool = False
    log_to_mlflow: bool = True

    def __post_init__(self) -> None:
        require(
            self.every_s is None or self.every_s > 0,
            "checkpoint.every_s",
            f"must be > 0 seconds or null (only at the end), got {self.every_s!r}",
        )


INFERENCE_LAYOUTS = ("process", "server")
LEARNER_CORES = 3  # the learner's main thread, its batch-prefetch thread, the inference server


def auto_processes(cores: int) -> int:
    """collector.processes=auto: one collector per core the learner leaves free, at least 1."""
    return max(1, int(cores) - LEARNER_CORES)


def int_at_least(value: int, low: int, key: str) -> None:
    require(value >= low, key, f"must be an integer >= {low}, got {value!r}")


@dataclass
class CollectorConfig:
    """Collector processes on this machine (conf/collector/local.yaml, where the defaults
    live): LocalCollectorPool's processes and what each collector runs."""

    backend: str = MISSING  # local | ray (distributed.config.RayCollectorConfig)
    processes: Any = MISSING  # an integer >= 1, or auto: one per CPU core the learner leaves
    cars_per_process: int = MISSING
    refresh_every_actions: int = MISSING
    queue_size: int = MISSING
    torch_threads: int = MISSING
    max_restarts: int = MISSING
    device: str = "auto"  # inference: auto (cuda when there is a GPU) | cpu | cuda
    # process: each collector runs its own network; server: one process runs every
    # collector's cars in one batch (training/inference_server.py)
    inference: str = "process"
    precision: str = "fp32"  # inference arithmetic: fp32 | bf16 (autocast, collectors on a GPU)

    def __post_init__(self) -> None:
        from trackmind.agent.device import check_device_name

        check_device_name(self.device, "collector.device")
        require(
            self.inference in INFERENCE_LAYOUTS,
            "collector.inference",
            f"must be one of {', '.join(INFERENCE_LAYOUTS)}, got {self.inference!r}",
        )
        require(
            self.precision in ("fp32", "bf16"),
            "collector.precision",
            f"must be fp32 or bf16, got {self.precision!r}",
        )
        if self.processes == "auto":
            self.processes = auto_processes(os.cpu_count() or 1)
        require(
            isinstance(self.processes, int) and not isinstance(self.processes, bool),
            "collector.processes",
            f"must be an integer >= 1 or auto, got {self.processes!r}",
        )
        for name in (
            "processes",
            "cars_per_process",
            "refresh_every_actions",
            "queue_size",
            "torch_threads",
        ):
            int_at_least(getattr(self, name), 1, f"collector.{name}")
        int_at_least(self.max_restarts, 0, "collector.max_restarts")


def check_local_collector(col: Mapping) -> None:
    """What this machine must offer local collectors: a CUDA GPU for collector.device=cuda
    (checked when the run is planned, so no collector process dies of it later)."""
    import torch

    from trackmind.agent.device import resolve_device

    cuda = torch.cuda.is_available()
    device = resolve_device(col.get("device", "auto"), cuda, "collector.device")
    require(
        col.get("precision", "fp32") == "fp32" or device == "cuda",
        "collector.precision",
        "bf16 inference needs the collectors on a GPU (collector.device cuda, or auto where "
        "torch sees one)",
    )
