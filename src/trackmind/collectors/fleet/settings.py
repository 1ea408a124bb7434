"""The collector=ray config keys and their checks, run by plan_run before anything starts.

A cluster address is checked twice: its form here (`auto`, or the head's `host:port`; the
learner's machine is a node of the cluster), and whether anything answers there, with a plain
TCP connection bounded by `connect_timeout_s`, so a wrong address is one clear line instead
of Ray's minutes of retries.
"""

from __future__ import annotations

import importlib.util
import math
import os
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from trackmind.collectors.spec import CollectorConfig, int_at_least
from trackmind.errors import ConfigError, require
from trackmind.netprobe import probe


def parse_address(address: object, key: str = "collector.address") -> tuple[str, str, int]:
    """(kind, host, port) of a Ray address; kind: local (null), auto or node (host:port).

    host is "" and port 0 for local and auto.
    """
    if address is None:
        return "local", "", 0
    ok = isinstance(address, str) and address.strip() != ""
    require(ok, key, f"not an address: {address!r}")
    text = str(address).strip()
    if text == "auto":
        return "auto", "", 0
    require(
        not text.startswith("ray://"),
        key,
        "Ray Client (ray://) is not supported: the learner fetches races from the object "
        "store, so its machine must be a node of the cluster (ray start --address=HEAD:PORT "
        "there, then collector.address=auto or HEAD:PORT)",
    )
    kind = "node"
    require("/" not in text and "://" not in text, key, f"expected host:port, got {address!r}")
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [IPv6]:port
    require(
        bool(sep) and bool(host) and port.isdigit() and 0 < int(port) < 65536,
        key,
        f"expected host:port or auto, got {address!r}",
    )
    return kind, host, int(port)


@dataclass
class RayCollectorConfig(CollectorConfig):
    """collector=ray (conf/collector/ray.yaml): the local backend's keys and the fleet's."""

    envs_per_worker: int = MISSING
    max_staleness: int = MISSING
    address: Any = MISSING  # null (start Ray here), auto, or a cluster's host:port
    connect_timeout_s: float = MISSING
    num_cpus: Any = MISSING  # null or an integer
    cpus_per_worker: int = MISSING
    # GPU share each worker actor reserves (Ray's num_gpus): 0 keeps workers off GPUs (device
    # auto then means cpu); device cuda needs > 0, e.g. 0.25 for four workers per GPU
    gpus_per_worker: float = MISSING
    object_store_mb: int = MISSING

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.inference == "process",
            "collector.inference",
            "server is for local collectors: a Ray worker batches its games' cars itself "
            "(envs_per_worker)",
        )
        int_at_least(self.envs_per_worker, 1, "collector.envs_per_worker")
        int_at_least(self.max_staleness, 0, "collector.max_staleness")
        int_at_least(self.cpus_per_worker, 1, "collector.cpus_per_worker")
        int_at_least(self.object_store_mb, 100, "collector.object_store_mb")
        g = self.gpus_per_worker
        require(
            g >= 0 and (g <= 1 or float(g).is_integer()),
            "collector.gpus_per_worker",
            f"must be a share in [0, 1] or a whole number of GPUs, got {g!r}",
        )
        require(
            self.device != "cuda" or g > 0,
            "collector.gpus_per_worker",
            "must be > 0 with collector.device=cuda (Ray gives a worker no GPU it did not "
            "reserve), e.g. 0.25 for four workers per GPU",
        )
        timeout = self.connect_timeout_s
        require(
            timeout > 0, "collector.connect_timeout_s", f"must be a number > 0, got {timeout!r}"
        )
        kind, _, _ = parse_address(self.address)
        if self.num_cpus is not None:
            n = self.num_cpus
            ok = isinstance(n, int) and not isinstance(n, bool) and n >= 1
            require(ok, "collector.num_cpus", f"must be an integer >= 1 or null, got {n!r}")
            require(kind == "local", "collector.num_cpus", "only for a local start (address: null)")
            need = self.processes * self.cpus_per_worker
            require(
                n >= need,
                "collector.num_cpus",
                f"{n} CPUs cannot hold {self.processes} workers of "
                f"{self.cpus_per_worker} CPU(s) each",
            )


def fleet_problem(col: RayCollectorConfig, cpus: float, where: str) -> str | None:
    """Why the fleet cannot be placed on `cpus` CPUs, or None: every worker reserves
    cpus_per_worker, and Ray would otherwise start them all and wait forever for the rest."""
    n, each = col.processes, col.cpus_per_worker
    if n * each <= cpus:
        return None
    return (
        f"{n} workers of {each} CPU(s) each need {n * each} CPUs, and {where} has {cpus:g}; "
        "use fewer processes"
        + (", or collector.num_cpus to oversubscribe on purpose" if where == "this machine" else "")
    )


def worker_cuda_available(col: RayCollectorConfig, cuda_available: bool) -> bool:
    """Whether a worker actor may infer on a GPU: only one it reserved (gpus_per_worker > 0),
    so `auto` never lands several unreserved workers on a GPU."""
    return col.gpus_per_worker > 0 and bool(cuda_available)


def worker_options(col: RayCollectorConfig) -> dict[str, Any]:
    """Ray resources of one RolloutWorkerWrapper actor."""
    return {"num_cpus": col.cpus_per_worker, "num_gpus": float(col.gpus_per_worker)}


def validate_ray_collector(col: RayCollectorConfig) -> None:
    """What the machine must offer collector=ray (the keys are RayCollectorConfig's): Ray
    installed, a cluster that answers at the address, and for a local start the GPUs the
    workers reserve (else Ray would wait forever to place them)."""
    require(
        importlib.util.find_spec("ray") is not None,
        "collector",
        "collector=ray needs Ray, an optional feature: pip install 'trackmind[ray]'",
    )
    kind, host, port = parse_address(col.address)
    if kind == "local" and col.num_cpus is None:  # Ray starts a process per CPU asked
        problem = fleet_problem(col, os.cpu_count() or 1, "this machine")
        require(problem is None, "collector.processes", str(problem))
    gpus = float(col.gpus_per_worker)
    if kind == "local" and gpus > 0:
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        n = col.processes
        # Ray places a share < 1 within one GPU: floor(1 / share) workers per GPU
        fits = n <= have * math.floor(1 / gpus + 1e-9) if gpus < 1 else n * gpus <= have
        require(
            fits,
            "collector.gpus_per_worker",
            f"{n} workers of {gpus:g} GPU each do not fit the {have} GPU(s) of this machine",
        )
    if kind == "node":
        why = probe(host, port, float(col.connect_timeout_s))
        if why is not None:
            raise ConfigError(
                "collector.address",
                f"cannot reach a Ray cluster at {col.address} ({why}); is its head "
                "running, and is this machine on its network?",
            )
