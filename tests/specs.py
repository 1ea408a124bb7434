"""Typed run parts for tests, built the way a run builds them (plan_run, the group schemas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from trackmind.agent.network_config import build_network
from trackmind.collectors.fleet.settings import RayCollectorConfig
from trackmind.collectors.spec import CollectorSpec
from trackmind.defaults import conf_option
from trackmind.errors import check_schema
from trackmind.training.factory import RunPlan, plan_run
from trackmind.training.module import IQNLightningModule

CONF = Path(__file__).resolve().parents[1] / "conf"
ONE_RACE_EACH = "map.cycle=[{map: starter, exploration: 1, greedy: 1}]"
FLOATS = 184  # the float inputs of the default observation


def learner_cfg(**change: Any) -> dict:
    """The learner group's YAML as a plain dict, with `change` over it."""
    return {**OmegaConf.to_container(OmegaConf.load(CONF / "learner" / "iqn.yaml")), **change}


def float_learner(module_args: dict | None = None, **change: Any) -> IQNLightningModule:
    """A learner over the float-only network (seed 0: the same weights each call), with
    `change` over the learner group's YAML and `module_args` (e.g. policy_cvar) handed to
    the module as a run hands them."""
    torch.manual_seed(0)
    net = OmegaConf.to_container(OmegaConf.load(CONF / "network" / "iqn_floats.yaml"))
    return IQNLightningModule(
        build_network(net, FLOATS, None), learner_cfg(**change), **(module_args or {})
    )


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


def learner_batches(n: int, floats: int, b: int = 16) -> list[dict[str, torch.Tensor]]:
    """`n` collated batches of `b` random float-only transitions (no frames), the same each
    call: what a learner module's step reads, without a buffer."""
    g = torch.Generator().manual_seed(1)
    return [
        {
            "state_float": torch.randn(b, floats, generator=g),
            "next_state_float": torch.randn(b, floats, generator=g),
            "action": torch.randint(0, 12, (b,), generator=g),
            "reward": torch.randn(b, generator=g),
            "discount": torch.full((b,), 0.99),
        }
        for _ in range(n)
    ]


def fit_steps(module: L.LightningModule, batches: list[dict], root: Path) -> None:
    """`module` trained on `batches`, one step each, on the CPU, writing nothing but under
    `root`."""
    trainer = L.Trainer(
        max_steps=len(batches),
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, None))
