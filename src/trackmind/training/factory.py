"""From the composed config to the parts of a run, validated before anything starts.

`plan_run` checks every group (env and reward terms, network against the environment's
frames and floats, exploration, buffer, learner, collector, trainer, logger, map cycle)
and returns a RunPlan; a mistake raises one ConfigError naming the key. The collectors
build their parts from the plan's CollectorSpec (collectors/parts.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trackmind.backends import COLLECTOR_POOLS, GAME_RUN_CHECK, GAMES, choose, load
from trackmind.collectors.spec import CollectorConfig, CollectorSpec
from trackmind.env.build import build_managers, env_config, float_dim_of, frame_shape_of
from trackmind.env.map_cycle import CycleEntry, MapCycle
from trackmind.env.mirror import FloatMirror
from trackmind.env.observations import FLOATS
from trackmind.errors import ConfigError, check_schema, require
from trackmind.replay.config import BufferConfig
from trackmind.tracking.logger_config import LoggerConfig
from trackmind.training.schema import (
    CheckpointConfig,
    MapConfig,
    RunConfig,
    TrainConfig,
    TrainerConfig,
    check_trainer_machine,
)
from trackmind.training.validation import ValidationConfig, check_validation_maps

if TYPE_CHECKING:
    from trackmind.agent.network import IQNNetwork
    from trackmind.agent.network_config import NetworkConfig
    from trackmind.collectors.demos import DemosConfig
    from trackmind.training.module import LearnerConfig


def to_plain(cfg: Any) -> dict:
    """A resolved plain dict (the run's record: checkpoints and MLflow params)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover
        pass
    return dict(cfg)


def resolve_frame_shape(cfg: dict) -> dict:
    """env.frame_shape `auto` follows network.image_shape ([C, H, W] -> [H, W], null -> null)."""
    env = cfg.get("env") or {}
    if env.get("frame_shape") == "auto":
        img = (cfg.get("network") or {}).get("image_shape")
        ok = img is None or (isinstance(img, (list, tuple)) and len(img) == 3)
        require(ok, "network.image_shape", f"must be [C, H, W] or null, got {img!r}")
        env["frame_shape"] = None if img is None else [int(img[1]), int(img[2])]
    return cfg


def recorded_config(record: dict) -> TrainConfig:
    """A run's config as a checkpoint recorded it, typed at the top level (the groups as
    mappings) for code that races its weights again (evaluation, audits)."""
    return check_schema(resolve_frame_shape(dict(record)), TrainConfig, "")


@dataclass
class RunPlan:
    """Everything the learner needs to know before it starts processes.

    `cfg` is the checked config as plain data (what a checkpoint and the MLflow run
    record); the typed groups are the same values, validated once, that the learner's
    builders take, and `collectors` is what every collector builds from.
    """

    cfg: dict
    cycle: MapCycle
    frame_shape: tuple[int, int] | None
    float_dim: int
    float_mean: np.ndarray
    float_std: np.ndarray
    float_mirror: FloatMirror | None  # how the floats mirror, when learner.mirror_share > 0
    ms_per_action: int
    potential_weights: dict[str, float]
    run: RunConfig
    network: NetworkConfig
    buffer: BufferConfig
    learner: LearnerConfig
    collector: CollectorConfig
    trainer: TrainerConfig
    logger: LoggerConfig
    checkpoint: CheckpointConfig
    validation: ValidationConfig
    validation_entries: tuple[CycleEntry, ...]  # validation.maps, loaded once when checked
    collectors: CollectorSpec

    def new_network(self) -> IQNNetwork:
        """A fresh network of this run (the learner's, the shared copy), with the
        environment's float statistics."""
        from trackmind.agent.network_config import build_network

        shape = (self.float_dim, self.frame_shape)
        return build_network(self.network, *shape, self.float_mean, self.float_std)


def plan_run(cfg: Any) -> RunPlan:
    """Validate the whole config; ConfigError (one line, naming the key) on any problem."""
    import torch

    from trackmind.agent.exploration import build_exploration
    from trackmind.agent.network_config import network_config
    from trackmind.collectors.demos import DemosConfig
    from trackmind.game.starts import StartsConfig
    from trackmind.tracking.tracking_uri import check_tracking_uri
    from trackmind.training.module import check_cuda_graph, learner_config

    record = resolve_frame_shape(to_plain(cfg))
    top = check_schema(record, TrainConfig, "")  # top-level keys and their types
    env = top.env
    choose(GAMES, env.get("backend", "sim"), "env.backend")
    obs, rew, _ = build_managers(env, top.reward)
    frame_shape = frame_shape_of(env)
    float_dim = float_dim_of(obs)
    require(float_dim > 0, "env.observation.terms", "a `floats` group is needed by the IQN network")
    network = network_config(top.network, float_dim, frame_shape)
    exploration = build_exploration(top.exploration)
    starts = StartsConfig.from_config(top.exploration.get("starts"))
    demos = DemosConfig.from_config(top.exploration.get("demos"))
    buffer = BufferConfig.from_dict(top.buffer)
    ms_per_action = env_config(env).action_ms
    buffer.horizon_actions(ms_per_action)
    require(
        buffer.value_bound_rate is None or (rew.shaping == "collate" and rew.normalizer is None),
        "buffer.value_bound_rate",
        "needs reward.shaping=collate and reward.normalize=false (the bound reads raw rewards "
        "and the recorded potentials); set it to null",
    )
    learner = learner_config(top.learner)
    require(
        network.policy_cvar >= 1.0 or learner.munchausen_alpha == 0,
        "network.policy_cvar",
        "a risk-averse policy's target excludes Munchausen targets: set "
        "learner.munchausen_alpha=0 or network.policy_cvar=1",
    )
    pool = choose(COLLECTOR_POOLS, top.collector.get("backend"), "collector.backend")
    collector = check_schema(top.collector, load(pool.schema), "collector")
    if pool.check is not None:
        load(pool.check)(collector)  # e.g. Ray installed, its cluster answering
    run = top.run()
    trainer = check_schema(top.trainer, TrainerConfig, "trainer")
    check_cuda_graph(learner, trainer.accelerator, trainer.precision, torch.cuda.is_available())
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    check_trainer_machine(trainer, gpus)
    logger = check_schema(top.logger, LoggerConfig, "logger")
    if logger.backend == "mlflow":  # a store MLflow knows, a server that answers
        check_tracking_uri(logger.tracking_uri)
    checkpoint = check_schema(top.checkpoint, CheckpointConfig, "checkpoint")
    cycle = MapCycle.from_config(top.map.get("cycle"), "map.cycle")
    check_schema(top.map, MapConfig, "map")
    check_demos_game(demos, cycle.entries, env.get("backend", "sim"))
    validation = check_schema(top.validation, ValidationConfig, "validation")
    held_out = check_validation_maps(
        validation, [e.name for e in cycle.entries], env.get("backend", "sim")
    )
    # real game / real time: settings, maps, servers answering
    load(GAME_RUN_CHECK)(env, collector, cycle)
    stats = obs.term(FLOATS)
    # rollouts record Phi already multiplied by each term's weight (RewardManager.potentials)
    recorded = [t.name for t in rew.terms if t.is_potential and rew.shaping == "collate"]
    # the record (checkpoints, MLflow params) keeps the values as they were checked
    record.update(asdict(run), learner=asdict(learner), collector=asdict(collector))
    record.update(trainer=asdict(trainer), logger=asdict(logger), checkpoint=asdict(checkpoint))
    record.update(validation=asdict(validation))
    return RunPlan(
        cfg=record,
        cycle=cycle,
        frame_shape=frame_shape,
        float_dim=float_dim,
        float_mean=stats.mean,
        float_std=stats.std,
        float_mirror=obs.float_mirror(FLOATS) if learner.mirror_share > 0 else None,
        ms_per_action=ms_per_action,
        potential_weights={name: 1.0 for name in recorded},
        run=run,
        network=network,
        buffer=buffer,
        learner=learner,
        collector=collector,
        trainer=trainer,
        logger=logger,
        checkpoint=checkpoint,
        validation=validation,
        validation_entries=held_out,
        collectors=CollectorSpec(
            collector=collector,
            env=env,
            reward=top.reward,
            cycle=tuple(cycle.entries),
            network=network,
            exploration=exploration,
            starts=starts,
            demos=demos,
        ),
    )


def check_demos_game(demos: DemosConfig, entries: list[CycleEntry], backend: str) -> None:
    """Demonstration races need the scripted driver, which drives the sim only: a ConfigError
    naming exploration.demos.share, or map.cycle where a map's row asks for them."""
    maps = demos.enabled_on(entries)
    if not maps or backend == "sim":
        return
    every = demos.share is not None
    raise ConfigError(
        "exploration.demos.share" if every else "map.cycle",
        "demonstration races need the scripted driver, which drives the sim only "
        f"(env.backend=sim){'' if every else f'; map {maps[0]} sets demos'}; "
        "set exploration.demos.share=0",
    )
