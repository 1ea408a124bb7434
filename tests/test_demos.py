"""Demonstration races: the scripted driver drives a share of exploration races, recorded
with the network's Q values, kept out of race statistics; bad settings name their key."""

from __future__ import annotations

import numpy as np
import pytest

from trackmind.collectors.demos import Demonstrator, DemosConfig, steer_direction
from trackmind.env.build import default_env_config, make_race
from trackmind.env.map_cycle import MapCycle
from trackmind.env.rollout import GameInstanceManager
from trackmind.errors import ConfigError
from trackmind.sim.driver import steer_after
from trackmind.sim.mapio import load_map
from trackmind.sim.reference import grip_profile, reference_lap
from trackmind.sim.vehicle import VehicleParams
from trackmind.training.factory import check_demos_game
from trackmind.training.race_stats import RaceStats


def _gim(
    n_cars: int,
    cycle_cfg: list,
    share,
    epsilon: float = 0.0,
    frames=lambda: 0,
    profile: str = "share",
    pace: tuple[float, float] = (0.8, 0.9),
):
    env = default_env_config()
    env["frame_shape"] = [24, 32]
    cycle = MapCycle.from_config(cycle_cfg)
    race = make_race(env, n_cars=n_cars, maps=cycle.entries[0].track)
    cfg = DemosConfig.from_config(
        {"share": share, "pace": list(pace), "epsilon": epsilon, "profile": profile}
    )
    demos = Demonstrator(cfg, n_cars, seed=0, frames=frames, vehicle=race.game.vehicle)
    return race, GameInstanceManager(race, cycle, demos=demos)


def _standing_policy(n_cars: int):
    """A network that always prefers `nothing` (action 3): without the driver no car moves."""
    q = np.tile(-np.abs(np.arange(12) - 3.0).astype(np.float32), (n_cars, 1))

    def policy(obs, greedy):
        return np.full(n_cars, 3), q.copy(), np.ones(n_cars, bool)

    return policy


def test_steer_direction_of_the_twelve_actions():
    assert [steer_direction(a) for a in range(12)] == [0, 1, -1, 0, 1, -1, 0, 1, -1, 0, 1, -1]


def test_steer_after_is_rate_and_lock_limited_by_hand():
    p = VehicleParams()
    lock = p.steer_max / (1.0 + 10.0 / p.steer_speed_ref)
    step = p.steer_rate * 0.1
    assert steer_after(0.0, 1, 10.0, p, 0.1) == pytest.approx(min(step, lock))
    assert steer_after(0.0, -1, -10.0, p, 0.1) == pytest.approx(-min(step, lock))
    assert steer_after(0.01, 0, 10.0, p, 0.1) == pytest.approx(max(0.0, 0.01 - step))


@pytest.mark.parametrize("profile, pace", [("share", (0.8, 0.9)), ("grip", (0.6, 0.8))])
def test_demonstration_races_finish_and_record_the_networks_view(profile, pace):
    row = [{"map": "starter", "exploration": 1, "greedy": 0}]
    race, gim = _gim(2, row, share=1.0, profile=profile, pace=pace)
    policy = _standing_policy(2)
    gim.begin()
    assert gim.demos.active.all()
    ended = []
    for _ in range(600):
        ended += [r for _, r in gim.advance(*policy(gim.obs, gim.greedy))]
        if len(ended) >= 2:
            break
    assert len(ended) >= 2
    for r in ended:
        assert r["demo"] and r["finished"] and not r["greedy"]
        a = np.asarray(r["actions"])
        q = np.asarray(r["q_values"])
        assert (a != 3).mean() > 0.5  # the driver's actions, not the network's
        assert np.array_equal(r["action_was_greedy"], a == q.argmax(axis=1))


def test_greedy_races_are_never_demonstrations_and_share_zero_is_off():
    race, gim = _gim(3, [{"map": "starter", "exploration": 0, "greedy": 1}], share=1.0)
    gim.begin()
    assert not gim.demos.active.any()
    race, gim = _gim(3, [{"map": "starter", "exploration": 1, "greedy": 0}], share=0.0)
    gim.begin()
    assert not gim.demos.active.any()
    for _ in range(50):
        out = gim.advance(*_standing_policy(3)(gim.obs, gim.greedy))
        assert all(not r["demo"] for _, r in out)
    assert np.all(race.car.progress_m < 1.0)  # nobody drove the standing network's cars


