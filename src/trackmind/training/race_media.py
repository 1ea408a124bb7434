"""Pictures of the evaluation races in the MLflow run: trajectory plot and GIF of the best.

Greedy races are the evaluation. When one beats the best time on its map, its path is kept
(positions, speeds, yaws: a few kB); every `every_s` seconds and at the end of the run the
kept races are drawn — the trajectory coloured by speed over the reference line, and a GIF
of the race rendered from the sim — into <output_dir>/media/ and logged as MLflow artifacts
under media/<map>/. Drawing happens in the learner between batches, so it is rate-limited
twice: at most every `every_s` seconds, and for at most `share` of that time (a GIF renders
a whole race, about a second). A cycle of 240 maps has a new best somewhere every few
seconds, and drawing them all took most of the learner's time; the maps drawn least
recently go first, and the others wait for the next turn (their latest best still wins).
"""

from __future__ import annotations

import logging
import math
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
        share: float = 0.05,
    ) -> None:
        self.dir = Path(output_dir) / "media"
        self.tracks = tracks
        self.action_ms = int(action_ms)  # race time of one recorded step (the GIF's clock)
        self.every_s = float(every_s)
        self.share = float(share)
        self.pending: dict[str, dict] = {}
        self.written: list[Path] = []
        self.drawn_at: dict[str, float] = {}  # map -> when its last picture was drawn
        self._last = time.monotonic()

    def record(self, r: dict) -> None:
        """Keep what drawing needs of a new best greedy race (the latest per map wins)."""
        self.pending[r["map"]] = {k: r[k] for k in KEPT if k in r}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.pending and time.monotonic() - self._last >= self.every_s:
            self.flush(trainer.logger, trainer.global_step, self.share * self.every_s)

    def on_train_end(self, trainer, pl_module) -> None:
        self.flush(trainer.logger, trainer.global_step, self.every_s)
        if self.pending:  # a last turn as long as the time between turns, no longer
            log.info("best races of %d maps left undrawn at the end", len(self.pending))

    def flush(self, logger: Any, step: int, budget_s: float | None = None) -> list[Path]:
        """Draw pending races, the maps drawn least recently first, until `budget_s` seconds
        are spent (at least one race; None: all); returns the files written."""
        from trackmind.tracking.media import render_race_gif
        from trackmind.tracking.plots import plot_trajectory

        out: list[Path] = []
        t0 = time.monotonic()
        for name in draw_order(self.pending, self.drawn_at):
            if budget_s is not None and out and time.monotonic() - t0 >= budget_s:
                break
            r = self.pending.pop(name)
            self.drawn_at[name] = time.monotonic()
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
        self.written += out
        self._last = time.monotonic()
        return out


def draw_order(pending: dict[str, dict], drawn_at: dict[str, float]) -> list[str]:
    """The pending maps, those never drawn first, then the least recently drawn (by name)."""
    return sorted(pending, key=lambda name: (drawn_at.get(name, -math.inf), name))


def _safe(name: str) -> str:
    """A map name as a path component ("procedural:3" -> "procedural_3")."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
