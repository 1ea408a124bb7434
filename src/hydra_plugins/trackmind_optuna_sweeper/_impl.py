"""The sweep: ask Optuna for n_jobs trials, launch them as one Hydra batch, tell the results."""

from __future__ import annotations

import logging
import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
from hydra.core.utils import JobReturn, JobStatus, configure_log
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import Trial, TrialState

from trackmind.tracking import optuna_trial

from ._search_space import SweeperError, format_value, parse_search_space

log = logging.getLogger(__name__)

RESULTS_FILE = "optimization_results.yaml"
# the trial's storage, study and pruner reach the job as an environment variable, through a
# Hydra override that is not one of the job's task overrides
ENV_OVERRIDE = f"++hydra.job.env_set.{optuna_trial.ENV_VAR}"
SAMPLERS = ("tpe", "random")


class JobExited(Exception):
    """A trial's job called sys.exit()."""


class ExitAsFailure:
    """The task function, with a trial's sys.exit() turned into an exception: the trial fails
    alone (train.py exits with status 2 on a config error) instead of ending the sweep."""

    def __init__(self, task_function: Any) -> None:
        self.task_function = task_function

    def __call__(self, cfg: DictConfig) -> Any:
        try:
            return self.task_function(cfg)
        except SystemExit as e:
            raise JobExited(f"the job exited with status {e.code}") from None


def run_sweep(sweeper: Any, arguments: list[str]) -> list[list[JobReturn]]:
    cfg = sweeper.config
    direction = str(sweeper.direction)
    if direction not in ("minimize", "maximize"):
        raise SweeperError(f"hydra.sweeper.direction: {direction!r} is not minimize or maximize")
    n_trials, n_jobs = int(sweeper.n_trials), int(sweeper.n_jobs)
    if n_trials < 0 or n_jobs < 1:
        raise SweeperError(f"hydra.sweeper: n_trials={n_trials} must be >= 0, n_jobs={n_jobs} >= 1")
    sampler_spec = _plain(sweeper.sampler)
    if sampler_spec.get("name") not in SAMPLERS:
        raise SweeperError(
            f"hydra.sweeper.sampler.name: {sampler_spec.get('name')!r} is not one of "
            f"{', '.join(SAMPLERS)}"
        )
    try:
        pruner_spec = optuna_trial.pruner_spec(_plain(sweeper.pruner))
        pruner = optuna_trial.make_pruner(pruner_spec)
    except (ValueError, TypeError) as e:
        raise SweeperError(f"hydra.sweeper.pruner: {e}") from None
    space, fixed = parse_search_space(_plain(sweeper.params), arguments)
    if not space:
        log.warning("nothing to search: every trial runs the same overrides")

    sweep_dir = Path(str(cfg.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, sweep_dir / "multirun.yaml")
    pruning = pruner_spec["name"] != "none"
    storage = _storage_url(sweeper.storage, sweep_dir, pruning)

    # compose one trial's config before asking for any: a misspelt key fails here, once
    probe = fixed + [f"{name}={format_value(_example(d))}" for name, d in space.items()]
    if storage:
        probe.append(f"{ENV_OVERRIDE}='{{}}'")
    sweeper.validate_batch_is_legal([probe])

    try:
        study = optuna.create_study(
            storage=storage,
            study_name=sweeper.study_name,
            direction=direction,
            pruner=pruner,
            load_if_exists=True,
        )
    except ValueError as e:  # e.g. a stored study with other directions
        raise SweeperError(f"hydra.sweeper: study {sweeper.study_name!r}: {e}") from None
    _check_direction(study, direction, storage)
    n_before = len(study.trials)
    study.sampler = _make_sampler(sampler_spec, n_before, parallel=n_jobs > 1)
    where = _mask(storage) if storage else "in memory"
    log.info(
        "Optuna study %r (%s): %d trials already, running %d more, %d at a time; "
        "sampler %s, pruner %s",
        study.study_name,
        where,
        n_before,
        n_trials,
        n_jobs,
        sampler_spec["name"],
        pruner_spec["name"],
    )
    if pruning and not sweeper.storage:
        log.info("pruning: trials report to %s, shared with their jobs", where)

    returns: list[list[JobReturn]] = []
    done = 0
    while done < n_trials:
        trials = [study.ask(space) for _ in range(min(n_jobs, n_trials - done))]
        numbers = [t.number for t in trials]
        if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
            log.warning(
                "trials %s are not consecutive: job dirs are numbered from %d", numbers, numbers[0]
            )
        batch = [_job_overrides(t, space, fixed, storage, pruner_spec) for t in trials]
        try:
            results = list(sweeper.launcher.launch(batch, initial_job_idx=numbers[0]))
        except BaseException:  # Ctrl-C or a launcher error: these trials will not finish
            for t in trials:
                study.tell(t, state=TrialState.FAIL, skip_if_finished=True)
            raise
        configure_log(cfg.hydra.hydra_logging, cfg.hydra.verbose)  # back from the job's logs
        for trial, result in zip(trials, results, strict=True):
            _tell(study, trial, result)
        returns.append(results)
        done += len(trials)
        _write_results(study, sweep_dir / RESULTS_FILE)

    counts = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    tally = ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
    if not counts.get("COMPLETE"):
        tally = tally or "the study has no trials"
        raise SweeperError(f"Optuna study {study.study_name!r}: no trial completed ({tally})")
    best = study.best_trial
    log.info(
        "Optuna study %r: best value %.6g at trial %d (%s); %s; results in %s",
        study.study_name,
        best.value,
        best.number,
        " ".join(f"{k}={format_value(v)}" for k, v in best.params.items()),
        tally,
        sweep_dir / RESULTS_FILE,
    )
    return returns


def _job_overrides(
    trial: Trial,
    space: dict[str, BaseDistribution],
    fixed: list[str],
    storage: str | None,
    pruner_spec: dict,
) -> list[str]:
    overrides = list(fixed) + [f"{k}={format_value(trial.params[k])}" for k in space]
    if storage:
        payload = optuna_trial.encode(
            storage=storage,
            study=trial.study.study_name,
            trial_id=trial._trial_id,
            number=trial.number,
            pruner=pruner_spec,
        )
        overrides.append(f"{ENV_OVERRIDE}='{payload}'")
    return overrides


def _tell(study: optuna.Study, trial: Trial, result: JobReturn) -> None:
    n = trial.number
    error = result._return_value if result.status != JobStatus.COMPLETED else None
    pruned_at = _pruned_at(study, n)
    if pruned_at is not None or isinstance(error, optuna.TrialPruned):
        step = f" at step {pruned_at}" if pruned_at is not None else ""
        log.info("trial %d pruned%s", n, step)
        study.tell(trial, state=TrialState.PRUNED)
        return
    if error is not None or result.status != JobStatus.COMPLETED:
        if isinstance(error, BaseException) and not isinstance(error, JobExited):
            log.error("trial %d failed: %s: %s", n, type(error).__name__, error, exc_info=error)
        else:
            log.error("trial %d failed: %s", n, error)
        study.tell(trial, state=TrialState.FAIL)
        return
    value = result._return_value
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number):
        log.error("trial %d failed: its job returned %r, not a finite number", n, value)
        study.tell(trial, state=TrialState.FAIL)
        return
    study.tell(trial, number)


