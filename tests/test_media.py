"""The race GIF: frame selection, minimap geometry (hand-computed), and a real render."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from trackmind.sim.mapio import load_map
from trackmind.tracking.media import (
    frame_indices,
    headings,
    minimap_transform,
    render_race_gif,
    to_pixels,
)


def test_frame_indices_subsample_and_keep_the_finish():
    # 50 ms actions at 10 fps: every 2nd step, counted back from the last one
    assert frame_indices(7, 50, 10.0, 60.0).tolist() == [0, 2, 4, 6]
    assert frame_indices(6, 50, 10.0, 60.0).tolist() == [1, 3, 5]
    # 20 fps shows every step; a 0.2 s cap keeps the last 4 steps
    assert frame_indices(10, 50, 20.0, 0.2).tolist() == [6, 7, 8, 9]
    assert frame_indices(0, 50, 10.0, 60.0).tolist() == []


def test_minimap_transform_fits_and_centres():
    # a 100 x 50 m box into 60 x 120 px with 10 px margins: scale min(100/100, 40/50) = 0.8
    scale, offset, origin = minimap_transform(
        np.array([0.0, 0.0]), np.array([100.0, 50.0]), (60, 120), margin=10
    )
    assert scale == pytest.approx(0.8)
    assert offset.tolist() == pytest.approx([20.0, 10.0])  # (120 - 80) / 2, (60 - 40) / 2
    px = to_pixels(np.array([[0.0, 50.0], [100.0, 0.0], [50.0, 25.0]]), scale, offset, origin)
    # top-left corner of the box, bottom-right (y up in the world, down in the image), centre
    assert np.allclose(px, [[20.0, 10.0], [100.0, 50.0], [60.0, 30.0]])


def test_headings_from_positions():
    pos = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    assert headings(pos).tolist() == pytest.approx([0.0, np.pi / 2, np.pi / 2])


def test_render_race_gif_of_a_drive_along_the_centre_line(tmp_path):
    track = load_map("starter")
    s = np.arange(0.0, 3.0, 0.05) * 20.0 + track.start_s  # 3 s at 20 m/s
    pos = np.stack([track.point_at(v) for v in s])
    r = {"positions": pos, "speeds": np.full(len(s), 20.0), "yaws": headings(pos)}
    out = render_race_gif(track, r, tmp_path / "r.gif", fps=10, size=(60, 80))
    im = Image.open(out)
    assert im.n_frames == 30 and im.size == (160, 60)
    frames = []
    for k in (0, 29):
        im.seek(k)
        frames.append(np.asarray(im.convert("RGB"), dtype=np.int16))
    assert np.abs(frames[0] - frames[1]).mean() > 1.0  # the car moved
    # the car marker (red) of the last frame sits on the last position's minimap pixel
    allp = np.concatenate(
        [
            track.points + sd * w[:, None] * track.normals
            for sd, w in ((1, track.width_left), (-1, track.width_right))
        ]
    )
    tf = minimap_transform(allp.min(axis=0), allp.max(axis=0), (60, 80))
    cx, cy = np.rint(to_pixels(pos[-1:], *tf)[0]).astype(int)
    red = frames[1][:, 80:][cy - 2 : cy + 3, cx - 2 : cx + 3]
    assert ((red[..., 0] > 180) & (red[..., 1] < 90)).any()


def test_best_race_media_draws_and_logs_to_mlflow(tmp_path):
    from lightning.pytorch.loggers import MLFlowLogger

    from trackmind.training.race_media import BestRaceMedia

    track = load_map("starter")
    s = np.arange(0.0, 1.0, 0.05) * 20.0 + track.start_s
    pos = np.stack([track.point_at(v) for v in s])
    race = {"map": "starter", "positions": pos, "speeds": np.full(len(s), 20.0)}
    logger = MLFlowLogger(
        experiment_name="t",
        tracking_uri=f"sqlite:///{tmp_path / 'ml.db'}",
        artifact_location=str(tmp_path / "art"),
    )
    media = BestRaceMedia(tmp_path / "out", {"starter": track}, every_s=3600)
    media.record({**race, "race_time": 12_340, "frames": np.zeros((20, 1, 8, 8))})
    media.record({**race, "race_time": 11_110})  # a newer best replaces the pending one
    files = media.flush(logger, step=7)
    names = sorted(f.name for f in files)
    assert names == ["starter_step7_11.11s.gif", "starter_step7_11.11s.png"]
    assert not media.pending and media.flush(logger, step=8) == []  # nothing new to draw
    logged = {a.path for a in logger.experiment.list_artifacts(logger.run_id, "media/starter")}
    assert logged == {f"media/starter/{n}" for n in names}


def test_draw_order_puts_maps_never_drawn_first_then_the_least_recent():
    from trackmind.training.race_media import draw_order

    pending = {"b": {}, "a": {}, "c": {}, "d": {}}
    assert draw_order(pending, {}) == ["a", "b", "c", "d"]
    assert draw_order(pending, {"a": 5.0, "b": 2.0, "d": 9.0}) == ["c", "b", "a", "d"]


def test_a_budgeted_flush_draws_one_race_at_least_and_keeps_the_rest(tmp_path):
    from trackmind.training.race_media import BestRaceMedia

    track = load_map("starter")
    s = np.arange(0.0, 1.0, 0.05) * 20.0 + track.start_s
    pos = np.stack([track.point_at(v) for v in s])
    race = {"positions": pos, "speeds": np.full(len(s), 20.0), "race_time": 9_000}
    tracks = {name: track for name in ("m1", "m2", "m3")}
    media = BestRaceMedia(tmp_path / "out", tracks, every_s=3600, share=1e-9)
    for name in tracks:
        media.record({**race, "map": name})
    first = media.flush(None, step=1, budget_s=0.0)  # no time at all: still one race
    assert [f.name for f in first] == ["m1_step1_9.00s.png", "m1_step1_9.00s.gif"]
    assert sorted(media.pending) == ["m2", "m3"]
    media.record({**race, "map": "m1", "race_time": 8_000})  # m1 again: drawn last
    assert [f.name[:2] for f in media.flush(None, step=2, budget_s=0.0)] == ["m2", "m2"]
    assert len(media.flush(None, step=3)) == 4 and not media.pending  # no budget: all
