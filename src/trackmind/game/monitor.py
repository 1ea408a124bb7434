"""PipelineMonitor: where the time of a rollout goes (game step, frame, inference, queue).

Seed 002's monitor, kept small: named stages timed with a context manager, summarised as
milliseconds per action and share of the total, so a collector can log its bottleneck.
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager


class PipelineMonitor:
    """Accumulates wall time per named stage; `summary()` reports and optionally resets."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.actions = 0

    @contextmanager
    def stage(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t0
            self.calls[name] += 1

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds
        self.calls[name] += 1

    def count_actions(self, n: int) -> None:
        self.actions += int(n)

    def summary(self, reset: bool = True) -> dict[str, float]:
        """{stage}_ms_per_action and {stage}_share for every stage, plus actions."""
        total = sum(self.seconds.values()) or 1e-12
        n = max(self.actions, 1)
        out: dict[str, float] = {"actions": float(self.actions)}
        for k, s in self.seconds.items():
            out[f"{k}_ms_per_action"] = 1000.0 * s / n
            out[f"{k}_share"] = s / total
        if reset:
            self.seconds.clear()
            self.calls.clear()
            self.actions = 0
        return out
