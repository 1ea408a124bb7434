"""Environment layer: spaces, reward terms by hand, termination timing, gymnasium, bad config."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import trackmind.env  # noqa: F401  (registers trackmind/Race-v0)
from trackmind.env.build import (
    build_managers,
    default_env_config,
    default_reward_config,
    float_dim_of,
    make_race,
    renamed_float_group,
)
from trackmind.env.gym_env import RaceEnv, RaceVectorEnv
from trackmind.env.obs_terms import zone_minima
from trackmind.env.observations import FLOATS
from trackmind.env.reward_terms import (
    contact_impact_penalty,
    impact_cost,
    wall_impact_penalty,
    zone_distance_potential,
)
from trackmind.env.rewards import RewardNormalizer, build_reward_manager
from trackmind.env.spaces import SpaceTransformer
from trackmind.errors import ConfigError
from trackmind.sim.driver import PurePursuitDriver
from trackmind.sim.reference import flying_profile

CONF = Path(__file__).resolve().parents[1] / "conf"
NOTHING, ACCEL = 3, 0
SMALL = {**default_env_config(), "frame_shape": [24, 32]}
ACTION_MS = SMALL["tick_ms"] * SMALL["ticks_per_action"]  # conf/env/sim.yaml's action step


def _race(n_cars=2, env=None, reward=None, maps="starter"):
    return make_race(env or dict(SMALL), reward, n_cars=n_cars, maps=maps)


# --- spaces ---------------------------------------------------------------------------------
def test_dict_box_round_trip_single_and_vectorized():
    race = _race(n_cars=3)
    obs, _ = race.reset()
    for _ in range(7):
        obs, *_ = race.step(np.array([ACCEL, 1, 2]))
    tr = race.observation.transformer
    box = tr.dict_to_numpy_vectorized(obs)
    assert box.shape == (3, 24 * 32 + 184) and box.dtype == np.float32
    back = tr.numpy_to_dict_vectorized(box)
    for k in obs:
        assert back[k].dtype == obs[k].dtype
        np.testing.assert_array_equal(back[k], obs[k])
    one = {k: v[1] for k, v in obs.items()}
    flat = tr.dict_to_numpy(one)
    np.testing.assert_array_equal(flat, box[1])
    again = tr.numpy_to_dict(flat)
    for k in one:
        np.testing.assert_array_equal(again[k], one[k])
    assert tr.box_space.contains(flat)
    assert race.observation_space.contains(one)


def test_round_trip_of_random_space_samples():
    space = gym.spaces.Dict(
        {
            "img": gym.spaces.Box(0, 255, (1, 4, 5), np.uint8),
            "v": gym.spaces.Box(-3, 3, (6,), np.float32),
            "m": gym.spaces.Box(-1, 1, (2, 3), np.float32),
        }
    )
    space.seed(0)
    tr = SpaceTransformer(space)
    samples = [space.sample() for _ in range(5)]
    batch = {k: np.stack([s[k] for s in samples]) for k in space.spaces}
    back = tr.numpy_to_dict_vectorized(tr.dict_to_numpy_vectorized(batch))
    for k in batch:
        np.testing.assert_array_equal(back[k], batch[k])
    for s in samples:
        r = tr.numpy_to_dict(tr.dict_to_numpy(s))
        for k in s:
            np.testing.assert_array_equal(r[k], s[k])
    with pytest.raises(ValueError, match="shape"):
        tr.numpy_to_dict(np.zeros(3))


def test_box_space_config_gives_flat_observations():
    env = default_env_config()
    env["frame_shape"] = [24, 32]
    env["observation"]["space"] = "box"
    race = _race(n_cars=2, env=env)
    obs, _ = race.reset()
    assert obs.shape == (2, 24 * 32 + 184)
    assert race.observation_space.contains(obs[0])


def test_float_features_match_the_network_layout():
    race = _race(n_cars=1)
    obs, _ = race.reset()
    assert float_dim_of(race.observation) == 184 == obs[FLOATS].shape[1]
    layout = race.observation.term(FLOATS).layout()
    assert layout["mini_race_clock"] == slice(0, 1)
    assert layout["previous_actions"] == slice(1, 21)
    assert layout["zone_centers"] == slice(62, 182)
    assert layout["freewheeling"] == slice(183, 184)
    mean, std = race.observation.float_stats()
    assert mean.shape == std.shape == (184,) and np.all(std > 0)
    obs, *_ = race.step(np.array([1]))  # accel + left
    f = obs[FLOATS][0]
    assert f[0] == 0.0  # the clock slot is 0 when acting
    np.testing.assert_array_equal(f[1:5], [1, 0, 1, 0])  # last action's keys
    np.testing.assert_array_equal(f[5:21], 0)  # no earlier actions yet
    assert f[183] == 0.0  # accelerate pressed: not freewheeling
    # the zone center ahead lies in front of the car, about one spacing away
    assert 0 < f[62] <= 10.5 and abs(f[63]) < 1.0


# --- rewards --------------------------------------------------------------------------------
def _fake_env(prev, now, n=2):
    def car(d):
        return SimpleNamespace(
            progress_m=np.asarray(d["p"], float),
            race_time_ms=np.asarray(d["t"]),
            finished=np.asarray(d["f"], bool),
            wall_contact=np.asarray(d["w"], bool),
            speed=np.asarray(d["v"], float),
            position=np.asarray(d["pos"], float),
        )

    env = SimpleNamespace(n_cars=n, prev_car=car(prev), car=car(now))
    env.upcoming_zone_centers = lambda k: np.array([[[10.0, 0.0]], [[0.0, 0.0]]])
    return env


def test_reward_terms_add_up_with_weights_and_clips():
    cfg = {
        "shaping": "env",
        "terms": {
            "progress": {"weight": 2.0, "params": {"per_metre": 0.01}},
            "time_penalty": {"params": {"per_second": -1.2}},
            "finish": {"weight": 0.5, "params": {"bonus": 3.0}},
            "wall_contact": {"clip": [-0.05, None], "params": {"penalty": -0.1}},
            "speed": {"weight": 0.1, "clip": [None, 2.0], "params": {"per_mps": 0.1}},
            "zone_distance": {"params": {"scale": -0.1, "min_m": 2.0, "max_m": 25.0}},
        },
    }
    mgr = build_reward_manager(cfg)
    prev = {"p": [100, 50], "t": [1000, 2000], "f": [0, 0], "w": [0, 0], "v": [0, 0]}
    prev["pos"] = [[-20.0, 0, 0], [1.0, 0, 0]]  # distances 30 (clipped 25) and 1 (clipped 2)
    env = _fake_env(prev, prev)
    mgr.bind(env)
    mgr.reset(np.array([0, 1]))
    now = {"p": [112.5, 49], "t": [1050, 2020], "f": [0, 1], "w": [1, 0], "v": [30, 10]}
    now["pos"] = [[5.0, 0, 0], [0.0, 3.0, 0]]  # distances 5 and 3
    env.car = _fake_env(prev, now).car
    total, parts = mgr.compute()
    # car 0: progress 2 * 0.01 * 12.5 = 0.25; time -1.2 * 0.05 = -0.06; no finish;
    #   wall -0.1 clipped to -0.05; speed 0.1 * min(3.0, 2.0) = 0.2;
    #   shaping 1 * (-0.5) - (-2.5) = 2.0  -> 2.34
    # car 1: progress 2 * 0.01 * -1 = -0.02; time -1.2 * 0.02 = -0.024 (finish remainder);
    #   finish 0.5 * 3 = 1.5; speed 0.1 * 1.0 = 0.1; shaping -0.3 - (-0.2) = -0.1 -> 1.456
    np.testing.assert_allclose(parts["progress"], [0.25, -0.02])
    np.testing.assert_allclose(parts["time_penalty"], [-0.06, -0.024])
    np.testing.assert_allclose(parts["finish"], [0.0, 1.5])
    np.testing.assert_allclose(parts["wall_contact"], [-0.05, 0.0])
    np.testing.assert_allclose(parts["speed"], [0.2, 0.1])
    np.testing.assert_allclose(parts["zone_distance"], [2.0, -0.1])
    np.testing.assert_allclose(total, [2.34, 1.456])


def _one_step(mgr, change: dict, **at_start) -> tuple:
    """(total, parts) of `mgr`'s reward for one step of two cars standing at the origin, with
    `at_start` over their first state and `change` over it for the second."""
    prev = {"p": [0, 0], "t": [0, 0], "f": [0, 0], "w": [0, 0], "v": [0, 0], **at_start}
    prev["pos"] = [[0.0, 0, 0], [0.0, 0, 0]]
    env = _fake_env(prev, prev)
    mgr.bind(env)
    mgr.reset(np.array([0, 1]))
    env.car = _fake_env(prev, {**prev, **change}).car
    return mgr.compute()


def test_collate_shaping_leaves_potentials_out_of_the_step_reward():
    cfg = default_reward_config()  # shaping: collate
    mgr = build_reward_manager(cfg)
    total, parts = _one_step(mgr, {"p": [10, 0], "t": [50, 50]})
    assert "zone_distance" not in parts
    np.testing.assert_allclose(total, [0.1 - 0.06, -0.06])
    # Phi = -0.1 * clip(distance, 2, 25): distances 10 and 0
    np.testing.assert_allclose(mgr.potentials()["zone_distance"], [-1.0, -0.2])
    np.testing.assert_allclose(
        zone_distance_potential(np.array([1, 7, 40]), -0.1, 2, 25), [-0.2, -0.7, -2.5]
    )


def test_wall_impact_prices_the_speed_a_wall_takes_by_hand():
    # a hit 40 -> 12 m/s costs 28 * 0.05; a car that gained speed along a wall, or slowed
    # without touching one (braking), pays nothing
    np.testing.assert_allclose(
        wall_impact_penalty(np.array([40, 30, 10]), np.array([12, 35, 8]), [1, 1, 0], -0.05),
        [-1.4, 0.0, 0.0],
    )
    # with 10 m/s free a step: the 28 m/s hit costs 18 * 0.05, a 6 m/s scrape nothing
    np.testing.assert_allclose(
        wall_impact_penalty(np.array([40, 50]), np.array([12, 44]), [1, 1], -0.05, 10.0),
        [-0.9, 0.0],
    )
    mgr = build_reward_manager({"terms": {"wall_impact": {"params": {"per_mps": -0.05}}}})
    total, parts = _one_step(mgr, {"w": [1, 0], "v": [19, 37.6]}, v=[59, 40])
    np.testing.assert_allclose(parts["wall_impact"], [-2.0, 0.0])  # 40 m/s into the wall
    np.testing.assert_allclose(total, [-2.0, 0.0])
    free = {"per_mps": -0.05, "free_mps": 10.0}  # the term hands its allowance down
    mgr = build_reward_manager({"terms": {"wall_impact": {"params": free}}})
    _, parts = _one_step(mgr, {"w": [1, 0], "v": [19, 37.6]}, v=[59, 40])
    np.testing.assert_allclose(parts["wall_impact"], [-1.5, 0.0])  # (40 - 10) m/s over
    with pytest.raises(ConfigError, match=r"reward\.terms\.wall_impact.*per_mps.*<= 0"):
        build_reward_manager({"terms": {"wall_impact": {"params": {"per_mps": 0.1}}}})
    with pytest.raises(ConfigError, match=r"reward\.terms\.wall_impact.*free_mps.*>= 0"):
        build_reward_manager({"terms": {"wall_impact": {"params": {"free_mps": -1.0}}}})


def test_wall_impact_per_contact_counts_the_allowance_over_the_whole_contact_by_hand():
    # a wall brake spread over three steps of 6 m/s (50 -> 32), 10 m/s free a contact: the
    # steps pay 0, 2 * 0.05 and 6 * 0.05 (per step all three would be free); the step off the
    # wall ends the contact; car 2 gains speed along a wall (nothing lost, nothing paid)
    speeds, lost, costs = [[50, 20], [44, 22], [38, 23], [32, 24], [30, 25]], np.zeros(2), []
    for before, after, wall in zip(speeds, speeds[1:], [[1, 1], [1, 1], [1, 1], [0, 1]]):
        cost, lost = contact_impact_penalty(lost, before, after, wall, -0.05, 10.0)
        costs.append(cost)
    np.testing.assert_allclose(costs, [[0, 0], [-0.1, 0], [-0.3, 0], [0, 0]])
    np.testing.assert_allclose(lost, [0, 0])
    # a contact that began on the previous step carries its loss: 8 lost, then 4 more
    cost, lost = contact_impact_penalty(np.array([8.0]), [40], [36], [1], -0.05, 10.0)
    np.testing.assert_allclose([cost[0], lost[0]], [-0.1, 12.0])
    params = {"per_mps": -0.05, "free_mps": 10.0, "per": "contact"}
    mgr = build_reward_manager({"terms": {"wall_impact": {"params": params}}})
    _, parts = _one_step(mgr, {"w": [1, 0], "v": [44, 37.6]}, v=[59, 40])
    np.testing.assert_allclose(parts["wall_impact"], [-0.25, 0.0])  # (15 - 10) m/s over
    with pytest.raises(ConfigError, match=r"reward\.terms\.wall_impact.*per.*'step' or"):
        build_reward_manager({"terms": {"wall_impact": {"params": {"per": "lap"}}}})


def test_a_curved_wall_price_makes_scrapes_cheap_and_hits_dear_by_hand():
    # exponent 2, knee 30 m/s, -0.035 per m/s: 6 m/s costs 0.035 * 30 * (6/30)^2 = 0.042 (0.2
    # of the linear 0.21), 30 m/s the linear 1.05, 45 m/s 0.035 * 30 * 1.5^2 = 2.3625
    np.testing.assert_allclose(
        impact_cost(np.array([0.0, 6.0, 30.0, 45.0]), -0.035, 2.0, 30.0),
        [0.0, -0.042, -1.05, -2.3625],
    )
    # exponent 1 is the linear price whatever the knee
    np.testing.assert_allclose(impact_cost(np.array([28.0]), -0.05, 1.0, 7.0), [-1.4])
    # per step: a 28 m/s hit and a 6 m/s scrape, exponent 2, knee 30, -0.05
    np.testing.assert_allclose(
        wall_impact_penalty(np.array([40, 50]), np.array([12, 44]), [1, 1], -0.05, 0.0, 2.0),
        [-0.05 * 30 * (28 / 30) ** 2, -0.05 * 30 * 0.04],
    )
    # per contact: three steps of 6 m/s pay f(6), f(12) - f(6), f(18) - f(12) with
    # f(x) = 0.05 * 30 * (x/30)^2 = 0.06, 0.24, 0.54: spreading a hit buys nothing
    speeds, lost, costs = [[50], [44], [38], [32]], np.zeros(1), []
    for before, after in zip(speeds, speeds[1:]):
        cost, lost = contact_impact_penalty(lost, before, after, [1], -0.05, 0.0, 2.0, 30.0)
        costs.append(cost[0])
    np.testing.assert_allclose(costs, [-0.06, -0.18, -0.30])
    params = {"per_mps": -0.05, "exponent": 2.0, "knee_mps": 20.0, "per": "contact"}
    mgr = build_reward_manager({"terms": {"wall_impact": {"params": params}}})
    _, parts = _one_step(mgr, {"w": [1, 0], "v": [19, 37.6]}, v=[59, 40])
    # 40 m/s into the wall: 0.05 * 20 * 2^2 = 4.0
    np.testing.assert_allclose(parts["wall_impact"], [-4.0, 0.0])
    with pytest.raises(ConfigError, match=r"reward\.terms\.wall_impact.*exponent.*>= 1"):
        build_reward_manager({"terms": {"wall_impact": {"params": {"exponent": 0.5}}}})
    with pytest.raises(ConfigError, match=r"reward\.terms\.wall_impact.*knee_mps.*> 0"):
        build_reward_manager({"terms": {"wall_impact": {"params": {"knee_mps": 0.0}}}})


def test_a_reward_weight_schedule_follows_the_frames_played_by_hand():
    # the wall price comes in between 1,000 and 3,000 frames: weight 0, then 0.5, then 1
    sched = {"weight": [[1000, 0.0], [3000, 1.0]], "params": {"per_mps": -0.05}}
    mgr = build_reward_manager({"terms": {"wall_impact": sched}})
    played = [0]
    mgr.follow(lambda: played[0])
    hit = ({"w": [1, 0], "v": [40, 37.6]}, {"v": [60, 40]})  # car 0 loses 20 m/s on a wall
    for frames, price in [(0, 0.0), (500, 0.0), (2000, -0.5), (3000, -1.0), (9000, -1.0)]:
        played[0] = frames
        _, parts = _one_step(mgr, hit[0], **hit[1])
        np.testing.assert_allclose(parts["wall_impact"], [price, 0.0])
    # a manager that follows no counter keeps the weight of frame 0
    free = build_reward_manager({"terms": {"wall_impact": sched}})
    np.testing.assert_allclose(_one_step(free, hit[0], **hit[1])[1]["wall_impact"], [0.0, 0.0])
    # one number stays one number; bad schedules and scheduled potentials are refused
    flat = build_reward_manager({"terms": {"wall_impact": {"weight": 2.0}}})
    assert flat.terms[0].weight == 2.0 and flat.terms[0].weight_schedule is None
    with pytest.raises(ConfigError, match=r"reward\.terms\.wall_impact\.weight.*increase"):
        build_reward_manager({"terms": {"wall_impact": {"weight": [[5, 1.0], [5, 0.0]]}}})
    with pytest.raises(ConfigError, match=r"reward\.terms\.wall_impact\.weight_kind"):
        build_reward_manager({"terms": {"wall_impact": {"weight": 1.0, "weight_kind": "cubic"}}})
    with pytest.raises(ConfigError, match=r"reward\.terms\.speed_potential\.weight.*one number"):
        build_reward_manager({"terms": {"speed_potential": {"weight": [[0, 1.0], [10, 0.0]]}}})


def test_reward_normalizer_matches_running_moments():
    norm = RewardNormalizer(eps=0.0)
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, -4.0])
    first = norm(a)  # normalised with the initial moments (0, 1), then updated
    np.testing.assert_allclose(first, a)
    out = norm(b)
    np.testing.assert_allclose(out, (b - 2.0) / np.sqrt(2.0 / 3.0))
    allv = np.r_[a, b]
    assert norm.mean == pytest.approx(allv.mean()) and norm.var == pytest.approx(allv.var())


def test_time_penalty_pays_the_exact_remainder_on_the_finishing_step():
    race = _race(n_cars=1)
    race.reset()
    driver = PurePursuitDriver([race.game.track(0)], speed_share=0.8, action_ms=ACTION_MS)
    total, t_prev = 0.0, 0
    for _ in range(2000):
        obs, rew, term, trunc, info = race.step(driver.act(race.car))
        total += info["reward_terms"]["time_penalty"][0]
        t_now = int(race.car.race_time_ms[0])
        if term[0]:
            break
        assert not trunc[0]
        t_prev = t_now
    assert race.car.finished[0] and info["termination_terms"]["finish"][0]
    assert info["reward_terms"]["time_penalty"][0] == pytest.approx(-1.2 * (t_now - t_prev) / 1000)
    assert total == pytest.approx(-1.2 * t_now / 1000)


# --- terminations ---------------------------------------------------------------------------
def _first_end(race, action, max_steps=400):
    race.reset()
    for k in range(1, max_steps + 1):
        _, _, term, trunc, info = race.step(np.full(race.n_cars, action))
        if term[0] or trunc[0]:
            fired = [n for n, v in info["termination_terms"].items() if v[0]]
            return k, bool(term[0]), bool(trunc[0]), fired
    return None


def _env_with(terms):
    env = default_env_config()
    env["frame_shape"] = [24, 32]
    env["termination"]["terms"] = terms
    return env


def test_no_progress_cuts_after_two_seconds_without_a_new_zone():
    race = _race(env=_env_with({"no_progress": {"params": {"window_ms": 2000}}}))
    # standing still: 2000 ms = 2000 / ACTION_MS actions
    assert _first_end(race, NOTHING) == (2000 // ACTION_MS, False, True, ["no_progress"])


def test_stuck_terminates_when_the_car_does_not_move():
    race = _race(env=_env_with({"stuck": {"params": {"window_ms": 3000, "min_distance_m": 1}}}))
    assert _first_end(race, NOTHING) == (3000 // ACTION_MS, True, False, ["stuck"])
    race.reset()
    for _ in range(4000 // ACTION_MS):  # a car driving for 4 s is never stuck
        _, _, term, _, _ = race.step(np.full(2, ACCEL))
        assert not term.any()


def test_timeout_truncates_at_the_limit():
    race = _race(env=_env_with({"timeout": {"params": {"max_race_ms": 1234}}}))
    # race time reaches k * ACTION_MS >= 1234 on action k = ceil(1234 / ACTION_MS)
    assert _first_end(race, ACCEL) == (-(-1234 // ACTION_MS), False, True, ["timeout"])


def test_terminations_are_per_car_and_reset_per_car():
    race = _race(n_cars=2, env=_env_with({"no_progress": {"params": {"window_ms": 2000}}}))
    race.reset()
    for _ in range(40):  # the accelerating car reaches a new zone after ~1.5 s
        _, _, _, trunc, _ = race.step(np.array([NOTHING, ACCEL]))
    assert trunc.tolist() == [True, False]
    race.reset(cars=[0])
    _, _, _, trunc, _ = race.step(np.array([NOTHING, ACCEL]))
    assert not trunc[0] and race.steps.tolist() == [1, 41]


# --- gymnasium ------------------------------------------------------------------------------
@pytest.mark.parametrize("space", ["dict", "box"])
def test_gymnasium_checker_passes(space):
    env_cfg = default_env_config()
    env_cfg["frame_shape"] = [24, 32]
    env_cfg["observation"]["space"] = space
    env = gym.make("trackmind/Race-v0", env=env_cfg, render_mode="rgb_array")
    check_env(env.unwrapped, skip_render_check=False)
    obs, _ = env.reset(seed=1)
    obs, r, term, trunc, info = env.step(ACCEL)
    assert env.observation_space.contains(obs) and isinstance(r, float)
    assert env.render().shape == (24, 32, 3)
    env.close()


def test_vector_env_autoresets_on_the_next_step():
    venv = RaceVectorEnv(
        num_envs=3,
        map="starter",
        env=_env_with({"timeout": {"params": {"max_race_ms": 2 * ACTION_MS}}}),
    )
    obs, _ = venv.reset(seed=0)
    assert venv.observation_space.contains(obs)
    _, _, _, trunc, _ = venv.step(np.zeros(3, int))
    assert not trunc.any()
    obs, rew, term, trunc, info = venv.step(np.zeros(3, int))  # 2 actions: truncated
    assert trunc.all() and not term.any()
    obs, rew, term, trunc, info = venv.step(np.zeros(3, int))  # reset step
    assert not trunc.any() and np.all(rew == 0) and np.all(info["race_time_ms"] == 0)
    assert venv.observation_space.contains(obs)
    venv.close()


# --- config ---------------------------------------------------------------------------------
def test_defaults_outside_hydra_are_the_yaml_files():
    """One place for each default: what gymnasium users get is conf/ itself, not a copy."""
    assert default_env_config() == yaml.safe_load((CONF / "env" / "sim.yaml").read_text())
    want = yaml.safe_load((CONF / "reward" / "linesight.yaml").read_text())
    assert default_reward_config() == want
    env = default_env_config()
    env["tick_ms"] = 1  # a copy: changing it leaves the next caller's defaults alone
    assert default_env_config()["tick_ms"] == 10
    for f in sorted((CONF / "reward").glob("*.yaml")):
        build_reward_manager(yaml.safe_load(f.read_text()))


@pytest.mark.parametrize(
    "where, value, key",
    [
        ("reward", {"terms": {"progres": {}}}, "reward.terms.progres"),
        (
            "reward",
            {"terms": {"progress": {"params": {"per_meter": 1}}}},
            "reward.terms.progress.params.per_meter",
        ),
        ("reward", {"terms": {"progress": {"wieght": 1}}}, "reward.terms.progress.wieght"),
        ("reward", {"terms": {"progress": {"weight": "big"}}}, "reward.terms.progress.weight"),
        ("reward", {"terms": {"progress": {"clip": [1, 0]}}}, "reward.terms.progress.clip"),
        ("reward", {"shaping": "later"}, "reward.shaping"),
        (
            "obs",
            {"zone_centers": {"params": {"n": 0}}},
            "env.observation.terms.floats.group.zone_centers.params",
        ),
        ("obs", {"no_such_feature": {}}, "env.observation.terms.floats.group.no_such_feature"),
        ("term", {"stuck": {"params": {"window_ms": -5}}}, "env.termination.terms.stuck.params"),
        (
            "term",
            {"timeout": {"params": {"outcome": "maybe"}}},
            "env.termination.terms.timeout.params",
        ),
        ("env", {"frame_shpe": [1, 2]}, "env.frame_shpe"),
    ],
)
def test_bad_config_names_the_key(where, value, key):
    env, reward = default_env_config(), default_reward_config()
    if where == "reward":
        reward.update(value)
    elif where == "obs":
        env["observation"]["terms"]["floats"]["group"].update(value)
    elif where == "term":
        env["termination"]["terms"].update(value)
    else:
        env.update(value)
    with pytest.raises(ConfigError) as e:
        build_managers(env, reward)
    assert str(e.value).startswith(key + ":") and "\n" not in str(e.value)


def test_bad_frame_shape_names_the_key():
    env = default_env_config()
    env["frame_shape"] = [0, 160]
    with pytest.raises(ConfigError, match=r"^env.frame_shape:"):
        RaceEnv(env=env)


def test_speed_potential_pays_the_speed_gained():
    mgr = build_reward_manager(
        {"shaping": "env", "terms": {"speed_potential": {"weight": 2.0, "params": {"scale": 0.05}}}}
    )
    env = SimpleNamespace(
        n_cars=2, car=SimpleNamespace(velocity=np.array([[0.0, 1, 0], [10, 0, 0]]))
    )
    mgr.bind(env)
    mgr.reset(np.array([0, 1]))
    env.car = SimpleNamespace(velocity=np.array([[4.0, 0, 0], [8, 0, 0]]))
    total, parts = mgr.compute()
    # Phi = 0.05 * forward speed: car 0 0 -> 0.2, car 1 0.5 -> 0.4; weight 2
    np.testing.assert_allclose(total, [2 * 0.2, 2 * -0.1])
    np.testing.assert_allclose(mgr.potentials()["speed_potential"], [0.4, 0.8])


def test_configs_saved_with_the_old_float_key_still_build():
    """Checkpoints before the rename keyed the float inputs `float` (an nn.Module attribute,
    which SB3 cannot take); a resume merges them, with this command's `floats` overrides."""
    old = default_env_config()
    terms = old["observation"]["terms"]
    terms["float"] = terms.pop(FLOATS)
    override = {"group": {"zone_centers": {"params": {"n": 20}}}}
    renamed = renamed_float_group({**old["observation"], "terms": {**terms, FLOATS: override}})
    assert "float" not in renamed["terms"]
    group = renamed["terms"][FLOATS]["group"]
    assert group["zone_centers"] == {"params": {"n": 20}}
    assert group["previous_actions"] == {"params": {"n": 5}}  # kept from the saved config
    obs, _, _ = build_managers(old, default_reward_config())
    assert float_dim_of(obs) == 184


