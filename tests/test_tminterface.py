"""The TMInterface backend, end to end against the simulated stand-in game.

The real game cannot run here, so `trackmind.tmi.standin` plays Trackmania + TMInterface:
the same calls the backend makes, inputs moving a sim car, SimStateData built and parsed
with tminterface.structs. Pure parts (frames of reference, projection, resampling, zone
centers, race times, frames) are checked value by value against hand-computed cases.
"""

from __future__ import annotations

import io
import logging
import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from test_scripts import load_script
from tminterface.structs import CheckpointData, CheckpointTime, SimStateData

from trackmind.collectors.parts import build_collector_parts
from trackmind.env.build import make_race
from trackmind.env.map_cycle import MapCycle
from trackmind.env.rollout import GameInstanceManager
from trackmind.errors import ConfigError
from trackmind.evaluation import map_entries
from trackmind.sim.driver import PurePursuitDriver
from trackmind.sim.game import SimGame
from trackmind.sim.mapio import load_map
from trackmind.sim.track import Track
from trackmind.tmi.capture import make_capture, resize_area, to_frame
from trackmind.tmi.config import CaptureConfig, tminterface_config
from trackmind.tmi.connection import GameUnavailable, standin_factory
from trackmind.tmi.game import TMInterfaceGame
from trackmind.tmi.launcher import CommandLauncher, fill
from trackmind.tmi.progress import LineTracker, project, zone_index
from trackmind.tmi.reference_line import (
    parse_race_time,
    resample_polyline,
    zone_centers,
)
from trackmind.tmi.run_check import probe_servers
from trackmind.tmi.standin import find_standin, start_standin, stop_all_standins
from trackmind.tmi.state import (
    game_to_world,
    read_kinematics,
    rotation_to_game,
    rotation_to_world,
    world_to_game,
)
from trackmind.training.factory import plan_run

ROOT = Path(__file__).resolve().parents[1]
FRAME = (24, 32)
REF_MS = 12340


@pytest.fixture(autouse=True)
def _no_games_left():
    yield
    stop_all_standins()


def standin(server="TMInterface0", **kw):
    kw.setdefault("frame_shape", FRAME)
    kw.setdefault("countdown_ms", 200)
    return start_standin(server, **kw)


def env_cfg(**tmi) -> dict:
    """conf/env/tminterface.yaml with the stand-in, small frames and short timeouts."""
    env = yaml.safe_load((ROOT / "conf" / "env" / "tminterface.yaml").read_text())
    env["frame_shape"] = list(FRAME)
    t = env["tminterface"]
    t.update(connection="standin", connect_timeout_s=1.0, step_timeout_s=1.0)
    t.update(map_load_timeout_s=3.0, retry_wait_s=0.05, restart_attempts=2)
    t["capture"]["method"] = "standin"
    t["standin"]["countdown_ms"] = 200
    for k, v in tmi.items():
        if isinstance(v, dict):
            t[k].update(v)
        else:
            t[k] = v
    return env


@pytest.fixture(scope="module")
def real_map(tmp_path_factory):
    """A 'real' map made as a user would: a recorded run -> make_map_from_run.py."""
    d = tmp_path_factory.mktemp("tmnf")
    assert load_script("record_run").main([str(d / "run.npy"), "--standin", "starter"]) == 0
    argv = [str(d / "run.npy"), "--name", "starter_real", "--challenge", "starter"]
    argv += ["--reference-time", "0:12.34", "--out-dir", str(d), "--conf-dir", str(d / "conf")]
    assert load_script("make_map_from_run").main(argv) == 0
    return d / "starter_real_0.5m_cl.npy"


def cycle_of(line, exploration=0, greedy=1, challenge="starter", more=()):
    entry = {"map": str(line), "challenge": challenge, "reference_time_ms": REF_MS}
    entry.update(exploration=exploration, greedy=greedy)
    return MapCycle.from_config([entry, *more])


def brake(obs, greedy):
    return np.array([6]), np.zeros((1, 12), np.float32), np.ones(1, bool)


def raw_line_track(path: Path) -> Track:
    """The driven line of a .npy run joined point to point, without the importer's smoothing."""
    run = np.load(path)
    return Track.build("raw", np.stack([run[:, 0], -run[:, 2]], axis=1), 8.0, 8.0)


