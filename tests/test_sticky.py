"""Sticky actions: by hand, their draws, the config key, and the races that use them."""

from __future__ import annotations

import numpy as np
import pytest

from trackmind.agent.exploration import build_exploration
from trackmind.env.build import default_env_config, make_race
from trackmind.env.map_cycle import MapCycle
from trackmind.env.rollout import GameInstanceManager
from trackmind.env.sticky import StickyActions, sticky_actions, sticky_on
from trackmind.errors import ConfigError
from trackmind.schedules import Schedule


def _always(p: float) -> Schedule:
    return Schedule.from_config(p, "linear", "exploration.sticky")


def test_sticky_actions_by_hand():
    chosen = np.array([4, 5, 6, 7, 8])
    previous = np.array([1, 1, -1, 2, 3])
    draws = np.array([0.1, 0.3, 0.0, 0.1, 0.1])
    eligible = np.array([True, True, True, True, False])
    # car 0 sticks (0.1 < 0.25); car 1 draws above p; car 2 has no previous action;
    # car 3 sticks; car 4 is not eligible (a greedy race or a demonstration)
    out = sticky_actions(chosen, previous, draws, 0.25, eligible)
    assert out.tolist() == [1, 5, 6, 2, 8]
    assert sticky_actions(chosen, previous, draws, 0.0, eligible).tolist() == chosen.tolist()


def test_sticky_draws_repeat_at_rate_p_and_restart_with_the_race():
    s = StickyActions(_always(0.25), n_cars=4000, seed=0, frames=lambda: 0)
    everyone = np.ones(4000, bool)
    first = s.apply(np.zeros(4000, np.int64), everyone)
    assert (first == 0).all()  # a race's first action is always the chosen one
    second = s.apply(np.ones(4000, np.int64), everyone)
    assert abs((second == 0).mean() - 0.25) < 0.03  # stuck on the previous action
    s.reset(np.arange(2000), [None] * 2000)  # every map's probability: no entry read
    third = s.apply(np.full(4000, 2, np.int64), everyone)
    assert (third[:2000] == 2).all()  # new races: nothing to repeat
    assert set(third[2000:].tolist()) <= {0, 1, 2}  # the previous executed action, 0 or 1


def test_sticky_probability_follows_the_frames():
    frames = {"n": 0}
    sched = Schedule.from_config([[0, 0.0], [100, 0.0], [200, 0.5]], "linear", "x")
    s = StickyActions(sched, n_cars=4000, seed=1, frames=lambda: frames["n"])
    everyone = np.ones(4000, bool)
    s.apply(np.zeros(4000, np.int64), everyone)
    assert (s.apply(np.ones(4000, np.int64), everyone) == 1).all()  # p = 0 at frame 0
    frames["n"] = 150  # halfway: p = 0.25
    assert abs((s.apply(np.full(4000, 2, np.int64), everyone) == 1).mean() - 0.25) < 0.03


@pytest.mark.parametrize("p", [1.0, -0.1, [[0, 0.1], [100, 1.0]], [[0, 0.2], [10, 0.1], [5, 0.0]]])
def test_sticky_config_names_the_key(p):
    with pytest.raises(ConfigError) as e:
        build_exploration({"policy": "epsilon_greedy", "epsilon": 0.1, "sticky": p})
    assert e.value.key == "exploration.sticky"


def test_sticky_config_reaches_every_policy():
    assert build_exploration({"policy": "greedy", "sticky": 0.2}).sticky(0) == 0.2
    points = [[0, 0.0], [300_000, 0.25]]
    cfg = {"policy": "linesight", "epsilon": 0.1, "epsilon_boltzmann": 0.1, "sticky": points}
    assert build_exploration(cfg).sticky(150_000) == pytest.approx(0.125)
    assert build_exploration({"policy": "epsilon_greedy", "epsilon": 0.1}).sticky is None
    assert build_exploration({"policy": "greedy", "sticky": 0}).sticky(0) == 0.0  # all maps off


def _drive_15_steps(cycle_cfg, n_cars, every=None):
    """(gim, chosen, executed): 15 steps of a new choice every step, on a fresh race."""
    env = default_env_config()
    env["frame_shape"] = [24, 32]
    cycle = MapCycle.from_config(cycle_cfg)
    race = make_race(env, n_cars=n_cars, maps=cycle.entries[0].track)
    gim = GameInstanceManager(race, cycle, sticky=StickyActions(every, n_cars, 0, lambda: 0))
    gim.begin()
    chosen_steps, executed_steps = [], []
    for k in range(15):  # 0, 1, ..., 11, 0, ... (within 2 s: no race is cut)
        a = np.full(n_cars, k % 12, np.int64)
        gim.advance(a, np.zeros((n_cars, 12), np.float32), np.ones(n_cars, bool))
        chosen_steps.append(a.copy())
        executed_steps.append(race.action_history[:, 0].copy())
    return gim, np.array(chosen_steps), np.array(executed_steps)


def test_exploration_races_stick_and_greedy_races_drive_as_chosen():
    cfg = [{"map": "starter", "exploration": 1, "greedy": 1}]
    gim, chosen, executed = _drive_15_steps(cfg, 2, every=_always(0.9))
    exploring = int(np.flatnonzero(~gim.greedy)[0])
    greedy = 1 - exploring
    assert (executed[:, greedy] == chosen[:, greedy]).all()
    assert executed[0, exploring] == chosen[0, exploring]  # the race's first action
    drove = executed[1:, exploring]
    assert 8 <= (drove != chosen[1:, exploring]).sum() < 14  # most stuck, not all
    assert ((drove == chosen[1:, exploring]) | (drove == executed[:-1, exploring])).all()
    # the records keep the choices, whatever the game drove
    assert gim._records[exploring].r["actions"] == chosen[:, exploring].tolist()


def test_each_map_sticks_as_its_cycle_row_says():
    cfg = [
        {"map": "starter", "exploration": 1, "greedy": 0, "sticky": 0.9},
        {"map": "chicanes", "exploration": 1, "greedy": 0},
    ]
    gim, chosen, executed = _drive_15_steps(cfg, 2)  # exploration.sticky null: the maps' own
    on_starter = [c for c in range(2) if gim._records[c].entry.name == "starter"]
    (s,), (c,) = on_starter, [c for c in range(2) if c not in on_starter]
    assert (executed[:, c] == chosen[:, c]).all()  # chicanes sets none
    assert (executed[1:, s] != chosen[1:, s]).sum() >= 8
    # every map's probability, when set, overrides the rows'
    gim, chosen, executed = _drive_15_steps(cfg, 2, every=_always(0.0))
    assert (executed == chosen).all()


def test_a_maps_sticky_value_is_checked_naming_its_row():
    with pytest.raises(ConfigError) as e:
        MapCycle.from_config([{"map": "starter", "sticky": 1.0}])
    assert e.value.key == "map.cycle[0].sticky"


def test_sticky_is_on_where_some_map_ever_sticks():
    plain = MapCycle.from_config(["starter"]).entries
    rows = MapCycle.from_config([{"map": "starter", "sticky": [[0, 0.0], [10, 0.25]]}]).entries
    assert not sticky_on(None, plain)
    assert sticky_on(None, rows)
    assert not sticky_on(_always(0.0), rows)  # every map's 0 turns the rows off
    assert sticky_on(_always(0.1), plain)
