"""The target network's forward pass on a thread beside the online one (learner.target_thread).

A CPU learner runs torch on one thread, beside a collector that uses about a third of the
second core, so most of that core idles. The step's two forward passes are independent
(online at s with autograd, target at s' without), and torch releases the GIL inside its
operators, so the target's pass can run on a second Python thread while the online pass
runs on the caller's: the step's critical path loses the target's forward (about a quarter
of it on iqn_cpu). The result is the same, bit for bit: the same weights, the same taus
(drawn by the caller, in the caller's order), and nothing on the thread draws from an RNG.

learner.split_step goes further: the batch in two halves, each half's forwards, loss and
backward on a thread of its own (this side thread and the caller's), the gradients summed
into the same .grad (autograd accumulates under a lock). The same update up to the order of
float sums.

Grad mode and autocast are per thread in torch, so a job runs under the caller's autocast
and the grad mode it asks for. A GPU needs none of this: its kernels already queue
asynchronously.
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


def on_side_thread(
    fn: Callable[..., T], *args, device_type: str = "cpu", grad: bool = False
) -> Future[T]:
    """fn(*args) on the side thread, with grad mode `grad` and the caller's autocast state
    (both are per thread in torch: a new thread would run with grad on and autocast off)."""
    autocast = torch.is_autocast_enabled(device_type)
    dtype = torch.get_autocast_dtype(device_type)

    def job() -> T:
        with (
            torch.set_grad_enabled(grad),
            torch.autocast(device_type, dtype=dtype, enabled=autocast),
        ):
            return fn(*args)

    return side_pool().submit(job)
