"""A training run's MLflow record: the run (new or resumed), its params, config, system
metrics, and how it ends (objective, summary and agent artifacts, KILLED when stopped).

Lightning's MLFlowLogger writes the metrics; these helpers do what it does not: an
experiment that opens in the UI's "Model training" view, artifacts beside a SQLite store,
the resolved config as an artifact, and the end of a run stopped by a signal.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from trackmind.tracking.logger_config import LoggerConfig

log = logging.getLogger(__name__)
# the experiment tag that opens it in the MLflow UI's "Model training" view (not GenAI)
ML_VIEW = ("mlflow.experimentKind", "custom_model_development")


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
    lg: LoggerConfig,
    output_dir: Path,
    run_name: str | None,
    tags: dict[str, str],
    run_id: str | None = None,
):
    """The configured Lightning logger; with `run_id`, the MLflow run a resume continues."""
    if lg.backend == "none":
        return None
    if lg.backend == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(str(output_dir), name="csv")
    from lightning.pytorch.loggers import MLFlowLogger

    uri = str(lg.tracking_uri)
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        Path(uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    artifacts = lg.artifact_location or default_artifact_location(uri)
    if run_id is None:
        ensure_experiment(uri, lg.experiment_name, artifacts)
    return MLFlowLogger(
        experiment_name=lg.experiment_name,
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


def start_system_metrics(logger: Any, lg: LoggerConfig):
    """MLflow's CPU/memory/disk/network (and GPU) sampler for this run; None if unavailable."""
    every = lg.system_metrics_every_s
    if not every:
        return None
    try:
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        mon = SystemMetricsMonitor(
            logger.run_id,
            sampling_interval=float(every),
            resume_logging=True,
            tracking_uri=lg.tracking_uri,
        )
        mon.start()
        return mon
    except Exception as e:  # psutil missing or the store refuses: training goes on
        log.warning("no system metrics: %s", e)
        return None


def open_run(
    lg: LoggerConfig,
    cfg: dict,
    output_dir: Path,
    run_name: str | None,
    tags: dict,
    saved: dict | None,
):
    """The run's logger: a new MLflow run with `cfg` (the run's config, as recorded) for
    params and artifact, or the run a resume continues."""
    run_id = saved.get("mlflow_run_id") if saved is not None else None
    if saved is not None and lg.backend == "mlflow" and not run_id:
        log.warning("the checkpoint has no MLflow run: this session starts a new one")
    logger = make_logger(lg, output_dir, run_name, tags, run_id=run_id)
    if logger is not None and saved is None:
        logger.log_hyperparams(flatten({k: v for k, v in cfg.items() if k != "hydra"}))
        log_config_artifact(logger, cfg, output_dir)
    if is_mlflow(logger):
        log.info(
            "MLflow run %s in %s; in the UI (make mlflow-ui): "
            "http://127.0.0.1:5000/#/experiments/%s/runs/%s",
            logger.run_id,
            lg.tracking_uri,
            logger.experiment_id,
            logger.run_id,
        )
    return logger


def is_mlflow(logger: Any) -> bool:
    """An MLflow logger (a CSV logger or none has no run to write to)."""
    return logger is not None and hasattr(logger, "run_id")


def close_run(logger: Any, objective: float, files: list[Path], stopped: bool) -> None:
    """The objective and the run's files into its record; KILLED when stopped by a signal
    (Lightning marked it FAILED: it was stopped, not broken)."""
    if not is_mlflow(logger):
        return
    logger.experiment.log_metric(logger.run_id, "objective", objective)
    for path in files:
        logger.experiment.log_artifact(logger.run_id, str(path))
    if stopped:
        logger.experiment.set_terminated(logger.run_id, "KILLED")
