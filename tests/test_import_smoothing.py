"""The importer smooths measured points (sim/smoothing.py), lifts a clean crossing (bridge.py)."""

import numpy as np
import pytest
from scipy.spatial import ConvexHull
from test_circuits import write_circuit_csv

from trackmind.sim.bridge import (
    BRIDGE_HEIGHT_M,
    BRIDGE_MARGIN_M,
    BRIDGE_RAMP_M,
    _circular_runs,
    crossing_angle_deg,
    deck_profile,
)
from trackmind.sim.driver import PurePursuitDriver, drive_races
from trackmind.sim.game import SimGame
from trackmind.sim.mapio import import_csv, load_map, save_map
from trackmind.sim.maps import line_from_recipe
from trackmind.sim.reference import reference_time_ms
from trackmind.sim.smoothing import distance_to_polyline, smooth_line
from trackmind.sim.track import HEIGHT_CLEARANCE_M, MapError, Track, curvature


def hairpin_circuit(step_m: float = 5.0) -> np.ndarray:
    """A teardrop circuit with an 8 m hairpin, its points every `step_m` as databases give.

    The belt around a 40 m circle and an 8 m one whose centres are 300 m apart: two tangent
    straights of sqrt(300^2 - 32^2) m, and arcs of pi +- 2 asin(32 / 300) radians.
    """
    t = np.linspace(0.0, 2 * np.pi, 4000, endpoint=False)
    ring = np.stack([np.cos(t), np.sin(t)], axis=1)
    cloud = np.vstack([40.0 * ring, 8.0 * ring + [300.0, 0.0]])
    hull = cloud[ConvexHull(cloud).vertices]  # counter-clockwise, the belt
    dense = np.vstack(
        [np.linspace(a, b, 200, endpoint=False) for a, b in zip(hull, np.roll(hull, -1, 0))]
    )
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(dense, axis=0), axis=1))])
    return dense[np.searchsorted(s, np.arange(0.0, s[-1] - step_m / 2, step_m))]


def hairpin_circuit_length() -> float:
    phi = np.arcsin(32.0 / 300.0)
    return 2 * np.sqrt(300.0**2 - 32.0**2) + 40.0 * (np.pi + 2 * phi) + 8.0 * (np.pi - 2 * phi)


def figure_eight_ground(a: float = 110.0, step_m: float = 5.0) -> np.ndarray:
    """A lemniscate in the ground plane, crossing itself at the origin at about 53 degrees."""
    t = np.linspace(0.0, 2.0 * np.pi, 20000, endpoint=False)
    g = np.stack([a * np.sin(t), 0.5 * a * np.sin(2.0 * t)], axis=1)
    s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(g, axis=0), axis=1))])
    return g[np.searchsorted(s, np.arange(0.0, s[-1] - step_m / 2, step_m))]


def test_a_circle_given_every_5_m_keeps_its_radius():
    t = np.arange(0.0, 2 * np.pi, 5.0 / 50.0)  # radius 50 m, a point every 5 m
    ring = 50.0 * np.stack([np.cos(t), np.sin(t)], axis=1)
    width = 5.0 + np.sin(t)  # a value per point
    out = smooth_line(ring, width, closed=True)
    radius = 1.0 / np.abs(curvature(out.points))
    # through every point; linear resampling: 2.5 m radii at the kinks
    assert radius.min() > 49.5 and radius.max() < 50.5
    np.testing.assert_allclose(np.linalg.norm(out.points, axis=1), 50.0, atol=0.05)
    assert out.max_deviation_m < 0.05
    # the value follows its point: width at angle phi is 5 + sin(phi)
    phi = np.arctan2(out.points[:, 1], out.points[:, 0])
    np.testing.assert_allclose(out.values[0], 5.0 + np.sin(phi), atol=0.01)
    step = np.linalg.norm(np.diff(out.points, axis=0), axis=1)
    np.testing.assert_allclose(step, step.mean(), rtol=0.01)  # evenly spaced, about 1 m
    assert 0.99 < step.mean() < 1.01


