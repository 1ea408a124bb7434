"""The target network's forward pass on a thread beside the online one (learner.target_thread).

A CPU learner runs torch on one thread, beside a collector that uses about a third of the
second core, so most of that core idles. The step's two forward passes are independent
(online at s with autograd, target at s' without), and torch releases the GIL inside its
operators, so the target's pass can run on a second Python thread while the online pass
runs on the caller's: the step's critical path loses the target's forward (about a quarter
of it on iqn_cpu). The result is the same, bit for bit: the same weights, the same taus
(drawn by the caller, in the caller's order), and nothing on the thread draws from an RNG.

Grad mode and autocast are per thread in torch, so the job runs under no_grad and under the
caller's autocast. A GPU needs none of this: its kernels already queue asynchronously.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import torch

T = TypeVar("T")

_POOL: tuple[int, ThreadPoolExecutor] | None = None


def side_pool() -> ThreadPoolExecutor:
    """One worker thread for this process (made again in a forked child, where the parent's
    thread does not exist)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="target-forward"))
    return _POOL[1]


def submit_no_grad(fn: Callable[..., T], *args, device_type: str = "cpu") -> Future[T]:
    """fn(*args) on the side thread, under no_grad and the caller's autocast state."""
    autocast = torch.is_autocast_enabled(device_type)
    dtype = torch.get_autocast_dtype(device_type)

    def job() -> T:
        with torch.no_grad(), torch.autocast(device_type, dtype=dtype, enabled=autocast):
            return fn(*args)

    return side_pool().submit(job)
