"""Starting or joining Ray for the collectors, bounded in time and private by default.

A local start (collector.address null) binds every Ray server to 127.0.0.1 and starts no
dashboard: Ray 2.60 turns a requested 127.0.0.1 into the machine's outside address unless
clusters are switched off (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read when ray is imported;
torchrl imports ray before us, hence the constant is set as well). Ray's token
authentication stays on (its default for a local start). Joining a cluster is first tried
by a child process with a deadline, since Ray itself retries an unreachable address for
minutes and cannot be interrupted; only then does this process join.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from trackmind.collectors.fleet.settings import RayCollectorConfig, fleet_problem, parse_address
from trackmind.errors import ConfigError, first_line

log = logging.getLogger(__name__)


def loopback_only() -> None:
    """Make the Ray processes this one starts listen on 127.0.0.1 only."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # for the processes Ray starts
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # get_node_ip_address() -> 127.0.0.1


def private_token_file() -> Path | None:
    """Make Ray's token file readable by its owner only (Ray writes it world-readable)."""
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
            log.info("Ray's token file %s made private (mode 600)", path)
        return path
    except OSError:  # no token file (authentication off), or not ours to change
        return None


def token_auth_if_available() -> None:
    """Join with Ray's token authentication when a token is at hand and RAY_AUTH_MODE is unset.

    Ray does this itself only for a cluster it finds without an address; a cluster started
    by `ray.init()` or `ray start` requires the token of ~/.ray/auth_token (or
    RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH).
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )
    except ImportError:  # a Ray without token authentication
        return
    maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def init_kwargs(col: RayCollectorConfig) -> dict:
    """ray.init arguments for the collector config (local start or join)."""
    kind, _, _ = parse_address(col.address)
    common = {"log_to_driver": False, "namespace": "trackmind", "configure_logging": False}
    if kind != "local":
        return {"address": str(col.address).strip(), **common}
    num_cpus = col.num_cpus
    if num_cpus is None:  # every wrapper gets scheduled; Ray starts this many processes at once
        num_cpus = max(col.processes * col.cpus_per_worker, os.cpu_count() or 1)
    gpus = 0  # the GPUs of this machine only when the workers reserve shares of them
    if col.gpus_per_worker > 0:
        import torch

        gpus = torch.cuda.device_count()
    return {
        "num_cpus": int(num_cpus),
        "num_gpus": gpus,
        "include_dashboard": False,
        "_node_ip_address": "127.0.0.1",
        "object_store_memory": col.object_store_mb * 2**20,
        **common,
    }


def connect_ray(col: RayCollectorConfig) -> bool:
    """Start or join Ray; True when this call did (the caller then shuts it down).

    Raises ConfigError (key collector.address) when a cluster does not answer within
    connect_timeout_s, or when Ray fails to start locally.
    """
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no reports to the internet
    kwargs = init_kwargs(col)
    local = "address" not in kwargs
    if local:  # in this thread: Ray installs its SIGTERM handler in the main thread
        loopback_only()
        try:
            ray.init(**kwargs)
        except Exception as e:
            raise ConfigError("collector", f"Ray failed to start locally: {first_line(e)}") from e
        private_token_file()
    else:
        _, host, _ = parse_address(col.address)
        if host in ("127.0.0.1", "localhost", "::1"):  # a private cluster on this machine
            loopback_only()
        token_auth_if_available()
        _join_within(kwargs, float(col.connect_timeout_s))
    ctx = ray.get_runtime_context()
    log.info("Ray %s: node %s", "started" if local else "joined", ctx.get_node_id()[:12])
    return True


def check_cluster_fits(col: RayCollectorConfig) -> None:
    """ConfigError (collector.processes) when the joined cluster has fewer CPUs than the
    fleet reserves: Ray would start the workers it can place and wait forever for the rest."""
    import ray

    kind, _, _ = parse_address(col.address)
    if kind == "local":
        return  # plan_run checked this machine (or num_cpus asks for more on purpose)
    cpus = float(ray.cluster_resources().get("CPU", 0))
    problem = fleet_problem(col, cpus, f"the cluster at {col.address}")
    if problem is not None:
        raise ConfigError("collector.processes", problem)


# a throwaway driver: Ray's own connection retries cannot be bounded or interrupted in-process
_TRY_JOIN = (
    "import sys, ray; "
    "ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False); "
    "ray.shutdown()"
)


def join_error(stderr: str) -> str:
    """The line of a failed join's output that says why (Ray prints many)."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    for x in lines:
        if "AuthenticationError" in x or "InvalidAuthToken" in x:
            return (
                "the cluster wants Ray's token (set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH, "
                "or copy the head's ~/.ray/auth_token)"
            )
    errors = [x for x in lines if "Error" in x.split(":", 1)[0]]
    return (errors or lines or ["no output"])[-1][:300]


def _join_within(kwargs: dict, timeout_s: float) -> None:
    """Join only after a child process joined within timeout_s (Ray retries for minutes)."""
    import ray

    address = kwargs["address"]
    where = f"the Ray cluster at {address}"
    try:
        res = subprocess.run(
            [sys.executable, "-c", _TRY_JOIN, address],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            "collector.address",
            f"no answer from {where} within {timeout_s:g} s (collector.connect_timeout_s)",
        ) from None
    if res.returncode != 0:
        raise ConfigError("collector.address", f"cannot join {where}: {join_error(res.stderr)}")
    try:
        ray.init(**kwargs)
    except Exception as e:
        raise ConfigError("collector.address", f"cannot join {where}: {first_line(e)}") from e
