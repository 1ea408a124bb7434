"""The logger group's schema (conf/logger): where a run's metrics and record go."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from trackmind.errors import require


@dataclass
class LoggerConfig:
    """Where metrics go (conf/logger): MLflow, CSV files or nowhere. The defaults are
    conf/logger/mlflow.yaml's, which the other options extend."""

    backend: str = MISSING
    tracking_uri: str | None = MISSING
    experiment_name: str = MISSING
    artifact_location: str | None = MISSING  # null: <sqlite db dir>/mlartifacts
    log_every_s: float = MISSING
    system_metrics_every_s: float = MISSING  # 0: off
    media_every_s: float = MISSING  # draw new best greedy races (plot + GIF) at most this often
    media_share: float = MISSING  # ... for at most this share of that time

    def __post_init__(self) -> None:
        require(
            self.backend in ("mlflow", "csv", "none"),
            "logger.backend",
            f"must be mlflow, csv or none, got {self.backend!r}",
        )
        require(
            self.backend != "mlflow" or bool(self.tracking_uri),
            "logger.tracking_uri",
            "MLflow needs a tracking URI (sqlite:///outputs/mlflow.db or http://127.0.0.1:5000)",
        )
        require(
            self.media_every_s > 0,
            "logger.media_every_s",
            f"must be > 0, got {self.media_every_s}",
        )
        require(
            0 < self.media_share <= 1,
            "logger.media_share",
            f"must be in (0, 1], got {self.media_share}",
        )
        require(self.log_every_s > 0, "logger.log_every_s", f"must be > 0, got {self.log_every_s}")
        require(
            self.system_metrics_every_s >= 0,
            "logger.system_metrics_every_s",
            f"must be >= 0, got {self.system_metrics_every_s}",
        )
