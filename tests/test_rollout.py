"""GameInstanceManager: rollout_results layout, map cycle order, per-car races, bad maps."""

from __future__ import annotations

import numpy as np
import pytest

from trackmind.env.build import default_env_config, make_race
from trackmind.env.map_cycle import MapCycle, loadable_cycle
from trackmind.env.rollout import GameInstanceManager
from trackmind.errors import ConfigError
from trackmind.sim.driver import PurePursuitDriver
from trackmind.sim.mapio import load_map

PER_ACTION = ["actions", "action_was_greedy", "q_values", "rewards", "input_w"]
PER_STATE = [
    "frames",
    "state_float",
    "meters_advanced_along_centerline",
    "current_zone_idx",
    "car_gear_and_wheels",
]


def _setup(n_cars, cycle_cfg, frame=(24, 32)):
    env = default_env_config()
    env["frame_shape"] = list(frame)
    cycle = MapCycle.from_config(cycle_cfg)
    race = make_race(env, n_cars=n_cars, maps=cycle.entries[0].track)
    return race, cycle


def _driver_policy(race, explore_every=0):
    state = {"k": 0}
    drivers = {}

    def policy(obs, greedy):
        tracks = [race.game.track(c) for c in range(race.n_cars)]
        key = tuple(id(t) for t in tracks)
        if key not in drivers:  # the driver follows each car's current map
            drivers[key] = PurePursuitDriver(tracks, speed_share=0.8, action_ms=race.action_ms)
        a = drivers[key].act(race.car)
        state["k"] += 1
        was_greedy = np.ones(race.n_cars, bool)
        if explore_every and state["k"] % explore_every == 0:
            a = np.where(greedy, a, 3)
            was_greedy = greedy.copy()
        q = np.tile(np.arange(12, dtype=np.float32), (race.n_cars, 1))
        return a, q, was_greedy

    return policy


def test_rollout_results_layout_and_values():
    race, cycle = _setup(1, [{"map": "starter", "exploration": 0, "greedy": 1}])
    gim = GameInstanceManager(race, cycle)
    r = gim.rollout(_driver_policy(race))
    t = len(r["actions"])
    assert t > 100 and r["finished"] and r["end"] == ["finish"]
    for k in PER_ACTION:
        assert len(r[k]) == t, k
    for k in PER_STATE:
        assert len(r[k]) == t + 1, k
    assert r["frames"][0].shape == (1, 24, 32) and r["frames"][0].dtype == np.uint8
    assert r["state_float"][0].shape == (184,)
    assert len(r["potentials"]["zone_distance"]) == t + 1
    assert r["map"] == "starter" and r["greedy"]
    action_ms = race.game.action_ms
    assert r["race_time"] == r["race_time_ms"] and t == -(-r["race_time"] // action_ms)
    # rewards: -1.2 per second raced and +0.01 per metre from start to finish line
    length = race.game.track(0).length_m
    progress = r["meters_advanced_along_centerline"]
    assert sum(r["rewards"]) == pytest.approx(-1.2 * r["race_time"] / 1000 + 0.01 * progress[-1])
    assert progress[-1] >= length and progress[0] == 0.0
    assert r["furthest_zone_idx"] == max(r["current_zone_idx"])
    assert r["input_w"] == [float(a in (0, 1, 2, 9, 10, 11)) for a in r["actions"]]


def test_races_follow_the_cycle_and_cars_restart_independently():
    cfg = [
        {"map": "starter", "exploration": 1, "greedy": 1},
        {"map": "chicanes", "exploration": 1, "greedy": 0},
    ]
    race, cycle = _setup(3, cfg)
    gim = GameInstanceManager(race, cycle)
    seen = []
    for r in gim.races(_driver_policy(race, explore_every=7)):
        seen.append((r["map"], r["greedy"]))
        if r["greedy"]:
            assert all(r["action_was_greedy"])
        else:
            assert not all(r["action_was_greedy"])
        if len(seen) == 8:
            break
    # starter races (12 s) end before the first chicanes race (30 s); every kind shows up
    assert sorted(seen[:2]) == [("starter", False), ("starter", True)]
    assert set(seen) == {("starter", False), ("starter", True), ("chicanes", False)}
    s = gim.monitor.summary()
    assert s["actions"] > 0 and s["game_step_share"] + s["inference_share"] == pytest.approx(1)


def test_cut_race_has_no_race_time():
    race, cycle = _setup(1, ["starter"])
    gim = GameInstanceManager(race, cycle)

    def stand_still(obs, greedy):
        return np.array([3]), np.zeros((1, 12)), np.ones(1, bool)

    r = gim.rollout(stand_still)
    assert not r["finished"] and r["race_time"] is None and r["end"] == ["no_progress"]
    assert len(r["actions"]) == 2000 // race.game.action_ms  # no_progress: 2 s


@pytest.mark.parametrize(
    "cfg, key",
    [
        ([{"map": "nowhere"}], "map.cycle[0].map"),
        ([{"map": "starter", "greedy": -1}], "map.cycle[0].greedy"),
        ([{"map": "starter", "lap": 2}], "map.cycle[0].lap"),
        ([{"map": "starter", "laps": 2}], "map.cycle[0].laps"),  # an open line has one lap
        ([{"map": "starter", "laps": 0}], "map.cycle[0].laps"),
        ([], "map.cycle"),
        ([{"map": "starter", "exploration": 0, "greedy": 0}], "map.cycle"),
        (["procedural:x"], "map.cycle[0].map"),
        (["starter", "narrow:9-3"], "map.cycle[1].map"),  # a range runs upwards
        (["procedural:1-99999"], "map.cycle[0].map"),  # too many maps for one range
    ],
)
def test_bad_map_cycle_names_the_key(cfg, key):
    with pytest.raises(ConfigError) as e:
        MapCycle.from_config(cfg)
    assert str(e.value).startswith(key + ":")


def test_a_seed_range_is_an_entry_per_map_with_its_settings():
    cycle = MapCycle.from_config(["starter", {"map": "narrow:3-5", "exploration": 2}])
    assert [e.name for e in cycle.entries] == ["starter", "narrow:3", "narrow:4", "narrow:5"]
    assert [e.exploration for e in cycle.entries] == [4, 2, 2, 2]
    assert cycle.entries[2].track.fingerprint() == load_map("narrow:4").fingerprint()


def test_maps_to_race_load_once_each_and_overlapping_ranges_share_their_seeds():
    cycle, failed = loadable_cycle(["narrow:3-5", "narrow:4-6", "narrow:5", "no_such_map"])
    assert [e.name for e in cycle.entries] == ["narrow:3", "narrow:4", "narrow:5", "narrow:6"]
    assert all((e.exploration, e.greedy) == (0, 1) for e in cycle.entries)
    assert [name for name, _ in failed] == ["no_such_map"]
