"""collector=ray: the rules, the config, and the fleet on a local Ray instance.

One Ray instance serves the in-process tests of this module (module fixture, shut down at
the end); the training run starts its own, as `python scripts/train.py collector=ray` does,
and the tests check that no Ray process outlives it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from hydra import compose, initialize_config_dir
from smoke_cli import wait_for_log
from specs import ray_collector

from trackmind.collectors.fleet.fragment import SampleFragment, check_fragment, is_stale
from trackmind.collectors.fleet.receiver import writable
from trackmind.collectors.fleet.settings import parse_address, worker_options
from trackmind.collectors.fleet.statistics import summarise_episodes
from trackmind.collectors.fleet.worker import concat_obs, fleet_frames
from trackmind.errors import ConfigError
from trackmind.training.factory import plan_run

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TRAIN = ROOT / "scripts" / "train.py"
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _plan(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=list(overrides))
    return plan_run(cfg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


# --- pure rules ---------------------------------------------------------------------------
def test_staleness_rule():
    assert not is_stale(learner_version=10, policy_version=5, max_staleness=5)
    assert is_stale(learner_version=11, policy_version=5, max_staleness=5)
    assert not is_stale(3, 3, 0) and is_stale(4, 3, 0)
    assert not is_stale(2, 7, 0)  # a worker ahead of what the learner checks against


def test_address_forms():
    assert parse_address(None) == ("local", "", 0)
    assert parse_address("auto") == ("auto", "", 0)
    assert parse_address("10.0.0.5:6379") == ("node", "10.0.0.5", 6379)
    assert parse_address("[::1]:6379") == ("node", "::1", 6379)
    for bad in ("head", "head:abc", "http://head:80", "head:70000", "", "ray://head:10001", 6379):
        with pytest.raises(ConfigError) as e:
            parse_address(bad)
        assert str(e.value).startswith("collector.address:")


def test_episode_summary_values():
    rows = [
        {"finished": True, "race_time_ms": 12_000},
        {"finished": False, "race_time_ms": None},
        {"finished": True, "race_time_ms": 10_000},
        {"finished": False, "race_time_ms": None},
    ]
    m = summarise_episodes({"a": rows, "b": []}, {"a": 9_500.0})
    assert m == {
        "episodes/a/finish_rate": 0.5,
        "episodes/a/mean_time": 11.0,
        "episodes/a/best_time": 9.5,
    }


def test_fleet_frames_and_batched_observations():
    assert fleet_frames(1_000, 50, 4) == 1_200  # 4 workers assumed as fast as this one
    a = {"frame": np.zeros((2, 1, 3, 4), np.uint8), "floats": np.ones((2, 5), np.float32)}
    b = {"frame": np.ones((3, 1, 3, 4), np.uint8), "floats": np.zeros((3, 5), np.float32)}
    both = concat_obs([a, b])
    assert both["frame"].shape == (5, 1, 3, 4) and both["floats"][:2].sum() == 10
    assert both["frame"][2:].all() and concat_obs([a]) is a


def _fragment(t: int = 3, **overrides) -> SampleFragment:
    r = {
        "actions": np.zeros(t, np.int64),
        "rewards": np.zeros(t),
        "q_values": np.zeros((t, 12), np.float32),
        "state_float": np.zeros((t + 1, 4), np.float32),
        "frames": np.zeros((t + 1, 1, 3, 4), np.uint8),
        "map": "starter",
        "finished": False,
        "race_time": None,
        "potentials": {},
        **overrides,
    }
    return SampleFragment(0, 0, 0, policy_version=1, weights_version=2, n_steps=t, rollout=r)


def test_fragment_checks_name_what_is_wrong():
    assert check_fragment(_fragment(), {"starter"}) is None
    assert "unknown map" in check_fragment(_fragment(map="elsewhere"), {"starter"})
    assert "['state_float'] has 3 entries" in check_fragment(
        _fragment(state_float=np.zeros((3, 4)))
    )
    assert "lacks potentials" in check_fragment(_no_potentials())
    assert "not a SampleFragment" in check_fragment({"actions": []})


def _no_potentials() -> SampleFragment:
    f = _fragment()
    del f.rollout["potentials"]
    return f


def test_read_only_arrays_become_writable_copies():
    a = np.arange(4)
    a.flags.writeable = False
    out = writable({"x": a, "p": {"y": a}, "n": 3})
    assert out["x"].flags.writeable and out["p"]["y"].flags.writeable and out["n"] == 3
    assert np.array_equal(out["x"], a)


def test_rollout_worker_batches_its_env_workers_and_dates_races():
    """Two games of two cars in one worker, weights moving on while races run (no Ray)."""
    from trackmind.collectors.fleet.worker import RolloutWorker

    plan = _plan(
        "debug=smoke",
        "collector=ray",
        "collector.envs_per_worker=2",
        "collector.cars_per_process=2",
    )
    worker = RolloutWorker(plan.collectors, index=1, seed=0, n_workers=3)
    net = plan.new_network()
    state = {k: v.numpy() for k, v in net.state_dict().items()}
    asked = [0]

    def weights(held: int):  # the learner publishes a new version every 10 refreshes
        asked[0] += 1
        v = 1 + asked[0] // 10
        return (v, state, 1000) if v > held else None

    frags: list[SampleFragment] = []
    worker.run(lambda f: frags.append(f) or len(frags) < 12, lambda: False, weights)
    assert len(frags) == 12 and {f.env for f in frags} == {0, 1}
    assert {f.worker for f in frags} == {1} and worker.version >= 2
    for f in frags:
        assert check_fragment(f, {"starter"}) is None
        assert 1 <= f.policy_version <= f.weights_version
        assert f.rollout["weights_version"] == f.weights_version
    assert any(f.policy_version < f.weights_version for f in frags)  # refreshed mid-race
    assert worker.frames() == 1000 + worker.own_actions * 3  # the fleet's estimate
    worker.close()


# --- config: refused before anything starts ----------------------------------------------
def test_ray_config_plans():
    plan = _plan("collector=ray")
    assert plan.collector.backend == "ray"
    assert plan.collector.address is None


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["collector=ray", "collector.max_staleness=-1"], "collector.max_staleness", ">= 0"),
        (["collector=ray", "collector.envs_per_worker=0"], "collector.envs_per_worker", ">= 1"),
        (["collector=ray", "+collector.gpus=1"], "collector.gpus", "unknown key"),
        (["+collector.max_staleness=3"], "collector.max_staleness", "unknown key"),
        (["collector.backend=slurm"], "collector.backend", "known: local, ray"),
        (["collector=ray", "collector.address=head"], "collector.address", "host:port"),
        (
            ["collector=ray", "collector.processes=2", "collector.num_cpus=1"],
            "collector.num_cpus",
            "cannot hold 2 workers",
        ),
        (["collector=ray", "collector.connect_timeout_s=0"], "collector.connect_timeout_s", "> 0"),
    ],
)
def test_bad_ray_config_is_refused_naming_the_key(overrides, key, words):
    with pytest.raises(ConfigError) as e:
        _plan(*overrides)
    assert str(e.value).startswith(key + ":") and words in str(e.value)


def test_gpu_share_reaches_the_worker_actor_options(monkeypatch):
    """collector.gpus_per_worker becomes the wrapper actors' num_gpus (no GPU needed: the
    manager's spawn is run on its plain class, the actor class replaced by a recorder)."""
    from trackmind.collectors.fleet import manager

    plan = _plan(
        "collector=ray",
        "collector.address=auto",  # a cluster elsewhere: no GPU needed on this machine
        "collector.device=cuda",
        "collector.gpus_per_worker=0.25",
        "collector.cpus_per_worker=2",
    )
    asked: list[dict] = []
    actor = SimpleNamespace(run=SimpleNamespace(remote=str), pid=SimpleNamespace(remote=str))

    class Recorder:  # RolloutWorkerWrapper.options(...).remote(...) -> an actor handle
        @staticmethod
        def options(**kw):
            asked.append(kw)
            return SimpleNamespace(remote=lambda *args: actor)

    monkeypatch.setattr(manager, "RolloutWorkerWrapper", Recorder)
    plain = manager.RolloutManager.__ray_metadata__.modified_class  # the class, not the actor
    # the pool hands the manager its workers' resources and the spec, boxed
    fleet = plain([plan.collectors], worker_options(plan.collector), 2, 0, None, None, 0)
    fleet._spawn(0)
    fleet._spawn(1)
    assert asked == [{"num_cpus": 2, "num_gpus": 0.25}] * 2
    default = _plan("collector=ray")
    fleet0 = plain([default.collectors], worker_options(default.collector), 1, 0, None, None, 0)
    fleet0._spawn(0)
    assert asked[-1] == {"num_cpus": 1, "num_gpus": 0.0}  # the default: no GPU reserved


