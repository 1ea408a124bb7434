"""A collector whose learner was killed (kill -9) gives up a put on its full queue."""

from __future__ import annotations

import os
import time

import torch

from trackmind.collectors.shared_handles import make_shared, put_message


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))


def test_put_on_a_full_queue_ends_when_the_learner_is_gone():
    shared = make_shared(_Net(), queue_size=1)
    try:
        link = shared.link(0)
        assert put_message(link, "first", os.getppid())  # room for one message
        started = time.monotonic()
        # the queue is full and nobody reads it: the put ends when the learner is gone
        assert not put_message(link, "gone", parent=-1)  # a learner that no longer exists
        assert time.monotonic() - started < 2.0
        shared.stop.set()
        assert not put_message(link, "stopped", os.getppid())
    finally:
        shared.cleanup()