def driver_policy(race, run: Path):
    """The scripted driver on the run's raw points. The run hugs the game's wall for its last
    80 m; the map's smoothed line lies a few cm off them, enough to pin the car to that wall."""
    state = {}

    def policy(obs, greedy):
        if race.steps[0] == 0 or "d" not in state:
            state["d"] = PurePursuitDriver([raw_line_track(run)])
        a = state["d"].act(race.car)
        return a, np.zeros((1, 12), np.float32), np.ones(1, bool)

    return policy


def one_line(text: str) -> bool:
    return "\n" not in str(text).strip() and "Traceback" not in str(text)


# --- frames of reference and SimStateData ----------------------------------------------------
def test_game_frames_map_to_trackmind_by_hand():
    # a car with the identity orientation: game local x (left), y (up), z (forward) = world
    r = rotation_to_world(np.eye(3))
    np.testing.assert_array_equal(r[:, 0], [0, -1, 0])  # forward = game +z -> (x, -z, y)
    np.testing.assert_array_equal(r[:, 1], [1, 0, 0])  # left = game +x
    np.testing.assert_array_equal(r[:, 2], [0, 0, 1])  # up = game +y
    assert np.linalg.det(r) == pytest.approx(1.0)
    np.testing.assert_array_equal(world_to_game([1.0, 2.0, 3.0]), [1.0, 3.0, -2.0])
    yaw = 0.7
    c, s = np.cos(yaw), np.sin(yaw)
    rw = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    np.testing.assert_allclose(rotation_to_world(rotation_to_game(rw)), rw, atol=1e-12)


