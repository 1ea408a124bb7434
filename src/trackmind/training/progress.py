"""The live progress bar: the figures a user watches while a run learns to drive.

Lightning's tqdm bar with the race figures instead of `v_num`: time spent and left of the
budget, finish rate, best greedy time (and its ratio to the reference; the worst map's for
a cycle), transitions/s from the collectors, samples/s of the learner and the loss. The
figures come from RaceMetricsCallback's last window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from lightning.pytorch.callbacks import TQDMProgressBar


def _per_map(m: Mapping[str, float], suffix: str) -> dict[str, float]:
    """{map: value} of the race/<map>/<suffix> metrics."""
    return {
        k[len("race/") : -len(suffix) - 1]: v
        for k, v in m.items()
        if k.startswith("race/") and k.endswith("/" + suffix)
    }


def clock(seconds: float) -> str:
    """m:ss below an hour, h:mm:ss above."""
    s = max(0, int(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def progress_figures(
    m: Mapping[str, float], elapsed_s: float | None = None, budget_s: float | None = None
) -> dict[str, str]:
    """Short labelled strings from a metrics dict (absent figures are left out).

    One map: its finish rate, best greedy time and ratio. A map cycle: the worst map's
    finish rate and best ratio, named (an average over maps of different lengths would hide
    the map that fails), and how many maps were never finished. With a time budget, the
    time spent and left (`time=4:31<25:29`).
    """
    fin, best, ratio = (_per_map(m, k) for k in ("finish_rate", "best_time", "best_ratio"))
    out: dict[str, str] = {}
    if budget_s:
        spent = elapsed_s or 0.0
        out["time"] = f"{clock(spent)}<{clock(budget_s - spent)}"
    if len(fin) <= 1:
        if fin:
            out["finish"] = f"{100.0 * next(iter(fin.values())):.0f}%"
        if best:
            out["best"] = f"{next(iter(best.values())):.2f}s"
        if ratio:
            out["ratio"] = f"{next(iter(ratio.values())):.3f}"
    else:
        worst = min(fin, key=fin.get)
        out["finish"] = f"{100.0 * fin[worst]:.0f}% {worst}"
        if ratio:
            slow = max(ratio, key=ratio.get)
            out["ratio"] = f"{ratio[slow]:.3f} {slow}"
        never = [name for name in fin if name not in best]
        if never:
            out["unfinished"] = str(len(never))
    if "throughput/transitions_per_s" in m:
        out["trans/s"] = f"{m['throughput/transitions_per_s']:.0f}"
    if "throughput/samples_per_s" in m:
        out["samples/s"] = f"{m['throughput/samples_per_s']:.0f}"
    if "train/loss" in m:
        out["loss"] = f"{m['train/loss']:.3g}"
    return out


class RaceProgressBar(TQDMProgressBar):
    """tqdm bar over learner steps showing `progress_figures` of the latest metrics."""

    def __init__(
        self, metrics_source, refresh_rate: int = 5, budget_s: float | None = None
    ) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.metrics_source = metrics_source  # has .last_metrics (RaceMetricsCallback)
        self.budget_s = budget_s  # trainer.max_time_s: the bar shows time spent and left
        self._start = time.monotonic()

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        self._start = time.monotonic()

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.train_progress_bar.set_description("learner steps")  # one endless "epoch"

    def get_metrics(self, trainer, pl_module) -> dict[str, str]:
        m = dict(self.metrics_source.last_metrics)
        loss = getattr(pl_module, "last_stats", {}).get("train/loss")
        if loss is not None:
            m["train/loss"] = loss
        return progress_figures(m, time.monotonic() - self._start, self.budget_s)
