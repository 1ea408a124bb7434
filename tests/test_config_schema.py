"""check_schema, the one way config groups are checked: keys, types, ranges, and the key
every error names."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from specs import ray_collector

from trackmind.env.build import env_config
from trackmind.env.rewards import build_reward_manager
from trackmind.env.terminations import build_termination_manager
from trackmind.errors import ConfigError
from trackmind.training.module import schedule_from


def _error(fn, *args) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        fn(*args)
    return e.value


def test_env_defaults_and_coercion() -> None:
    cfg = env_config({"tick_ms": "10", "ticks_per_action": 5})
    assert cfg.tick_ms == 10 and cfg.action_ms == 50
    assert cfg.backend == "sim"


@pytest.mark.parametrize(
    ("section", "key", "words"),
    [
        ({"tick_ms": 0}, "env.tick_ms", "must be an integer > 0, got 0"),
        ({"zone_spacing_m": -1.0}, "env.zone_spacing_m", "must be > 0"),
        ({"render_threads": 0}, "env.render_threads", "must be an integer > 0, got 0"),
        ({"tick_ms": "fast"}, "env.tick_ms", "fast"),
        ({"nope": 1}, "env.nope", "unknown key (allowed: backend, camera"),
    ],
)
def test_env_errors_name_the_key(section: dict, key: str, words: str) -> None:
    e = _error(env_config, section)
    assert e.key == key and words in str(e), str(e)


@pytest.mark.parametrize(
    ("section", "key", "words"),
    [
        ({"vehicle": {"mu": -1}}, "env.vehicle.mu", "must be finite and >= 0, got -1.0"),
        ({"vehicle": {"muu": 1}}, "env.vehicle.muu", "unknown key (allowed: brake_decel"),
        ({"vehicle": {"dynamic_above": 1}}, "env.vehicle.dynamic_above", "> kinematic_below"),
        ({"camera": {"hfov_deg": 200}}, "env.camera.hfov_deg", "must be in (0, 170)"),
        ({"camera": {"fov": 90}}, "env.camera.fov", "unknown key (allowed: behind"),
    ],
)
def test_vehicle_and_camera_errors_name_the_key(section: dict, key: str, words: str) -> None:
    from trackmind.env.build import make_sim_game

    e = _error(lambda env: make_sim_game(env, 1, ["starter"]), section)
    assert e.key == key and words in str(e), str(e)


def test_vehicle_overrides_keep_the_other_defaults() -> None:
    from trackmind.sim.vehicle import VehicleParams

    v = VehicleParams.from_config({"mu": 2.5, "gear_top_speeds": [10, 20, 30, 40, 90]})
    assert v.mu == 2.5 and v.gear_top_speeds == (10.0, 20.0, 30.0, 40.0, 90.0)
    assert v.brake_decel == VehicleParams().brake_decel


def test_reward_terms_keep_weight_and_clip() -> None:
    rm = build_reward_manager(
        {"terms": {"progress": {"weight": 2.0, "clip": [None, 1.5], "params": {}}}}
    )
    (term,) = rm.terms
    assert term.weight == 2.0 and (term.clip_min, term.clip_max) == (None, 1.5)


@pytest.mark.parametrize(
    ("section", "key", "words"),
    [
        ({"terms": {"progress": {"weight": math.nan}}}, "reward.terms.progress.weight", "finite"),
        ({"terms": {"progress": {"clip": [2, 1]}}}, "reward.terms.progress.clip", "above max"),
        ({"terms": {"progress": {"clip": [1]}}}, "reward.terms.progress.clip", "[min, max]"),
        ({"terms": {"progress": {"wieght": 1}}}, "reward.terms.progress.wieght", "unknown key"),
        ({"terms": {"warp": {}}}, "reward.terms.warp", "unknown reward term 'warp'"),
        ({"shaping": "both"}, "reward.shaping", "'collate' or 'env'"),
        (
            {"terms": {"progress": {"params": {"x": 1}}}},
            "reward.terms.progress.params.x",
            "per_metre",
        ),
    ],
)
def test_reward_errors_name_the_key(section: dict, key: str, words: str) -> None:
    e = _error(build_reward_manager, section)
    assert e.key == key and words in str(e), str(e)


def test_termination_unknown_key_is_named() -> None:
    e = _error(build_termination_manager, {"terms": {}, "extra": 1})
    assert e.key == "env.termination.extra"


def test_schedule_points_are_required() -> None:
    e = _error(schedule_from, {"kind": "linear"}, "learner.lr")
    assert e.key == "learner.lr.points" and "required" in str(e), str(e)


def test_trainer_against_the_machine_by_hand():
    from trackmind.training.schema import TrainerConfig, check_trainer_machine

    check_trainer_machine(TrainerConfig(accelerator="gpu", devices=[1]), cuda_devices=2)
    check_trainer_machine(TrainerConfig(accelerator="cpu", devices=1), cuda_devices=0)
    check_trainer_machine(TrainerConfig(accelerator="auto", devices=[0]), cuda_devices=1)
    with pytest.raises(ConfigError, match="^trainer.accelerator: cuda asked for, but torch"):
        check_trainer_machine(TrainerConfig(accelerator="cuda", devices=1), cuda_devices=0)
    with pytest.raises(ConfigError, match="^trainer.devices: GPU number 2 asked for, but .* 2$"):
        check_trainer_machine(TrainerConfig(accelerator="gpu", devices=[2]), cuda_devices=2)
    with pytest.raises(ConfigError, match=r"^trainer.devices: \[0\] names a GPU"):
        check_trainer_machine(TrainerConfig(accelerator="auto", devices=[0]), cuda_devices=0)


def test_a_fleet_larger_than_its_cpus_by_hand(monkeypatch):
    from trackmind.collectors.fleet.connect import check_cluster_fits
    from trackmind.collectors.fleet.settings import fleet_problem

    col = ray_collector(processes=3, cpus_per_worker=2, address="10.0.0.5:6379")
    assert fleet_problem(col, 6, "this machine") is None
    assert fleet_problem(col, 5, "the cluster") == (
        "3 workers of 2 CPU(s) each need 6 CPUs, and the cluster has 5; use fewer processes"
    )
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 4.0})
    with pytest.raises(ConfigError, match="^collector.processes: .* the cluster at 10.0.0.5"):
        check_cluster_fits(col)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 64.0})
    check_cluster_fits(col)
    check_cluster_fits(replace(col, address=None))  # a local start was checked at plan time
