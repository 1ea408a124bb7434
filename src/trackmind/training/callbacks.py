"""Lightning callbacks: CollectorCallback (the collector processes), RaceMetricsCallback and
StopWhenStarved.

CollectorCallback publishes the initial weights and starts the pool at fit start, checks it
after every batch (a dead collector is logged and restarted), and stops it at fit end, on
an exception and on Ctrl-C. RaceMetricsCallback turns race records, learner timings and
collector timings into metrics every `log_every_s` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import lightning as L

from trackmind.collectors.protocol import CollectorPool
from trackmind.collectors.shared_handles import SharedHandles, publish_weights
from trackmind.training.datamodule import ReplayDataModule

log = logging.getLogger(__name__)


class CollectorCallback(L.Callback):
    """Owns the collector processes for the duration of `trainer.fit`."""

    def __init__(self, pool: CollectorPool, shared: SharedHandles) -> None:
        self.pool = pool
        self.shared = shared

    def on_fit_start(self, trainer, pl_module) -> None:
        publish_weights(self.shared, pl_module.acting)
        self.pool.start()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.pool.check()

    def on_fit_end(self, trainer, pl_module) -> None:
        self.pool.stop()

    def on_exception(self, trainer, pl_module, exception) -> None:
        log.info("stopping collectors after %s", type(exception).__name__)
        self.pool.stop()

    def teardown(self, trainer, pl_module, stage) -> None:
        self.pool.stop()


class StopWhenStarved(L.Callback):
    """Ends fit once the DataModule's stream ran dry past its deadline (no collectors left):
    the DataModule only reports `starved`, steering the trainer is a callback's job."""

    def __init__(self, dm: ReplayDataModule) -> None:
        self.dm = dm

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.dm.starved:
            log.warning("no data from the collectors before the deadline: stopping")
            trainer.should_stop = True


class RaceMetricsCallback(L.Callback):
    """Logs race times/ratios per map, throughput and pipeline timings at a steady pace."""

    def __init__(
        self,
        dm: ReplayDataModule,
        log_every_s: float = 10.0,
        pool: CollectorPool | None = None,
        epsilon: Callable[[], float] | None = None,
    ) -> None:
        self.dm = dm
        self.log_every_s = float(log_every_s)
        self.pool = pool  # collector figures: alive, restarts, the backend's own metrics
        self.epsilon = epsilon  # the exploration epsilon now
        self._last = time.monotonic()
        self._samples_at_last = 0
        self._wait_at_last = 0.0
        self._sample_at_last = 0.0
        self._sampling_at_last: tuple[float, ...] = (0, 0.0, 0.0, 0.0)
        self.last_metrics: dict[str, float] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        if now - self._last >= self.log_every_s:
            self.flush(trainer, pl_module, now)

    def on_train_end(self, trainer, pl_module) -> None:
        self.flush(trainer, pl_module, time.monotonic())

    def flush(self, trainer, pl_module, now: float) -> dict[str, float]:
        dm = self.dm
        dt = max(now - self._last, 1e-9)
        m = dm.stats.metrics()
        m["throughput/samples_per_s"] = (dm.samples_served - self._samples_at_last) / dt
        m["throughput/learner_wait_share"] = min(1.0, (dm.wait_s - self._wait_at_last) / dt)
        m["throughput/learner_sample_share"] = min(1.0, (dm.sample_s - self._sample_at_last) / dt)
        m.update(self._sampling_times(dm))
        m["buffer/size"] = float(len(dm.buffers))
        m["buffer/transitions_added"] = float(dm.transitions_added)
        m["buffer/n_steps"] = float(dm.buffers.n_steps_now)  # the n read (n_steps_schedule)
        m["frames"] = float(dm.shared.frames.value)
        if self.pool is not None:
            m["collector/alive"] = float(self.pool.alive())
            m["collector/restarts"] = float(self.pool.restarts)
            m.update(self.pool.metrics())  # e.g. collector=ray: stale races, episodes
        m["weights/version"] = float(dm.shared.weights_version.value)
        if self.epsilon is not None:
            m["train/epsilon"] = float(self.epsilon())
        self._last, self._samples_at_last, self._wait_at_last = now, dm.samples_served, dm.wait_s
        self._sample_at_last = dm.sample_s
        self.last_metrics = m
        if trainer.logger is not None:
            trainer.logger.log_metrics(m, step=trainer.global_step)
        return m

    def _sampling_times(self, dm: ReplayDataModule) -> dict[str, float]:
        """ms per batch since the last flush: the prefetch thread's wall and CPU time making
        one (their gap: waits for the GIL, the lock, a copy) and sample()'s wait for the
        buffers' lock. Empty without a prefetch thread or a new batch."""
        times = dm.prefetch_times
        if times is None:
            return {}
        now = (times.batches, times.wall_s, times.cpu_s, dm.buffers.sample_lock_wait_s)
        last, self._sampling_at_last = self._sampling_at_last, now
        n = now[0] - last[0]
        if n <= 0:
            return {}
        per = [(a - b) * 1000.0 / n for a, b in zip(now[1:], last[1:])]
        return {
            "throughput/prefetch_sample_ms": per[0],
            "throughput/prefetch_sample_cpu_ms": per[1],
            "throughput/replay_lock_wait_ms": per[2],
        }


class TrialPruning(L.Callback):
    """In an Optuna sweep, report the objective so far once a minute; stop a pruned trial.

    The step is the minute of training, a grid every trial shares, so Optuna's pruners
    compare trials at equal budgets (trackmind.tracking.optuna_trial; a no-op outside a
    sweep with a storage).
    """

    def __init__(self, objective_so_far: Callable[[], float], every_s: float = 60.0) -> None:
        self.objective_so_far = objective_so_far
        self.every_s = float(every_s)
        self._start: float | None = None
        self._reported = 0  # minutes reported
        self.pruned_at: int | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        from trackmind.tracking import optuna_trial

        step = int((time.monotonic() - (self._start or time.monotonic())) // self.every_s)
        if step <= self._reported:
            return
        self._reported = step
        if optuna_trial.report(self.objective_so_far(), step):
            self.pruned_at = step
            trainer.should_stop = True