def test_a_float_member_set_to_null_is_left_out():
    """`env.observation.terms.floats.group.distance_to_finish=null`: a run without that input
    (docs/benchmarks.md, the real-length line); the other members keep their order."""
    env = default_env_config()
    env["observation"]["terms"][FLOATS]["group"]["distance_to_finish"] = None
    obs, _, _ = build_managers(env, default_reward_config())
    layout = obs.term(FLOATS).layout()
    assert "distance_to_finish" not in layout
    assert float_dim_of(obs) == 183
    assert layout["zone_centers"] == slice(62, 182)
    assert layout["freewheeling"] == slice(182, 183)


def test_zone_minima_by_hand():
    s = np.arange(0.0, 21.0, 2.0)
    v = np.array([10, 9, 8, 5, 8, 10, 10, 10, 7, 10, 10], float)
    got = zone_minima(np.array([-5.0, 5.0, 10.0, 20.0, 30.0]), s, v, 10.0)
    # (-15,-5]: before the profile, its first value; (-5,5]: v(5) = (8 + 5) / 2 on the way
    # down; (0,10]: the sample 5 at s=6; (10,20]: 7 at s=16; (20,30]: after it, its last value
    np.testing.assert_allclose(got, [10.0, 6.5, 5.0, 7.0, 10.0])


