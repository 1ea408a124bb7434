"""One training run from a validated RunPlan: wire the parts, fit, summarise.

scripts/train.py validates the Hydra config into a RunPlan (nothing starts on a bad
config) and calls `train(plan)`, which returns the objective a sweep minimises: the best
greedy race time over the reference time, averaged over the maps of the cycle (a map never
finished counts as FAIL_RATIO).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections import OrderedDict
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning as L
import torch

from trackmind.replay.buffers import make_buffers
from trackmind.sim.reference import reference_time_ms
from trackmind.training.callbacks import CollectorCallback, RaceMetricsCallback
from trackmind.training.datamodule import ReplayDataModule
from trackmind.training.factory import RunPlan, build_network_from
from trackmind.training.module import IQNLightningModule
from trackmind.training.pool import CollectorPool
from trackmind.training.race_stats import RaceStats
from trackmind.training.shared import make_shared, publish_weights

log = logging.getLogger(__name__)
FAIL_RATIO = 10.0


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} (lists stay values): config as MLflow params."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def make_logger(cfg: dict, output_dir: Path, run_name: str | None, tags: dict[str, str]):
    lg = cfg["logger"]
    if lg["backend"] == "none":
        return None
    if lg["backend"] == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(str(output_dir), name="csv")
    from lightning.pytorch.loggers import MLFlowLogger

    uri = lg["tracking_uri"]
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return MLFlowLogger(
        experiment_name=lg["experiment_name"],
        tracking_uri=uri,
        run_name=run_name,
        tags=tags,
        log_model=False,
    )


def objective(stats: RaceStats, maps: list[str]) -> float:
    """Mean over maps of the best greedy ratio (FAIL_RATIO for a map never finished)."""
    vals = []
    for m in maps:
        times = [h["time_ms"] for h in stats.history if h["map"] == m and h["time_ms"] is not None]
        ref = stats.reference_ms.get(m)
        vals.append(min(times) / ref if times and ref else FAIL_RATIO)
    return float(sum(vals) / len(vals)) if vals else FAIL_RATIO


def train(
    plan: RunPlan, output_dir: str | Path, run_name: str | None = None, tags: dict | None = None
) -> float:
    cfg = plan.cfg
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    tcfg, lcfg, ccfg = cfg["trainer"], cfg["learner"], cfg["collector"]
    torch.set_num_threads(int(tcfg["torch_threads"]))
    L.seed_everything(int(cfg.get("seed", 0)), workers=False, verbose=False)

    net = build_network_from(cfg, plan.frame_shape, plan.float_dim, plan.float_mean, plan.float_std)
    shared_net = build_network_from(
        cfg, plan.frame_shape, plan.float_dim, plan.float_mean, plan.float_std
    )
    shared = make_shared(shared_net, int(ccfg["queue_size"]))
    frame = (1, *plan.frame_shape) if plan.frame_shape is not None else None
    buffers = make_buffers(
        cfg["buffer"],
        frame,
        plan.float_dim,
        ms_per_action=plan.ms_per_action,
        seed=int(cfg.get("seed", 0)),
    )
    published: OrderedDict[int, dict] = OrderedDict()  # recent versions, for best.pt
    net_bytes = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    keep_versions = max(4, min(64, int(256e6 // max(net_bytes, 1))))  # at most ~256 MB

    def remember(version: int, online: torch.nn.Module) -> int:
        published[version] = {k: v.detach().clone() for k, v in online.state_dict().items()}
        while len(published) > keep_versions:
            published.popitem(last=False)
        return version

    module = IQNLightningModule(
        net,
        lcfg,
        n_quantiles_train=int(cfg["network"]["n_quantiles_train"]),
        n_quantiles_target=int(cfg["network"]["n_quantiles_train"]),
        frames=lambda: shared.frames.value,
        publish=lambda online: remember(publish_weights(shared, online), online),
        on_priorities=buffers.update_priorities if buffers.config.prioritized else None,
    )
    from trackmind.agent.exploration import build_exploration

    explorer = build_exploration(cfg["exploration"])
    module.epsilon_now = lambda: explorer.params(shared.frames.value).epsilon
    stats = RaceStats(
        reference_ms={e.name: reference_time_ms(e.track) for e in plan.cycle.entries},
        length_m={e.name: e.track.length_m for e in plan.cycle.entries},
    )
    pool = CollectorPool(
        cfg, shared, int(ccfg["processes"]), int(ccfg["max_restarts"]), int(cfg.get("seed", 0))
    )
    dm = ReplayDataModule(
        buffers,
        shared,
        batch_size=int(lcfg["batch_size"]),
        replay_ratio=float(lcfg["replay_ratio"]),
        gamma=module.current_gamma,
        potential_weights=plan.potential_weights,
        stats=stats,
        check_collectors=pool.check,
        val_batches=int(tcfg["limit_val_batches"]),
    )

    def keep_best(r: dict) -> None:
        """Greedy policies scatter: keep the weights that drove the best greedy race."""
        weights = published.get(int(r.get("weights_version", -1)))
        if weights is None:  # older than the versions kept: the closest we have
            weights = module.online_network.state_dict()
        race = {
            "map": r["map"],
            "race_time_ms": r["race_time"],
            "version": r.get("weights_version"),
        }
        torch.save({"network": weights, "config": cfg, "race": race}, output_dir / "best.pt")

    dm.on_best_race = keep_best
    restarts: list[dict] = []

    def record_restart(idx: int) -> None:  # evidence that buffered data survives a restart
        restarts.append(
            {"collector": idx, "buffer": len(buffers), "transitions_added": dm.transitions_added}
        )

    pool.on_restart = record_restart
    logger = make_logger(cfg, output_dir, run_name, tags or {})
    if logger is not None:
        logger.log_hyperparams(flatten({k: v for k, v in cfg.items() if k != "hydra"}))
    metrics_cb = RaceMetricsCallback(dm, float(cfg["logger"].get("log_every_s", 10)))
    max_time = tcfg.get("max_time_s")
    trainer = L.Trainer(
        accelerator=tcfg["accelerator"],
        devices=tcfg["devices"],
        precision=tcfg["precision"],
        max_steps=int(tcfg["max_steps"]),
        max_epochs=-1,
        max_time=timedelta(seconds=float(max_time)) if max_time else None,
        val_check_interval=int(tcfg["val_check_interval"]),
        check_val_every_n_epoch=None,
        limit_val_batches=int(tcfg["limit_val_batches"]),
        num_sanity_val_steps=0,
        log_every_n_steps=int(tcfg["log_every_n_steps"]),
        logger=logger if logger is not None else False,
        callbacks=[CollectorCallback(pool, shared), metrics_cb],
        enable_checkpointing=False,
        enable_progress_bar=bool(tcfg.get("progress_bar", True)),
        enable_model_summary=False,
        default_root_dir=str(output_dir),
    )
    if max_time:  # a learner starved of data still stops (Lightning's own timer acts first)
        import time

        dm.deadline = time.monotonic() + float(max_time) + 60.0
    log.info("outputs: %s", output_dir)
    if logger is not None and hasattr(logger, "run_id"):
        log.info("MLflow run %s in %s", logger.run_id, cfg["logger"].get("tracking_uri"))
    try:
        trainer.fit(module, datamodule=dm)
    finally:
        pool.stop()
    result = objective(stats, [e.name for e in plan.cycle.entries])
    ckpt = output_dir / "agent.pt"  # the final online network with the config that built it
    torch.save({"network": module.online_network.state_dict(), "config": cfg}, ckpt)
    summary = {
        "objective": result if math.isfinite(result) else None,
        "global_step": int(trainer.global_step),
        "samples_learned": int(module.samples_learned),
        "races": stats.races,
        "transitions": stats.transitions,
        "frames": int(shared.frames.value),
        "weights_published": int(shared.weights_version.value),
        "race_weights_versions": sorted(stats.weights_versions),
        "collector_restarts": pool.restarts,
        "restarts": restarts,
        "buffer_size": len(buffers),
        "transitions_added": dm.transitions_added,
        "greedy_races": stats.history,
        "last_metrics": metrics_cb.last_metrics,
        "mlflow_run_id": getattr(logger, "run_id", None),
        "pid": os.getpid(),
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    if logger is not None and hasattr(logger, "experiment"):
        logger.experiment.log_metric(logger.run_id, "objective", result)
        logger.experiment.log_artifact(logger.run_id, str(output_dir / "summary.json"))
        logger.experiment.log_artifact(logger.run_id, str(ckpt))
    return result
