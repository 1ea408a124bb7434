"""Schemas of the run-level groups: map, trainer, checkpoint.

Every group is a dataclass whose fields are its keys, checked by the one function
`trackmind.errors.check_schema` (OmegaConf merge: unknown keys and wrong types refused;
`__post_init__`: ranges). Groups that configure one part keep their schema beside it:
learner (training.module.LearnerConfig), buffer (replay.config.BufferConfig), collector
(collectors.spec, collectors.fleet.settings), logger (tracking.logger_config), the real
game (tmi.config). plan_run checks
all of them before anything starts.
"""

from __future__ import annotations

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


Group = dict[str, Any]  # a config group as composed, checked by its own schema in plan_run


@dataclass
class TrainConfig(RunConfig):
    """train.yaml as Hydra composes it: the run's own keys and every config group (a
    mapping, each then checked by its own schema). Unknown top-level keys and a group that
    is not a mapping are refused here, naming the key."""

    map: Group = MISSING
    network: Group = MISSING
    reward: Group = MISSING
    exploration: Group = MISSING
    env: Group = MISSING
    collector: Group = MISSING
    buffer: Group = MISSING
    learner: Group = MISSING
    trainer: Group = MISSING
    logger: Group = MISSING
    checkpoint: Group | None = None
    validation: Group | None = None
    # Hydra's and the launchers' own keys: not read by plan_run
    output_dir: Any = None
    debug: Any = None
    hparams_search: Any = None
    experiment: Any = None
    hydra: Any = None

    def run(self) -> RunConfig:
        """The run's own keys alone."""
        return RunConfig(seed=self.seed, run_name=self.run_name, resume=self.resume)


def check_trainer_machine(trainer: TrainerConfig, cuda_devices: int) -> None:
    """The trainer's settings against this machine: a GPU asked for must be here."""
    acc, dev = trainer.accelerator, trainer.devices
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
    torch_threads: int = 1
    prefetch_batches: int = 0  # batches sampled ahead on a thread (a GPU learner)
    intake_thread: bool = False  # races into the buffers on a thread (training/intake.py)
    intake_ahead_batches: int = 64  # ... at most this many batches' data ahead of the learner
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
        require(
            isinstance(self.intake_thread, bool),
            "trainer.intake_thread",
            f"must be true or false, got {self.intake_thread!r}",
        )
        require(
            self.intake_ahead_batches >= 1,
            "trainer.intake_ahead_batches",
            f"must be an integer >= 1, got {self.intake_ahead_batches!r}",
        )


@dataclass
class MapConfig:
    """The ``map`` group: the cycle of maps (each item an env.map_cycle.CycleEntryConfig)."""

    cycle: Any = MISSING


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
