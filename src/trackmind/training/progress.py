"""The live progress bar: the figures a user watches while a run learns to drive.

Lightning's tqdm bar with the race figures instead of `v_num`: finish rate, best greedy
time (and its ratio to the reference), transitions/s from the collectors, samples/s of the
learner and the loss. The figures come from RaceMetricsCallback's last window.
"""

from __future__ import annotations

from collections.abc import Mapping

from lightning.pytorch.callbacks import TQDMProgressBar


def progress_figures(m: Mapping[str, float]) -> dict[str, str]:
    """Short labelled strings from a metrics dict (absent figures are left out).

    Finish rate and best time are averaged over the maps of the cycle; with one map they are
    that map's figures.
    """
    fin = [v for k, v in m.items() if k.startswith("race/") and k.endswith("/finish_rate")]
    best = [v for k, v in m.items() if k.startswith("race/") and k.endswith("/best_time")]
    ratio = [v for k, v in m.items() if k.startswith("race/") and k.endswith("/best_ratio")]
    out: dict[str, str] = {}
    if fin:
        out["finish"] = f"{100.0 * sum(fin) / len(fin):.0f}%"
    if best:
        out["best"] = f"{sum(best) / len(best):.2f}s"
    if ratio:
        out["ratio"] = f"{sum(ratio) / len(ratio):.3f}"
    if "throughput/transitions_per_s" in m:
        out["trans/s"] = f"{m['throughput/transitions_per_s']:.0f}"
    if "throughput/samples_per_s" in m:
        out["samples/s"] = f"{m['throughput/samples_per_s']:.0f}"
    if "train/loss" in m:
        out["loss"] = f"{m['train/loss']:.3g}"
    return out


class RaceProgressBar(TQDMProgressBar):
    """tqdm bar over learner steps showing `progress_figures` of the latest metrics."""

    def __init__(self, metrics_source, refresh_rate: int = 5) -> None:
        super().__init__(refresh_rate=refresh_rate)
        self.metrics_source = metrics_source  # has .last_metrics (RaceMetricsCallback)

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self.train_progress_bar.set_description("learner steps")  # one endless "epoch"

    def get_metrics(self, trainer, pl_module) -> dict[str, str]:
        m = dict(self.metrics_source.last_metrics)
        loss = getattr(pl_module, "last_stats", {}).get("train/loss")
        if loss is not None:
            m["train/loss"] = loss
        return progress_figures(m)
