"""The renderer against frames of the renderer it replaced (tests/data/frames_reference.npz).

The reference frames were rendered by the previous kernel (one thread, one loop over the
cars) from the scenario below: the six built-in maps, a procedural map, the 4.5 km circuit
and a figure-eight whose second pass is a bridge, 18 cars driven by fixed random actions,
frames taken every 15 actions at 120x160 and 48x64. Any change to the renderer is checked
here: the frames must stay identical (mean absolute difference 0), on one thread or two.

The current kernel computes each pixel's ground point as gx0 + col * dgx (vectorised) where
the reference kernel added dgx column after column; the two differ in the last bits, which
can move a pixel to the neighbouring texel only when its ground point lies within about
1e-12 cells of a texel edge. On this scenario no pixel moves.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trackmind.sim.game import SimGame
from trackmind.sim.mapio import read_csv_rows
from trackmind.sim.maps import builtin_names
from trackmind.sim.track import Track

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(__file__).parent / "data" / "frames_reference.npz"
SHAPES = {"120x160": (120, 160), "48x64": (48, 64)}


def unsmoothed_maps() -> list[Track]:
    """The 4.5 km circuit and the bridge map of tests/test_circuits.py, built from their raw
    points as the reference frames saw them (the importer smooths lines since)."""
    from test_circuits import figure_eight

    rows = read_csv_rows(ROOT / "maps" / "circuit.csv")
    circuit = Track.build("circuit", rows[:, :2], rows[:, 3], rows[:, 2], source="circuit.csv")
    eight = figure_eight()
    line = np.stack([eight[:, 0], -eight[:, 2]], axis=1)  # as import_npy maps a driven line
    return [circuit, Track.build("eight", line, 8.0, 8.0, source="eight", heights=eight[:, 1])]


def scenario_frames(shape: tuple[int, int], tmp: Path, render_threads: int = 1) -> np.ndarray:
    """(snapshots, cars, 1, H, W) frames of the fixed scenario."""
    maps = [*builtin_names(), "procedural:3", *unsmoothed_maps()]
    cars = [maps[i % len(maps)] for i in range(18)]
    game = SimGame(len(cars), maps=cars, frame_shape=shape, render_threads=render_threads)
    rng = np.random.default_rng(7)
    game.reset()
    snaps = []
    for k in range(90):
        acts = np.where(rng.random(len(cars)) < 0.6, 0, rng.integers(0, 12, len(cars)))
        game.step(acts)
        if k % 15 == 14:
            snaps.append(game.frames.copy())
    return np.stack(snaps)


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("threads", [1, 2])
def test_frames_match_the_previous_renderer(name: str, threads: int, tmp_path: Path) -> None:
    want = np.load(REFERENCE)[name]
    got = scenario_frames(SHAPES[name], tmp_path, render_threads=threads)
    assert got.shape == want.shape
    mad = np.abs(got.astype(np.int16) - want.astype(np.int16)).mean()
    print(f"{name}, {threads} thread(s): mean absolute difference {mad:.4f}")
    assert mad == 0.0
