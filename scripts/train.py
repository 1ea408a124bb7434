"""Train an IQN agent: python scripts/train.py [group=option ...] [key=value ...].

    python scripts/train.py                          # defaults: starter map, iqn_cpu, sim
    python scripts/train.py debug=smoke              # the whole loop in under a minute
    python scripts/train.py map=hairpins learner.lr.points='[[0,5e-4]]'
    python scripts/train.py -m learner.replay_ratio=16,32   # a sweep, one MLflow run each
    python scripts/train.py -m hparams_search=optuna        # an Optuna search
    python scripts/train.py resume=outputs/2026-11-22/10-00-00   # continue a run (or a
                                                 # .ckpt file, or an MLflow run id)

The config is validated before any process starts: a bad value prints one line naming
the key and exits with status 2. Returns the objective (mean best greedy race time over the
reference time, lower is better) for sweepers.
"""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from trackmind.errors import ConfigError
from trackmind.sim.track import MapError

log = logging.getLogger("trackmind")


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def main(cfg: DictConfig) -> float:
    from trackmind.training.factory import plan_run, to_plain
    from trackmind.training.run import train

    hc = HydraConfig.get()
    overrides = list(hc.overrides.task)
    resume = None
    try:
        if cfg.get("resume"):
            resume, cfg = resumed_config(to_plain(cfg), overrides)
        plan = plan_run(cfg)
    except (ConfigError, MapError) as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    # the run name says what differs between runs; where results are stored does not
    named = [o for o in overrides if not o.lstrip("+~").startswith(("logger.", "hydra."))]
    run_name = cfg.get("run_name") or (",".join(named) if named else "defaults")
    tags = {"overrides": " ".join(overrides) or "(defaults)", "hydra_output": hc.runtime.output_dir}
    if hc.mode is not None and hc.mode.name == "MULTIRUN":  # a sweep: group its jobs
        tags.update(sweep_dir=str(hc.sweep.dir), sweep_job=str(hc.job.num))
    try:
        return train(plan, hc.runtime.output_dir, run_name[:250], tags=tags, resume=resume)
    except ConfigError as e:  # found once the parts exist (e.g. a checkpoint's network shape)
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)


def resumed_config(composed: dict, overrides: list[str]):
    """(checkpoint path, config): the saved run's config with this command's key overrides."""
    from trackmind.training.checkpoint import find_checkpoint, merge_resume_config, read_checkpoint

    path = find_checkpoint(str(composed["resume"]), composed["logger"].get("tracking_uri"))
    saved = read_checkpoint(path)["trackmind"]["config"]
    cfg = merge_resume_config(saved, composed, overrides)
    cfg["resume"] = str(path)
    return path, cfg


if __name__ == "__main__":
    main()
