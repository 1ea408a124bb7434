"""Periodic checkpoints and resume: a killed run continues where its last checkpoint left it.

A checkpoint is Lightning's own (`trainer.save_checkpoint`: networks, optimizer, loop
counters incl. the global step, the Timer's elapsed time, the DataModule's state with the
frame counter that drives every schedule) plus a `trackmind` entry: the resolved config,
the MLflow run id and the output directory, so `resume=<checkpoint | output dir | MLflow
run id>` rebuilds the same run and logs into the same MLflow run. Everything in it is a
tensor or a plain container, so it loads with `torch.load(weights_only=True)`. Files are
written to a temporary name and renamed: a kill -9 mid-write leaves the previous one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch

from trackmind.errors import ConfigError, first_line, require

log = logging.getLogger(__name__)

LAST = "last.ckpt"
BUFFER = "replay.pt"


def read_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint safely (weights_only); ConfigError naming the file if unusable."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("resume", f"{p}: checkpoint not found")
    try:
        ckpt = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # a truncated/garbled file can fail in any of torch's layers
        first = first_line(e)[:120]
        raise ConfigError("resume", f"{p}: not a readable checkpoint ({first})") from None
    ok = isinstance(ckpt, dict) and isinstance(ckpt.get("trackmind"), dict)
    ok = ok and "state_dict" in ckpt and isinstance(ckpt["trackmind"].get("config"), dict)
    require(ok, "resume", f"{p}: not a trackmind training checkpoint (no trackmind/state_dict)")
    return ckpt


def find_checkpoint(resume: str, tracking_uri: str | None = None) -> Path:
    """`resume` as a checkpoint file, a run's output directory, or an MLflow run id."""
    p = Path(resume)
    if p.is_file():
        return p
    if p.is_dir():
        for cand in (p / "checkpoints" / LAST, p / LAST):
            if cand.is_file():
                return cand
        raise ConfigError("resume", f"{p}: no checkpoints/{LAST} in this directory")
    if tracking_uri and resume.isalnum() and len(resume) >= 8:
        return _checkpoint_of_mlflow_run(resume, tracking_uri)
    raise ConfigError("resume", f"{resume!r} is not a checkpoint file, output dir or MLflow run id")


def _checkpoint_of_mlflow_run(run_id: str, tracking_uri: str) -> Path:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise ConfigError("resume", f"no MLflow run {run_id} in {tracking_uri}") from None
    out = run.data.tags.get("output_dir")
    if out and (Path(out) / "checkpoints" / LAST).is_file():
        return Path(out) / "checkpoints" / LAST
    try:  # the output dir is gone: the copy logged as an artifact
        local = client.download_artifacts(run_id, f"checkpoints/{LAST}")
    except (MlflowException, OSError):
        raise ConfigError("resume", f"MLflow run {run_id} has no checkpoint to resume") from None
    return Path(local)


def check_network_matches(ckpt_state: Mapping[str, torch.Tensor], module: torch.nn.Module) -> None:
    """A checkpoint of another network shape is refused with the first differing tensor."""
    own = module.state_dict()
    optional = "acting_network."  # the acting average is made from the online weights if absent
    for k, v in own.items():
        if k not in ckpt_state and k.startswith(optional):
            continue
        if k not in ckpt_state:
            raise ConfigError("resume", f"checkpoint has no {k}: another network architecture")
        if tuple(ckpt_state[k].shape) != tuple(v.shape):
            raise ConfigError(
                "resume",
                f"{k} is {list(ckpt_state[k].shape)} in the checkpoint but "
                f"{list(v.shape)} in this network config",
            )
    extra = [k for k in ckpt_state if k not in own and not k.startswith(optional)]
    if extra:
        raise ConfigError("resume", f"checkpoint has {extra[0]}, unknown to this network config")


def merge_resume_config(saved: dict, composed: dict, overrides: list[str]) -> dict:
    """The saved config, with what this command line overrides replaced from `composed`.

    `key.sub=value` copies that key; `group=option` copies the whole group. Options of the
    global groups (debug, experiment, hparams_search) would rewrite many keys at once and
    are refused: a resumed run is the same run.
    """
    import copy

    out = copy.deepcopy(saved)
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key == "resume" or key.startswith("hydra"):
            continue
        require(
            key not in ("debug", "experiment", "hparams_search"),
            "resume",
            f"{o!r} cannot change a resumed run; override single keys (key=value)",
        )
        parts = key.split(".")
        src: Any = composed
        for p_ in parts:
            src = src.get(p_) if isinstance(src, Mapping) else None
        dst = out
        for p_ in parts[:-1]:
            dst = dst.setdefault(p_, {})
        if o.startswith("~"):
            dst.pop(parts[-1], None)
        else:
            dst[parts[-1]] = copy.deepcopy(src)
    return out


def is_interruption(exception: BaseException) -> bool:
    """True for a stop asked from outside: Ctrl-C (KeyboardInterrupt) or SIGTERM."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    return isinstance(exception, KeyboardInterrupt | SIGTERMException)


class CheckpointCallback(L.Callback):
    """Saves `checkpoints/last.ckpt` every `every_s` seconds and at the end of fit."""

    def __init__(
        self,
        output_dir: Path,
        cfg: dict,
        every_s: float | None,
        save_buffer: bool = False,
        log_to_mlflow: bool = True,
        buffers: Any = None,
    ) -> None:
        self.dir = Path(output_dir) / "checkpoints"
        self.cfg = cfg
        self.every_s = every_s
        self.save_buffer = save_buffer
        self.log_to_mlflow = log_to_mlflow
        self.buffers = buffers
        self.saved = 0
        self.interrupted = False  # Ctrl-C or SIGTERM reached fit (on_exception)
        self.last_path: Path | None = None
        self._last = time.monotonic()

    @property
    def state_key(self) -> str:
        return "trackmind_checkpoint"

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self.every_s is not None and time.monotonic() - self._last >= self.every_s:
            self.save(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.save(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """Ctrl-C or SIGTERM (how schedulers stop jobs): keep what was learned since the
        last periodic checkpoint. Other errors keep the last good checkpoint as it is."""
        if is_interruption(exception):
            self.interrupted = True
            self.save(trainer)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        logger = trainer.logger
        checkpoint["trackmind"] = {
            "config": self.cfg,
            "output_dir": str(self.dir.parent),
            "mlflow_run_id": getattr(logger, "run_id", None) if logger else None,
            "buffer_file": BUFFER if self.save_buffer else None,
            "saved_unix_s": time.time(),
        }

    def save(self, trainer) -> Path:
        """Write last.ckpt atomically (and the replay buffer when asked)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.save_buffer and self.buffers is not None:
            self.buffers.save(self.dir / BUFFER)  # atomic by itself
        path = self.dir / LAST
        tmp = self.dir / (LAST + ".tmp")
        trainer.save_checkpoint(str(tmp), weights_only=False)
        os.replace(tmp, path)
        self.saved += 1
        self.last_path = path
        self._last = time.monotonic()
        logger = trainer.logger
        if self.log_to_mlflow and logger is not None and hasattr(logger, "run_id"):
            try:
                logger.experiment.log_artifact(logger.run_id, str(path), "checkpoints")
            except Exception as e:  # a busy store must not stop training
                log.warning("could not log the checkpoint to MLflow: %s", e)
        log.info("checkpoint %s (step %d)", path, trainer.global_step)
        return path
