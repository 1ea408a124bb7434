"""Where collectors run their inference: `collector.device` (auto, cpu or cuda) resolved.

A pure rule, so that the plan (before any process starts) and each collector process come to
the same answer on the same machine: `auto` takes the GPU when there is one, `cuda` without
one is a configuration error, named in one line.
"""

from __future__ import annotations

from trackmind.errors import ConfigError, require

DEVICES = ("auto", "cpu", "cuda")


def check_device_name(name: object, key: str = "collector.device") -> str:
    """`name` if it is one of DEVICES, else ConfigError at `key`."""
    require(name in DEVICES, key, f"must be one of {', '.join(DEVICES)}, got {name!r}")
    return str(name)


def resolve_device(name: str, cuda_available: bool, key: str = "collector.device") -> str:
    """`cpu` or `cuda`: auto -> cuda when CUDA is available, else cpu; cuda without CUDA
    -> ConfigError at `key`."""
    name = check_device_name(name, key)
    if name == "auto":
        return "cuda" if cuda_available else "cpu"
    if name == "cuda" and not cuda_available:
        raise ConfigError(key, "cuda asked for, but torch sees no CUDA GPU here (use auto or cpu)")
    return name