def test_sim_state_data_is_parsed_from_its_real_byte_layout():
    s = SimStateData()
    s.flags = 0xFF
    dyna = s.dyna.current_state
    dyna.position = [10.0, 2.0, -30.0]  # game x, y (up), z
    # the car faces game -x (yaw +180 deg in trackmind): local z (forward) -> world -x,
    # local x (left) -> world -z, local y (up) -> world y
    dyna.rotation = np.array([[0.0, 0.0, -1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
    dyna.linear_speed = [-20.0, 0.0, 0.0]  # 20 m/s forward
    dyna.angular_speed = [0.0, 0.5, 0.0]  # about game up
    s.scene_mobil.engine.gear = 3
    s.scene_mobil.engine.actual_rpm = 7000.0
    s.scene_mobil.has_any_lateral_contact = True
    wheel = s.simulation_wheels[2].real_time_state
    wheel.is_sliding, wheel.has_ground_contact, wheel.contact_material_id = True, True, 2
    s.player_info.race_time = 4560
    s.cp_data = CheckpointData([True, False], [CheckpointTime(time=3000), CheckpointTime(time=-1)])
    data = bytes(s.data)
    # the checkpoint part closes the fixed part and grows past it, in order: reserved,
    # n states, states, n times, (time, stunts score) per checkpoint
    tail = struct.unpack_from("<9i", data, SimStateData.min_size - CheckpointData.min_size)
    assert tail == (0, 2, 1, 0, 2, 3000, 0, -1, 0)
    # read back exactly as TMInterface.get_simulation_state reads its shared memory
    st = SimStateData(data[: SimStateData.min_size])
    st.cp_data.read_from_file(io.BytesIO(data[SimStateData.min_size :]))
    k = read_kinematics(st)
    np.testing.assert_allclose(k.position, [10.0, 30.0, 2.0])
    assert k.yaw == pytest.approx(np.pi)
    np.testing.assert_allclose(k.velocity, [20.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(k.angular_velocity, [0.0, 0.0, 0.5], atol=1e-6)
    assert (k.gear, k.rpm, k.wall_contact, k.race_time_ms) == (3, 7000.0, True, 4560)
    np.testing.assert_array_equal(k.wheel_sliding, [False, False, True, False])
    np.testing.assert_array_equal(k.material_group, [0, 0, 1, 0])  # grass on wheel 2
    assert [c.time for c in st.cp_data.cp_times] == [3000, -1]


def test_precomputed_offsets_read_what_the_struct_proxies_read():
    """read_kinematics reads fixed offsets; tminterface's proxies must agree field by field."""
    rng = np.random.default_rng(0)
    s = SimStateData()
    dyna, mobil = s.dyna.current_state, s.scene_mobil
    for name in ("position", "linear_speed", "angular_speed"):
        setattr(dyna, name, rng.normal(size=3) * 50)
    dyna.rotation = rng.normal(size=(3, 3))
    mobil.engine.gear, mobil.engine.actual_rpm = 4, 6543.5
    mobil.has_any_lateral_contact = True
    s.player_info.race_time = 123456
    for i in range(4):
        w = s.simulation_wheels[i].real_time_state
        w.has_ground_contact, w.is_sliding = bool(i % 2), bool(i // 2)
        w.damper_absorb, w.contact_material_id = 0.01 * (i + 1), [0, 2, 3, 5][i]
    k = read_kinematics(SimStateData(bytes(s.data)))
    rot = rotation_to_world(dyna.rotation.to_numpy().reshape(3, 3))
    np.testing.assert_allclose(k.rotation, rot)
    np.testing.assert_allclose(k.position, game_to_world(dyna.position.to_numpy()))
    np.testing.assert_allclose(k.velocity, rot.T @ game_to_world(dyna.linear_speed.to_numpy()))
    np.testing.assert_allclose(
        k.angular_velocity, rot.T @ game_to_world(dyna.angular_speed.to_numpy())
    )
    assert (k.gear, k.rpm, k.wall_contact, k.race_time_ms) == (4, 6543.5, True, 123456)
    np.testing.assert_array_equal(k.wheel_contact, [False, True, False, True])
    np.testing.assert_array_equal(k.wheel_sliding, [False, False, True, True])
    np.testing.assert_allclose(k.damper_absorb, [0.01, 0.02, 0.03, 0.04], rtol=1e-6)
    np.testing.assert_array_equal(k.material_group, [0, 1, 2, 1])  # road, grass, ice, sand


def test_standin_states_round_trip_the_sim_car():
    g = standin(frame_shape=None)
    g.t, g.inputs["accelerate"], g.inputs["left"] = 0, True, True
    for _ in range(150):
        g._tick()
    state = g.simulation_state()
    car = g.sim.car_state()
    k = read_kinematics(state)
    np.testing.assert_allclose(k.position, car.position[0], atol=1e-4)  # float32 in the game
    np.testing.assert_allclose(k.rotation, car.rotation[0], atol=1e-6)
    np.testing.assert_allclose(k.velocity, car.velocity[0], atol=1e-4)
    np.testing.assert_allclose(k.angular_velocity, car.angular_velocity[0], atol=1e-5)
    assert k.race_time_ms == 1500 and k.gear == car.gear[0]
    row = g.sim.state[0].copy()
    for _ in range(30):
        g._tick()
    g.rewind(state)
    np.testing.assert_array_equal(g.sim.state[0], row)
    assert g.t == 1500


# --- pure geometry -------------------------------------------------------------------------
def test_projection_on_the_line_by_hand():
    pts = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0]])
    s = np.array([0.0, 10.0, 20.0])
    assert project(pts, s, np.array([4.0, 2.0]))[:3] == (4.0, 2.0, 0)  # left of +x
    assert project(pts, s, np.array([12.0, 5.0]))[:3] == (15.0, -2.0, 1)  # right of +y
    arc, lat, seg, dist = project(pts, s, np.array([-3.0, -4.0]))  # before the start
    assert (arc, lat, seg, dist) == (0.0, -5.0, 0, 5.0)
    assert zone_index(-0.1, 10.0, 1) == 0 and zone_index(25.0, 10.0, 1) == 3
    assert zone_index(-30.0, 10.0, 1) == 0


def test_tracker_follows_the_car_and_finds_it_again_after_a_jump():
    track = load_map("hairpins")
    tr = LineTracker(track, window_m=20.0)
    for s in (5.0, 30.0, 120.0):
        p, lat = tr.locate(track.point_at(track.start_s + s))
        assert p == pytest.approx(s, abs=0.05) and abs(lat) < 0.05
    p, _ = tr.locate(track.point_at(track.start_s + 10.0))  # a rewind: global search
    assert p == pytest.approx(10.0, abs=0.05)


def test_resampling_every_half_metre_by_hand():
    run = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 0.0, 1.25]])
    expected = [[0, 0, 0], [0.5, 0, 0], [1, 0, 0], [1, 0, 0.5], [1, 0, 1], [1, 0, 1.25]]
    np.testing.assert_allclose(resample_polyline(run, 0.5), expected)
    exact = resample_polyline(np.array([[0.0, 5.0, 0.0], [0.0, 5.0, 2.0]]), 0.5)
    np.testing.assert_allclose(exact[:, 2], [0.0, 0.5, 1.0, 1.5, 2.0])  # no repeated end