def test_limit_speeds_are_the_flying_profile_zone_by_zone():
    """The opt-in input (+env.observation.terms.floats.group.limit_speeds={}): appended after
    the 184 defaults; each value is the least limit speed up to that zone center."""
    env = dict(SMALL)
    env["observation"] = copy.deepcopy(env["observation"])
    env["observation"]["terms"][FLOATS]["group"]["limit_speeds"] = {"params": {"n": 40}}
    race = _race(n_cars=2, env=env, maps="starter")
    obs, _ = race.reset()
    layout = race.observation.term(FLOATS).layout()
    assert layout["limit_speeds"] == slice(184, 224) and float_dim_of(race.observation) == 224
    track = race.tracks[0]
    _, zone_s = track.zone_centers(race.zone_spacing_m, race.zones_before_start, 45)
    np.testing.assert_array_equal(race.zone_arclengths, zone_s)  # one table for both cars
    per_zone = zone_minima(zone_s, *flying_profile(track, race.game.vehicle), 10.0)
    for _ in range(30):
        obs, *_ = race.step(np.array([ACCEL, ACCEL]))
    for car in range(2):
        k = np.minimum(race.car.zone_idx[car] + 1 + np.arange(40), len(zone_s) - 1)
        np.testing.assert_allclose(obs[FLOATS][car, 184:224], per_zone[k], rtol=1e-6)
    assert per_zone.min() < 0.6 * per_zone.max()  # starter's corners show
    mirror = race.observation.term(FLOATS).mirror()
    np.testing.assert_array_equal(mirror.perm[184:224], np.arange(184, 224))
    np.testing.assert_array_equal(mirror.sign[184:224], 1)


def test_make_vec_builds_the_batched_simulator_with_the_map_keyword():
    venv = gym.make_vec("trackmind/Race-v0", num_envs=16, map="hairpins")
    assert isinstance(venv, RaceVectorEnv) and venv.race.n_cars == 16
    obs, _ = venv.reset(seed=0)
    assert venv.observation_space.contains(obs)
    obs, rew, term, trunc, _ = venv.step(np.zeros(16, int))
    assert rew.shape == (16,) and venv.observation_space.contains(obs)
    venv.close()
    with pytest.warns(DeprecationWarning, match="map="):
        RaceVectorEnv(num_envs=2, maps="starter").close()
