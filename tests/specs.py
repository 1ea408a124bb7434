"""Typed run parts for tests, built the way a run builds them (plan_run, the group schemas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir

from trackmind.collectors.fleet.settings import RayCollectorConfig
from trackmind.collectors.spec import CollectorSpec
from trackmind.defaults import conf_option
from trackmind.errors import check_schema
from trackmind.training.factory import RunPlan, plan_run

CONF = Path(__file__).resolve().parents[1] / "conf"
ONE_RACE_EACH = "map.cycle=[{map: starter, exploration: 1, greedy: 1}]"


def smoke_plan(*overrides: str) -> RunPlan:
    """The plan of a smoke run (debug=smoke) on starter, one exploration and one greedy race
    a cycle, with `overrides`."""
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose("train", overrides=["debug=smoke", ONE_RACE_EACH, *overrides])
    return plan_run(cfg)


def collector_spec(cfg: Any) -> CollectorSpec:
    """The CollectorSpec a run of the composed config `cfg` hands its collectors."""
    return plan_run(cfg).collectors


def ray_collector(**keys: Any) -> RayCollectorConfig:
    """collector=ray's settings (conf/collector/ray.yaml) with `keys` changed, checked."""
    return check_schema(
        {**conf_option("collector", "ray"), **keys}, RayCollectorConfig, "collector"
    )
