"""The collector=ray config keys and their checks, run by plan_run before anything starts.

A cluster address is checked twice: its form here (`auto`, or the head's `host:port`; the
learner's machine is a node of the cluster), and whether anything answers there, with a plain
TCP connection bounded by `connect_timeout_s`, so a wrong address is one clear line instead
of Ray's minutes of retries.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from trackmind.errors import ConfigError, require

# keys collector=ray adds to the local backend's
RAY_EXTRA_KEYS = {
    "envs_per_worker",
    "max_staleness",
    "address",
    "connect_timeout_s",
    "num_cpus",
    "cpus_per_worker",
    "object_store_mb",
}


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


def probe(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection to host:port opens within timeout_s, else the reason."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as e:
        return e.strerror or type(e).__name__


def _int_at_least(col: Mapping, name: str, low: int) -> int:
    v = col.get(name)
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= low
    require(ok, f"collector.{name}", f"must be an integer >= {low}, got {v!r}")
    return int(v)


def validate_ray_collector(col: Mapping) -> None:
    """Check the collector=ray keys (the shared ones are checked by plan_run)."""
    _int_at_least(col, "envs_per_worker", 1)
    _int_at_least(col, "max_staleness", 0)
    cpus = _int_at_least(col, "cpus_per_worker", 1)
    _int_at_least(col, "object_store_mb", 100)
    timeout = col.get("connect_timeout_s")
    require(
        isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0,
        "collector.connect_timeout_s",
        f"must be a number > 0, got {timeout!r}",
    )
    kind, host, port = parse_address(col.get("address"))
    num_cpus = col.get("num_cpus")
    if num_cpus is not None:
        require(kind == "local", "collector.num_cpus", "only for a local start (address: null)")
        need = int(col["processes"]) * cpus
        low = _int_at_least(col, "num_cpus", 1)
        require(
            low >= need,
            "collector.num_cpus",
            f"{low} CPUs cannot hold {col['processes']} workers of {cpus} CPU(s) each",
        )
    if kind == "node":
        why = probe(host, port, float(timeout))
        if why is not None:
            raise ConfigError(
                "collector.address",
                f"cannot reach a Ray cluster at {col['address']} ({why}); is its head "
                "running, and is this machine on its network?",
            )