def test_zone_centers_by_hand_and_as_training_computes_them():
    line = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 25.0]])  # 25 m along game +z
    z = zone_centers(line, spacing_m=10.0, n_before=1, n_after=2)
    np.testing.assert_allclose(z[:, 2], [-10, 0, 10, 20, 25, 35, 45])
    # the .npy line of a curvy map, mapped as training loads it, gives the Track's zones
    track = load_map("hairpins")
    ground = track.race_line
    line3 = np.stack([ground[:, 0], np.zeros(len(ground)), -ground[:, 1]], axis=1)
    z3 = zone_centers(resample_polyline(line3), 10.0, 1, 45)
    zt, _ = track.zone_centers(10.0, 1, 45)
    assert z3.shape[0] == zt.shape[0]
    np.testing.assert_allclose(np.stack([z3[:, 0], -z3[:, 2]], axis=1), zt, atol=0.3)


@pytest.mark.parametrize(
    "text, ms", [("0:55.10", 55100), ("55.1", 55100), ("1:02.345", 62345), ("55100", 55100)]
)
def test_race_times_parse_by_hand(text, ms):
    assert parse_race_time(text) == ms


def test_screenshots_become_gray_frames_by_hand():
    # 2 x 4 BGRA: left half pure red, right half pure blue -> 1 x 2 gray by area means
    img = np.zeros((2, 4, 4), np.uint8)
    img[:, :2, 2] = 200  # R
    img[:, 2:, 0] = 100  # B
    np.testing.assert_array_equal(to_frame(img, (1, 2)), [[[round(0.299 * 200), 11]]])
    np.testing.assert_allclose(resize_area(np.arange(6.0).reshape(1, 6), (1, 3)), [[0.5, 2.5, 4.5]])
    np.testing.assert_allclose(resize_area(np.array([[1.0, 2.0]]), (1, 4)), [[1, 1, 2, 2]])


# --- races through the stand-in ----------------------------------------------------------------
def test_full_race_rewind_checkpoints_and_finish(real_map):
    g = standin()
    cycle = cycle_of(real_map, exploration=1, greedy=1)
    assert cycle.entries[0].track.reference_time_ms == REF_MS
    race = make_race(env_cfg(), None, 1, cycle.entries[0].track, challenges=cycle.challenges)
    gim = GameInstanceManager(race, cycle)
    seen_cps, actions = set(), []
    drive = driver_policy(race, real_map)

    def policy(obs, greedy):
        seen_cps.add(int(race.car.checkpoints_passed[0]))
        a, q, w = drive(obs, greedy)
        actions.append(int(a[0]))
        return a, q, w

    r1 = gim.rollout(policy)
    n1 = len(actions)
    r2 = gim.rollout(policy)
    race.close()
    assert r1["finished"] and r1["end"] == ["finish"] and r1["race_time"] > 10_000
    assert seen_cps == {0, 1}  # the starter map's checkpoint, counted by the game
    # lockstep: every action lasted 50 ms of game time, so the sim with the same actions
    # finishes at the very same tick
    sim = SimGame(1, "starter", frame_shape=None)
    for a in actions[:n1]:
        obs = sim.step(np.array([a]))
    assert bool(obs.car.finished[0]) and int(obs.car.race_time_ms[0]) == r1["race_time"]
    # race 2 rewound to the start state saved in race 1: same race, no second map load
    assert r2["race_time"] == r1["race_time"] and r2["meters_advanced_along_centerline"][0] == 0
    assert g.commands == ["map starter"]
    frames = np.stack(r1["frames"])
    assert frames.shape[1:] == (1, *FRAME) and frames.std() > 0