def test_share_follows_its_schedule_over_frames():
    frames = {"n": 0}
    share = [[0, 1.0], [1000, 0.0]]
    race, gim = _gim(
        200, [{"map": "starter", "exploration": 1, "greedy": 0}], share, frames=lambda: frames["n"]
    )
    gim.begin()
    assert gim.demos.active.all()
    frames["n"] = 750  # the share is 0.25 here
    starter = gim.cycle.entries * 200
    gim.demos.start(np.arange(200), np.ones(200, bool), starter)
    assert 0.15 < gim.demos.active.mean() < 0.35
    frames["n"] = 5000
    gim.demos.start(np.arange(200), np.ones(200, bool), starter)
    assert not gim.demos.active.any()


TWO_MAPS = [
    {"map": "starter", "exploration": 1, "greedy": 0, "demos": 1.0},
    {"map": "flow", "exploration": 1, "greedy": 0},
]


def test_each_map_sets_its_own_share_when_every_maps_is_unset():
    race, gim = _gim(40, TWO_MAPS, share=None)
    gim.begin()  # the cycle alternates starter (share 1) and flow (unset: 0)
    names = [rec.entry.name for rec in gim._records]
    demo = gim.demos.active
    assert names[:4] == ["starter", "flow", "starter", "flow"]
    assert all(d == (n == "starter") for d, n in zip(demo, names))
    assert gim.demos.cfg.enabled_on(gim.cycle.entries) == ["starter"]


def test_every_maps_share_overrides_the_maps_own():
    race, gim = _gim(40, TWO_MAPS, share=0.0)
    gim.begin()
    assert not gim.demos.active.any()
    assert gim.demos.cfg.enabled_on(gim.cycle.entries) == []
    race, gim = _gim(40, TWO_MAPS, share=1.0)
    gim.begin()
    assert gim.demos.active.all()


def test_a_maps_share_draws_the_races_every_maps_share_drew():
    """map=hairpins now sets 0.25 on its row: the same races are demonstrations as with the
    measured exploration.demos.share=0.25 (same seed, same draws)."""
    row = [{"map": "starter", "exploration": 3, "greedy": 1, "demos": 0.25}]
    bare = [{"map": "starter", "exploration": 3, "greedy": 1}]
    _, by_row = _gim(64, row, share=None)
    _, by_every = _gim(64, bare, share=0.25)
    by_row.begin()
    by_every.begin()
    assert 4 < by_row.demos.active.sum() < 40
    assert np.array_equal(by_row.demos.active, by_every.demos.active)


def test_a_maps_share_is_checked_and_named_by_its_row():
    with pytest.raises(ConfigError) as e:
        MapCycle.from_config([{"map": "starter"}, {"map": "flow", "demos": [[0, 0.2], [5, 1.2]]}])
    assert str(e.value).startswith("map.cycle[1].demos: value 1.2 at frame 5")


def test_demonstrations_on_another_game_name_the_key_that_asks_for_them():
    entries = MapCycle.from_config(TWO_MAPS).entries
    check_demos_game(DemosConfig.from_config({"share": None}), entries, "sim")
    check_demos_game(DemosConfig.from_config({"share": 0.0}), entries, "tminterface")
    with pytest.raises(ConfigError) as e:
        check_demos_game(DemosConfig.from_config({"share": None}), entries, "tminterface")
    assert str(e.value).startswith("map.cycle: demonstration races need the scripted driver")
    assert "map starter sets demos" in str(e.value)
    with pytest.raises(ConfigError) as e:
        check_demos_game(DemosConfig.from_config({"share": 0.5}), entries, "tminterface")
    assert str(e.value).startswith("exploration.demos.share: demonstration races need")


def test_a_maps_share_follows_its_own_schedule_over_frames():
    frames = {"n": 0}
    row = [{"map": "starter", "exploration": 1, "greedy": 0, "demos": [[0, 1.0], [1000, 0.0]]}]
    race, gim = _gim(200, row, share=None, frames=lambda: frames["n"])
    gim.begin()
    assert gim.demos.active.all()
    frames["n"] = 5000
    gim.demos.start(np.arange(200), np.ones(200, bool), gim.cycle.entries * 200)
    assert not gim.demos.active.any()


@pytest.mark.parametrize(
    "overrides, want",
    [
        (["map=hairpins"], ["hairpins"]),
        (["map=technical"], ["technical"]),
        (["map=technical", "exploration.demos.share=0"], []),
        (["map=hairpins", "exploration=linesight"], ["hairpins"]),  # no demos section: the map's
        (["map=hairpins", "exploration.demos.share=0"], []),
        (["map=technical", "exploration.demos.share=0.25"], ["technical"]),
    ],
)
def test_a_run_demonstrates_where_its_config_asks(overrides, want):
    from hydra import compose, initialize_config_dir
    from specs import CONF

    from trackmind.collectors.parts import make_demonstrator
    from trackmind.training.factory import plan_run

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        spec = plan_run(compose("train", overrides=overrides)).collectors
    assert spec.demos.enabled_on(spec.cycle) == want
    race, _ = _gim(2, [{"map": "starter"}], share=0.0)
    assert (make_demonstrator(spec, race, 0, lambda: 0) is not None) == bool(want)


