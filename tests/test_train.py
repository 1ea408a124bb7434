"""The learning loop end to end: scripts/train.py with real processes, queue, buffers, MLflow.

Each test runs the real script in a subprocess (spawned collectors, the SQLite MLflow
store under the test's folder) with the `debug=smoke` settings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from smoke_cli import resume_args, smoke_args, unbuffered_env, wait_for_log

from trackmind.errors import ConfigError
from trackmind.training.datamodule import replay_ratio_allows
from trackmind.training.factory import plan_run
from trackmind.training.race_stats import race_ratio

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "scripts" / "train.py"


_args, _env = smoke_args, unbuffered_env


def _collectors(pid: int) -> list[int]:
    """Spawned collector processes of `pid` (multiprocessing spawn children)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and "spawn_main" in cmd:
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for_collectors(proc: subprocess.Popen, n: int = 1, timeout_s: float = 60) -> list[int]:
    """The run's collector processes, once at least `n` are up."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        kids = _collectors(proc.pid)
        if len(kids) >= n:
            return kids
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} collector processes appeared")


def _wait_for_collector(proc: subprocess.Popen, timeout_s: float = 60) -> int:
    return _wait_for_collectors(proc, 1, timeout_s)[0]


def test_smoke_run_learns_syncs_weights_and_records_races(tmp_path):
    t0 = time.monotonic()
    held_out = ("validation.maps=[procedural:7]", "validation.every_s=0.05", "validation.average=2")
    res = subprocess.run(
        _args(tmp_path, *held_out), capture_output=True, text=True, env=_env(), timeout=180
    )
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    assert elapsed < 60, f"smoke run took {elapsed:.0f} s"
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["global_step"] == 40 and s["samples_learned"] == 40 * 32  # batches were learned
    assert s["weights_published"] > 1
    assert max(s["race_weights_versions"]) > 1  # races were driven by published weights
    assert s["races"] > 0 and s["transitions"] > 0 and s["frames"] >= s["transitions"]
    assert s["collector_restarts"] == 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(s["mlflow_run_id"])
    assert run.data.params["learner.batch_size"] == "32"
    assert run.data.params["map.cycle/0/map"] == "starter"
    for metric in (
        "train/loss",
        "race/starter/finish_rate",
        "throughput/samples_per_s",
        "objective",
        "validation/progress",
    ):
        assert metric in run.data.metrics, metric
    for share in ("throughput/learner_wait_share", "throughput/learner_sample_share"):
        assert 0.0 <= run.data.metrics[share] <= 1.0, share
    assert run.data.tags["overrides"].startswith("debug=smoke")
    # the held-out map was raced (at the end at least); validated.pt kept the best
    rows = s["validation"]
    assert rows and rows[0]["kept"] and rows[-1]["step"] == 40
    assert all(0.0 < r["validation/progress"] <= 1.0 for r in rows)
    kept = torch.load(tmp_path / "run" / "validated.pt", weights_only=True)
    assert kept["validation"]["maps"][0]["map"] == "procedural:7"
    assert kept["validation"]["step"] == max(r["step"] for r in rows if r["kept"])
    # from the second validation on, the mean of the last two is raced and kept as averaged.pt
    assert len(rows) >= 2 and "validation/averaged_finished" in rows[-1]
    averaged = torch.load(tmp_path / "run" / "averaged.pt", weights_only=True)
    # the last two steps validated: the end of fit may validate the last timed step again,
    # which counts once
    assert averaged["averaged"] == sorted({r["step"] for r in rows})[-2:]
    ensemble = torch.load(tmp_path / "run" / "ensemble.pt", weights_only=True)
    assert ensemble["ensemble"] == averaged["averaged"] and len(ensemble["members"]) == 2
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"averaged.pt", "ensemble.pt"} <= artifacts
    # the final network evaluates greedily on a procedural map it never saw
    ckpt = tmp_path / "run" / "agent.pt"
    res = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "evaluate.py"),
            str(ckpt),
            "--maps",
            "procedural:5",
            "--plot-dir",
            str(tmp_path / "eval"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    row = [x for x in res.stdout.splitlines() if x.startswith("| procedural:5 |")]
    assert len(row) == 1 and "s |" in row[0]
    assert (tmp_path / "eval" / "procedural_5.png").stat().st_size > 10_000  # trajectory plot
    from PIL import Image

    assert Image.open(tmp_path / "eval" / "procedural_5.gif").n_frames > 1  # the race's GIF
    bad = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "evaluate.py"), str(tmp_path / "nope.pt")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and bad.stderr.strip().endswith("checkpoint not found")


def test_sweep_makes_one_mlflow_run_per_job(tmp_path):
    args = [
        sys.executable,
        str(TRAIN),
        "-m",
        "debug=smoke",
        "trainer.max_steps=10",
        "learner.batch_size=16,32",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"logger.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
    ]
    res = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("trackmind")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 2
    assert sorted(r.data.params["learner.batch_size"] for r in runs) == ["16", "32"]
    assert {r.info.run_name for r in runs} == {
        "debug=smoke,trainer.max_steps=10,learner.batch_size=16",
        "debug=smoke,trainer.max_steps=10,learner.batch_size=32",
    }
    assert {r.data.tags["sweep_job"] for r in runs} == {"0", "1"}
    assert all("objective" in r.data.metrics for r in runs)


def test_killed_collector_is_restarted_and_buffer_kept(tmp_path):
    proc = subprocess.Popen(
        _args(tmp_path, "trainer.max_steps=-1", "trainer.max_time_s=25"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        victim = _wait_for_collector(proc)
        # killed once its transitions fill the buffer (the run's log says learning starts), not
        # after a fixed sleep: on a busy machine the collector can take longer to race
        wait_for_log(proc, tmp_path / "run" / "train.log", "learning starts")
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert s["collector_restarts"] >= 1 and s["restarts"]
    at_restart = s["restarts"][0]
    assert at_restart["buffer"] > 0
    assert s["buffer_size"] >= at_restart["buffer"]  # nothing buffered was lost
    assert s["transitions_added"] > at_restart["transitions_added"]  # the new collector works
    assert "collector 0 died" in out + err  # logged


def _ctrl_c_reaches_it() -> None:
    """The run's own Ctrl-C handling, however the suite was started: a shell that starts a
    job in the background (`cmd &`) starts it with SIGINT ignored, and Python then never
    installs its KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_leaves_no_child_process(tmp_path):
    proc = subprocess.Popen(
        _args(tmp_path, "trainer.max_steps=-1", "trainer.max_time_s=120", "collector.processes=2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=_ctrl_c_reaches_it,
    )
    try:
        kids = _wait_for_collectors(proc, 2)  # both up, not a fixed sleep
        assert len(kids) == 2
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while any(_alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [k for k in kids if _alive(k)]


# SIGTERM (a scheduler's stop) takes the same path as Ctrl-C with another exit code: slow
@pytest.mark.parametrize(
    ("sig", "code"),
    [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow)],
)
def test_stop_signal_keeps_what_was_learned_and_resume_continues(tmp_path, sig, code):
    """Ctrl-C / SIGTERM 30 s in, before the first periodic checkpoint (every 300 s)."""
    from mlflow.tracking import MlflowClient

    long_run = ("trainer.max_steps=-1", "trainer.max_time_s=300", "checkpoint.every_s=300")
    started = time.monotonic()
    proc = subprocess.Popen(
        _args(tmp_path, *long_run),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=_ctrl_c_reaches_it,
    )
    try:
        _wait_for_collector(proc)  # about 10 s after the start
        time.sleep(max(15.0, started + 30.0 - time.monotonic()))  # learning since about 15 s
        assert time.monotonic() - started >= 30.0  # well before the first checkpoint at 300 s
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-3000:]
    run = tmp_path / "run"
    s = json.loads((run / "summary.json").read_text())
    assert s["stopped_by"] == sig.name and s["global_step"] > 0
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "agent.pt").is_file()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.get_run(s["mlflow_run_id"]).info.status == "KILLED"
    logged = {a.path for a in client.list_artifacts(s["mlflow_run_id"])}
    assert {"agent.pt", "summary.json", "checkpoints"} <= logged
    more = subprocess.run(
        resume_args(tmp_path, str(run), f"trainer.max_steps={s['global_step'] + 10}"),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert more.returncode == 0, more.stderr[-3000:]
    after = json.loads((run / "summary.json").read_text())
    assert after["global_step"] == s["global_step"] + 10  # the step count went on
    assert after["mlflow_run_id"] == s["mlflow_run_id"] and after["stopped_by"] is None
    assert client.get_run(s["mlflow_run_id"]).info.status == "FINISHED"


# --- bad input: refused before any process starts ---------------------------------------
def _plan(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=list(overrides))
    return plan_run(cfg)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["map.cycle=[{map: nowhere}]"], "map.cycle[0].map"),
        (["env.frame_shape=[120,160]"], "network.image_shape"),
        (["network.float_dim=100"], "network.float_dim"),
        (["learner.batch_size=0"], "learner.batch_size"),
        (["collector.processes=0"], "collector.processes"),
        (["network.n_quantiles_train=7"], "network.n_quantiles_train"),
        (["reward.terms.progress.weight=fast"], "reward.terms.progress.weight"),
        (["+learner.momentum=0.9"], "learner.momentum"),
        (["validation.maps=[starter]"], "validation.maps"),  # a training map is not held out
        (["validation.maps=[procedural:7,nowhere]"], "validation.maps[1]"),
        (["validation.every_s=0"], "validation.every_s"),
    ],
)
def test_bad_config_is_refused_naming_the_key(overrides, key):
    with pytest.raises(ConfigError) as e:
        _plan(*overrides)
    assert str(e.value).startswith(key + ":")