def test_maps_change_with_the_challenge(real_map):
    g = standin()
    other = {"map": "hairpins", "challenge": "hairpins", "exploration": 0, "greedy": 1}
    cycle = cycle_of(real_map, more=[other])
    race = make_race(env_cfg(), None, 1, cycle.entries[0].track, challenges=cycle.challenges)
    gim = GameInstanceManager(race, cycle)
    races = gim.races(brake)  # every race is cut after 2 s without a new zone
    maps = [(r["map"], r["race_time_ms"]) for r in (next(races) for _ in range(3))]
    race.close()
    assert maps == [(str(real_map), 2000), ("hairpins", 2000), (str(real_map), 2000)]
    # the fourth race (hairpins) starts as soon as the third ends
    assert g.commands == ["map starter", "map hairpins", "map starter", "map hairpins"]


def test_save_and_restore_rewind_the_game(real_map):
    standin()
    cycle = cycle_of(real_map)
    game = make_race(env_cfg(), None, 1, cycle.entries[0].track, challenges=cycle.challenges).game
    for _ in range(20):
        obs = game.step(0)
    saved, at = game.save_state(0), obs.car.position.copy()
    later = [game.step(1).car.position.copy() for _ in range(10)]
    game.restore_state(0, saved)
    np.testing.assert_allclose(game.observe().car.position, at)
    again = [game.step(1).car.position.copy() for _ in range(10)]
    np.testing.assert_allclose(again, later)
    game.close()


def test_a_race_without_a_new_zone_is_cut(real_map):
    standin()
    cycle = cycle_of(real_map)
    race = make_race(env_cfg(), None, 1, cycle.entries[0].track, challenges=cycle.challenges)
    r = GameInstanceManager(race, cycle).rollout(brake)
    race.close()
    assert r["end"] == ["no_progress"] and not r["finished"] and len(r["actions"]) == 40


def test_a_hung_game_is_restarted_and_its_race_cut(real_map, caplog):
    first = standin()
    cycle = cycle_of(real_map, greedy=2)
    env = env_cfg(launch_command="standin", step_timeout_s=0.3)
    race = make_race(env, None, 1, cycle.entries[0].track, challenges=cycle.challenges)
    gim = GameInstanceManager(race, cycle)
    drive = driver_policy(race, real_map)

    def policy(obs, greedy):
        if race.steps[0] == 30 and find_standin("TMInterface0") is first:
            first.hang()
        return drive(obs, greedy)

    with caplog.at_level(logging.WARNING, logger="trackmind.tmi.game"):
        races = gim.races(policy)
        cut, after = next(races), next(races)
    race.close()
    assert cut["end"] == ["game_lost"] and not cut["finished"] and len(cut["actions"]) == 31
    assert after["finished"]  # on the restarted game
    assert race.game.restarts == 1 and find_standin("TMInterface0") is None  # closed with it
    warn = [r.getMessage() for r in caplog.records if "no physics step" in r.getMessage()]
    assert warn and warn[0].startswith("TMInterface0: ") and one_line(warn[0])


def test_a_closed_game_is_reconnected_when_it_comes_back(real_map, caplog):
    first = standin()
    cycle = cycle_of(real_map)
    race = make_race(env_cfg(), None, 1, cycle.entries[0].track, challenges=cycle.challenges)
    game = race.game
    game.step(0)
    first.close_game()  # TMInterface says it shuts down
    threading.Timer(0.3, lambda: standin()).start()  # the user starts it again
    with caplog.at_level(logging.WARNING, logger="trackmind.tmi.game"):
        obs = game.step(0)
    assert bool(obs.lost[0]) and game.restarts == 1
    assert any("the game closed; reconnecting" in r.getMessage() for r in caplog.records)
    obs = game.reset()
    assert obs.car.race_time_ms[0] == 0 and not obs.lost[0]
    race.close()


