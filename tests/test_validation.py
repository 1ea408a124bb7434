"""Validation races: the score that chooses validated.pt, the races, and the keeper."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from specs import smoke_plan

from trackmind.errors import ConfigError
from trackmind.training.validation import (
    ValidationCallback,
    ValidationConfig,
    ValidationRaces,
    ValidationResult,
    check_validation_maps,
    validation_score,
)


def test_score_counts_finishes_then_coverage_then_speed():
    a = ValidationResult(progress=(1.0, 0.5), ratios=(1.2, None))
    b = ValidationResult(progress=(1.0, 1.0), ratios=(1.5, 1.6))
    c = ValidationResult(progress=(1.0, 0.7), ratios=(1.4, None))
    assert validation_score(a) == (1, 0.75, -1.2)
    assert validation_score(b) == (2, 1.0, -1.55)
    assert validation_score(c) == (1, 0.85, -1.4)
    # one more finish outweighs any speed; at equal finishes, more of the track does
    assert validation_score(b) > validation_score(c) > validation_score(a)
    none = ValidationResult(progress=(0.2, 0.4), ratios=(None, None))
    assert validation_score(none) == (0, pytest.approx(0.3), -math.inf)
    fast = ValidationResult(progress=(1.0, 0.5), ratios=(1.1, None))
    assert validation_score(fast) > validation_score(a)  # same finishes and coverage: faster


def test_metrics_of_a_validation():
    m = ValidationResult(progress=(1.0, 0.5, 1.0), ratios=(1.2, None, 1.4)).metrics()
    assert m == {
        "validation/finished": 2.0,
        "validation/progress": pytest.approx(2.5 / 3),
        "validation/ratio_median": pytest.approx(1.3),
    }
    assert math.isnan(ValidationResult((0.1,), (None,)).metrics()["validation/ratio_median"])


def test_config_is_checked_naming_the_key():
    with pytest.raises(ConfigError, match=r"^validation.every_s:"):
        ValidationConfig(maps=[], every_s=-1)
    with pytest.raises(ConfigError, match=r"^validation.maps: lists narrow:3 more than once"):
        ValidationConfig(maps=["narrow:3", "narrow:3"])
    v = ValidationConfig(maps=["procedural:7"])
    with pytest.raises(ConfigError, match=r"^validation.maps: .*env.backend=tminterface"):
        check_validation_maps(v, ["starter"], "tminterface")
    with pytest.raises(ConfigError, match=r"^validation.maps: procedural:7 is also a training"):
        check_validation_maps(v, ["procedural:7"], "sim")
    in_range = ValidationConfig(maps=["procedural:6-8"])
    with pytest.raises(ConfigError, match=r"^validation.maps: procedural:7 is also a training"):
        check_validation_maps(in_range, ["procedural:7"], "sim")
    assert check_validation_maps(ValidationConfig(), ["starter"], "tminterface") == ()  # off
    loaded = check_validation_maps(v, ["starter"], "sim")
    assert [e.name for e in loaded] == ["procedural:7"]


@pytest.fixture(scope="module")
def races():
    plan = smoke_plan("validation.maps=[procedural:7,narrow:3]")
    spec = plan.collectors
    r = ValidationRaces(plan.validation_entries, spec.env, spec.reward, plan.new_network)
    yield r, plan
    r.close()


def test_races_one_car_per_map_and_depend_on_the_weights_alone(races):
    r, plan = races
    assert r.names == ["procedural:7", "narrow:3"]
    weights = plan.new_network().state_dict()
    first = r.run(weights, k=8, cvar=1.0)
    assert len(first.progress) == 2 and all(0.0 <= p <= 1.0 for p in first.progress)
    assert r.run(weights, k=8, cvar=1.0) == first  # midpoint taus, fresh start: the same


class _Logger:
    def __init__(self):
        self.logged: list[dict] = []

    def log_metrics(self, m, step):
        self.logged.append(dict(m, step=step))


class _Races:
    """Stand-in races: each validation returns the next of the given results."""

    names = ["a", "b"]

    def __init__(self, results):
        self.results = list(results)

    def run(self, weights, k, cvar):
        return self.results.pop(0)


def test_keeper_writes_validated_pt_only_for_a_better_score(tmp_path):
    results = [
        ValidationResult((1.0, 0.4), (1.3, None)),  # first: kept
        ValidationResult((0.9, 0.4), (None, None)),  # worse: not kept
        ValidationResult((1.0, 1.0), (1.4, 1.5)),  # two finishes: kept
    ]
    path = tmp_path / "validated.pt"
    net = torch.nn.Linear(2, 1)
    cb = ValidationCallback(
        _Races(results),
        60.0,
        path,
        {"seed": 3},
        SimpleNamespace(n_quantiles_inference=8, greedy_cvar=1.0),
    )
    logger = _Logger()
    kept_weights = []
    for step in (10, 20, 30):
        with torch.no_grad():
            net.weight.fill_(step)
        cb.validate(SimpleNamespace(global_step=step, logger=logger), SimpleNamespace(acting=net))
        kept_weights.append(torch.load(path, weights_only=True)["network"]["weight"][0, 0].item())
    assert kept_weights == [10.0, 10.0, 30.0]
    # between validations a batch end does nothing; every_s after the last, it validates
    trainer = SimpleNamespace(global_step=31, logger=None)
    cb.on_train_batch_end(trainer, SimpleNamespace(acting=net), None, None, 0)
    assert len(cb.history) == 3
    cb._last -= 61.0
    cb.races.results.append(results[1])
    cb.on_train_batch_end(trainer, SimpleNamespace(acting=net), None, None, 0)
    assert len(cb.history) == 4 and cb.history[-1]["step"] == 31
    assert [row["kept"] for row in cb.history] == [True, False, True, False]
    saved = torch.load(path, weights_only=True)
    assert saved["config"] == {"seed": 3} and saved["validation"]["step"] == 30
    assert [m["map"] for m in saved["validation"]["maps"]] == ["a", "b"]
    assert [m["validation/finished"] for m in logger.logged] == [1.0, 0.0, 2.0]
    # a resumed run's keeper starts from the best score so far
    again = ValidationCallback(
        _Races([results[1]]),
        60.0,
        path,
        {},
        SimpleNamespace(n_quantiles_inference=8, greedy_cvar=1.0),
    )
    again.load_state_dict(cb.state_dict())
    again.validate(SimpleNamespace(global_step=40, logger=None), SimpleNamespace(acting=net))
    assert not again.history[-1]["kept"]
    assert torch.load(path, weights_only=True)["validation"]["step"] == 30


def test_snapshots_keep_every_validation_and_validated_pt_only_the_best(tmp_path):
    results = [
        ValidationResult((1.0,), (1.3,)),
        ValidationResult((0.5,), (None,)),
    ]
    net = torch.nn.Linear(2, 1)
    cb = ValidationCallback(
        _Races(results),
        60.0,
        tmp_path / "validated.pt",
        {},
        SimpleNamespace(n_quantiles_inference=8, greedy_cvar=1.0),
        snapshots=tmp_path / "validation",
    )
    for step in (7, 12):
        with torch.no_grad():
            net.weight.fill_(step)
        cb.validate(SimpleNamespace(global_step=step, logger=None), SimpleNamespace(acting=net))
    files = sorted(p.name for p in (tmp_path / "validation").iterdir())
    assert files == ["step_00000007.pt", "step_00000012.pt"]
    late = torch.load(tmp_path / "validation" / files[1], weights_only=True)
    assert late["network"]["weight"][0, 0].item() == 12.0
    assert late["validation"]["maps"][0]["ratio"] is None
    best = torch.load(tmp_path / "validated.pt", weights_only=True)
    assert best["validation"]["step"] == 7


class _RecordingRaces(_Races):
    """Stand-in races that also record the first weight of every network they race."""

    def __init__(self, results):
        super().__init__(results)
        self.raced: list[float] = []

    def run(self, weights, k, cvar):
        self.raced.append(weights["weight"][0, 0].item())
        return super().run(weights, k, cvar)


def test_averaged_pt_is_the_mean_of_the_last_validations_and_survives_a_resume(tmp_path):
    one, none = ValidationResult((1.0,), (1.2,)), ValidationResult((0.5,), (None,))
    races = _RecordingRaces([one] * 2 + [none, one] * 2)  # from the third: snapshot, mean
    net, logger = torch.nn.Linear(2, 1), _Logger()
    network = SimpleNamespace(n_quantiles_inference=8, greedy_cvar=1.0)
    cb = ValidationCallback(races, 60.0, tmp_path / "validated.pt", {"seed": 1}, network, average=3)
    averaged = tmp_path / "averaged.pt"

    def validate(callback, step):
        with torch.no_grad():
            net.weight.fill_(step)
        callback.validate(
            SimpleNamespace(global_step=step, logger=logger), SimpleNamespace(acting=net)
        )

    validate(cb, 10)
    validate(cb, 20)
    assert not averaged.exists() and races.raced == [10.0, 20.0]  # fewer than 3 so far
    validate(cb, 40)
    saved = torch.load(averaged, weights_only=True)
    assert saved["network"]["weight"][0, 0].item() == pytest.approx(70 / 3)
    assert saved["averaged"] == [10, 20, 40] and saved["config"] == {"seed": 1}
    assert saved["validation"]["step"] == 40
    assert saved["validation"]["maps"] == [{"map": "a", "progress": 1.0, "ratio": 1.2}]
    assert races.raced[2:] == [40.0, pytest.approx(70 / 3)]  # the snapshot, then the mean
    assert logger.logged[-1]["validation/finished"] == 0.0  # the snapshot's own race
    assert logger.logged[-1]["validation/averaged_finished"] == 1.0
    assert cb.history[-1]["validation/averaged_progress"] == 1.0
    # ensemble.pt: the same window's weights themselves, not raced (one race more only)
    kept = torch.load(tmp_path / "ensemble.pt", weights_only=True)
    assert [m["weight"][0, 0].item() for m in kept["members"]] == [10.0, 20.0, 40.0]
    assert kept["network"]["weight"][0, 0].item() == 40.0 and kept["ensemble"] == [10, 20, 40]
    assert kept["config"] == {"seed": 1} and len(races.raced) == 4
    # a resumed run averages the same window: 20, 40 and its own 60
    again = ValidationCallback(races, 60.0, tmp_path / "validated.pt", {}, network, average=3)
    again.load_state_dict(cb.state_dict())
    validate(again, 60)
    saved = torch.load(averaged, weights_only=True)
    assert saved["averaged"] == [20, 40, 60] and saved["network"]["weight"][0, 0].item() == 40.0


def test_average_is_checked_and_off_by_default(tmp_path):
    with pytest.raises(ConfigError, match=r"^validation.average: must be a number of validat"):
        ValidationConfig(average=0)
    races = _Races([ValidationResult((1.0,), (1.2,))] * 3)
    network = SimpleNamespace(n_quantiles_inference=8, greedy_cvar=1.0)
    cb = ValidationCallback(races, 60.0, tmp_path / "validated.pt", {}, network)
    for step in (1, 2, 3):
        cb.validate(
            SimpleNamespace(global_step=step, logger=None),
            SimpleNamespace(acting=torch.nn.Linear(2, 1)),
        )
    assert not (tmp_path / "averaged.pt").exists() and not races.results  # one race each
    assert not (tmp_path / "ensemble.pt").exists()
    assert "validation/averaged_finished" not in cb.history[-1]


def test_a_step_validated_twice_counts_once_in_the_average(tmp_path):
    races = _RecordingRaces([ValidationResult((1.0,), (1.2,))] * 6)
    network = SimpleNamespace(n_quantiles_inference=8, greedy_cvar=1.0)
    cb = ValidationCallback(races, 60.0, tmp_path / "validated.pt", {}, network, average=2)
    net = torch.nn.Linear(2, 1)
    for step, value in ((5, 1.0), (9, 3.0), (9, 5.0)):  # the end of fit validates step 9 again
        with torch.no_grad():
            net.weight.fill_(value)
        cb.validate(SimpleNamespace(global_step=step, logger=None), SimpleNamespace(acting=net))
    saved = torch.load(tmp_path / "averaged.pt", weights_only=True)
    assert saved["averaged"] == [5, 9] and saved["network"]["weight"][0, 0].item() == 3.0
