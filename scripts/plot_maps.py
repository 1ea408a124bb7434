"""Top-down picture of maps: walls, and the reference line coloured by its limit speed.

python scripts/plot_maps.py --out docs/maps.png            # the built-in maps
python scripts/plot_maps.py --maps procedural:1 mine.csv --out outputs/maps.png
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

from trackmind.cli import OneLineParser

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from trackmind.sim.mapio import load_map  # noqa: E402
from trackmind.sim.maps import builtin_names  # noqa: E402
from trackmind.sim.reference import reference_lap  # noqa: E402
from trackmind.sim.track import MapError  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = OneLineParser(description=__doc__)
    ap.add_argument("--maps", nargs="+", default=builtin_names())
    ap.add_argument("--out", default="outputs/maps.png")
    args = ap.parse_args(argv)
    kinds = plt.gcf().canvas.get_supported_filetypes()
    plt.close("all")
    if Path(args.out).suffix.lstrip(".").lower() not in kinds:
        ap.error(f"--out: {args.out!r} must end in one of .{', .'.join(sorted(kinds))}")
    try:
        tracks = [load_map(m) for m in args.maps]
    except MapError as e:
        ap.error(f"--maps: {e}")
    cols = min(3, len(tracks))
    rows = (len(tracks) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4.5 * rows), squeeze=False)
    for ax, t in zip(axes.ravel(), tracks):
        n = t.normals
        for side, w in ((1, t.width_left), (-1, t.width_right)):
            wall = t.points + side * w[:, None] * n
            ax.plot(wall[:, 0], wall[:, 1], color="0.3", lw=0.8)
        lap = reference_lap(t)
        sc = ax.scatter(lap.line[:, 0], lap.line[:, 1], c=lap.speed * 3.6, s=1.5, cmap="viridis")
        ax.plot(*t.point_at(t.start_s), "g>", ms=8)
        ax.plot(*t.point_at(t.finish_s), "rs", ms=6)
        ax.set_title(f"{t.name}: {t.length_m:.0f} m, ref {lap.time_ms / 1000:.2f} s")
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(sc, ax=ax, shrink=0.7, label="km/h")
    for ax in axes.ravel()[len(tracks) :]:
        ax.axis("off")
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
