"""A map's own wall price (env/map_prices.py): the wall_impact term on its cars alone."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from specs import CONF, collector_spec

from trackmind.collectors.parts import build_collector_parts
from trackmind.env.map_cycle import MapCycle
from trackmind.env.map_prices import map_wall_prices, price_walls_by_map, priced_as_recorded
from trackmind.env.reward_terms import WallImpactPenalty
from trackmind.errors import ConfigError
from trackmind.game.actions import ACTIONS


class _Track:
    def __init__(self, key: str) -> None:
        self.key = key

    def fingerprint(self) -> str:
        return self.key


def _env(tracks, before, after, wall):
    def car(v):
        return SimpleNamespace(speed=np.asarray(v, float), wall_contact=np.asarray(wall, bool))

    return SimpleNamespace(n_cars=len(tracks), tracks=tracks, prev_car=car(before), car=car(after))


def test_each_car_pays_its_own_maps_wall_price_by_hand():
    # cars 0 and 2 race the priced map (-0.05 per m/s), car 1 another: each loses 20 m/s on
    # a wall, so 0 and 2 pay 20 * 0.05 = 1.0 and car 1 nothing
    priced, free = _Track("priced"), _Track("free")
    term = WallImpactPenalty(per_mps=0.0)
    term.price_maps({"priced": -0.05})
    term.bind(_env([priced, free, priced], [50, 50, 30], [30, 30, 10], [1, 1, 1]))
    np.testing.assert_allclose(term._get_term(), [-1.0, 0.0, -1.0])
    np.testing.assert_allclose(term.car_prices(3), [-0.05, 0.0, -0.05])
    # car 1 starts a race on the priced map and car 0 on the other: the prices follow
    term.env.tracks[0], term.env.tracks[1] = free, priced
    term.reset(np.array([0, 1]))
    np.testing.assert_allclose(term._get_term(), [0.0, -1.0, -1.0])


def test_a_map_row_adds_the_term_unless_the_run_prices_every_map():
    entries = MapCycle.from_config(
        [{"map": "starter", "wall_price": -0.035}, {"map": "flow"}, "speedway"]
    ).entries
    assert map_wall_prices(entries) == {entries[0].track.fingerprint(): -0.035}
    spec = _spec("map.cycle=[{map: starter, wall_price: -0.035}, {map: flow}]")
    race, cycle, _ = build_collector_parts(spec, n_cars=2)
    race.reset(np.arange(2), [e.track for e in cycle.entries])
    term = race.reward.term("wall_impact")
    np.testing.assert_allclose(term.car_prices(2), [-0.035, 0.0])
    assert not price_walls_by_map(race, cycle.entries)  # once is enough: it is there
    # a run's own wall_impact prices every map and takes precedence over the rows
    spec = _spec(
        "map.cycle=[{map: starter, wall_price: -0.035}]",
        "+reward.terms.wall_impact={weight:1.0,params:{per_mps:-0.05}}",
    )
    race, _, _ = build_collector_parts(spec, n_cars=1)
    walls = [t for t in race.reward.terms if isinstance(t, WallImpactPenalty)]
    assert len(walls) == 1 and walls[0].car_prices(1) == -0.05
    # no row names a price: no term
    race, _, _ = build_collector_parts(_spec("map.cycle=[{map: starter}]"), n_cars=1)
    assert not any(isinstance(t, WallImpactPenalty) for t in race.reward.terms)


def test_a_wall_price_above_zero_is_named_by_its_row():
    with pytest.raises(ConfigError) as e:
        MapCycle.from_config([{"map": "starter"}, {"map": "flow", "wall_price": 0.1}])
    assert str(e.value).startswith("map.cycle[1].wall_price: is a cost per m/s lost")


def test_technicals_row_pays_what_the_measured_run_override_paid():
    """map=technical's row (wall_price -0.035) gives the rewards the 3-seed runs got from
    `+reward.terms.wall_impact={weight:1.0,params:{per_mps:-0.035}}`: the same actions into
    the walls, the same wall costs and totals, step by step."""
    row = build_collector_parts(_spec("map=technical"), n_cars=4)[0]
    arm = _spec(
        "map=technical",
        "map.cycle.0.wall_price=null",
        "+reward.terms.wall_impact={weight:1.0,params:{per_mps:-0.035}}",
    )
    run = build_collector_parts(arm, n_cars=4)[0]
    full_left = int(np.flatnonzero((ACTIONS[:, 0] == 1) & (ACTIONS[:, 2] == 1))[0])
    actions = np.array([0, full_left, full_left, 0])
    paid = 0.0
    for race in (row, run):
        race.reset()
    for _ in range(150):
        _, r1, _, _, i1 = row.step(actions)
        _, r2, _, _, i2 = run.step(actions)
        w1, w2 = i1["reward_terms"]["wall_impact"], i2["reward_terms"]["wall_impact"]
        np.testing.assert_allclose(r1, r2)
        np.testing.assert_allclose(w1, w2)
        paid += float(w1.sum())
    assert paid < -0.5  # the cars steering left met a wall and paid for it


def _spec(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return collector_spec(compose("train", overrides=list(overrides)))


def test_a_checkpoint_raced_again_pays_the_price_its_run_gave_the_map(tmp_path):
    """value_audit's returns and evaluation's races: the map named alone gets the wall price
    of the run's own row for it (matched by name), and a map the run did not price none."""
    import torch

    from trackmind.evaluation import checkpoint_race
    from trackmind.training.factory import plan_run

    entries = MapCycle.from_config(["starter", "flow"]).entries
    rows = [{"map": "starter", "wall_price": -0.035}, "flow"]
    priced = priced_as_recorded(entries, rows)
    assert [e.wall_price for e in priced] == [-0.035, None]
    assert [e.wall_price for e in priced_as_recorded(entries, None)] == [None, None]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        plan = plan_run(compose("train", overrides=["map=technical", "network=iqn_floats"]))
    _, _, net = build_collector_parts(plan.collectors, n_cars=1)
    agent = tmp_path / "agent.pt"
    torch.save({"network": net.state_dict(), "config": plan.cfg}, agent)
    race = checkpoint_race(str(agent), "technical")[0]
    race.reset()
    assert race.reward.term("wall_impact").car_prices(1)[0] == -0.035
    race = checkpoint_race(str(agent), "starter")[0]
    assert not any(isinstance(t, WallImpactPenalty) for t in race.reward.terms)
