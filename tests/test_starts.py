"""Mid-track starts: saved states along the map, drawn where races end (game/starts.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from trackmind.collectors.parts import build_collector_parts, make_start_bank
from trackmind.env.rollout import GameInstanceManager
from trackmind.errors import ConfigError
from trackmind.game.starts import StartBank, StartsConfig, start_point_weights
from trackmind.training.factory import plan_run
from trackmind.training.race_stats import RaceStats

ROOT = Path(__file__).resolve().parents[1]


def test_start_point_weights_by_hand():
    reached = np.array([1, 1, 1, 1, 0], bool)
    ends = np.array([0, 0, 3, 1, 5.0])  # the end at an unreached point does not count
    w = start_point_weights(ends, reached, floor=0.2)
    np.testing.assert_allclose(w, [0.05, 0.05, 0.8 * 0.75 + 0.05, 0.8 * 0.25 + 0.05, 0.0])
    np.testing.assert_allclose(start_point_weights(np.zeros(5), reached, 0.2), [0.25] * 4 + [0])
    assert start_point_weights(ends, np.zeros(5, bool), 0.2).sum() == 0


def test_bank_starts_a_lead_before_where_races_end():
    cfg = StartsConfig.from_config({"share": 1.0, "spacing_m": 20.0, "lead_m": 60.0, "floor": 0.0})
    bank = StartBank(cfg, seed=0)
    assert bank.draw("m") is None  # nothing saved yet
    for p in range(12):
        bank.save("m", p, f"state{p}")
    for _ in range(5):
        bank.race_ended("m", 205.0)  # point 10
    draws = {bank.draw("m") for _ in range(20)}
    assert draws == {("state7", 7)}  # 60 m (3 points) before the point where races end
    bank.save("m", 7, "newer")
    assert {bank.draw("m")[0] for _ in range(40)} == {"state7", "newer"}


def test_bad_starts_config_names_the_key():
    with pytest.raises(ConfigError, match=r"exploration.starts.share: must be a share in \[0, 1\]"):
        StartsConfig.from_config({"share": 1.5})
    with pytest.raises(ConfigError, match="exploration.starts"):
        StartsConfig.from_config({"shares": 0.5})


def test_exploration_races_start_mid_track_and_greedy_races_at_the_line():
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(
            "train",
            overrides=[
                "debug=smoke",
                "network=iqn_floats",
                "map=hairpins",
                "++exploration.starts={share: 1.0, spacing_m: 20, lead_m: 40}",
            ],
        )
    spec = plan_run(cfg).collectors
    race, cycle, _ = build_collector_parts(spec, n_cars=4)
    bank = make_start_bank(spec, seed=1)
    assert bank is not None and bank.cfg.share == 1.0 and bank.cfg.lead_m == 40
    gim = GameInstanceManager(race, cycle, starts=bank)
    rng = np.random.default_rng(0)

    def policy(obs, greedy):  # mostly throttle, some steering: races end in the hairpins
        n = len(greedy)
        a = np.where(rng.random(n) < 0.7, 0, rng.integers(0, 12, n))
        return a, np.zeros((n, 12), np.float32), np.ones(n, bool)

    races = []
    for r in gim.races(policy):
        races.append(r)
        if len(races) >= 60:
            break
    mid = [r for r in races if r["mid_track"]]
    assert mid, "no exploration race started from a saved state"
    assert all(not r["greedy"] for r in mid)
    assert all(r["meters_advanced_along_centerline"][0] > 10.0 for r in mid)
    line = [r for r in races if not r["mid_track"]]
    assert all(abs(r["meters_advanced_along_centerline"][0]) < 1.0 for r in line)
    # a mid-track race is exploration data, not a race time or a finish rate
    stats = RaceStats(reference_ms={"hairpins": 25_000.0}, length_m={"hairpins": 792.0})
    for r in mid:
        stats.add_race({**r, "finished": True, "race_time": 1000}, len(r["actions"]))
    assert "hairpins" not in stats.best_ms and "hairpins" not in stats.finishes
    assert stats.metrics()["races/mid_track"] == len(mid)


def test_a_collectors_reward_weights_follow_the_frames_it_is_handed():
    # the config path a user takes: a Hydra override, the run plan, a collector's parts
    price = "+reward.terms.wall_impact={weight: [[0, 0.0], [100, 1.0]], params: {per_mps: -0.05}}"
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=["debug=smoke", "network=iqn_floats", price])
    spec = plan_run(cfg).collectors
    race, _, _ = build_collector_parts(spec, n_cars=2, frames=lambda: 25)
    term = race.reward.term("wall_impact")
    assert term.weight == 0.0  # the schedule's frame-0 value until the first step
    race.reset()
    race.step(np.zeros(2, np.int64))
    assert term.weight == pytest.approx(0.25)
