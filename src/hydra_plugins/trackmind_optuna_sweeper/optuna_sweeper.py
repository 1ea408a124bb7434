"""The Hydra Sweeper: Optuna's ask/tell around Hydra's launcher (the search is in _impl.py)."""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from . import config as _config  # noqa: F401  (registers hydra/sweeper: trackmind_optuna)


class TrackmindOptunaSweeper(Sweeper):
    """Asks Optuna for `n_jobs` trials at a time, launches them as one batch of Hydra jobs
    (one job dir per trial, numbered by trial) and tells Optuna each job's return value."""

    def __init__(
        self,
        direction: str,
        storage: str | None,
        study_name: str | None,
        n_trials: int,
        n_jobs: int,
        sampler: Any,
        pruner: Any,
        params: Any = None,
    ) -> None:
        super().__init__()
        self.direction = direction
        self.storage = storage
        self.study_name = study_name
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.sampler = sampler
        self.pruner = pruner
        self.params = params
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(
        self,
        *,
        hydra_context: HydraContext,
        task_function: TaskFunction,
        config: DictConfig,
    ) -> None:
        from hydra.core.plugins import Plugins

        from ._impl import ExitAsFailure

        self.hydra_context = hydra_context
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context,
            task_function=ExitAsFailure(task_function),
            config=config,
        )

    def sweep(self, arguments: list[str]) -> Any:
        from ._impl import run_sweep

        return run_sweep(self, list(arguments))
