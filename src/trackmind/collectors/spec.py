"""What a collector is built from: the collector group's schema and the run's CollectorSpec.

`plan_run` checks every group once and puts what collectors need into one CollectorSpec:
typed groups (the collector's keys, the network, the exploration policy, mid-track starts,
demonstration races)
and the map cycle with its maps already loaded. The spec is pickled as it is to each local
collector process, the inference server and each Ray worker, so a collector reads typed
attributes and never a config dict. The env and reward groups stay mappings of terms built
by name from the registries (env/obs_terms.py, env/reward_terms.py); plan_run has built them
once, so a collector's build cannot fail on them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import MISSING

from trackmind.errors import require

if TYPE_CHECKING:
    from trackmind.agent.exploration import Exploration
    from trackmind.agent.network_config import NetworkConfig
    from trackmind.collectors.demos import DemosConfig
    from trackmind.env.map_cycle import CycleEntry
    from trackmind.game.starts import StartsConfig

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

    backend: str = MISSING  # local | ray (collectors.fleet.settings.RayCollectorConfig)
    processes: Any = MISSING  # an integer >= 1, or auto: one per CPU core the learner leaves
    cars_per_process: int = MISSING
    refresh_every_actions: int = MISSING
    queue_size: int = MISSING
    torch_threads: int = MISSING
    max_restarts: int = MISSING
    device: str = MISSING  # inference: auto (cuda when there is a GPU) | cpu | cuda
    # process: each collector runs its own network; server: one process runs every
    # collector's cars in one batch (collectors/inference_server.py)
    inference: str = MISSING
    precision: str = MISSING  # inference arithmetic: fp32 | bf16 (autocast, on a GPU)
    # the live network's forward replayed as CUDA graphs, one per padded batch size
    # (agent/graphed_inference.py); a GPU only
    cuda_graph: bool = MISSING

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


def check_local_collector(col: CollectorConfig) -> None:
    """What this machine must offer local collectors: a CUDA GPU for collector.device=cuda
    (checked when the run is planned, so no collector process dies of it later)."""
    import torch

    from trackmind.agent.device import resolve_device

    device = resolve_device(col.device, torch.cuda.is_available(), "collector.device")
    require(
        col.precision == "fp32" or device == "cuda",
        "collector.precision",
        "bf16 inference needs the collectors on a GPU (collector.device cuda, or auto where "
        "torch sees one)",
    )
    require(
        not col.cuda_graph or device == "cuda",
        "collector.cuda_graph",
        "CUDA graphs need the collectors on a GPU (collector.device cuda, or auto where torch "
        "sees one); set collector.cuda_graph=false here",
    )


@dataclass(frozen=True)
class CollectorSpec:
    """Everything a collector builds from, checked once by plan_run (picklable).

    `collector` is the backend's schema (CollectorConfig, or RayCollectorConfig for
    collector=ray); `cycle` holds the loaded maps, so a collector never reloads a map file.
    """

    collector: CollectorConfig
    env: Mapping[str, Any]
    reward: Mapping[str, Any]
    cycle: tuple[CycleEntry, ...]
    network: NetworkConfig
    exploration: Exploration
    starts: StartsConfig
    demos: DemosConfig
