"""Reference time: velocity profile and minimum-curvature line, checked by hand."""

import math

import numpy as np
import pytest

from trackmind.sim.driver import PurePursuitDriver, drive_races
from trackmind.sim.game import SimGame
from trackmind.sim.maps import builtin_map, builtin_names, line_from_recipe
from trackmind.sim.reference import (
    compute_reference,
    flying_profile,
    min_curvature_offsets,
    profile_time,
    reference_lap,
    reference_time_ms,
    velocity_profile,
)
from trackmind.sim.track import Track, curvature
from trackmind.sim.vehicle import VehicleParams, top_speed


def test_profile_on_a_straight_is_constant_acceleration():
    kappa, ds = np.zeros(11), np.ones(10)
    v = velocity_profile(kappa, ds, 4.0, lambda v: 2.0, lambda v: 4.0)
    np.testing.assert_allclose(v, 2.0 * np.sqrt(np.arange(11)))  # v^2 = 2 a s
    assert profile_time(v, ds) == pytest.approx(math.sqrt(10.0))  # s = a t^2 / 2


def test_profile_brakes_for_a_curve_within_the_friction_circle():
    kappa, ds = np.zeros(11), np.ones(10)
    kappa[10] = 1.0  # cap sqrt(a_lat / kappa) = 2 m/s at the last point
    v = velocity_profile(kappa, ds, 4.0, lambda v: 2.0, lambda v: 4.0)
    expected = 2.0 * np.sqrt(np.arange(11))
    expected[10] = 2.0
    expected[9] = 2.0  # at the limit laterally on point 10: no braking budget left there
    expected[8] = math.sqrt(4.0 + 2 * 4.0 * 2.0 / 2)  # sqrt(2^2 + 2 * 4 * 1) = sqrt(12)
    expected[7] = math.sqrt(12.0 + 8.0)
    np.testing.assert_allclose(v, expected)
    assert expected[6] < math.sqrt(28.0)  # point 6 keeps its forward-pass speed


def test_profile_respects_lateral_limit_and_top_speed():
    kappa = np.full(50, 0.01)
    v = velocity_profile(kappa, np.ones(49), 30.0, lambda v: 10.0, lambda v: 10.0, 0.0, 40.0)
    assert v.max() <= math.sqrt(30.0 / 0.01) + 1e-9
    v = velocity_profile(np.zeros(500), np.ones(499), 30.0, lambda v: 10.0, lambda v: 10.0, 0, 40)
    assert v.max() == pytest.approx(40.0)


def test_min_curvature_on_a_straight_stays_centred():
    c = np.stack([np.arange(30.0), np.zeros(30)], axis=1)
    n = np.tile([0.0, 1.0], (30, 1))
    a = min_curvature_offsets(c, n, np.full(30, -5.0), np.full(30, 5.0))
    np.testing.assert_allclose(a, 0.0, atol=1e-6)


def test_min_curvature_cuts_the_corner():
    t = Track.build("corner", line_from_recipe([("S", 80), ("L", 30, 90), ("S", 80)]), 10, 10)
    lap = compute_reference(t)
    k_center = np.abs(curvature(t.point_at(lap.s))).max()
    k_line = np.abs(curvature(lap.line)).max()
    assert k_line < 0.8 * k_center  # a wider radius than the centre line
    normals = np.stack([np.interp(lap.s, t.s, t.normals[:, k]) for k in range(2)], axis=1)
    offs = np.einsum("ij,ij->i", lap.line - t.point_at(lap.s), normals)
    apex = np.argmin(np.abs(lap.s - (t.start_s + 80 + 7.5 * np.pi)))
    assert offs[apex] > 3.0  # apex on the inside (left) of the turn
    assert offs[: apex - 20].min() < -3.0 and offs[apex + 20 :].min() < -3.0  # wide in, wide out
    assert np.all(np.abs(offs) <= 10.0 - 1.0 + 1e-6)  # walls minus the car's half-width
    assert offs[0] == pytest.approx(0.0, abs=1e-6)  # starts at the start line's centre


