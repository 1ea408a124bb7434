"""A GIF of a recorded race, rendered from the sim: what the driver saw, and where it was.

Each GIF frame puts the sim's own chase-camera view of the recorded pose (the renderer that
makes the agent's frames, at a size worth watching) beside a top-down minimap with the
car's trail, plus the race clock and speed. Races are recorded every 50 ms; the GIF shows
`fps` frames per second of race time, and a long race keeps its last `max_seconds` (the
finish is what a user opens the GIF to see).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from trackmind.sim import physics as ph
from trackmind.sim.track import Track

TRAIL, CAR, WALL, BG = (255, 170, 0), (230, 40, 40), (90, 90, 90), (20, 24, 28)


def frame_indices(n_steps: int, action_ms: int, fps: float, max_seconds: float) -> np.ndarray:
    """Which recorded steps to show: one every 1/fps s of race time, the last max_seconds.

    The final step is always shown (the finish line).
    """
    if n_steps <= 0:
        return np.zeros(0, np.int64)
    stride = max(1, int(round(1000.0 / (fps * action_ms))))
    keep = max(1, int(max_seconds * 1000.0 / action_ms))
    first = max(0, n_steps - keep)
    idx = np.arange(n_steps - 1, first - 1, -stride)[::-1]
    return idx.astype(np.int64)


def minimap_transform(
    lo: np.ndarray, hi: np.ndarray, size: tuple[int, int], margin: int = 6
) -> tuple[float, np.ndarray, np.ndarray]:
    """(scale, offset, flip) mapping world (x, y) to minimap pixels, aspect kept, y up.

    pixel = offset + scale * (x - lo_x, hi_y - y): the map's bounding box fits inside
    `size` = (H, W) less `margin` pixels on every side, centred.
    """
    h, w = size
    span = np.maximum(np.asarray(hi, float) - np.asarray(lo, float), 1e-9)
    scale = float(min((w - 2 * margin) / span[0], (h - 2 * margin) / span[1]))
    used = span * scale
    offset = np.array([(w - used[0]) / 2.0, (h - used[1]) / 2.0])
    return scale, offset, np.array([lo[0], hi[1]], float)


def to_pixels(xy: np.ndarray, scale: float, offset: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """World points (N, 2) to minimap pixel coordinates (N, 2) as float (col, row)."""
    xy = np.asarray(xy, float)
    return np.stack(
        [offset[0] + scale * (xy[:, 0] - origin[0]), offset[1] + scale * (origin[1] - xy[:, 1])],
        axis=1,
    )


def headings(positions: np.ndarray) -> np.ndarray:
    """Yaw from consecutive positions, for recordings without yaws (the last repeats)."""
    d = np.diff(np.asarray(positions, float), axis=0)
    if len(d) == 0:
        return np.zeros(len(positions))
    yaw = np.arctan2(d[:, 1], d[:, 0])
    return np.append(yaw, yaw[-1])


def _minimap_base(track: Track, size: tuple[int, int]):
    walls = [
        track.points + side * w[:, None] * track.normals
        for side, w in ((1, track.width_left), (-1, track.width_right))
    ]
    allp = np.concatenate(walls)
    tf = minimap_transform(allp.min(axis=0), allp.max(axis=0), size)
    img = Image.new("RGB", (size[1], size[0]), BG)
    draw = ImageDraw.Draw(img)
    for wall in walls:
        draw.line([tuple(p) for p in to_pixels(wall, *tf)], fill=WALL, width=1)
    return img, tf


def render_race_gif(
    track: Track,
    rollout: dict,
    out: str | Path,
    fps: float = 10.0,
    size: tuple[int, int] = (180, 240),
    max_seconds: float = 60.0,
    action_ms: int = 50,
) -> Path:
    """Write the GIF of `rollout` (positions, speeds, optional yaws) on `track`; its path."""
    from trackmind.sim.game import SimGame

    pos = np.asarray(rollout["positions"], float)
    speeds = np.asarray(rollout.get("speeds", np.zeros(len(pos))), float)
    yaws = rollout.get("yaws")
    yaws = headings(pos) if yaws is None or len(yaws) != len(pos) else np.asarray(yaws, float)
    idx = frame_indices(len(pos), action_ms, fps, max_seconds)
    if len(idx) == 0:
        raise ValueError("render_race_gif: the rollout has no positions")
    game = SimGame(1, [track], frame_shape=size)
    snap = game.save_state(0)
    base, tf = _minimap_base(track, size)
    trail = to_pixels(pos, *tf)
    frames = []
    for i in idx:
        row = snap.row.copy()
        row[ph.X], row[ph.Y], row[ph.YAW] = pos[i, 0], pos[i, 1], yaws[i]
        row[ph.VX] = row[ph.VY] = row[ph.R] = 0.0
        game.restore_state(0, type(snap)(row=row))
        view = Image.fromarray(game.observe().frames[0, 0]).convert("RGB")
        mini = base.copy()
        draw = ImageDraw.Draw(mini)
        if i > 0:
            draw.line([tuple(p) for p in trail[: i + 1]], fill=TRAIL, width=2)
        cx, cy = trail[i]
        draw.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill=CAR)
        frame = Image.new("RGB", (2 * size[1], size[0]))
        frame.paste(view, (0, 0))
        frame.paste(mini, (size[1], 0))
        label = f"{track.name}  {(i + 1) * action_ms / 1000:6.2f} s  {speeds[i] * 3.6:5.0f} km/h"
        d = ImageDraw.Draw(frame)
        d.rectangle([0, 0, 2 * size[1], 13], fill=BG)
        d.text((4, 1), label, fill=(255, 255, 255))
        frames.append(frame.quantize(colors=64, method=Image.Quantize.MEDIANCUT))
    game.close()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    duration = int(round(1000.0 / fps))
    frames[0].save(
        out,
        save_all=True,
        append_images=frames[1:],
        duration=duration,
        loop=0,
        optimize=True,
        disposal=1,
    )
    return out
