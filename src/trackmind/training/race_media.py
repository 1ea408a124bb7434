"""Pictures of the evaluation races in the MLflow run: trajectory plot and GIF of the best.

Greedy races are the evaluation. When one beats the best time on its map, its path is kept
(positions, speeds, yaws: a few kB); every `every_s` seconds and at the end of the run the
kept races are drawn — the trajectory coloured by speed over the reference line, and a GIF
of the race rendered from the sim — into <output_dir>/media/ and logged as MLflow artifacts
under media/<map>/. Drawing happens in the learner between batches, so it is rate-limited.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning as L

log = logging.getLogger(__name__)
KEPT = ("map", "positions", "speeds", "yaws", "race_time", "finished", "weights_version")


class BestRaceMedia(L.Callback):
    """Collects new best greedy races (`record`) and draws them at a steady pace."""

    def __init__(
        self,
        output_dir: Path,
        tracks: dict[str, Any],
        every_s: float = 120.0,
        action_ms: int = 50,
    ) -> None:
        self.dir = Path(output_dir) / "media"
        self.tracks = tracks
        self.action_ms = int(action_ms)  # race time of one recorded step (the GIF's clock)
        self.every_s = float(every_s)
        self.pending: dict[str, dict] = {}
        self.written: list[Path] = []
        self._last = time.monotonic()

    def record(self, r: dict) -> None:
        """Keep what drawing needs of a new best greedy race (the latest per map wins)."""
        self.pending[r["map"]] = {k: r[k] for k in KEPT if k in r}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.pending and time.monotonic() - self._last >= self.every_s:
            self.flush(trainer.logger, trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        self.flush(trainer.logger, trainer.global_step)

    def flush(self, logger: Any, step: int) -> list[Path]:
        """Draw every pending race; returns the files written."""
        from trackmind.tracking.media import render_race_gif
        from trackmind.tracking.plots import plot_trajectory

        out: list[Path] = []
        for name, r in sorted(self.pending.items()):
            track = self.tracks.get(name)
            if track is None or len(r.get("positions", ())) < 2:
                continue
            stem = f"{_safe(name)}_step{step}_{r['race_time'] / 1000:.2f}s"
            d = self.dir / _safe(name)
            d.mkdir(parents=True, exist_ok=True)
            title = f"{name}: best greedy race {r['race_time'] / 1000:.2f} s (learner step {step})"
            try:
                files = [plot_trajectory(track, r, d / f"{stem}.png", title=title)]
                files.append(render_race_gif(track, r, d / f"{stem}.gif", action_ms=self.action_ms))
            except Exception as e:  # a picture must never stop training
                log.warning("could not draw the best race on %s: %s", name, e)
                continue
            out += files
            if logger is not None and hasattr(logger, "run_id"):
                for f in files:
                    logger.experiment.log_artifact(logger.run_id, str(f), f"media/{_safe(name)}")
        self.pending.clear()
        self.written += out
        self._last = time.monotonic()
        return out


def _safe(name: str) -> str:
    """A map name as a path component ("procedural:3" -> "procedural_3")."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
