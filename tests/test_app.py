"""The application around the loop: checkpoints and resume, Optuna sweeps, bad input.

Real processes and a real MLflow store: a run killed with SIGKILL is resumed from its last
checkpoint and continues the step count, the frame counter and the same MLflow run.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from smoke_cli import resume_args, smoke_args, unbuffered_env

from trackmind.errors import ConfigError, check_schema
from trackmind.netprobe import probe
from trackmind.tracking.metric_names import metric_map_name
from trackmind.training.checkpoint import (
    find_checkpoint,
    merge_resume_config,
    read_checkpoint,
)
from trackmind.training.progress import progress_figures
from trackmind.training.race_stats import RaceStats
from trackmind.training.schema import CheckpointConfig

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "scripts" / "train.py"


_args, _env = smoke_args, unbuffered_env


def _wait_for_checkpoint(proc: subprocess.Popen, path: Path, min_step: int, timeout_s=120) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        if path.is_file():
            try:
                ck = torch.load(path, map_location="cpu", weights_only=True)
            except (RuntimeError, EOFError, OSError):
                ck = None  # replaced while reading
            if ck is not None and ck["global_step"] >= min_step:
                return ck
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint at step >= {min_step}")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """A run killed with SIGKILL after its checkpoint reached step 10: (tmp, checkpoint)."""
    tmp = tmp_path_factory.mktemp("killed")
    proc = subprocess.Popen(
        _args(tmp, "trainer.max_steps=-1", "trainer.max_time_s=120", "checkpoint.every_s=1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        start_new_session=True,
    )
    ckpt_path = tmp / "run" / "checkpoints" / "last.ckpt"
    try:
        _wait_for_checkpoint(proc, ckpt_path, min_step=10)
        time.sleep(1.5)  # mid-training, between checkpoints
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    time.sleep(2.0)  # collectors notice their learner is gone and exit
    return tmp, torch.load(ckpt_path, map_location="cpu", weights_only=True)


def test_kill_9_then_resume_continues_step_frames_and_mlflow_run(killed_run):
    tmp, ck = killed_run
    step, frames = ck["global_step"], ck["ReplayDataModule"]["frames"]
    run_id = ck["trackmind"]["mlflow_run_id"]
    assert step >= 10 and frames > 0 and run_id
    res = subprocess.run(
        resume_args(tmp, str(tmp / "run"), f"trainer.max_steps={step + 15}"),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp / "run" / "summary.json").read_text())
    assert summary["global_step"] == step + 15  # continued, not restarted
    assert summary["frames"] > frames
    assert summary["mlflow_run_id"] == run_id
    assert summary["races"] > ck["ReplayDataModule"]["stats"]["races"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("trackmind").experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]  # the same run, no second one
    assert runs[0].info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run_id, "train/loss")]
    assert min(steps) < step < max(steps)  # one metric history across the kill
    assert max(steps) >= step + 10
    arts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "checkpoints", "agent.pt", "summary.json"} <= arts
    new = torch.load(tmp / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert new["global_step"] == step + 15
    assert new["learner_counters"]["samples_learned"] > ck["learner_counters"]["samples_learned"]


def test_corrupt_checkpoint_is_refused_and_files_kept(killed_run, tmp_path):
    tmp, _ = killed_run
    bad = tmp_path / "corrupt.ckpt"
    good = (tmp / "run" / "checkpoints" / "last.ckpt").read_bytes()
    bad.write_bytes(good[: len(good) // 2])
    before = _digest(bad)
    res = subprocess.run(
        resume_args(tmp_path, str(bad)), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2
    last = [x for x in res.stderr.splitlines() if x.strip()][-1]
    assert last.startswith(f"config error: resume: {bad}: not a readable checkpoint"), last
    assert _digest(bad) == before
    assert not (tmp_path / "mlflow.db").exists()


def test_checkpoint_of_another_network_shape_is_refused(killed_run, tmp_path):
    tmp, _ = killed_run
    ckpt = tmp / "run" / "checkpoints" / "last.ckpt"
    before = _digest(ckpt)
    res = subprocess.run(
        resume_args(tmp_path, str(ckpt), "network.dense_hidden=32"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr[-2000:]
    last = [x for x in res.stderr.splitlines() if x.strip()][-1]
    assert last.startswith("config error: resume: ") and "in the checkpoint but" in last, last
    assert _digest(ckpt) == before  # the existing checkpoint is untouched


def test_misspelt_group_option_names_the_group(tmp_path):
    res = subprocess.run(_args(tmp_path, "map=startr"), capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.startswith("config error: map=startr: no map option 'startr'")
    assert "starter" in res.stderr  # the available options are listed
    assert not (tmp_path / "mlflow.db").exists()


def test_optuna_sweep_of_two_trials_returns_objectives(tmp_path):
    """Through train.py, a persistent SQLite study with pruning on (the documented way)."""
    sweep = tmp_path / "sweep"
    study = f"sqlite:///{tmp_path / 'study.db'}"
    args = [
        sys.executable,
        str(TRAIN),
        "-m",
        "hparams_search=optuna",
        "debug=smoke",
        "trainer.max_steps=10",
        "hydra.sweeper.n_trials=2",
        f"hydra.sweeper.storage={study}",
        "hydra.sweeper.pruner.name=median",
        f"hydra.sweep.dir={sweep}",
        f"logger.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    import optuna
    from omegaconf import OmegaConf

    (name,) = optuna.get_all_study_names(study)
    trials = optuna.load_study(study_name=name, storage=study).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]

    result = OmegaConf.load(sweep / "optimization_results.yaml")
    assert result.name == "optuna" and 0 < float(result.best_value) <= 10.0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("trackmind").experiment_id])
    assert len(runs) == 2
    objectives = sorted(r.data.metrics["objective"] for r in runs)
    assert objectives[0] == pytest.approx(float(result.best_value))
    lrs = {r.data.params["learner.lr"] for r in runs}
    assert len(lrs) == 2  # the sampler proposed two learning rates


def test_find_checkpoint_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"^resume: .*no checkpoints/last.ckpt"):
        find_checkpoint(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^resume: 'nowhere/x.ckpt' is not a checkpoint"):
        find_checkpoint("nowhere/x.ckpt")
    uri = f"sqlite:///{tmp_path / 'ml.db'}"
    with pytest.raises(ConfigError, match=r"^resume: no MLflow run 0123456789abcdef"):
        find_checkpoint("0123456789abcdef", uri)
    (tmp_path / "x.ckpt").write_bytes(torch.save.__doc__.encode()[:100])
    with pytest.raises(ConfigError, match="not a readable checkpoint"):
        read_checkpoint(tmp_path / "x.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "y.ckpt")
    with pytest.raises(ConfigError, match="not a trackmind training checkpoint"):
        read_checkpoint(tmp_path / "y.ckpt")


def test_merge_resume_config_keeps_the_saved_run():
    saved = {"trainer": {"max_steps": 40, "max_time_s": 45}, "map": {"cycle": [1]}, "seed": 0}
    composed = {
        "trainer": {"max_steps": 99, "max_time_s": 1800},
        "map": {"cycle": [2]},
        "seed": 5,
        "network": {"a": 1},
    }
    out = merge_resume_config(
        saved, composed, ["resume=x", "trainer.max_steps=99", "network=other", "hydra.run.dir=d"]
    )
    assert out == {
        "trainer": {"max_steps": 99, "max_time_s": 45},
        "map": {"cycle": [1]},
        "seed": 0,
        "network": {"a": 1},
    }
    assert saved["trainer"]["max_steps"] == 40  # not mutated
    with pytest.raises(ConfigError, match="^resume: 'debug=smoke' cannot change"):
        merge_resume_config(saved, composed, ["debug=smoke"])


def test_checkpoint_config_validation():
    def validate_checkpoint_config(cfg):  # what plan_run does with the checkpoint block
        return asdict(check_schema(cfg, CheckpointConfig, "checkpoint"))

    assert validate_checkpoint_config(None) == {
        "every_s": 300.0,
        "save_buffer": False,
        "log_to_mlflow": True,
    }
    with pytest.raises(ConfigError, match=r"^checkpoint.every_s: must be > 0"):
        validate_checkpoint_config({"every_s": 0})
    with pytest.raises(
        ConfigError, match=r"^checkpoint.save_buffer: Value 'maybe' is not a valid bool"
    ):
        validate_checkpoint_config({"save_buffer": "maybe"})
    with pytest.raises(
        ConfigError, match=r"^checkpoint.every: unknown key \(allowed: every_s, log_to_mlflow"
    ):
        validate_checkpoint_config({"every": 3})


def test_race_stats_state_round_trip():
    s = RaceStats(reference_ms={"a": 10_000.0}, length_m={"a": 100.0})
    base = {"map": "a", "meters_advanced_along_centerline": [50.0], "input_w": [1.0, 0.0]}
    s.add_race({**base, "finished": True, "race_time": 12_000, "greedy": True}, 40, frames=40)
    s.add_race({**base, "finished": False, "race_time": 3_000, "greedy": False}, 10, frames=50)
    t = RaceStats(reference_ms={"a": 10_000.0}, length_m={"a": 100.0})
    t.load_state_dict(s.state_dict())
    assert (t.races, t.transitions, t.best_greedy_ms, t.history) == (
        2,
        50,
        {"a": 12_000.0},
        s.history,
    )
    m = t.metrics()
    assert m["race/a/finish_rate"] == 0.5 and m["race/a/best_ratio"] == 1.2
    cut = {**base, "finished": False, "race_time": 2_000, "greedy": True, "end": ["stuck"]}
    t.add_race(cut, 5)  # a greedy race that did not finish: where and why it ended
    assert {k: t.history[-1][k] for k in ("time_ms", "progress", "end")} == {
        "time_ms": None,
        "progress": 0.5,
        "end": ["stuck"],
    }
    # a later, slower greedy race is not a new best after the resume
    assert not t.add_race({**base, "finished": True, "race_time": 13_000, "greedy": True}, 5)
    state = s.state_dict()
    assert torch.load(_saved(state), weights_only=True) == state  # plain containers only


def test_metric_names_are_mlflow_safe_by_hand():
    assert metric_map_name("procedural:112") == "procedural_112"
    assert metric_map_name("maps/circuit.csv") == "maps_circuit.csv"
    assert metric_map_name("starter") == "starter"
    s = RaceStats(reference_ms={"procedural:7": 10_000.0}, length_m={"procedural:7": 100.0})
    race = {"map": "procedural:7", "meters_advanced_along_centerline": [100.0]}
    s.add_race({**race, "input_w": [1.0], "finished": True, "race_time": 11_000, "greedy": True}, 9)
    assert s.metrics()["race/procedural_7/best_ratio"] == 1.1


def _saved(obj) -> object:
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def test_progress_figures():
    m = {
        "race/a/finish_rate": 0.5,
        "race/b/finish_rate": 1.0,
        "race/a/best_time": 20.0,
        "race/b/best_time": 30.5,
        "race/a/best_ratio": 1.1,
        "race/b/best_ratio": 1.2,
        "throughput/transitions_per_s": 760.4,
        "throughput/samples_per_s": 4100.6,
        "train/loss": 0.012345,
    }
    # a cycle: the worst map's finish rate and best ratio, named; maps never finished
    cycle = dict(m, **{"race/c/finish_rate": 0.0})
    assert progress_figures(cycle, elapsed_s=271.0, budget_s=1800.0) == {
        "time": "4:31<25:29",
        "finish": "0% c",
        "ratio": "1.200 b",
        "unfinished": "1",
        "trans/s": "760",
        "samples/s": "4101",
        "loss": "0.0123",
    }
    # one map: its own figures
    one = {"race/a/finish_rate": 0.5, "race/a/best_time": 20.0, "race/a/best_ratio": 1.1}
    assert progress_figures(one) == {"finish": "50%", "best": "20.00s", "ratio": "1.100"}
    assert progress_figures({}, elapsed_s=3725.0, budget_s=7200.0) == {"time": "1:02:05<57:55"}
    assert progress_figures({}) == {}


@pytest.mark.parametrize(
    "group", ["experiment", "map", "network", "reward", "exploration", "logger", "trainer"]
)
def test_every_group_option_composes_and_plans(group):
    from trackmind.training.factory import plan_run

    options = sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))
    assert options
    gpu_only = {"experiment": {"linesight_gpu"}, "trainer": {"gpu"}}.get(group, set())
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        for opt in options:
            overrides = [f"{group}={opt}"]
            if opt in gpu_only and not torch.cuda.is_available():
                if group == "experiment":  # each GPU-only key refused in one line, at once
                    with pytest.raises(ConfigError, match="^collector.cuda_graph: CUDA graphs"):
                        plan_run(compose("train", overrides))
                    overrides.append("collector.cuda_graph=false")
                    with pytest.raises(
                        ConfigError, match="^learner.cuda_graph: needs a CUDA.*=false learner.comp"
                    ):
                        plan_run(compose("train", overrides))
                    overrides.append("learner.cuda_graph=false")
                    with pytest.raises(ConfigError, match="^learner.compile_optimizer: fuses"):
                        plan_run(compose("train", overrides))
                    overrides.append("learner.compile_optimizer=false")  # as the first said
                with pytest.raises(ConfigError, match="^trainer.accelerator: gpu asked for"):
                    plan_run(compose("train", overrides))
                overrides.append("trainer.accelerator=cpu")  # the rest of it plans here
            if group == "logger" and opt == "mlflow_server" and probe("127.0.0.1", 5000, 1.0):
                with pytest.raises(ConfigError, match="^logger.tracking_uri: no MLflow"):
                    plan_run(compose("train", overrides))  # no server runs here: named
                overrides.append("logger.tracking_uri=sqlite:///unused.db")
            plan = plan_run(compose("train", overrides))
            assert plan.cycle.entries, f"{group}={opt}"


def test_long_line_recipe_trains_without_the_distance_to_finish_input():
    """experiment=long_line: grandprix_long on 183 floats, the network sized to them, with the
    learning rate its runs were measured with (the defaults' until 2026-12-06)."""
    from trackmind.training.factory import plan_run

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        plan = plan_run(compose("train", ["experiment=long_line"]))
    assert [e.name for e in plan.cycle.entries] == ["maps/grandprix_long.csv"]
    assert plan.float_dim == 183 == plan.float_mean.shape[0]
    assert plan.cfg["env"]["observation"]["terms"]["floats"]["group"]["distance_to_finish"] is None
    assert plan.cfg["learner"]["lr"]["points"] == [[0, 1e-3], [300000, 3e-4], [1500000, 3e-5]]


def test_technical_recipe_is_the_measured_runs_config():
    """experiment=technical is map=technical with the learning rate its three runs were
    measured with (docs/learning.md), nothing else."""
    from omegaconf import OmegaConf

    measured = "learner.lr.points=[[0,1.0e-3],[300000,3.0e-4],[3000000,5.0e-5]]"
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        recipe = OmegaConf.to_container(compose("train", ["experiment=technical"]))
        runs = OmegaConf.to_container(compose("train", ["map=technical", measured]))
    assert recipe == runs
    assert recipe["map"]["cycle"][0]["wall_price"] == -0.035


def test_csv_logger_run_ends_cleanly(tmp_path):
    args = [
        a for a in _args(tmp_path, "logger=csv", "trainer.max_steps=5") if "tracking_uri" not in a
    ]
    res = subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=180,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["global_step"] == 5 and summary["mlflow_run_id"] is None
    assert list((tmp_path / "run" / "csv").rglob("metrics.csv"))
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "mlflow.db").exists()
