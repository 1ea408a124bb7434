"""Vehicle physics: magnitudes, robustness, walls, determinism."""

import numpy as np
import pytest

from trackmind.sim import physics as ph
from trackmind.sim.game import SimGame
from trackmind.sim.maps import builtin_map, builtin_names, procedural_map
from trackmind.sim.render import SKY, WALL_SHADE
from trackmind.sim.track import Track
from trackmind.sim.vehicle import VehicleParams, top_speed

ACCEL, NOTHING, BRAKE, LEFT_ACCEL = 0, 3, 6, 1


def long_straight(width=20.0):
    line = np.array([[0.0, 0.0], [4000.0, 0.0], [8000.0, 0.0]])
    return Track.build("straight", line, width, width)


def inside_walls(game: SimGame, tol=1e-6) -> np.ndarray:
    """Per car: the car's centre keeps half its width from both walls."""
    ok = np.ones(game.n_cars, dtype=bool)
    hw = game.vehicle.half_width
    for c in range(game.n_cars):
        t = game.track(c)
        x, y = game.state[c, ph.X], game.state[c, ph.Y]
        d2 = np.sum((t.points - [x, y]) ** 2, axis=1)
        j = int(np.argmin(d2))
        # signed distance to the nearest wall along the nearest sample's normal
        rel = np.array([x, y]) - t.points[j]
        d = rel @ t.normals[j]
        ok[c] = (d <= t.width_left[j] - hw + 0.05 + tol) and (d >= -t.width_right[j] + hw - 0.05)
        ok[c] &= np.sqrt(d2[j]) <= max(t.width_left[j], t.width_right[j]) + 0.05
    return ok


def test_stadium_car_magnitudes():
    g = SimGame(1, maps=[long_straight()], frame_shape=None)
    t100 = None
    for k in range(1200):
        g.step([ACCEL])
        v = g.state[0, ph.VX] * 3.6
        if t100 is None and v >= 100:
            t100 = (k + 1) * 0.05
    assert 1.5 <= t100 <= 2.5  # 0-100 km/h in about 2 s
    v_top = g.state[0, ph.VX] * 3.6
    assert 250 <= v_top <= 320  # several hundred km/h
    assert v_top == pytest.approx(top_speed(VehicleParams()) * 3.6, rel=0.03)
    assert g.state[0, ph.GEAR] == 5 and 1000 < g.state[0, ph.RPM] <= 11000
    # braking from top speed stops the car within a few seconds
    steps = 0
    while g.state[0, ph.VX] > 0.0 and steps < 200:
        g.step([BRAKE])
        steps += 1
    assert steps * 0.05 < 5.0


def test_gears_rise_with_speed():
    g = SimGame(1, maps=[long_straight()], frame_shape=None)
    gears = []
    for _ in range(300):
        g.step([ACCEL])
        gears.append(int(g.state[0, ph.GEAR]))
    assert gears[0] == 1 and gears[-1] == 5
    assert np.all(np.diff(gears) >= 0)


def test_lateral_grip_is_several_g_and_the_car_can_slide():
    g = SimGame(1, maps=[long_straight(60.0)], frame_shape=None)
    for _ in range(60):
        g.step([ACCEL])

    def world_velocity():
        vx, vy, yaw = g.state[0, ph.VX], g.state[0, ph.VY], g.state[0, ph.YAW]
        return np.array([vx * np.cos(yaw) - vy * np.sin(yaw), vx * np.sin(yaw) + vy * np.cos(yaw)])

    lateral, slid = [], False
    for _ in range(30):
        v0 = world_velocity()
        g.step([LEFT_ACCEL])
        assert not g.state[0, ph.WALL]
        dv = (world_velocity() - v0) / 0.05
        lateral.append(abs(v0[0] * dv[1] - v0[1] * dv[0]) / np.linalg.norm(v0))
        slid |= bool(g.state[0, ph.SLIDE_F])
    assert 2.0 * 9.81 < max(lateral) < 3.3 * 9.81  # about mu = 3 g, never above the tyres
    assert slid


def test_reverse_with_brake_at_standstill():
    g = SimGame(1, maps=[long_straight()], frame_shape=None)
    for _ in range(30):
        g.step([ACCEL])
    for _ in range(60):
        g.step([BRAKE])
    assert g.state[0, ph.VX] < -5.0 and g.state[0, ph.GEAR] == 0
    assert g.state[0, ph.VX] >= -VehicleParams().reverse_max_speed - 1e-9


def all_test_maps():
    return [builtin_map(n) for n in builtin_names()] + [procedural_map(s) for s in range(20)]


def test_no_nan_after_random_actions_and_no_escape():
    tracks = all_test_maps()
    g = SimGame(len(tracks), maps=tracks, frame_shape=None)
    rng = np.random.default_rng(0)
    # biased towards accelerating so cars reach high speed and hit walls hard
    acts = np.where(
        rng.random((10_000, len(tracks))) < 0.5, 0, rng.integers(0, 12, (10_000, len(tracks)))
    )
    for k in range(10_000):
        g.advance(acts[k])
        if k % 500 == 0:
            assert inside_walls(g).all(), k
    assert np.isfinite(g.state).all()
    assert inside_walls(g).all()
    assert g.state[:, ph.S].max() > 300  # they did drive