def test_a_slow_caller_spoils_only_the_race(real_map):
    standin()
    cycle = cycle_of(real_map)
    env = env_cfg(hold_timeout_s=0.2, server_timeout_ms=2000)
    game = make_race(env, None, 1, cycle.entries[0].track, challenges=cycle.challenges).game
    game.step(0)
    time.sleep(0.4)  # the game is released after 0.2 s without an action
    assert bool(game.step(0).lost[0]) and game.restarts == 0
    obs = game.reset()
    assert obs.car.race_time_ms[0] == 0 and not game.step(0).lost[0]
    game.close()


def test_a_game_that_never_comes_back_ends_in_one_line(real_map):
    g = standin()
    cycle = cycle_of(real_map)
    env = env_cfg(restart_attempts=1, connect_timeout_s=0.2, step_timeout_s=0.3)
    game = make_race(env, None, 1, cycle.entries[0].track, challenges=cycle.challenges).game
    g.kill()
    with pytest.raises(GameUnavailable) as e:
        game.step(0)
    assert one_line(e.value) and "TMInterface0: gave up after 1 attempt" in str(e.value)


def test_each_collector_gets_its_own_game(real_map):
    games = [standin(f"TMInterface{i}") for i in range(2)]
    spec = plan_run(_compose(_real_overrides(real_map))).collectors  # a float-only network
    races = [build_collector_parts(spec, 1, offset=i)[0] for i in range(2)]
    assert [r.game.server for r in races] == ["TMInterface0", "TMInterface1"]
    for _ in range(10):
        races[1].step(np.array([0]))
    assert games[1].sim.state[0, 0] != games[0].sim.state[0, 0]  # only game 1 drove
    for r in races:
        r.close()


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides)


def _real_overrides(line, **tmi):
    ov = ["env=tminterface", "collector=tminterface", "logger=none", "network=iqn_floats"]
    ov += [f"map.cycle=[{{map:'{line}',challenge:starter,reference_time_ms:{REF_MS}}}]"]
    tmi = {"connection": "standin", "connect_timeout_s": 0.5, "capture.method": "none", **tmi}
    return ov + [f"env.tminterface.{k}={v}" for k, v in tmi.items()]


def test_env_tminterface_plans_when_every_game_answers(real_map):
    for i in range(2):
        standin(f"TMInterface{i}")
    plan = plan_run(_compose(_real_overrides(real_map)))
    assert plan.cfg["env"]["backend"] == "tminterface" and plan.frame_shape is None
    assert plan.cycle.entries[0].challenge == "starter"
    assert plan.cycle.entries[0].track.reference_time_ms == REF_MS


# --- bad input: clear one-line errors before training -----------------------------------------
def test_no_tminterface_reachable_fails_within_the_timeout(real_map):
    cfg = _compose(_real_overrides(real_map))  # no stand-in game serves TMInterface0
    with pytest.raises(ConfigError) as e:
        plan_run(cfg)
    msg = str(e.value)
    assert msg.startswith("env.tminterface: TMInterface server 'TMInterface0' did not answer")
    assert one_line(msg) and "start game 1 of 2" in msg
    # the real tminterface package: named shared memory that only Windows (or Wine) has
    tmi = tminterface_config(
        {"tminterface": {"connection": "tminterface", "connect_timeout_s": 0.5}}
    )
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        probe_servers(tmi, 1)
    assert time.monotonic() - t0 < 2.0 and one_line(e.value)
    if sys.platform != "win32":
        assert "last error" in str(e.value)
    with pytest.raises(GameUnavailable) as e:  # building the game directly: same, one line
        TMInterfaceGame("TMInterface0", load_map(str(real_map)), standin_factory(), tmi)
    assert one_line(e.value) and "launch_command" in str(e.value)


