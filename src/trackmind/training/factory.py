"""From the composed config to the parts of a run, validated before anything starts.

`plan_run` checks every group (env and reward terms, network against the environment's
frames and floats, exploration, buffer, learner, collector, trainer, logger, map cycle)
and returns a RunPlan; a mistake raises one ConfigError naming the key. The collectors
rebuild their own parts from the same resolved dict with `build_collector_parts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from trackmind.backends import COLLECTOR_POOLS, GAME_RUN_CHECK, GAMES, choose, load
from trackmind.env.build import (
    build_managers,
    env_config,
    float_dim_of,
    frame_shape_of,
    make_race,
)
from trackmind.env.map_cycle import MapCycle
from trackmind.env.observations import FLOATS
from trackmind.errors import check_known_keys, check_schema, require
from trackmind.replay.config import BufferConfig
from trackmind.training.schema import (
    CheckpointConfig,
    CollectorConfig,
    LoggerConfig,
    MapConfig,
    RunConfig,
    TrainerConfig,
    check_trainer_machine,
)

if TYPE_CHECKING:
    from trackmind.agent.network_config import NetworkConfig
    from trackmind.training.module import LearnerConfig

TOP_KEYS = {
    "map",
    "network",
    "reward",
    "exploration",
    "env",
    "collector",
    "buffer",
    "learner",
    "trainer",
    "logger",
    "seed",
    "run_name",
    "output_dir",
    "debug",
    "resume",
    "hparams_search",
    "experiment",
    "checkpoint",
    "hydra",
}


def to_plain(cfg: Any) -> dict:
    """A resolved plain dict (what spawned processes receive)."""
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


@dataclass
class RunPlan:
    """Everything the learner needs to know before it starts processes.

    `cfg` is the checked config as plain data (what collector processes receive and a
    checkpoint saves); the typed groups are the same values, validated once, that the
    learner's builders take.
    """

    cfg: dict
    cycle: MapCycle
    frame_shape: tuple[int, int] | None
    float_dim: int
    float_mean: np.ndarray
    float_std: np.ndarray
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


def plan_run(cfg: Any) -> RunPlan:
    """Validate the whole config; ConfigError (one line, naming the key) on any problem."""
    import torch

    from trackmind.agent.exploration import build_exploration
    from trackmind.agent.network_config import network_config
    from trackmind.game.starts import StartsConfig
    from trackmind.tracking.tracking_uri import check_tracking_uri
    from trackmind.training.module import check_cuda_graph, learner_config

    cfg = resolve_frame_shape(to_plain(cfg))
    check_known_keys(cfg, TOP_KEYS, "config")
    for group in ("map", "network", "reward", "exploration", "env", "collector", "buffer"):
        require(isinstance(cfg.get(group), Mapping), group, "missing config group")
    for group in ("learner", "trainer", "logger"):
        require(isinstance(cfg.get(group), Mapping), group, "missing config group")
    env = cfg["env"]
    choose(GAMES, env.get("backend", "sim"), "env.backend")
    obs, rew, _ = build_managers(env, cfg["reward"])
    frame_shape = frame_shape_of(env)
    float_dim = float_dim_of(obs)
    require(float_dim > 0, "env.observation.terms", "a `floats` group is needed by the IQN network")
    network = network_config(cfg["network"], float_dim, frame_shape)
    build_exploration(cfg["exploration"])
    StartsConfig.from_config(cfg["exploration"].get("starts"))
    buffer = BufferConfig.from_dict(cfg["buffer"])
    ms_per_action = env_config(env).action_ms
    buffer.horizon_actions(ms_per_action)
    learner = learner_config(cfg["learner"])
    cfg["learner"] = asdict(learner)
    pool = choose(COLLECTOR_POOLS, cfg["collector"].get("backend"), "collector.backend")
    collector = check_schema(cfg["collector"], load(pool.schema), "collector")
    cfg["collector"] = asdict(collector)
    if pool.check is not None:
        load(pool.check)(cfg["collector"])  # e.g. Ray installed, its cluster answering
    # run-level groups: structured schemas (types, unknown keys, ranges), values normalised
    run_keys = {k: cfg[k] for k in RunConfig.__dataclass_fields__ if k in cfg}
    run = check_schema(run_keys, RunConfig, "")
    cfg.update(asdict(run))
    trainer = check_schema(cfg["trainer"], TrainerConfig, "trainer")
    cfg["trainer"] = asdict(trainer)
    check_cuda_graph(learner, trainer.accelerator, trainer.precision, torch.cuda.is_available())
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    check_trainer_machine(cfg["trainer"], gpus)
    logger = check_schema(cfg["logger"], LoggerConfig, "logger")
    cfg["logger"] = asdict(logger)
    if logger.backend == "mlflow":  # a store MLflow knows, a server that answers
        check_tracking_uri(logger.tracking_uri)
    checkpoint = check_schema(cfg.get("checkpoint"), CheckpointConfig, "checkpoint")
    cfg["checkpoint"] = asdict(checkpoint)
    cycle = MapCycle.from_config(cfg["map"].get("cycle"), "map.cycle")
    check_schema(cfg["map"], MapConfig, "map")
    load(GAME_RUN_CHECK)(cfg, cycle)  # real game / real time: settings, maps, servers answering
    stats = obs.term(FLOATS)
    # rollouts record Phi already multiplied by each term's weight (RewardManager.potentials)
    recorded = [t.name for t in rew.terms if t.is_potential and rew.shaping == "collate"]
    return RunPlan(
        cfg=cfg,
        cycle=cycle,
        frame_shape=frame_shape,
        float_dim=float_dim,
        float_mean=stats.mean,
        float_std=stats.std,
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
    )


def build_network_from(cfg: dict, frame_shape, float_dim: int, mean, std):
    from trackmind.agent.network_config import build_network

    return build_network(cfg["network"], float_dim, frame_shape, float_mean=mean, float_std=std)


def build_collector_parts(cfg: dict, n_cars: int, offset: int = 0):
    """(VecRace, MapCycle, network) for one collector; the cycle starts `offset` races in."""
    cfg = resolve_frame_shape(cfg)
    cycle = MapCycle.from_config(cfg["map"]["cycle"], "map.cycle")
    for _ in range(offset * n_cars):
        cycle.next()
    race = make_race(
        cfg["env"],
        cfg["reward"],
        n_cars=n_cars,
        maps=cycle.entries[0].track,
        instance=offset,  # a real game per collector: TMInterface server <prefix><offset>
        challenges=cycle.challenges,
    )
    stats = race.observation.term(FLOATS)
    net = build_network_from(
        cfg, frame_shape_of(cfg["env"]), float_dim_of(race.observation), stats.mean, stats.std
    )
    return race, cycle, net
