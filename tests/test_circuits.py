"""Circuits (closed lines raced for laps) and roads that pass over themselves (bridges)."""

import numpy as np
import pytest

from trackmind.sim.driver import PurePursuitDriver, drive_races
from trackmind.sim.game import SimGame
from trackmind.sim.mapio import import_csv, load_map, save_map
from trackmind.sim.maps import line_from_recipe
from trackmind.sim.reference import reference_time_ms
from trackmind.sim.track import MapError, Track


def oval(step_m: float = 2.0) -> np.ndarray:
    """A closed stadium: two 150 m straights joined by 40 m half circles (about 551 m)."""
    return line_from_recipe([("S", 150), ("L", 40, 180), ("S", 150), ("L", 40, 180)], step_m)


def write_circuit_csv(path, line: np.ndarray, wr: float = 7.0, wl: float = 7.0) -> None:
    rows = ["x,y,width_right,width_left"] + [f"{x:.3f},{y:.3f},{wr},{wl}" for x, y in line]
    path.write_text("\n".join(rows) + "\n")


def figure_eight(a: float = 110.0, rise_m: float = 8.0, step_m: float = 0.5) -> np.ndarray:
    """A Trackmania driven line (x, y up, z) of a figure-eight whose second pass is a bridge.

    Lemniscate of Gerono in the ground plane; the road climbs to `rise_m` where it passes
    over its own first pass, and the line ends where it began (a circuit).
    """
    t = np.linspace(0.0, 2.0 * np.pi, 4000, endpoint=False)
    ground = np.stack([a * np.sin(t), 0.5 * a * np.sin(2.0 * t)], axis=1)
    height = 10.0 + 0.5 * rise_m * (1.0 - np.cos(t))
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(ground, axis=0), axis=1))])
    keep = np.searchsorted(s, np.arange(0.0, s[-1], step_m))
    g, h = ground[keep], height[keep]
    # game axes: x, y up, z; our ground plane is (x, -z)
    return np.stack([g[:, 0], h, -g[:, 1]], axis=1)


def test_closed_csv_is_a_circuit_with_laps(tmp_path):
    path = tmp_path / "oval.csv"
    line = oval()
    write_circuit_csv(path, np.vstack([line[:-1], line[:1]]))  # last row repeats the first
    one = import_csv(path)
    assert one.closed and one.laps == 1
    lap = one.length_m
    assert lap == pytest.approx(300 + 2 * np.pi * 40, rel=0.01)
    three = load_map(path, laps=3)
    assert three.laps == 3 and three.length_m == pytest.approx(3 * lap, rel=1e-6)
    assert three.lap_length_m == pytest.approx(lap, rel=1e-6)
    # the start/finish line is crossed once per lap: a lap line between laps, then the finish
    np.testing.assert_allclose(three.lap_lines_s - three.start_s, [lap, 2 * lap], rtol=1e-6)
    assert set(np.round(three.lap_lines_s, 6)) <= set(np.round(three.checkpoints_s, 6))
    np.testing.assert_allclose(three.point_at(three.finish_s), three.point_at(three.start_s))
    np.testing.assert_allclose(
        three.point_at(three.start_s + lap + 37.0), three.point_at(three.start_s + 37.0), atol=0.05
    )
    # zones continue across laps: one every 10 m from the start to the end of the last lap
    _, zs = three.zone_centers(10.0, 1, 45)
    assert zs[1] == pytest.approx(three.start_s)
    race = zs[zs < three.finish_s]
    np.testing.assert_allclose(np.diff(race), 10.0)
    assert race[-1] > three.finish_s - 10.0 and three.finish_s in zs
    np.testing.assert_array_equal(three.laps_done([0.0, lap + 1, 3 * lap]), [0, 1, 3])


def test_circuit_ends_a_few_metres_apart_and_file_round_trip(tmp_path):
    line = oval()[:-3]  # the last row ~6 m short of the first, as circuit CSVs often end
    path = tmp_path / "gap.csv"
    write_circuit_csv(path, line)
    t = import_csv(path)
    assert t.closed
    again = load_map(save_map(load_map(path, laps=2), tmp_path / "gap.npz"))
    assert again.closed and again.laps == 2
    assert again.fingerprint() == load_map(path, laps=2).fingerprint()