def test_flying_profile_starts_at_top_speed_and_meets_the_standing_one_after_a_corner():
    """The limit_speeds input: the reference line's limits without the standing start."""
    p = VehicleParams()
    t = builtin_map("starter")
    lap = reference_lap(t, p)
    s, v = flying_profile(t, p)
    np.testing.assert_array_equal(s, lap.s)
    assert lap.speed[0] == 0.0 and 0.9 * top_speed(p) < v[0] <= top_speed(p)  # flying start
    assert np.all(v >= lap.speed - 1e-9) and v.max() <= top_speed(p) + 1e-9
    # from the end of the first braking zone on, both are limited by the same corners
    dv = np.diff(lap.speed)
    first_brake = int(np.argmax(dv < 0))
    apex = first_brake + int(np.argmax(dv[first_brake:] >= 0))
    assert lap.speed[apex] < 0.8 * top_speed(p) and v[first_brake - 1] > lap.speed[first_brake - 1]
    np.testing.assert_allclose(v[apex:], lap.speed[apex:])


def test_reference_is_cached_and_given_times_win(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKMIND_CACHE_DIR", str(tmp_path))
    t = builtin_map("starter")
    a = reference_lap(t)
    assert len(list(tmp_path.glob("reference-*.npz"))) == 1
    b = reference_lap(t)
    assert a.time_ms == b.time_ms
    real = Track.build("real", t.race_line, 9.0, 9.0, reference_time_ms=55100.0)
    assert reference_time_ms(real) == 55100.0


def test_scripted_driver_finishes_every_builtin_map_between_1x_and_2x_reference():
    tracks = [builtin_map(n) for n in builtin_names()]
    game = SimGame(len(tracks), maps=tracks, frame_shape=None)
    results = drive_races(game, PurePursuitDriver(tracks))
    for t, r in zip(tracks, results):
        ref = reference_time_ms(t)
        assert r["finished"], t.name
        assert ref <= r["race_time_ms"] <= 2.0 * ref, (t.name, r, ref)


def test_axle_friction_of_the_bound_script_by_hand():
    """scripts/reference_bounds.py: the two axles' friction circles, braking split evenly."""
    from test_scripts import load_script

    rb = load_script("reference_bounds")
    front, rear = rb.axle_grips(VehicleParams())
    # static loads 1.4 / 2.6 and 1.2 / 2.6 of g, times mu = 3 (rear x 1.15)
    assert front == pytest.approx(3.0 * 9.81 * 1.4 / 2.6, rel=1e-3)
    assert rear == pytest.approx(3.0 * 1.15 * 9.81 * 1.2 / 2.6, rel=1e-3)
    assert rb.lateral_capacity(0.0, 10.0, 8.0) == pytest.approx(18.0)
    assert rb.lateral_capacity(12.0, 10.0, 8.0) == pytest.approx(8.0 + np.sqrt(28.0))  # 6 each
    assert rb.lateral_capacity(40.0, 10.0, 8.0) == 0.0  # both axles saturated
    fx = rb.longitudinal_budget(8.0 + np.sqrt(28.0), 30.0, 10.0, 8.0)
    assert fx == pytest.approx(12.0, abs=1e-6)  # the inverse of the line above
    assert rb.longitudinal_budget(5.0, 4.0, 10.0, 8.0) == 4.0  # grip to spare: the limit
    assert rb.longitudinal_budget(19.0, 4.0, 10.0, 8.0) == 0.0  # no grip left to brake


def test_every_relaxation_at_once_is_the_lowest_time():
    """scripts/reference_bounds.py's `all` column relaxes every assumption together, so it is
    at or under each single relaxation, and under the reference itself."""
    from test_scripts import load_script

    rb = load_script("reference_bounds")
    r = rb.relaxations(builtin_map("starter"))
    singles = ["margin_0", "drag_outside_grip", "shorter_line", "axle_grip", "axle_and_yaw"]
    assert r["all"] < 1.0
    assert all(r["all"] <= r[k] + 1e-9 for k in singles), r
