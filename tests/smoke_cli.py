"""Command lines of scripts/train.py with the smoke settings, shared by the end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


def wait_for_log(proc: subprocess.Popen, log: Path, text: str, timeout_s: float = 90) -> None:
    """Block until the run's `log` file holds `text`: the run's own word that a stage was
    reached, rather than a fixed sleep that a busy machine can outlast."""
    deadline = time.monotonic() + timeout_s
    while text not in (log.read_text() if log.is_file() else ""):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{log.name} never said {text!r}"
        time.sleep(0.2)