def test_open_lines_still_refuse_self_crossing_and_laps():
    line = line_from_recipe([("S", 100), ("L", 30, 270), ("S", 120)])
    with pytest.raises(MapError, match="crosses itself|touches itself"):
        Track.build("x", line, 6.0, 6.0)
    straight = np.stack([np.arange(60) * 2.0, np.zeros(60)], axis=1)
    with pytest.raises(MapError, match="laps = 3 needs a circuit"):
        Track.build("x", straight, 6.0, 6.0, laps=3)
    with pytest.raises(MapError, match="laps must lie in"):
        Track.build("x", oval(), 6.0, 6.0, laps=0)
    with pytest.raises(MapError, match="closed: the line ends 118.0 m from its start"):
        Track.build("x", straight, 6.0, 6.0, closed=True)


def test_bridge_crossing_loads_but_a_flat_crossing_does_not(tmp_path):
    arr = figure_eight()
    path = tmp_path / "eight.npy"
    np.save(path, arr)
    t = load_map(path, width_m=6.0)
    assert t.closed and t.crossings and t.heights is not None
    flat = arr.copy()
    flat[:, 1] = 10.0
    np.save(path, flat)
    with pytest.raises(MapError, match="crosses itself at the same height"):
        load_map(path, width_m=6.0)


def test_car_stays_on_its_road_through_a_bridge(tmp_path):
    """Driving the bridge pass, the car's progress runs on (no jump to the road below)."""
    path = tmp_path / "eight.npy"
    np.save(path, figure_eight())
    track = load_map(path, width_m=6.0, laps=2)
    game = SimGame(1, maps=[track], frame_shape=(48, 64))
    driver = PurePursuitDriver([track], speed_share=0.8)
    obs = game.reset()
    progress = [0.0]
    while not obs.car.finished[0] and obs.car.race_time_ms[0] < 120_000:
        obs = game.step(driver.act(obs.car))
        progress.append(float(obs.car.progress_m[0]))
    assert obs.car.finished[0]
    steps = np.diff(progress)
    assert steps.min() > -0.5 and steps.max() < 3.0  # <= 60 m/s * 50 ms: no jumps
    assert track.laps_done(progress[-1]) == 2
    assert obs.car.checkpoints_passed[0] == len(track.checkpoints_s)


def test_windowed_textures_follow_the_road_the_car_is_on(tmp_path):
    path = tmp_path / "eight.npy"
    np.save(path, figure_eight())
    track = load_map(path, width_m=6.0)
    game = SimGame(1, maps=[track], frame_shape=(48, 64))
    textures = game._pool.textures[0]
    assert len(textures.textures) > 1
    # the crossing point: both passes go through the origin, at 1/4 and 3/4 of the lap
    lap = track.lap_length_m
    first, second = track.start_s + 0.0 * lap, track.start_s + 0.5 * lap
    np.testing.assert_allclose(track.point_at(first), track.point_at(second), atol=0.5)
    # on each pass, the texture the car sees marks the other road's walls where it crosses
    for s_car, heading_s in ((first + 3.0, first), (second + 3.0, second)):
        tex = textures.textures[int(textures.index(np.array([s_car]))[0])]
        ahead = track.point_at(heading_s + 8.0)
        side = ahead + 5.2 * track.normals[track.segment_at(heading_s + 8.0)]
        inside = _texel(tex, ahead)
        beside = _texel(tex, side)
        assert inside > 0 and beside > 0  # on its own road, near its own wall
        edge = ahead + 6.5 * track.normals[track.segment_at(heading_s + 8.0)]
        assert _texel(tex, edge) == 0  # its own wall stands there, not the crossing road


def _texel(tex, xy) -> int:
    i = int((xy[0] - tex.x0) / tex.cell)
    k = int((xy[1] - tex.y0) / tex.cell)
    return int(tex.data[k, i])


@pytest.mark.parametrize("kind", ["oval", "eight"])
def test_scripted_driver_finishes_circuits_near_their_reference(tmp_path, kind):
    if kind == "oval":
        path = tmp_path / "oval.csv"
        write_circuit_csv(path, oval())
        track = load_map(path, laps=3)
    else:
        path = tmp_path / "eight.npy"
        np.save(path, figure_eight())
        track = load_map(path, width_m=6.0, laps=2)
    game = SimGame(1, maps=[track], frame_shape=None)
    (result,) = drive_races(game, PurePursuitDriver([track], speed_share=0.8))
    assert result["finished"]
    ratio = result["race_time_ms"] / reference_time_ms(track)
    assert 1.15 <= ratio <= 1.35, ratio
    # flying laps are faster than the standing-start first one in the reference
    one = reference_time_ms(
        load_map(path, laps=1, width_m=6.0) if kind == "eight" else load_map(path, laps=1)
    )
    assert reference_time_ms(track) < track.laps * one