def test_default_config_plans_and_matches_the_network():
    plan = _plan()
    assert plan.frame_shape == (48, 64) and plan.float_dim == 184
    assert plan.cycle.entries[0].name == "starter"
    assert _plan("network=iqn_linesight").frame_shape == (120, 160)


def test_bad_config_exits_2_with_one_line_before_any_process(tmp_path):
    res = subprocess.run(
        _args(tmp_path, "map.cycle=[{map: nowhere}]"), capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert lines[-1].startswith("config error: map.cycle[0].map:") and "nowhere" in lines[-1]
    assert not (tmp_path / "mlflow.db").exists()  # nothing started, nothing recorded


@pytest.mark.parametrize(
    ("arg", "start"),
    [
        (
            "map=nonexistent",
            "config error: map=nonexistent: no map option 'nonexistent' (options: ",
        ),
        ("network=big", "config error: network=big: no network option 'big' (options: "),
        ("+experiment=nope", "config error: +experiment=nope: no experiment option 'nope'"),
    ],
)
def test_unknown_group_option_is_one_line_exit_2(tmp_path, arg, start):
    res = subprocess.run(_args(tmp_path, arg), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(start), res.stderr
    if arg.startswith("map="):
        assert "starter" in lines[0] and "procedural:" in lines[0]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "run").exists()


def test_replay_ratio_rule():
    # ratio 4: 10 new transitions allow 40 samples; a batch of 8 fits at 32, not at 33
    assert replay_ratio_allows(32, 8, 10, 4.0)
    assert not replay_ratio_allows(33, 8, 10, 4.0)
    assert race_ratio(12_000, 10_000) == 1.2 and race_ratio(None, 10_000) is None


def test_race_stats_flags_the_best_greedy_race():
    from trackmind.training.race_stats import RaceStats

    st = RaceStats(reference_ms={"m": 10_000.0}, length_m={"m": 100.0})

    def race(t, greedy, finished=True):
        meters = [0.0, 50.0, 100.0 if finished else 60.0]
        return {
            "map": "m",
            "finished": finished,
            "race_time": t if finished else None,
            "greedy": greedy,
            "meters_advanced_along_centerline": meters,
            "input_w": [1.0, 0.0],
        }

    assert st.add_race(race(12_000, True), 2)  # first greedy finish
    assert not st.add_race(race(11_000, False), 2)  # exploration races never count
    assert not st.add_race(race(12_500, True), 2)
    assert st.add_race(race(11_500, True), 2)
    assert not st.add_race(race(None, True, finished=False), 2)
    m = st.metrics()
    assert m["race/m/best_ratio"] == 1.1  # best of all races (the exploration one)
    assert m["race/m/finish_rate"] == 0.8 and m["race/m/greedy_progress"] == 0.6
    assert m["race/m/greedy_finish_rate"] == 0.75  # 3 of the 4 greedy races
    assert m["race/m/greedy_accel_share"] == 0.5
    resumed = RaceStats(reference_ms={"m": 10_000.0}, length_m={"m": 100.0})
    resumed.load_state_dict(st.state_dict())
    assert resumed.metrics()["race/m/greedy_finish_rate"] == 0.75
    old = st.state_dict()
    del old["greedy_finishes"]  # a checkpoint from before the key resumes without it
    before = RaceStats(reference_ms={"m": 10_000.0}, length_m={"m": 100.0})
    before.load_state_dict(old)
    assert "race/m/greedy_finish_rate" not in before.metrics()
