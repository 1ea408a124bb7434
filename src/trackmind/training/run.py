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
from lightning.pytorch.utilities.exceptions import SIGTERMException

from trackmind.logs import tidy_library_output
from trackmind.replay.buffers import make_buffers
from trackmind.sim.reference import reference_time_ms
from trackmind.training.callbacks import CollectorCallback, RaceMetricsCallback, TrialPruning
from trackmind.training.checkpoint import (
    CheckpointCallback,
    check_network_matches,
    read_checkpoint,
)
from trackmind.training.datamodule import ReplayDataModule
from trackmind.training.factory import RunPlan, build_network_from
from trackmind.training.module import IQNLightningModule
from trackmind.training.pool import make_collector_pool
from trackmind.training.progress import RaceProgressBar
from trackmind.training.race_media import BestRaceMedia
from trackmind.training.race_stats import RaceStats
from trackmind.training.shared import make_shared, publish_weights

log = logging.getLogger(__name__)
# the experiment tag that opens it in the MLflow UI's "Model training" view (not GenAI)
ML_VIEW = ("mlflow.experimentKind", "custom_model_development")
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


def make_logger(
    cfg: dict,
    output_dir: Path,
    run_name: str | None,
    tags: dict[str, str],
    run_id: str | None = None,
):
    """The configured Lightning logger; with `run_id`, the MLflow run a resume continues."""
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
    artifacts = lg.get("artifact_location") or default_artifact_location(uri)
    if run_id is None:
        ensure_experiment(uri, lg["experiment_name"], artifacts)
    return MLFlowLogger(
        experiment_name=lg["experiment_name"],
        tracking_uri=uri,
        run_name=run_name,
        tags=None if run_id else tags,
        log_model=False,
        run_id=run_id,
        artifact_location=artifacts,
    )


def ensure_experiment(tracking_uri: str, name: str, artifact_location: str | None) -> str:
    """The experiment's id, creating it if need be (tagged to open as training runs).

    Jobs of a parallel launcher start together: both may find no experiment and create
    it; the loser's RESOURCE_ALREADY_EXISTS means it is there, so it is looked up again.
    The view tag is given at creation, so concurrent jobs never write it at once; an
    experiment made elsewhere without it gets it once, and losing that (cosmetic) race to
    another job is no error.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(
                name, artifact_location=artifact_location, tags=dict([ML_VIEW])
            )
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        exp = client.get_experiment_by_name(name)
    if exp.tags.get(ML_VIEW[0]) != ML_VIEW[1]:  # open in the UI's "Model training" view
        try:
            client.set_experiment_tag(exp.experiment_id, *ML_VIEW)
        except MlflowException:
            if client.get_experiment(exp.experiment_id).tags.get(ML_VIEW[0]) != ML_VIEW[1]:
                raise
    return exp.experiment_id


def default_artifact_location(tracking_uri: str) -> str | None:
    """Artifacts beside a SQLite store (<db dir>/mlartifacts), not in the working directory.

    Used only when the experiment is created; None lets a tracking server decide.
    """
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = Path(tracking_uri[len("sqlite:///") :])
    return str((db.parent / "mlartifacts").resolve())


def log_config_artifact(logger: Any, cfg: dict, output_dir: Path) -> None:
    """The resolved config as config.yaml beside the params (what re-runs it exactly)."""
    if not hasattr(logger, "run_id"):
        return
    from omegaconf import OmegaConf

    path = output_dir / "config.yaml"
    path.write_text(OmegaConf.to_yaml({k: v for k, v in cfg.items() if k != "hydra"}))
    logger.experiment.log_artifact(logger.run_id, str(path))


def start_system_metrics(logger: Any, lcfg: dict):
    """MLflow's CPU/memory/disk/network (and GPU) sampler for this run; None if unavailable."""
    every = lcfg.get("system_metrics_every_s", 10)
    if not every:
        return None
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        mon = SystemMetricsMonitor(
            logger.run_id,
            sampling_interval=float(every),
            resume_logging=True,
            tracking_uri=lcfg["tracking_uri"],
        )
        mon.start()
        return mon
    except Exception as e:  # psutil missing or the store refuses: training goes on
        log.warning("no system metrics: %s", e)
        return None