@pytest.mark.parametrize(
    "cycle, key, text",
    [
        ("[{map:starter,challenge:starter}]", "map.cycle[0].map", "is a simulator map"),
        ("[{map:'LINE'}]", "map.cycle[0].challenge", "challenge file the game loads is missing"),
        ("[{map:'LINE',challenge:x,reference_time_ms:0}]", "map.cycle[0].reference_time_ms", ">"),
        ("[{map:'BAD',challenge:x}]", "map.cycle[0].map", "expected an N x 3 array"),
        ("[{map:'missing.npy',challenge:x}]", "map.cycle[0].map", "map file not found"),
    ],
)
def test_bad_maps_are_refused_before_training(real_map, tmp_path, cycle, key, text):
    bad = tmp_path / "flat.npy"
    np.save(bad, np.zeros((50, 2)))  # a reference line of the wrong shape
    cycle = cycle.replace("LINE", str(real_map)).replace("BAD", str(bad))
    ov = [o for o in _real_overrides(real_map) if not o.startswith("map.cycle")]
    with pytest.raises(ConfigError) as e:
        plan_run(_compose([*ov, f"map.cycle={cycle}"]))
    assert str(e.value).startswith(f"{key}: ") and text in str(e.value) and one_line(e.value)


@pytest.mark.parametrize(
    "override, key",
    [
        ("env.tminterface.mode=paused", "env.tminterface.mode"),
        ("+env.tminterface.sever=1", "env.tminterface.sever"),
        ("env.tminterface.hold_timeout_s=20", "env.tminterface.hold_timeout_s"),
        ("env.tminterface.launch_command=no-such-game.exe", "env.tminterface.launch_command"),
        ("collector.cars_per_process=4", "collector.cars_per_process"),
        ("env.realtime.enabled=true", "env.tminterface.mode"),
        ("env.tick_ms=20", "env.tick_ms"),
    ],
)
def test_bad_settings_name_the_key(real_map, override, key):
    with pytest.raises(ConfigError) as e:
        plan_run(_compose([*_real_overrides(real_map), override]))
    assert str(e.value).startswith(f"{key}: ") and one_line(e.value)


def test_window_capture_names_its_optional_packages():
    if sys.platform == "win32":
        pytest.skip("pywin32 may be installed on Windows")
    cfg = CaptureConfig(method="window", window_title="TrackMania", regions=None)
    with pytest.raises(ConfigError) as e:
        make_capture(cfg, FRAME, 0, "TMInterface0", "env.tminterface.capture")
    assert "pywin32" in str(e.value) and one_line(e.value)


# --- tools ---------------------------------------------------------------------------------------
def test_map_tools_write_a_registered_map(real_map, tmp_path):
    d = real_map.parent
    line = np.load(real_map)
    steps = np.linalg.norm(np.diff(line, axis=0), axis=1)
    # 0.5 m of arclength apart: chords a hair shorter in the turns, a shorter last step
    assert line.shape[1] == 3 and np.allclose(steps[:-1], 0.5, atol=0.01)
    assert steps.max() <= 0.5 + 1e-9
    zones = np.load(d / "starter_real_zone_centers.npy")
    assert zones.shape == (1 + int(np.ceil(steps.sum() / 10)) + 46, 3)
    conf = yaml.safe_load((d / "conf" / "starter_real.yaml").read_text())
    assert conf["cycle"][0] == {
        "map": str(real_map),
        "challenge": "starter",
        "reference_time_ms": REF_MS,
        "exploration": 4,
        "greedy": 1,
    }
    MapCycle.from_config(conf["cycle"])  # loads as a map cycle


@pytest.mark.parametrize(
    "positions, msg",
    [
        (np.zeros((40, 2)), "expected an N x 3 array"),
        (np.full((40, 3), np.nan), "NaN"),
        (np.cumsum(np.ones((10, 3)), axis=0) * 0.1, "at least 30 m"),
    ],
)
def test_make_map_refuses_bad_runs_in_one_line(tmp_path, capsys, positions, msg):
    np.save(tmp_path / "run.npy", positions)
    argv = [str(tmp_path / "run.npy"), "--name", "x", "--challenge", "x.Challenge.Gbx"]
    argv += ["--reference-time", "12.3", "--out-dir", str(tmp_path / "m")]
    argv += ["--conf-dir", str(tmp_path / "c")]
    assert load_script("make_map_from_run").main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and one_line(err)
    assert not (tmp_path / "c").exists()  # nothing written


