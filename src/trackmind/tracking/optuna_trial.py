"""Intermediate objectives of a training run that is a trial of an Optuna sweep, for pruning.

The sweeper (`hydra/sweeper=trackmind_optuna`, src/hydra_plugins/trackmind_optuna_sweeper)
runs each trial as a Hydra job. When the study has a storage the job can reach (an SQLite
file or a database), it gives the job the study's storage, name, trial and pruner in the
environment variable TRACKMIND_OPTUNA_TRIAL (a JSON object, set through the job's
`hydra.job.env_set`, so the job's config and overrides stay the trial's parameters).

The training loop calls `report(value, step)` at each evaluation with the objective so far
(the same quantity and direction as the final objective). It returns True when the pruner
says the trial is worse than the others at that step: the loop then stops training early
(and returns, or raises `optuna.TrialPruned`), and the sweeper tells the trial PRUNED.
Outside a sweep (no TRACKMIND_OPTUNA_TRIAL), `report` does nothing and returns False,
without importing Optuna.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import threading
from typing import Any

log = logging.getLogger(__name__)

ENV_VAR = "TRACKMIND_OPTUNA_TRIAL"
# user attribute of a trial whose job was told to stop by `report`: the sweeper tells it PRUNED
PRUNED_AT_STEP = "pruned_at_step"
# Optuna's pruners by name, and the options each takes (passed to its constructor)
PRUNER_OPTIONS = {
    "none": (),
    "median": ("n_startup_trials", "n_warmup_steps", "interval_steps"),
    "successive_halving": ("min_resource", "reduction_factor", "min_early_stopping_rate"),
}

_lock = threading.Lock()
_trials: dict[str, Any] = {}  # payload -> optuna Trial (one per process in practice)


def encode(*, storage: str, study: str, trial_id: int, number: int, pruner: dict) -> str:
    """The TRACKMIND_OPTUNA_TRIAL value for a trial: compact JSON with no ' and no $ in it, so
    it can stand in a single-quoted Hydra override without escaping or interpolation."""
    payload = {
        "storage": storage,
        "study": study,
        "trial_id": trial_id,
        "number": number,
        "pruner": pruner,
    }
    text = json.dumps(payload, separators=(",", ":"))
    return text.replace("'", "\\u0027").replace("$", "\\u0024")


def current() -> dict | None:
    """The trial this process runs ({storage, study, trial_id, number, pruner}), or None."""
    text = os.environ.get(ENV_VAR)
    return json.loads(text) if text else None


def pruner_spec(settings: dict | None) -> dict:
    """{name, its options} from pruner settings, the options of other pruners dropped."""
    settings = dict(settings or {})
    name = str(settings.get("name") or "none")
    if name not in PRUNER_OPTIONS:
        raise ValueError(f"unknown pruner {name!r} (one of {', '.join(PRUNER_OPTIONS)})")
    return {"name": name, **{k: settings[k] for k in PRUNER_OPTIONS[name] if k in settings}}


def make_pruner(settings: dict | None):
    """An Optuna pruner from {name: none|median|successive_halving, options...}: median takes
    n_startup_trials, n_warmup_steps, interval_steps; successive_halving takes min_resource,
    reduction_factor, min_early_stopping_rate (Optuna's defaults for those not given)."""
    import optuna

    spec = pruner_spec(settings)
    options = {k: v for k, v in spec.items() if k != "name"}
    pruner = {
        "none": optuna.pruners.NopPruner,
        "median": optuna.pruners.MedianPruner,
        "successive_halving": optuna.pruners.SuccessiveHalvingPruner,
    }[spec["name"]]
    return pruner(**options)


def report(value: float, step: int) -> bool:
    """Report the objective so far at `step` (an int >= 0 that grows: the training step, or
    the evaluation count) to this run's Optuna trial; True if the trial should stop now.

    A no-op returning False outside a sweep with a storage. A storage error is logged and
    answered False (training goes on); a bad value or step raises ValueError.
    """
    text = os.environ.get(ENV_VAR)
    if not text:
        return False
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"report: step must be an int >= 0, got {step!r}")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"report: value must be a number, got {value!r}")
    value = float(value)
    try:
        trial = _trial(text)
        if not math.isfinite(value):
            log.warning(
                "optuna trial %d: non-finite value %s at step %d", trial.number, value, step
            )
        trial.report(value, int(step))
        prune = bool(trial.should_prune())
        if prune:
            trial.set_user_attr(PRUNED_AT_STEP, int(step))
            log.info("optuna trial %d: pruned at step %d (value %.6g)", trial.number, step, value)
        return prune
    except Exception as e:  # the study's storage is unreachable or locked: keep training
        log.warning("optuna trial: could not report step %d (%s: %s)", step, type(e).__name__, e)
        return False


def _trial(text: str):
    with _lock:
        trial = _trials.get(text)
        if trial is None:
            import optuna

            spec = json.loads(text)
            study = optuna.load_study(
                study_name=spec["study"],
                storage=spec["storage"],
                sampler=optuna.samplers.RandomSampler(),  # never samples here
                pruner=make_pruner(spec.get("pruner")),
            )
            trial = optuna.trial.Trial(study, int(spec["trial_id"]))
            _trials.clear()  # a new trial in this process (in-process launcher): drop the last
            _trials[text] = trial
        return trial
