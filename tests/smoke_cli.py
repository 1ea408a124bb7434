"""Command lines of scripts/train.py with the smoke settings, shared by the end-to-end tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "scripts" / "train.py"


def smoke_args(tmp: Path, *extra: str, run: str = "run") -> list[str]:
    """train.py with debug=smoke, its outputs and SQLite MLflow store under `tmp`."""
    return [
        sys.executable,
        str(TRAIN),
        "debug=smoke",
        f"hydra.run.dir={tmp / run}",
        f"logger.tracking_uri=sqlite:///{tmp / 'mlflow.db'}",
        *extra,
    ]


def resume_args(tmp: Path, target: str, *extra: str) -> list[str]:
    """train.py resume=<target> (no debug=smoke: a resumed run keeps its saved config)."""
    return [
        sys.executable,
        str(TRAIN),
        f"resume={target}",
        f"hydra.run.dir={tmp / 'resumed'}",
        f"logger.tracking_uri=sqlite:///{tmp / 'mlflow.db'}",
        *extra,
    ]


def unbuffered_env() -> dict:
    """The environment with unbuffered output, so a killed run's last lines are kept."""
    return {**os.environ, "PYTHONUNBUFFERED": "1"}