def test_record_run_saves_the_positions_of_a_run(real_map, capsys):
    run = np.load(real_map.parent / "run.npy")  # recorded by the fixture, from time 0
    assert run.ndim == 2 and run.shape[1] == 3 and len(run) > 1000
    start = load_map("starter")
    start = start.point_at(start.start_s)  # the sim's start line, as game x, y, z
    np.testing.assert_allclose(run[0], world_to_game([start[0], start[1], 0.0]), atol=1e-4)
    out = str(real_map.parent / "none.npy")
    assert load_script("record_run").main([out, "--connect-timeout", "0.2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "did not answer within 0.2 s" in err and one_line(err)


def test_command_launcher_restarts_what_it_started(tmp_path):
    assert fill('"a b/tm.exe" /server={server} -i {index}', server="TMInterface1", index=1) == [
        "a b/tm.exe",
        "/server=TMInterface1",
        "-i",
        "1",
    ]
    windows = fill(r'"C:\Games\TM Forever\TMInterface.exe" /i={index}', posix=False, index=2)
    assert windows == ["C:\\Games\\TM Forever\\TMInterface.exe", "/i=2"]
    cmd = f'"{sys.executable}" -c "import time; time.sleep(60)" {{server}}'
    launcher = CommandLauncher(cmd, "TMInterface3", 3)
    launcher.launch()
    first = launcher.proc
    launcher.restart()
    assert first.wait(5) is not None and launcher.proc.poll() is None
    assert launcher.proc.args[-1] == "TMInterface3"
    second = launcher.proc
    launcher.close()
    assert second.wait(5) is not None


@pytest.mark.slow
def test_training_runs_through_the_standin(real_map, tmp_path):
    import subprocess

    ov = [o for o in _real_overrides(real_map) if "network" not in o and "env." not in o]
    ov += ["debug=smoke", "collector.processes=1", "collector.cars_per_process=1"]
    ov += [f"hydra.run.dir={tmp_path / 'run'}", "env.frame_shape=auto"]
    ov += ["env.tminterface.connection=standin", "env.tminterface.standin.autostart=true"]
    ov += ["env.tminterface.capture.method=standin", "env.tminterface.standin.countdown_ms=200"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train.py"), *ov],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = yaml.safe_load((tmp_path / "run" / "summary.json").read_text())
    assert summary["races"] > 5 and summary["collector_restarts"] == 0


def test_evaluate_races_a_real_game_agent_on_its_registered_map(real_map, capsys):
    """scripts/evaluate.py on an agent trained with env=tminterface: it drives the game
    (here the stand-in) on the map's challenge, against the map's registered reference."""
    import torch

    plan = plan_run(_compose([*_real_overrides(real_map), "env.tminterface.probe=false"]))
    net = plan.new_network()
    agent = real_map.parent / "agent.pt"
    torch.save({"network": net.state_dict(), "config": plan.cfg}, agent)
    evaluate = load_script("evaluate")
    # --maps by conf/map option, as make_map_from_run.py registered it
    entries = map_entries(["starter_real", "hairpins"], real_map.parent / "conf")
    assert entries[0]["challenge"] == "starter" and entries[0]["reference_time_ms"] == 12340
    assert entries[1] == {"map": "hairpins"}
    g = standin()
    assert evaluate.main([str(agent), "--races", "2"]) == 0  # the training cycle's map
    out = capsys.readouterr().out
    assert g.commands == ["map starter"]  # the challenge was loaded, once for both races
    row = next(line for line in out.splitlines() if "starter_real" in line)
    assert f"| {REF_MS / 1000:.2f} s |" in row  # the map's own reference time
    assert find_standin("TMInterface0") is g  # released, not closed: the game stays up


def test_evaluate_without_a_game_ends_in_one_line(real_map, capsys):
    import torch

    ov = [*_real_overrides(real_map), "env.tminterface.probe=false"]
    plan = plan_run(_compose([*ov, "env.tminterface.restart_attempts=0"]))
    net = plan.new_network()
    agent = real_map.parent / "agent_nogame.pt"
    torch.save({"network": net.state_dict(), "config": plan.cfg}, agent)
    assert load_script("evaluate").main([str(agent)]) == 2  # no stand-in serves TMInterface0
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: TMInterface server 'TMInterface0' did not answer"), err
    assert one_line(err) and "launch_command" in err
