"""collector.device: where collectors infer, checked when the run is planned.

The rule value by value, the one-line errors, the CPU path acting exactly as before (same
actions and Q values for a fixed seed), the shared network made on the collectors' device,
publish and pull through it, and a real collector process body on `cpu`. The CUDA paths
(CUDA IPC, device-to-device copies) need a GPU and are not run here.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from specs import ray_collector

from trackmind.agent.acting import BatchedPolicy, cars_q_tensor
from trackmind.agent.device import DEVICES, resolve_device
from trackmind.agent.exploration import select_actions
from trackmind.agent.inference import make_inference_network
from trackmind.collectors.parts import build_collector_parts, make_policy
from trackmind.collectors.shared_handles import (
    make_shared,
    publish_weights,
    pull_weights,
    read_spool,
    shared_device,
)
from trackmind.collectors.spec import CollectorSpec
from trackmind.env.observations import FLOATS
from trackmind.errors import ConfigError
from trackmind.training.factory import plan_run

ROOT = Path(__file__).resolve().parents[1]
NO_CUDA = not torch.cuda.is_available()


def _plan(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose("train", overrides=list(overrides))
    return plan_run(cfg)


# --- the rule ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, cuda, want",
    [
        ("auto", True, "cuda"),
        ("auto", False, "cpu"),
        ("cpu", True, "cpu"),
        ("cpu", False, "cpu"),
        ("cuda", True, "cuda"),
    ],
)
def test_resolve_device_value_by_value(name, cuda, want):
    assert resolve_device(name, cuda) == want


def test_cuda_without_cuda_and_unknown_names_are_config_errors():
    with pytest.raises(ConfigError) as e:
        resolve_device("cuda", False)
    assert e.value.key == "collector.device" and "no CUDA GPU" in str(e.value)
    for bad in ("gpu", "cuda:0", "", None, 1):
        with pytest.raises(ConfigError, match="^collector.device: must be one of auto, cpu"):
            resolve_device(bad, True)  # type: ignore[arg-type]
    assert DEVICES == ("auto", "cpu", "cuda")


def test_every_collector_group_says_auto():
    for group in ("local", "ray", "tminterface"):
        assert OmegaConf.load(ROOT / f"conf/collector/{group}.yaml")["device"] == "auto"
    assert _plan().collector.device == "auto"  # and the plan keeps it


def test_shared_network_lives_where_local_collectors_infer():
    local = _plan().collector
    assert shared_device(local, cuda_available=False) == "cpu"
    assert shared_device(local, cuda_available=True) == "cuda"
    assert shared_device(replace(local, device="cpu"), cuda_available=True) == "cpu"
    # Ray workers take numpy state dicts: the learner's copy stays on the host
    fleet = ray_collector(device="cuda", gpus_per_worker=0.5)
    assert shared_device(fleet, cuda_available=True) == "cpu"
    with pytest.raises(ConfigError, match="^collector.device:"):
        shared_device(replace(local, device="cuda"), cuda_available=False)


# --- refused when the run is planned ------------------------------------------------------
@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA: collector.device=cuda plans")
def test_cuda_on_a_machine_without_it_is_refused_at_plan_time():
    with pytest.raises(ConfigError) as e:
        _plan("collector.device=cuda")
    assert str(e.value).startswith("collector.device: cuda asked for")
    assert "\n" not in str(e.value)


def test_cpu_plans_anywhere_and_bad_values_are_refused():
    assert _plan("collector.device=cpu").collector.device == "cpu"
    with pytest.raises(ConfigError, match="^collector.device: must be one of auto, cpu, cuda"):
        _plan("collector.device=tpu")


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        (["collector.device=cuda"], "collector.gpus_per_worker", "must be > 0"),
        (["collector.gpus_per_worker=-1"], "collector.gpus_per_worker", "share in [0, 1]"),
        (["collector.gpus_per_worker=1.5"], "collector.gpus_per_worker", "whole number"),
        (["collector.device=gpu"], "collector.device", "must be one of"),
    ],
)
def test_ray_gpu_settings_are_refused_naming_the_key(overrides, key, words):
    pytest.importorskip("ray")
    with pytest.raises(ConfigError) as e:
        _plan("collector=ray", *overrides)
    assert str(e.value).startswith(key + ":") and words in str(e.value)


@pytest.mark.skipif(not NO_CUDA, reason="this machine has CUDA")
def test_a_local_ray_without_gpus_refuses_gpu_shares():
    pytest.importorskip("ray")
    with pytest.raises(ConfigError, match="^collector.gpus_per_worker: 1 workers of 0.5 GPU"):
        _plan("collector=ray", "collector.gpus_per_worker=0.5")
    # a cluster elsewhere may have the GPUs: its workers check on their own node
    plan = _plan(
        "collector=ray",
        "collector.address=auto",
        "collector.device=cuda",
        "collector.gpus_per_worker=0.5",
    )
    assert plan.collector.gpus_per_worker == 0.5


def test_ray_workers_use_only_a_gpu_they_reserved():
    from trackmind.collectors.fleet.settings import worker_cuda_available, worker_options

    assert not worker_cuda_available(ray_collector(gpus_per_worker=0), cuda_available=True)
    assert not worker_cuda_available(ray_collector(), cuda_available=True)  # 0 by default
    shared_gpu = ray_collector(cpus_per_worker=2, gpus_per_worker=0.25)
    assert not worker_cuda_available(shared_gpu, cuda_available=False)
    assert worker_cuda_available(shared_gpu, cuda_available=True)
    assert worker_options(shared_gpu) == {"num_cpus": 2, "num_gpus": 0.25}
    assert worker_options(ray_collector()) == {"num_cpus": 1, "num_gpus": 0.0}


# --- the CPU path acts as before ----------------------------------------------------------
def _spec(*overrides: str) -> CollectorSpec:
    cycle = "map.cycle=[{map: starter, exploration: 1, greedy: 1}]"
    return _plan("debug=smoke", cycle, *overrides).collectors


def _old_act(p: BatchedPolicy, obs: dict, greedy, started, version: int):
    """BatchedPolicy.act as it was before collector.device (numpy Q, one CPU copy a group)."""
    p.frozen.update(greedy, started, version)
    img = torch.from_numpy(obs["frame"]) if "frame" in obs else None
    floats = torch.from_numpy(obs[FLOATS])
    q = np.empty((len(greedy), p.live.net.n_actions), np.float32)
    explore = np.flatnonzero(~greedy)
    if len(explore):
        q[explore] = cars_q_tensor(p.live, img, floats, explore, p.k, p.gen).numpy()
    p.frozen.fill(q, img, floats)
    p.hold.release(np.flatnonzero(started))
    actions, was_greedy = select_actions(q, p.explorer.params(p.frames()), p.rng, p.hold)
    actions[greedy] = q[greedy].argmax(axis=1)
    was_greedy[greedy] = True
    return actions, q, was_greedy


@pytest.mark.parametrize("network", ["iqn_floats", "iqn_cpu"])  # floats only; frames too
def test_batched_policy_on_cpu_acts_exactly_as_before(network):
    spec = _spec(f"network={network}")
    race, _, net = build_collector_parts(spec, n_cars=4)
    torch.manual_seed(0)
    with torch.no_grad():
        for prm in net.parameters():
            prm.normal_(std=0.2)
    net.to(resolve_device("cpu", torch.cuda.is_available()))
    live = make_inference_network(net, "none")
    new = make_policy(spec, live, 4, 7, frames=lambda: 0)
    old = make_policy(spec, live, 4, 7, frames=lambda: 0)
    assert new.device == torch.device("cpu") and new.gen.device == torch.device("cpu")
    obs, _ = race.reset()
    assert (obs["frame"].size > 0) == (network == "iqn_cpu")  # frames into the network
    patterns = [[0, 0, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1], [0, 1, 0, 0]]  # greedy cars
    for step in range(24):
        greedy = np.array(patterns[(step // 3) % len(patterns)], bool)
        started = np.zeros(4, bool) if step % 3 else np.ones(4, bool)
        version = step // 5
        a1, q1, g1 = new.act(obs, greedy, started, version)
        a2, q2, g2 = _old_act(old, obs, greedy, started, version)
        np.testing.assert_array_equal(q1, q2)
        np.testing.assert_array_equal(a1, a2)
        np.testing.assert_array_equal(g1, g2)
        assert q1.dtype == np.float32 and q1.shape == (4, net.n_actions)
        obs, *_ = race.step(a1)
    assert sorted(new.frozen.nets) == sorted(old.frozen.nets) and len(new.frozen.nets) >= 1
    race.close()


# --- the shared network: made on a device, published and pulled ---------------------------
class _Net(torch.nn.Module):
    def __init__(self, value: float = 0.0) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("mean", torch.zeros(3))
        with torch.no_grad():
            self.lin.weight.fill_(value)
            self.mean.fill_(value)


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        torch.equal(x.cpu(), y.cpu())
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_publish_and_pull_through_a_shared_network_on_the_cpu_device():
    shared = make_shared(_Net(), queue_size=2, device="cpu")
    try:
        assert all(t.device.type == "cpu" and t.is_shared() for t in shared.network.parameters())
        link = shared.link(0)
        online = _Net(3.0)
        assert publish_weights(shared, online) == 1
        assert _same(shared.network, online) and shared.weights_version.value == 1
        target = _Net(-1.0)
        assert pull_weights(link, target, -1) == 1 and _same(target, online)
        with torch.no_grad():
            target.lin.weight.fill_(9.0)
        assert pull_weights(link, target, 1) == 1  # nothing newer: no copy
        assert float(target.lin.weight.detach()[0, 0]) == 9.0
        assert publish_weights(shared, _Net(5.0)) == 2
        assert pull_weights(link, target, 1) == 2 and float(target.lin.weight.detach()[0, 0]) == 5.0
        assert link.lock.acquire(False)  # pull left its lock free
        link.lock.release()
    finally:
        shared.cleanup()


def test_a_collector_process_body_on_cpu_races_with_the_published_weights():
    """local_process._run with collector.device=cpu, in a thread: its network goes to the
    device, pulls the published weights, and a race arrives dated with that version."""
    from trackmind.collectors import local_process
    from trackmind.queueing import RaceFile

    plan = _plan("debug=smoke", "collector.device=cpu")
    device = shared_device(plan.collector, torch.cuda.is_available())
    shared = make_shared(plan.new_network(), 4, device)
    threads = torch.get_num_threads()
    try:
        link = shared.link(0)
        assert publish_weights(shared, plan.new_network()) == 1
        body = threading.Thread(
            target=local_process._run,
            args=(plan.collectors, 0, link, 0, os.getppid()),
            daemon=True,
        )
        body.start()
        msg = link.queue.get(timeout=60)
        while not isinstance(msg, RaceFile):
            msg = link.queue.get(timeout=60)
        shared.stop.set()
        while body.is_alive():  # it may wait on a full queue until it sees the stop flag
            try:
                link.queue.get(timeout=0.1)
            except Exception:
                pass
        body.join(30)
        race = read_spool(msg.path)
        assert race["weights_version"] == 1 and race["collector"] == 0
    finally:
        shared.stop.set()
        shared.cleanup()
        torch.set_num_threads(threads)
