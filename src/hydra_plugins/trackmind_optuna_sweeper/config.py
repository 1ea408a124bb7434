"""The sweeper's structured config, registered as `hydra/sweeper: trackmind_optuna`."""

# no `from __future__ import annotations`: Hydra's plugin scan runs this module before it is
# in sys.modules, where dataclasses would look up string annotations
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class SamplerConf:
    name: str = "tpe"  # tpe | random
    # a continued study draws from seed + the number of trials already in it
    seed: int | None = None
    n_startup_trials: int = 10  # tpe: random trials before TPE models the objective


@dataclass
class PrunerConf:
    name: str = "none"  # none | median | successive_halving (needs trials that report)
    # median: prune below the median of earlier trials at the same step
    n_startup_trials: int = 5  # no pruning until this many trials have finished
    n_warmup_steps: int = 0  # no pruning of a trial before this step
    interval_steps: int = 1
    # successive_halving
    min_resource: Any = "auto"
    reduction_factor: int = 4
    min_early_stopping_rate: int = 0


@dataclass
class TrackmindOptunaSweeperConf:
    _target_: str = "hydra_plugins.trackmind_optuna_sweeper.optuna_sweeper.TrackmindOptunaSweeper"
    direction: str = "minimize"  # minimize | maximize
    # an Optuna storage URL (sqlite:///outputs/optuna.db, a relative path is taken from the
    # working directory); null: in memory, or <sweep dir>/optuna.db when a pruner is set
    storage: str | None = None
    study_name: str | None = None  # with a storage: the study to create or continue
    n_trials: int = 20  # trials to run in this invocation (a continued study adds these)
    n_jobs: int = 1  # trials asked and launched together as one batch of the launcher
    sampler: SamplerConf = field(default_factory=SamplerConf)
    pruner: PrunerConf = field(default_factory=PrunerConf)
    # key: search expression (choice(...), interval(a, b), tag(log, interval(a, b)),
    # range(a, b, step)) or a fixed value
    params: dict[str, Any] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper",
    name="trackmind_optuna",
    node=TrackmindOptunaSweeperConf,
    provider="trackmind",
)