def _pruned_at(study: optuna.Study, number: int) -> int | None:
    """The step at which the trial's job was told to prune (optuna_trial.report), if it was."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number == number:
            return t.user_attrs.get(optuna_trial.PRUNED_AT_STEP)
    return None


def _write_results(study: optuna.Study, path: Path) -> None:
    trials = study.get_trials(deepcopy=False)
    if not any(t.state == TrialState.COMPLETE for t in trials):
        return
    best = study.best_trial
    counts = Counter(t.state.name.lower() for t in trials)
    results = {
        "name": "optuna",
        "study_name": study.study_name,
        "direction": study.direction.name.lower(),
        "best_trial": best.number,
        "best_value": best.value,
        "best_params": dict(best.params),
        "trials": dict(sorted(counts.items())),
    }
    OmegaConf.save(OmegaConf.create(results), path)


def _make_sampler(spec: dict, offset: int, parallel: bool) -> optuna.samplers.BaseSampler:
    seed = spec.get("seed")
    # a continued study must not draw the first invocation's values again
    seed = None if seed is None else int(seed) + offset
    if spec["name"] == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # a batch asked before any of it is told: the constant liar keeps its trials apart
    return optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=int(spec.get("n_startup_trials", 10)), constant_liar=parallel
    )


def _check_direction(study: optuna.Study, direction: str, storage: str | None) -> None:
    try:
        stored = study.direction.name.lower()
    except RuntimeError:
        raise SweeperError(
            f"Optuna study {study.study_name!r} in {_mask(storage)} has several objectives; "
            "this sweeper runs single-objective studies"
        ) from None
    if stored != direction:
        raise SweeperError(
            f"hydra.sweeper.direction={direction}, but Optuna study {study.study_name!r} in "
            f"{_mask(storage)} was created to {stored}"
        )


def _storage_url(storage: str | None, sweep_dir: Path, pruning: bool) -> str | None:
    """The storage URL as the jobs can use it: a relative SQLite path made absolute (and its
    folder created); with no storage, <sweep dir>/optuna.db when pruning, else in memory."""
    if not storage:
        if not pruning:
            return None
        return f"sqlite:///{(sweep_dir / 'optuna.db').resolve()}"
    storage = str(storage)
    prefix = "sqlite:///"
    if storage.startswith(prefix):
        path, sep, query = storage[len(prefix) :].partition("?")
        if path and path != ":memory:":
            path = os.path.abspath(path)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return f"{prefix}{path}{sep}{query}"
    return storage


def _mask(url: str | None) -> str:
    """A storage URL without its password."""
    return re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", url or "")


def _example(distribution: BaseDistribution) -> Any:
    if isinstance(distribution, CategoricalDistribution):
        return distribution.choices[0]
    return distribution.low  # Float and IntDistribution


def _plain(node: Any) -> dict:
    if node is None:
        return {}
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)
    return dict(node)
