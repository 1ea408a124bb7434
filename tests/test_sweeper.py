"""The Optuna sweeper plugin (hydra/sweeper=trackmind_optuna) and the trial-report helper.

The sweeps run through the real Hydra CLI on a toy app written into tmp_path, whose trials
take milliseconds: what happens to each trial is decided by its job number (= trial number).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import optuna
import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from hydra_plugins.trackmind_optuna_sweeper._search_space import (
    SweeperError,
    format_value,
    parse_search_space,
)
from trackmind.tracking import optuna_trial

ROOT = Path(__file__).resolve().parents[1]

TOY_APP = """
import sys

import hydra
from hydra.core.hydra_config import HydraConfig

from trackmind.tracking import optuna_trial


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    num = HydraConfig.get().job.num  # the trial number
    if num in cfg.raise_at:
        raise RuntimeError(f"boom in job {num}")
    if num in cfg.exit_at:
        sys.exit(3)
    if num in cfg.nan_at:
        return float("nan")
    if num in cfg.raise_pruned_at:
        import optuna

        raise optuna.TrialPruned()
    for step in range(cfg.steps):
        # the same curve for every good trial (never below the median), far above for bad ones
        if optuna_trial.report((100.0 if num in cfg.bad_at else 0.0) + cfg.steps - step, step):
            return -1.0  # stopped early: the sweeper tells the trial PRUNED, not this value
    return (cfg.x - 2) ** 2 + cfg.y


if __name__ == "__main__":
    main()
"""

TOY_CONFIG = """
defaults:
  - override hydra/sweeper: trackmind_optuna
  - _self_
x: 0.0
y: 0
steps: 3
raise_at: []
exit_at: []
nan_at: []
bad_at: []
raise_pruned_at: []
hydra:
  sweeper:
    study_name: toy
    n_trials: 2
    sampler:
      seed: 0
    params:
      x: interval(-4, 6)