@pytest.mark.parametrize("angle_deg", [2, 10, 30, 45, 60, 80, 90])
@pytest.mark.parametrize("speed", [83.0, 150.0])
def test_no_wall_tunnelling_at_top_speed(angle_deg, speed):
    for side in (1, -1):
        for name in ("starter", "hairpins"):
            g = SimGame(1, maps=[name], frame_shape=None)
            t = g.track(0)
            s0 = t.start_s + 60
            j = int(np.searchsorted(t.s, s0))
            heading = t.heading_at(s0) + side * np.deg2rad(angle_deg)
            g.state[0, ph.YAW] = heading
            g.state[0, ph.VX] = speed
            g.state[0, ph.SEG] = j
            for _ in range(40):
                g.step([ACCEL])
                assert inside_walls(g).all()
            assert np.isfinite(g.state).all()
            assert abs(g.state[0, ph.VX]) < speed  # the wall cost speed


def test_frames_shape_dtype_and_determinism():
    g1 = SimGame(3, maps=["starter", "hairpins", "procedural:5"])
    g2 = SimGame(3, maps=["starter", "hairpins", "procedural:5"])
    rng = np.random.default_rng(1)
    for _ in range(100):
        a = rng.integers(0, 12, 3)
        o1, o2 = g1.step(a), g2.step(a)
    assert o1.frames.shape == (3, 1, 120, 160) and o1.frames.dtype == np.uint8
    np.testing.assert_array_equal(o1.frames, o2.frames)
    np.testing.assert_array_equal(g1.state, g2.state)
    assert o1.frames.std() > 10  # not a blank image


def test_frames_any_size_and_walls_in_view():
    g = SimGame(1, maps=["starter"], frame_shape=(48, 64))
    o = g.observe()
    assert o.frames.shape == (1, 1, 48, 64)
    g = SimGame(1, maps=["starter"], frame_shape=(120, 160))
    f = g.observe().frames[0, 0]
    assert (f[:30] == SKY).all()  # sky above the horizon
    assert f[-1, 80] in (92, 108)  # road bands under the car
    assert WALL_SHADE in f[:, 0] and WALL_SHADE in f[:, -1]  # walls on both sides


def test_save_restore_rewinds_one_car_exactly():
    g = SimGame(2, maps=["chicanes", "starter"])
    for _ in range(30):
        g.step([0, 0])
    snap = g.save_state(0)
    frame = g.observe().frames[0].copy()
    after = []
    for _ in range(20):
        after.append(g.step([1, 2]).frames[0].copy())
    g.restore_state(0, snap)
    np.testing.assert_array_equal(g.observe().frames[0], frame)
    for k in range(20):
        np.testing.assert_array_equal(g.step([1, 2]).frames[0], after[k])


def test_cars_reset_independently_onto_new_maps():
    g = SimGame(2, maps="starter", frame_shape=None)
    for _ in range(50):
        g.step([0, 0])
    g.reset(cars=[1], maps="hairpins")
    assert g.track(1).name == "hairpins" and g.track(0).name == "starter"
    st = g.car_state()
    assert st.progress_m[1] == 0.0 and st.race_time_ms[1] == 0
    assert st.progress_m[0] > 20 and st.race_time_ms[0] == 2500


@pytest.mark.parametrize("bad", [12, -1, 3.5, "a"])
def test_invalid_action_index(bad):
    g = SimGame(1, maps="starter", frame_shape=None)
    with pytest.raises(ValueError, match="action"):
        g.step([bad])


def test_race_clock_checkpoints_and_finish():
    t = builtin_map("starter")
    g = SimGame(1, maps=[t], frame_shape=None)
    j = int(np.searchsorted(t.s, t.finish_s - 3))

    def drive_across_finish(checkpoints_passed: int):
        """Place the car 3 m before the finish at 30 m/s and drive 4 steps (200 ms)."""
        g.reset()
        g.state[0, ph.NEXT_CP] = checkpoints_passed
        g.state[0, [ph.X, ph.Y]] = t.points[j]
        g.state[0, ph.YAW] = t.heading_at(t.finish_s)
        g.state[0, ph.SEG] = j
        g.state[0, ph.S] = t.s[j]
        g.state[0, ph.VX] = 30
        for _ in range(4):
            g.step([0])
        return g.car_state()

    # the checkpoint was not driven across: crossing the finish line does not finish
    assert not drive_across_finish(0).finished[0]
    st = drive_across_finish(len(t.checkpoints_s))
    # 3 m at 30 m/s: the line is crossed on the 10th or 11th tick of 10 ms
    assert st.finished[0] and st.race_time_ms[0] in (100, 110)
    frozen = st.race_time_ms[0]
    g.step([0])
    assert g.car_state().race_time_ms[0] == frozen
