"""Trajectory plot: the car's path on the map coloured by speed, beside the reference line.

One picture answers what a race time does not: where the agent brakes, cuts or touches a
wall, and how its line compares with the minimum-curvature reference.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from trackmind.sim.reference import reference_lap  # noqa: E402
from trackmind.sim.track import Track  # noqa: E402


def plot_trajectory(track: Track, rollout: dict, out: str | Path, title: str | None = None) -> Path:
    """Walls, reference line (grey) and the race's positions coloured by speed (km/h)."""
    pos = np.asarray(rollout["positions"])
    speed = np.asarray(rollout["speeds"]) * 3.6
    fig, ax = plt.subplots(figsize=(7, 6))
    n = track.normals
    for side, w in ((1, track.width_left), (-1, track.width_right)):
        wall = track.points + side * w[:, None] * n
        ax.plot(wall[:, 0], wall[:, 1], color="0.3", lw=0.8)
    lap = reference_lap(track)
    ax.plot(lap.line[:, 0], lap.line[:, 1], color="0.6", lw=1.0, ls="--", label="reference line")
    sc = ax.scatter(pos[:, 0], pos[:, 1], c=speed, s=4, cmap="plasma", label="agent")
    ax.plot(*track.point_at(track.start_s), "g>", ms=8)
    ax.plot(*track.point_at(track.finish_s), "rs", ms=6)
    fig.colorbar(sc, ax=ax, shrink=0.7, label="km/h")
    if title is None:
        t = rollout.get("race_time")
        when = f"{t / 1000:.2f} s (reference {lap.time_ms / 1000:.2f} s)" if t else "not finished"
        title = f"{track.name}: {when}"
    ax.set_title(title)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