def test_a_jittery_driven_line_is_smoothed_not_followed():
    """Points every 0.5 m with 2 cm of noise: joined as they are, their 3-point radii drop to
    a few metres; the least-squares fit keeps the 50 m circle within 10 cm."""
    rng = np.random.default_rng(3)
    t = np.arange(0.0, 2 * np.pi, 0.5 / 50.0)
    ring = 50.0 * np.stack([np.cos(t), np.sin(t)], axis=1) + rng.normal(0.0, 0.02, (len(t), 2))
    assert 1.0 / np.abs(curvature(ring)).max() < 5.0  # the raw points' kinks
    out = smooth_line(ring, closed=True)
    radius = 1.0 / np.abs(curvature(out.points))
    assert radius.min() > 40.0 and radius.max() < 70.0
    np.testing.assert_allclose(np.linalg.norm(out.points, axis=1), 50.0, atol=0.03)
    assert 0.02 < out.max_deviation_m < 0.15  # it left the noise behind
    line = smooth_line(ring[: len(ring) // 2], closed=False)  # an open line keeps its ends
    np.testing.assert_array_equal(line.points[[0, -1]], ring[[0, len(ring) // 2 - 1]])


def test_distance_to_polyline_by_segments():
    line = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]])
    assert distance_to_polyline(np.array([[5.0, 3.0]]), line) == pytest.approx(3.0)
    assert distance_to_polyline(np.array([[12.0, 5.0], [5.0, -1.0]]), line) == pytest.approx(2.0)
    assert distance_to_polyline(np.array([[13.0, 14.0]]), line) == pytest.approx(5.0)  # end


def test_an_8_m_hairpin_given_every_5_m_loads_and_is_driven():
    points = hairpin_circuit()
    with pytest.raises(MapError, match="turn too tight"):  # linear joins: kinks at each point
        Track.build("raw", points, 6.0, 6.0, closed=True)
    track = Track.build("smooth", smooth_line(points, closed=True).points, 6.0, 6.0, closed=True)
    radius = 1.0 / np.abs(curvature(track.points)).max()
    assert 7.0 < radius < 9.0, radius
    game = SimGame(1, maps=[track], frame_shape=None)
    (result,) = drive_races(game, PurePursuitDriver([track], speed_share=0.8))
    assert result["finished"]
    assert 1.1 < result["race_time_ms"] / reference_time_ms(track) < 1.4


def test_imported_circuit_reports_its_deviation_and_round_trips(tmp_path):
    path = tmp_path / "hairpin.csv"
    write_circuit_csv(path, hairpin_circuit(), wr=6.0, wl=6.0)
    track = import_csv(path)
    assert track.closed and not track.crossings
    assert 0.0 <= track.smoothing_deviation_m < 0.01  # points 5 m apart: passed through
    assert track.length_m == pytest.approx(hairpin_circuit_length(), rel=0.005)
    again = load_map(save_map(track, tmp_path / "hairpin.npz"))  # saved smoothed: kept as is
    assert again.fingerprint() == track.fingerprint()


def test_figure_eight_without_heights_loads_as_a_bridge(tmp_path):
    path = tmp_path / "eight.csv"
    write_circuit_csv(path, figure_eight_ground(), wr=6.0, wl=6.0)
    with pytest.raises(MapError, match="crosses itself"):  # the raw line, no heights
        Track.build("raw", figure_eight_ground(), 6.0, 6.0, closed=True)
    track = load_map(path, laps=2)
    assert track.closed and track.crossings
    z = track.race_heights
    assert z.min() == 0.0 and z.max() == pytest.approx(BRIDGE_HEIGHT_M)
    # the two passes through the origin: one on the ground, one on the deck
    near = np.linalg.norm(track.race_line, axis=1) < 3.0
    assert z[near].min() == 0.0 and z[near].max() >= HEIGHT_CLEARANCE_M
    game = SimGame(1, maps=[track], frame_shape=None)
    (result,) = drive_races(game, PurePursuitDriver([track], speed_share=0.8))
    assert result["finished"]


def test_lines_that_really_meet_themselves_are_still_refused(tmp_path):
    path = tmp_path / "line.csv"
    open_line = line_from_recipe([("S", 100), ("L", 30, 270), ("S", 120)], 5.0)
    write_circuit_csv(path, open_line, wr=6.0, wl=6.0)  # an open line crossing itself
    with pytest.raises(MapError, match="crosses itself|touches itself"):
        import_csv(path)
    # a circuit whose two straights run side by side, 12 m apart: the roads touch along 150 m
    narrow = line_from_recipe([("S", 150), ("L", 6, 180), ("S", 150), ("L", 6, 180)], 5.0)
    write_circuit_csv(path, narrow[:-1], wr=6.0, wl=6.0)
    with pytest.raises(MapError, match=r"line\.csv: the line touches itself"):
        import_csv(path)
    # a circuit driven twice over: it overlaps itself along its whole length
    oval = line_from_recipe([("S", 150), ("L", 40, 180), ("S", 150), ("L", 40, 180)], 5.0)
    write_circuit_csv(path, np.vstack([oval[:-1], oval[:-1]]), wr=6.0, wl=6.0)
    with pytest.raises(MapError, match=r"line\.csv: the line crosses itself"):
        import_csv(path)


def test_crossing_angle_and_runs_on_a_circle():
    a = np.radians(45.0 * np.arange(8))  # an octagon: its tangent at k points at 45 k + 90 deg
    octagon = np.stack([np.cos(a), np.sin(a)], axis=1)
    assert crossing_angle_deg(octagon, 0, 1) == pytest.approx(45.0)
    assert crossing_angle_deg(octagon, 0, 2) == pytest.approx(90.0)
    assert crossing_angle_deg(octagon, 1, 5) == pytest.approx(0.0, abs=1e-6)  # opposite ways
    runs = _circular_runs(np.array([0, 1, 2, 10, 11, 97, 98, 99]), 100)
    assert [r.tolist() for r in runs] == [[97, 98, 99, 0, 1, 2], [10, 11]]


def test_deck_profile_by_hand():
    s = np.arange(0.0, 1000.0, 1.0)
    z = deck_profile(s, 1000.0, np.array([490.0, 500.0, 510.0]))
    lo, hi = 490.0 - BRIDGE_MARGIN_M, 510.0 + BRIDGE_MARGIN_M
    assert z[int(lo)] == z[500] == z[int(hi)] == BRIDGE_HEIGHT_M
    assert z[int(lo - BRIDGE_RAMP_M / 2)] == pytest.approx(BRIDGE_HEIGHT_M / 2)
    assert z[int(hi + BRIDGE_RAMP_M)] == pytest.approx(0.0)
    assert z[0] == z[999] == 0.0
    wrapped = deck_profile(s, 1000.0, np.array([995.0, 0.0, 5.0]))  # a deck across the start
    assert wrapped[0] == wrapped[998] == wrapped[8] == BRIDGE_HEIGHT_M and wrapped[500] == 0.0