def test_local_ray_offers_gpus_only_when_workers_reserve_them():
    from trackmind.collectors.fleet.connect import init_kwargs

    col = _plan("collector=ray").collector
    assert init_kwargs(col)["num_gpus"] == 0
    import torch

    with_gpus = init_kwargs(replace(col, gpus_per_worker=0.5))["num_gpus"]
    assert with_gpus == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_unreachable_address_is_refused_at_once():
    from trackmind.collectors.fleet.settings import validate_ray_collector

    port = _free_port()  # nothing listens there
    col = replace(_plan("collector=ray").collector, address=f"127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(ConfigError) as e:
        validate_ray_collector(col)
    assert time.monotonic() - t0 < 2
    msg = str(e.value)
    assert msg.startswith(f"collector.address: cannot reach a Ray cluster at 127.0.0.1:{port}")
    assert "\n" not in msg
    with pytest.raises(ConfigError, match="^collector.address: cannot reach"):  # in plan_run
        _plan("collector=ray", f"collector.address=127.0.0.1:{port}")


def test_silent_address_gives_one_line_and_no_hang():
    """A port that accepts but never speaks Ray: joining gives up after connect_timeout_s
    (Ray alone retries for minutes), and the process exits cleanly."""
    code = (
        "import sys, time; from trackmind.errors import ConfigError; "
        "from trackmind.collectors.fleet.connect import connect_ray\n"
        f"sys.path.insert(0, {str(HERE)!r}); from specs import ray_collector\n"
        "spec = ray_collector(address=sys.argv[1], connect_timeout_s=3)\n"
        "print(f'joining at {time.monotonic()}', file=sys.stderr, flush=True)\n"
        "try:\n"
        "    connect_ray(spec)\n"
        "except ConfigError as e:\n"
        "    print(f'config error: {e}', file=sys.stderr); sys.exit(2)\n"
    )
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        res = subprocess.run(
            [sys.executable, "-c", code, address], capture_output=True, text=True, timeout=60
        )
        done = time.monotonic()
    assert res.returncode == 2, res.stderr[-2000:]
    # from the join to the process's exit, without the interpreter's and imports' start-up,
    # which a loaded CI host stretches (time.monotonic is one clock for all processes on Linux)
    joining = float(re.search(r"^joining at ([0-9.]+)$", res.stderr, re.M).group(1))
    elapsed = done - joining
    last = [x for x in res.stderr.splitlines() if x.strip()][-1]
    assert last == (
        f"config error: collector.address: no answer from the Ray cluster at {address} "
        "within 3 s (collector.connect_timeout_s)"
    )
    assert elapsed < 12, f"took {elapsed:.0f} s from the join to the exit"


# --- the fleet on a local Ray ------------------------------------------------------------
@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for this module's in-process tests (2 worker CPUs)."""
    import ray

    from trackmind.collectors.fleet.connect import connect_ray

    owned = connect_ray(ray_collector(processes=2, object_store_mb=256))
    yield ray.get_runtime_context().gcs_address
    if owned:
        ray.shutdown()


def _ray_processes(root: psutil.Process) -> list[psutil.Process]:
    out = []
    for p in root.children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "ray" in cmd:
            out.append(p)
    return out


def test_local_ray_listens_on_loopback_only(local_ray):
    assert local_ray.split(":")[0] == "127.0.0.1"
    listening = []
    for p in [psutil.Process(), *_ray_processes(psutil.Process())]:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.Error:
            continue
        listening += [c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN]
    assert len(listening) >= 3  # the GCS, the raylet, workers
    assert set(listening) <= LOOPBACK, listening
    assert os.environ.get("RAY_AUTH_MODE") == "token"  # Ray's token authentication is on ...
    token = Path.home() / ".ray" / "auth_token"  # ... and its token file private
    assert token.stat().st_mode & 0o077 == 0


def test_joining_the_cluster_by_address(local_ray):
    code = (
        "import ray, sys; from trackmind.collectors.fleet.connect import connect_ray; "
        f"sys.path.insert(0, {str(HERE)!r}); from specs import ray_collector; "
        f"connect_ray(ray_collector(address={local_ray!r}, connect_timeout_s=20)); "
        "print(int(ray.cluster_resources()['CPU']))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    import ray

    assert res.stdout.strip().splitlines()[-1] == str(int(ray.cluster_resources()["CPU"]))


def _fleet_parts(*overrides: str):
    from trackmind.collectors.shared_handles import make_shared
    from trackmind.replay.buffers import make_buffers
    from trackmind.training.datamodule import ReplayDataModule

    plan = _plan("debug=smoke", "collector=ray", *overrides)
    shared = make_shared(plan.new_network(), 8)
    frame = (1, *plan.frame_shape)
    buffers = make_buffers(plan.buffer, frame, plan.float_dim, ms_per_action=plan.ms_per_action)
    dm = ReplayDataModule(buffers, shared, 32, 1.0, gamma=lambda: 0.99)
    return plan.collectors, plan.new_network(), shared, dm


def _pump(pool, dm, until, timeout_s: float, check: bool = True) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check:
            pool.check()
        dm.drain(block_s=0.05)
        if until():
            return True
    return False


def test_fleet_streams_races_and_drops_stale_ones(local_ray):
    from trackmind.collectors.fleet.fleet_pool import RayCollectorPool
    from trackmind.collectors.shared_handles import publish_weights

    spec, online, shared, dm = _fleet_parts("collector.max_staleness=3")
    pool = RayCollectorPool(spec, shared, 1, 2, seed=0)
    assert not pool.owns_ray  # the module's Ray: the pool joins it and leaves it running
    publish_weights(shared, online)  # version 1
    pool.start()
    try:
        assert _pump(pool, dm, lambda: dm.stats.races >= 3, 90), "no races arrived"
        assert dm.stats.weights_versions == {1}
        # the manager's status is polled every STATUS_EVERY_S: the worker shows up within that
        assert _pump(pool, dm, lambda: pool.alive() == 1, 10), pool._status
        # a forced old version: the learner moves 10 versions on, the fleet does not hear of it
        with shared.weights_version.get_lock():
            shared.weights_version.value += 10
        # races the receiver judged before the bump may still wait in its queue: once it has
        # dropped a stale one, its earlier batches are all queued, and one drain lets them in
        assert _pump(pool, dm, lambda: pool.receiver.stale_dropped >= 1, 30, check=False)
        dm.drain()
        added, frames = dm.transitions_added, shared.frames.value
        dropped = pool.receiver.stale_dropped
        assert _pump(pool, dm, lambda: pool.receiver.stale_dropped >= dropped + 3, 30, check=False)
        assert dm.transitions_added == added  # nothing stale reached the buffers
        assert shared.frames.value > frames  # though its frames were counted
        # publishing the new version brings fresh races back; the races the workers had
        # started with version 1 are now dropped at the workers, before they are sent
        races = dm.stats.races
        assert _pump(pool, dm, lambda: 11 in dm.stats.weights_versions, 30)
        assert dm.stats.races > races and dm.transitions_added > added
        m: dict[str, float] = {}  # EpisodeStatistics hears from the workers every 2 s

        def dropped_at_workers() -> bool:
            m.update(pool.metrics())
            return m.get("collector/stale_dropped_at_workers", 0) >= 1

        assert _pump(pool, dm, dropped_at_workers, 15)
        assert m["collector/stale_dropped"] >= 3 and m["collector/received"] >= dm.stats.races
        assert 0 <= m["episodes/starter/finish_rate"] <= 1 and m["episodes/total"] >= 3
        assert m["collector/lost"] == 0 and m["collector/invalid"] == 0
        # the PipelineMonitor timings of worker 0 arrive every 5 s
        assert _pump(pool, dm, lambda: 0 in dm.stats.collector_timings, 10)
        assert dm.stats.collector_timings[0]["inference_ms_per_action"] > 0
        pids = pool.pids()
    finally:
        pool.stop()
    assert len(pids) == 1
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(pids[0])  # the wrapper actor is gone
    assert shared.queues == []  # the receiver's queue left with it


def _wrapper(root: psutil.Process) -> psutil.Process | None:
    for p in _ray_processes(root):
        try:
            if "ray::RolloutWorkerWrapper" in " ".join(p.cmdline()):
                return p
        except psutil.Error:
            continue
    return None


def _train_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(TRAIN),
        "debug=smoke",
        "collector=ray",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"logger.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
        *extra,
    ]


def _summary_and_metrics(tmp_path: Path) -> tuple[dict, dict]:
    from mlflow.tracking import MlflowClient

    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(s["mlflow_run_id"])
    assert run.data.params["collector.backend"] == "ray"
    return s, run.data.metrics


def test_ray_training_run_restarts_a_killed_worker(tmp_path, local_ray):
    """A smoke training run with collector=ray joining the module's Ray; its worker actor
    is killed (SIGKILL) once it has filled the buffer, replaced, and training goes on."""
    args = _train_args(
        tmp_path,
        f"collector.address={local_ray}",
        "trainer.max_steps=-1",
        "trainer.max_time_s=25",
        "logger.media_every_s=3600",  # no race GIFs: collection is what is tested here
        "logger.system_metrics_every_s=0",
    )
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    try:
        deadline = time.monotonic() + 90
        victim = None
        while victim is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            victim = _wrapper(psutil.Process())  # the module's Ray runs the actors
            time.sleep(0.2)
        assert victim is not None, "no RolloutWorkerWrapper process appeared"
        # killed once its transitions fill the buffer (the run's log says learning starts), not
        # after a fixed sleep: on a busy machine the worker can take longer to race
        wait_for_log(
            proc, tmp_path / "run" / "train.log", "learning starts", deadline - time.monotonic()
        )
        os.kill(victim.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    s, metrics = _summary_and_metrics(tmp_path)
    assert s["global_step"] > 0 and s["samples_learned"] == 32 * s["global_step"]
    assert s["weights_published"] > 1 and max(s["race_weights_versions"]) > 1
    assert s["collector_restarts"] >= 1 and s["restarts"]
    at_restart = s["restarts"][0]
    assert at_restart["buffer"] > 0 and s["buffer_size"] >= at_restart["buffer"]
    assert s["transitions_added"] > at_restart["transitions_added"]  # the new worker races
    assert "rollout worker 0 stopped (its actor died" in out + err
    for metric in (
        "train/loss",
        "collector/stale_dropped",
        "collector/received",
        "episodes/starter/finish_rate",
        "collector/0/inference_ms_per_action",
        "collector/restarts",
    ):
        assert metric in metrics, metric
    deadline = time.monotonic() + 10  # the learner's actors went with it
    while _wrapper(psutil.Process()) is not None:
        assert time.monotonic() < deadline, "a RolloutWorkerWrapper outlived its learner"
        time.sleep(0.3)


@pytest.mark.slow
def test_ray_smoke_run_starts_and_stops_its_own_ray(tmp_path):
    """`train.py debug=smoke collector=ray` as a user runs it: Ray starts and ends with it."""
    proc = subprocess.Popen(
        _train_args(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen: list[psutil.Process] = []
    try:
        learner = psutil.Process(proc.pid)
        deadline = time.monotonic() + 90
        while _wrapper(learner) is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        seen = _ray_processes(learner)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    s, metrics = _summary_and_metrics(tmp_path)
    assert s["global_step"] == 40 and s["weights_published"] > 1
    assert max(s["race_weights_versions"]) > 1 and s["collector_restarts"] == 0
    assert metrics["collector/lost"] == 0 and "episodes/total" in metrics
    assert len(seen) >= 3  # the GCS, the raylet, the worker actor ...
    deadline = time.monotonic() + 15
    while [p for p in seen if _alive(p)]:  # ... and none outlives the run
        assert time.monotonic() < deadline, [p.pid for p in seen if _alive(p)]
        time.sleep(0.3)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.slow
def test_fleet_is_replaced_when_its_manager_dies(local_ray):
    import ray

    from trackmind.collectors.fleet.fleet_pool import RayCollectorPool
    from trackmind.collectors.shared_handles import publish_weights

    spec, online, shared, dm = _fleet_parts()
    pool = RayCollectorPool(spec, shared, 1, 2, seed=0)
    publish_weights(shared, online)
    pool.start()
    restarted: list[int] = []
    pool.on_restart = restarted.append
    try:
        assert _pump(pool, dm, lambda: dm.stats.races >= 1 and pool.pids(), 90)
        old = pool.pids()[0]
        ray.kill(pool.manager)  # its wrapper goes with it (the manager owns it)
        assert _pump(pool, dm, lambda: pool.restarts == 1, 20)
        assert restarted == [-1] and "manager died" in pool.deaths[-1][1]
        assert _pump(pool, dm, lambda: not psutil.pid_exists(old), 10)
        races = dm.stats.races
        assert _pump(pool, dm, lambda: dm.stats.races > races + 2, 90)  # the new fleet races
    finally:
        pool.stop()