def restore_buffers(buffers: Any, path: Path) -> None:
    """The replay buffer saved with the checkpoint; a missing/corrupt one is only a warning."""
    try:
        buffers.load(path)
        log.info("replay buffer restored from %s (%d transitions)", path, len(buffers))
    except (OSError, ValueError) as e:
        log.warning("replay buffer not restored (%s): it refills from the collectors", e)


def objective(stats: RaceStats, maps: list[str]) -> float:
    """Mean over maps of the best greedy ratio (FAIL_RATIO for a map never finished)."""
    vals = []
    for m in maps:
        times = [h["time_ms"] for h in stats.history if h["map"] == m and h["time_ms"] is not None]
        ref = stats.reference_ms.get(m)
        vals.append(min(times) / ref if times and ref else FAIL_RATIO)
    return float(sum(vals) / len(vals)) if vals else FAIL_RATIO


def train(
    plan: RunPlan,
    output_dir: str | Path,
    run_name: str | None = None,
    tags: dict | None = None,
    resume: Path | None = None,
) -> float:
    """Fit, summarise, return the objective; `resume`: a checkpoint of this run to continue."""
    tidy_library_output()
    cfg = plan.cfg
    ckpt = read_checkpoint(resume) if resume is not None else None
    saved = ckpt["trackmind"] if ckpt is not None else None
    if saved is not None and Path(saved["output_dir"]).is_dir():
        output_dir = saved["output_dir"]  # a resumed run keeps writing where it started
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
    # a greedy race is driven by the version it started with and arrives a race later:
    # keep minutes of versions (~256 MB at most) so that best.pt holds exactly those weights
    keep_versions = max(4, min(1024, int(256e6 // max(net_bytes, 1))))

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
    if ckpt is not None:  # refuse another architecture before any process starts
        check_network_matches(ckpt["state_dict"], module)
        del ckpt
    from trackmind.agent.exploration import build_exploration

    explorer = build_exploration(cfg["exploration"])
    module.epsilon_now = lambda: explorer.params(shared.frames.value).epsilon
    stats = RaceStats(
        reference_ms={e.name: reference_time_ms(e.track) for e in plan.cycle.entries},
        length_m={e.name: e.track.length_m for e in plan.cycle.entries},
    )
    pool = make_collector_pool(
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
        version = int(r.get("weights_version", -1))
        weights = published.get(version)
        exact = weights is not None  # the weights that drove the race
        if not exact:  # older than the versions kept: the closest we have
            log.warning(
                "best.pt: weights version %d of the best race is no longer kept; "
                "saving the current weights instead",
                version,
            )
            weights = module.acting.state_dict()
        race = {
            "map": r["map"],
            "race_time_ms": r["race_time"],
            "version": version,
            "exact": exact,
        }
        torch.save({"network": weights, "config": cfg, "race": race}, output_dir / "best.pt")
        media.record(r)

    media = BestRaceMedia(
        output_dir,
        {e.name: e.track for e in plan.cycle.entries},
        float(cfg["logger"].get("media_every_s", 120)),
    )
    dm.on_best_race = keep_best
    restarts: list[dict] = []

    def record_restart(idx: int) -> None:  # evidence that buffered data survives a restart
        restarts.append(
            {"collector": idx, "buffer": len(buffers), "transitions_added": dm.transitions_added}
        )

    pool.on_restart = record_restart
    tags = dict(tags or {}, output_dir=str(output_dir))
    run_id = saved.get("mlflow_run_id") if saved is not None else None
    if saved is not None and cfg["logger"]["backend"] == "mlflow" and not run_id:
        log.warning("the checkpoint has no MLflow run: this session starts a new one")
    logger = make_logger(cfg, output_dir, run_name, tags, run_id=run_id)
    if logger is not None and saved is None:
        logger.log_hyperparams(flatten({k: v for k, v in cfg.items() if k != "hydra"}))
        log_config_artifact(logger, cfg, output_dir)
    if saved is not None and saved.get("buffer_file"):
        restore_buffers(buffers, Path(resume).parent / saved["buffer_file"])
    ck = cfg["checkpoint"]  # filled in and checked by plan_run (schema.CheckpointConfig)
    ckpt_cb = CheckpointCallback(
        output_dir, cfg, ck["every_s"], ck["save_buffer"], ck["log_to_mlflow"], buffers
    )
    metrics_cb = RaceMetricsCallback(dm, float(cfg["logger"].get("log_every_s", 10)))
    maps = [e.name for e in plan.cycle.entries]
    pruning = TrialPruning(lambda: objective(stats, maps))  # only acts in an Optuna sweep
    callbacks = [CollectorCallback(pool, shared), metrics_cb, ckpt_cb, media, pruning]
    progress = bool(tcfg.get("progress_bar", True))
    if progress:
        callbacks.append(RaceProgressBar(metrics_cb, budget_s=tcfg.get("max_time_s")))
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
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=progress,
        enable_model_summary=False,
        default_root_dir=str(output_dir),
    )
    if max_time:  # a learner starved of data still stops (Lightning's own timer acts first)
        import time

        dm.deadline = time.monotonic() + float(max_time) + 60.0
    log.info("outputs: %s (checkpoints in %s)", output_dir, ckpt_cb.dir)
    sysmon = None
    if logger is not None and hasattr(logger, "run_id"):
        log.info(
            "MLflow run %s in %s; in the UI (make mlflow-ui): "
            "http://127.0.0.1:5000/#/experiments/%s/runs/%s",
            logger.run_id,
            cfg["logger"]["tracking_uri"],
            logger.experiment_id,
            logger.run_id,
        )
        sysmon = start_system_metrics(logger, cfg["logger"])
    if resume is not None:
        log.info("resuming from %s", resume)
    stop_signal = None  # "SIGINT" or "SIGTERM" when the run was stopped from outside
    try:
        trainer.fit(
            module,
            datamodule=dm,
            ckpt_path=str(resume) if resume is not None else None,
            weights_only=True if resume is not None else None,
        )
    except (KeyboardInterrupt, SystemExit, SIGTERMException) as e:
        # Lightning saves last.ckpt (CheckpointCallback.on_exception), then turns Ctrl-C into
        # SystemExit(1) and re-raises SIGTERM as SIGTERMException: finish the run's records
        if isinstance(e, SystemExit) and not ckpt_cb.interrupted:
            raise
        stop_signal = "SIGTERM" if isinstance(e, SIGTERMException) else "SIGINT"
        log.warning("%s: stopping; checkpoint, agent.pt and summary.json are kept", stop_signal)
    finally:
        pool.stop()
        if sysmon is not None:
            sysmon.finish()
    result = objective(stats, maps)
    if pruning.pruned_at is not None:
        log.info("Optuna pruned this trial after %d minute(s)", pruning.pruned_at)
    ckpt = output_dir / "agent.pt"  # the final online network with the config that built it
    torch.save({"network": module.acting.state_dict(), "config": cfg}, ckpt)
    summary = {
        "objective": result if math.isfinite(result) else None,
        "global_step": int(trainer.global_step),
        "samples_learned": int(module.samples_learned),
        "resumed_from": str(resume) if resume is not None else None,
        "checkpoint": str(ckpt_cb.last_path) if ckpt_cb.last_path else None,
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
        "stopped_by": stop_signal,
        "pruned_at_minute": pruning.pruned_at,
        "pid": os.getpid(),
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    if logger is not None and hasattr(logger, "run_id"):  # MLflow (CSV has no run)
        logger.experiment.log_metric(logger.run_id, "objective", result)
        logger.experiment.log_artifact(logger.run_id, str(output_dir / "summary.json"))
        logger.experiment.log_artifact(logger.run_id, str(ckpt))
        if stop_signal is not None:  # Lightning marked it FAILED; it was stopped, not broken
            logger.experiment.set_terminated(logger.run_id, "KILLED")
    if stop_signal is not None:
        raise SystemExit(130 if stop_signal == "SIGINT" else 143)
    return result
