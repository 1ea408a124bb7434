"""Typed run parts for tests, built the way a run builds them (plan_run, the group schemas)."""

from __future__ import annotations

from typing import Any

from trackmind.collectors.fleet.settings import RayCollectorConfig
from trackmind.collectors.spec import CollectorSpec
from trackmind.defaults import conf_option
from trackmind.errors import check_schema
from trackmind.training.factory import plan_run


def collector_spec(cfg: Any) -> CollectorSpec:
    """The CollectorSpec a run of the composed config `cfg` hands its collectors."""
    return plan_run(cfg).collectors


def ray_collector(**keys: Any) -> RayCollectorConfig:
    """collector=ray's settings (conf/collector/ray.yaml) with `keys` changed, checked."""
    return check_schema(
        {**conf_option("collector", "ray"), **keys}, RayCollectorConfig, "collector"
    )
