"""Train an IQN agent: python scripts/train.py [group=option ...] [key=value ...].

    python scripts/train.py                          # defaults: starter map, iqn_cpu, sim
    python scripts/train.py debug=smoke              # the whole loop in under a minute
    python scripts/train.py map=hairpins learner.lr.points='[[0,5e-4]]'
    python scripts/train.py -m learner.replay_ratio=16,32   # a sweep, one MLflow run each

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
    from trackmind.training.factory import plan_run
    from trackmind.training.run import train

    try:
        plan = plan_run(cfg)
    except (ConfigError, MapError) as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    hc = HydraConfig.get()
    overrides = list(hc.overrides.task)
    # the run name says what differs between runs; where results are stored does not
    named = [o for o in overrides if not o.lstrip("+~").startswith(("logger.", "hydra."))]
    run_name = cfg.get("run_name") or (",".join(named) if named else "defaults")
    tags = {"overrides": " ".join(overrides) or "(defaults)", "hydra_output": hc.runtime.output_dir}
    if hc.mode is not None and hc.mode.name == "MULTIRUN":  # a sweep: group its jobs
        tags.update(sweep_dir=str(hc.sweep.dir), sweep_job=str(hc.job.num))
    return train(plan, hc.runtime.output_dir, run_name=run_name[:250], tags=tags)


if __name__ == "__main__":
    main()