"""


@pytest.fixture
def toy(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "app.py").write_text(textwrap.dedent(TOY_APP))
    (tmp_path / "conf" / "config.yaml").write_text(TOY_CONFIG)

    def run(*args: str, sweep: str = "sweep") -> subprocess.CompletedProcess:
        cmd = [sys.executable, "app.py", "-m", f"hydra.sweep.dir={tmp_path / sweep}", *args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop(optuna_trial.ENV_VAR, None)
        return subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    return run


def _trials(storage: str, study: str = "toy") -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=storage).trials


def test_a_study_in_sqlite_continues_in_a_second_invocation(toy, tmp_path):
    """2 trials, then the same command continues the study to 4, with pruning on: the resumed
    study's bad trial is pruned against the medians of the first invocation's trials."""
    args = (
        "hydra.sweeper.storage=sqlite:///study.db",  # relative: tmp_path
        "hydra.sweeper.pruner.name=median",
        "hydra.sweeper.pruner.n_startup_trials=2",
        "y=choice(0, 1)",
    )
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = toy(*args)
    assert first.returncode == 0, first.stderr[-3000:]
    assert [t.state for t in _trials(storage)] == [TrialState.COMPLETE] * 2

    second = toy(*args, "bad_at=[3]")  # the same command continues the study: n_trials (2) more
    assert second.returncode == 0, second.stderr[-3000:]
    assert "2 trials already, running 2 more" in second.stdout  # Hydra logs to stdout
    trials = _trials(storage)
    c, p = TrialState.COMPLETE, TrialState.PRUNED
    assert [t.state for t in trials] == [c, c, c, p]
    assert trials[3].intermediate_values == {0: 103.0}  # above the first trials' medians
    assert len({t.params["x"] for t in trials}) == 4  # no draw repeated from the first run

    sweep = tmp_path / "sweep"
    for t in trials:  # one job dir per trial, numbered by trial; its overrides are its params
        overrides = yaml.safe_load(
            (sweep / str(t.number) / ".hydra" / "overrides.yaml").read_text()
        )
        params = [o for o in overrides if not o.startswith("bad_at=")]
        assert params == [f"x={t.params['x']!r}", f"y={t.params['y']}"]
    done = trials[:3]
    for t in done:
        assert t.value == pytest.approx((t.params["x"] - 2) ** 2 + t.params["y"])
        assert t.intermediate_values == {0: 3.0, 1: 2.0, 2: 1.0}  # the jobs reported
    best = min(done, key=lambda t: t.value)
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["name"] == "optuna" and results["study_name"] == "toy"
    assert results["best_trial"] == best.number
    assert results["best_value"] == pytest.approx(best.value)
    assert results["best_params"] == best.params
    assert results["trials"] == {"complete": 3, "pruned": 1}


def test_pruned_and_failed_trials_are_told_and_the_sweep_goes_on(toy, tmp_path):
    res = toy(
        "hydra.sweeper.n_trials=8",
        "hydra.sweeper.n_jobs=2",  # batches of two trials
        "hydra.sweeper.pruner.name=median",  # no storage: <sweep dir>/optuna.db for pruning
        "hydra.sweeper.pruner.n_startup_trials=2",
        "bad_at=[2]",  # reports bad values: pruned at its first report, stops early
        "raise_pruned_at=[3]",  # raises optuna.TrialPruned
        "raise_at=[4]",
        "exit_at=[5]",
        "nan_at=[6]",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    sweep = tmp_path / "sweep"
    trials = _trials(f"sqlite:///{sweep / 'optuna.db'}")
    c, p, f = TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL
    assert [t.state for t in trials] == [c, c, p, p, f, f, f, c]
    assert trials[2].intermediate_values == {0: 103.0}  # stopped at its first report
    assert trials[2].user_attrs == {optuna_trial.PRUNED_AT_STEP: 0}
    assert trials[7].intermediate_values == {0: 3.0, 1: 2.0, 2: 1.0}
    assert "trial 4 failed: RuntimeError: boom in job 4" in res.stdout
    assert "trial 5 failed: the job exited with status 3" in res.stdout
    assert "trial 6 failed: its job returned nan" in res.stdout
    assert all((sweep / str(n)).is_dir() for n in range(8))
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["trials"] == {"complete": 3, "fail": 3, "pruned": 2}
    assert results["best_value"] == pytest.approx(min(trials[n].value for n in (0, 1, 7)))


def test_a_bad_search_space_is_a_one_line_error_before_any_trial(toy, tmp_path):
    res = toy("hydra.sweeper.storage=sqlite:///study.db", "x=tag(log, interval(0, 1))")
    assert res.returncode != 0
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert lines[0] == (
        "command line: x=tag(log, interval(0, 1)): tag(log, interval()): bounds must be > 0, got 0"
    )
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "study.db").exists()
    assert not list((tmp_path / "sweep").glob("0"))


# the search space, value by value


def _space(params=None, *args):
    return parse_search_space(params, list(args))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("choice(4, 8, 16)", CategoricalDistribution((4, 8, 16))),
        ("choice(adam, 'a b', true, 1.5)", CategoricalDistribution(("adam", "a b", True, 1.5))),
        ("4,8", CategoricalDistribution((4, 8))),
        ("interval(0.005, 0.05)", FloatDistribution(0.005, 0.05)),
        ("interval(1, 10)", FloatDistribution(1.0, 10.0)),
        ("tag(log, interval(1e-4, 3e-3))", FloatDistribution(1e-4, 3e-3, log=True)),
        ("tag(int, interval(1, 10))", IntDistribution(1, 10)),
        ("tag(int, log, interval(32, 512))", IntDistribution(32, 512, log=True)),
        ("range(4, 17, 4)", IntDistribution(4, 16, step=4)),  # Hydra's: 4, 8, 12, 16
        ("range(5)", IntDistribution(0, 4)),
        ("range(10, 0, -3)", IntDistribution(1, 10, step=3)),  # 10, 7, 4, 1
        ("range(0, 1, 0.25)", FloatDistribution(0.0, 0.75, step=0.25)),
        ("range(0, 1, 0.1)", FloatDistribution(0.0, 0.9, step=0.1)),
        ("tag(log, range(1, 100))", IntDistribution(1, 99, log=True)),
    ],
)
def test_sweep_expressions_become_optuna_distributions(text, expected):
    space, fixed = _space({"learner.lr": text})
    assert space == {"learner.lr": expected} and fixed == []


def test_fixed_values_and_command_line_overrides():
    params = {"a": "choice(1, 2)", "b": 5, "learner": {"kappa": "interval(0, 0.01)"}, "c": [1, 2]}
    space, fixed = _space(params, "a=interval(0, 1)", "+extra=x", "~gone", "b=7", "+d=choice(3)")
    assert space == {  # nested params (hydra.sweeper.params.learner.kappa=...) flattened
        "learner.kappa": FloatDistribution(0.0, 0.01),
        "a": FloatDistribution(0.0, 1.0),  # the command line wins
        "+d": CategoricalDistribution((3,)),
    }
    assert fixed == ["c=[1,2]", "+extra=x", "~gone", "b=7"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "interval(5, 1)",
            "x=interval(5, 1): interval(): the low bound 5 is above the high bound 1",
        ),
        ("tag(log, interval(0, 1))", "bounds must be > 0, got 0"),
        ("tag(lo, interval(0, 1))", "tag lo does not apply to interval() (it takes int and log)"),
        ("tag(log, choice(1, 2))", "tag log does not apply to choice() (it takes no tag)"),
        ("tag(int, interval(0.5, 2))", "tag(int, interval()): bounds must be integers: 0.5, 2"),
        ("glob(*)", "Glob cannot be searched by Optuna: use choice(), interval() or range()"),
        ("range(5, 1)", "range(5, 1, 1) has no values"),
        ("tag(log, range(0, 10, 2))", "tag(log, range()): the step must be 1"),
        ("tag(log, range(0, 1, 0.1))", "tag(log, range()) needs integers"),
        ("choice([1, 2], [3])", "choice() values must be numbers, strings or booleans, got [1, 2]"),
        ("interval(1", "hydra.sweeper.params: cannot parse 'x=interval(1': no viable alternative"),
    ],
)
def test_bad_search_space_values_name_the_key_and_the_reason(text, message):
    with pytest.raises(SweeperError) as e:
        _space({"x": text})
    assert message in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("hydra.sweeper.params: ")


@pytest.mark.parametrize(
    "value",
    [
        "a",
        "4",
        "b c",
        " x",
        "it's",
        "a\\",
        "a\\'b",
        "x,y",
        "1e-5",
        "true",
        "null",
        "a=b",
        "",
        3,
        -2,
        1.5,
        1e-05,
        float("inf"),
        True,
        False,
        None,
        [1, "a b"],
        {"k": 1},
    ],
)
def test_sampled_values_round_trip_through_the_override_parser(value):
    override = OverridesParser.create().parse_overrides([f"k={format_value(value)}"])[0]
    assert not override.is_sweep_override()
    assert override.value() == value and type(override.value()) is type(value)


# the trial-report helper


def test_report_outside_a_sweep_does_nothing(monkeypatch):
    monkeypatch.delenv(optuna_trial.ENV_VAR, raising=False)
    assert optuna_trial.report(1.0, 0) is False
    assert optuna_trial.current() is None


def test_report_prunes_a_trial_worse_than_the_median(tmp_path, monkeypatch):
    storage = f"sqlite:///{tmp_path / 'o.db'}"
    pruner = {"name": "median", "n_startup_trials": 2}
    pruned = optuna_trial.make_pruner(pruner)
    study = optuna.create_study(study_name="s", storage=storage, pruner=pruned)
    for _ in range(2):
        done = study.ask()
        done.report(1.0, 0)
        study.tell(done, 1.0)

    def become(trial):
        payload = optuna_trial.encode(
            storage=storage,
            study="s",
            trial_id=trial._trial_id,
            number=trial.number,
            pruner=pruner,
        )
        assert "'" not in payload and "$" not in payload
        monkeypatch.setenv(optuna_trial.ENV_VAR, payload)

    good, bad = study.ask(), study.ask()
    become(good)
    assert optuna_trial.current()["number"] == good.number
    assert optuna_trial.report(0.5, 0) is False  # better than the median at step 0
    become(bad)
    assert optuna_trial.report(5, 0) is True
    with pytest.raises(ValueError, match="step must be an int >= 0"):
        optuna_trial.report(1.0, -1)
    with pytest.raises(ValueError, match="value must be a number"):
        optuna_trial.report("bad", 2)
    stored = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert stored[good.number].intermediate_values == {0: 0.5}
    assert stored[good.number].user_attrs == {}
    assert stored[bad.number].intermediate_values == {0: 5.0}
    assert stored[bad.number].user_attrs == {optuna_trial.PRUNED_AT_STEP: 0}


def test_report_with_an_unreachable_study_logs_and_goes_on(tmp_path, monkeypatch, caplog):
    payload = optuna_trial.encode(
        storage=f"sqlite:///{tmp_path / 'none.db'}",
        study="gone",
        trial_id=1,
        number=0,
        pruner={"name": "median"},
    )
    monkeypatch.setenv(optuna_trial.ENV_VAR, payload)
    assert optuna_trial.report(1.0, 0) is False
    assert "could not report step 0" in caplog.text


def test_pruner_settings():
    assert isinstance(optuna_trial.make_pruner(None), optuna.pruners.NopPruner)
    assert isinstance(
        optuna_trial.make_pruner({"name": "successive_halving", "n_warmup_steps": 3}),
        optuna.pruners.SuccessiveHalvingPruner,
    )
    assert optuna_trial.pruner_spec(
        {"name": "median", "n_warmup_steps": 3, "reduction_factor": 2}
    ) == {
        "name": "median",
        "n_warmup_steps": 3,
    }
    with pytest.raises(ValueError, match="unknown pruner 'medain'"):
        optuna_trial.make_pruner({"name": "medain"})


# packaging and discovery


def test_hydra_finds_the_plugin_and_setuptools_installs_it():
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins
    from hydra.plugins.sweeper import Sweeper

    names = [p.__name__ for p in Plugins.instance().discover(Sweeper)]
    assert "TrackmindOptunaSweeper" in names
    assert "trackmind_optuna.yaml" in ConfigStore.instance().list("hydra/sweeper")
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = packages["packages"]  # listed (tests/test_packaging.py keeps the list whole)
    assert {"hydra_plugins", "hydra_plugins.trackmind_optuna_sweeper"} <= set(packages)
    assert not (ROOT / "src" / "hydra_plugins" / "__init__.py").exists()  # a namespace package


def test_the_payload_is_json():
    payload = optuna_trial.encode(
        storage="sqlite:////a/it's $x.db", study="s", trial_id=3, number=2, pruner={"name": "none"}
    )
    assert json.loads(payload)["storage"] == "sqlite:////a/it's $x.db"
    assert "'" not in payload and "$" not in payload