def test_the_defaults_demonstrate_on_hairpins_and_technical_alone():
    from trackmind.defaults import conf_option

    assert DemosConfig.from_config(conf_option("exploration", "fast")["demos"]).share is None
    for name in ("hairpins", "technical", "starter", "builtin_cycle"):
        entries = MapCycle.from_config(conf_option("map", name)["cycle"]).entries
        demos = DemosConfig.from_config(conf_option("exploration", "fast")["demos"])
        want = [name] if name in ("hairpins", "technical") else []
        assert demos.enabled_on(entries) == want
    hairpins = MapCycle.from_config(conf_option("map", "hairpins")["cycle"]).entries[0]
    assert demos.share_of(hairpins)(0) == demos.share_of(hairpins)(10**7) == 0.25


def test_race_stats_keep_demonstrations_out_of_finish_rates_and_best_times():
    s = RaceStats(reference_ms={"a": 10_000.0}, length_m={"a": 100.0})
    demo = {"map": "a", "finished": True, "race_time": 9_000, "greedy": False, "demo": True}
    assert s.add_race(demo, 90) is False
    m = s.metrics()
    assert m["races/demo"] == 1.0 and "race/a/finish_rate" not in m and "race/a/best_time" not in m


@pytest.mark.parametrize(
    "cfg, key",
    [
        ({"share": 1.5}, "exploration.demos.share"),
        ({"share": [[0, 0.5], [10, -0.1]]}, "exploration.demos.share"),
        ({"pace": [0.9, 0.5]}, "exploration.demos.pace"),
        ({"pace": [0.9]}, "exploration.demos.pace"),
        ({"epsilon": 2.0}, "exploration.demos.epsilon"),
        ({"speed": 1.0}, "exploration.demos.speed"),
        ({"profile": "late"}, "exploration.demos.profile"),
        ({"profile": "grip", "pace": [0.7, 1.2]}, "exploration.demos.pace"),
    ],
)
def test_bad_demos_config_names_the_key(cfg, key):
    with pytest.raises(ConfigError) as e:
        DemosConfig.from_config(cfg)
    assert str(e.value).startswith(key)


def test_the_grip_profile_takes_corners_at_the_root_of_the_grip_by_hand():
    """Two laps of a 50 m circle: the limit there is sqrt(mu * g * 50) (3.0 * 9.81 * 50: 38.36
    m/s); with 0.64 of the grip 0.8 of it, 30.69 m/s. The car starts from rest, so the first
    points are slower; it reaches the cap well inside the first lap."""
    p = VehicleParams()
    angle = np.arange(0.0, 4.0 * np.pi, 2.0 / 50.0)  # a point every 2 m
    line = 50.0 * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    full, low = grip_profile(line, p, 1.0), grip_profile(line, p, 0.64)
    inner = slice(len(line) // 2, -5)
    np.testing.assert_allclose(full[inner], np.sqrt(3.0 * 9.81 * 50.0), rtol=2e-3)
    np.testing.assert_allclose(low[inner], np.sqrt(0.64 * 3.0 * 9.81 * 50.0), rtol=2e-3)
    assert low[1] > 0 and np.all(low <= full + 1e-9)
    with pytest.raises(ValueError, match="grip"):
        grip_profile(line, p, 1.2)


def test_the_grip_profile_keeps_the_straights_and_brakes_later_than_a_share():
    """On technical: grip 0.7 reaches 0.9 of the limit's top speed (62 of 68 m/s: its brakes
    too are held to 0.7 of the grip, so it brakes a little sooner), where a share of 0.8 caps
    every speed at 0.8 of the limit; it is never above the limit profile, and its corners are
    taken at about sqrt(0.7) of their limit."""
    track = load_map("technical")
    p = VehicleParams()
    lap = reference_lap(track, p)
    low = grip_profile(lap.line, p, 0.7)
    assert np.all(low <= lap.speed + 1e-9)
    assert low.max() > 0.88 * lap.speed.max()
    corners = (lap.speed < 0.5 * lap.speed.max()) & (lap.s > lap.s[0] + 200.0)  # not the start
    np.testing.assert_array_less(low[corners], lap.speed[corners] + 1e-9)
    assert np.median(low[corners] / lap.speed[corners]) == pytest.approx(np.sqrt(0.7), rel=0.05)
