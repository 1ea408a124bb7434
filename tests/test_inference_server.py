"""collector.inference=server: one process computes every collector's Q values.

The server's answer for a batch of several collectors equals what each collector's own rule
(acting.batch_q: live weights for exploring cars, the frozen midpoint copy for greedy ones)
gives; a real pool of spawned processes (the server and two collectors, on the CPU) delivers
races dated with the published weights version; a Ray fleet refuses the layout.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from specs import smoke_plan

from trackmind.agent.acting import FrozenGreedy, batch_q
from trackmind.agent.inference import make_inference_network
from trackmind.collectors.inference_server import (
    InferenceServer,
    RemoteQ,
    make_server_link,
)
from trackmind.collectors.shared_handles import make_shared, publish_weights, spawn_context
from trackmind.collectors.spec import auto_processes
from trackmind.errors import ConfigError


def test_one_batch_for_several_collectors_is_each_collectors_own_rule():
    plan = smoke_plan("network=iqn_cpu", "collector.device=cpu")
    torch.manual_seed(0)
    shared = make_shared(plan.new_network(), 4, "cpu")
    try:
        publish_weights(shared, plan.new_network())
        cars = 3
        link = make_server_link(shared.network, 3, cars, spawn_context())
        server = InferenceServer(plan.collectors, link, shared.link(3), "cpu", seed=7)
        rng = np.random.default_rng(0)
        n = 3 * cars
        link.frames.copy_(torch.from_numpy(rng.integers(0, 256, link.frames.shape, np.uint8)))
        link.floats.copy_(torch.from_numpy(rng.standard_normal(link.floats.shape, np.float32)))
        greedy = np.array([0, 1, 0, 0, 0, 0, 1, 1, 0], bool)
        link.greedy.copy_(torch.from_numpy(greedy))
        link.started.fill_(True)
        asked = np.array([0, 2])  # collector 1 is not waiting
        server.answer(asked)

        rows = np.r_[0:3, 6:9]
        live = make_inference_network(plan.new_network())
        live.net.load_state_dict(shared.network.state_dict())
        k = plan.network.n_quantiles_inference
        frozen = FrozenGreedy(live, k, n)
        frozen.update(greedy & np.isin(np.arange(n), rows), np.ones(n, bool), 1)
        gen = torch.Generator().manual_seed(7)
        img, floats = link.frames[torch.from_numpy(rows)], link.floats[torch.from_numpy(rows)]
        want = batch_q(live, frozen, k, gen, img, floats, rows, greedy)
        assert torch.equal(link.q[torch.from_numpy(rows)], want)
        assert not link.q[3:6].any()  # nobody asked for collector 1's cars
        assert link.bound.tolist() == [-1, 1, -1, -1, -1, -1, 1, 1, -1]
        assert link.version.tolist() == [1, 0, 1]
        assert [e.is_set() for e in link.answers] == [True, False, True]
        remote = RemoteQ(link, 2, lambda: True)
        assert remote.race_version(0) == 1 and remote.race_version(2) == 1  # live, greedy
    finally:
        shared.cleanup()


def test_a_pool_with_a_server_delivers_races_with_the_published_version():
    from trackmind.collectors.local_pool import LocalCollectorPool
    from trackmind.collectors.shared_handles import read_spool
    from trackmind.queueing import RaceFile

    plan = smoke_plan("collector.device=cpu", "collector.inference=server", "collector.processes=2")
    shared = make_shared(plan.new_network(), 8, "cpu")
    pool = LocalCollectorPool(plan.collectors, shared, 2, max_restarts=0)
    try:
        assert publish_weights(shared, plan.new_network()) == 1
        pool.start()
        assert len(pool.pids()) == 3 and pool.alive() == 2  # the server is not a collector
        seen: set[int] = set()
        deadline = time.monotonic() + 120
        while len(seen) < 2 and time.monotonic() < deadline:
            for q in shared.queues:
                try:
                    msg = q.get(timeout=0.2)
                except Exception:
                    continue
                if isinstance(msg, RaceFile):
                    race = read_spool(msg.path)
                    assert race["weights_version"] == 1
                    seen.add(race["collector"])
            assert pool.check() == []
        assert seen == {0, 1}
    finally:
        pool.stop()


def test_ray_refuses_the_server_layout_naming_the_key():
    with pytest.raises(ConfigError, match="^collector.inference: server is for local"):
        smoke_plan("collector=ray", "collector.inference=server")


def test_unknown_layout_and_auto_processes():
    with pytest.raises(ConfigError, match="^collector.inference: must be one of process, server"):
        smoke_plan("collector.inference=central")
    assert [auto_processes(c) for c in (1, 2, 4, 16)] == [1, 1, 1, 13]
    plan = smoke_plan("collector.processes=auto")
    assert plan.collector.processes == auto_processes(__import__("os").cpu_count())


def test_inference_precision_is_checked_and_bf16_needs_a_gpu():
    from trackmind.agent.inference import inference_autocast

    with pytest.raises(ConfigError, match="^collector.precision: must be fp32 or bf16"):
        smoke_plan("collector.precision=fp16")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="^collector.precision: bf16 inference needs"):
            smoke_plan("collector.precision=bf16")
    with inference_autocast(torch.device("cpu"), "bf16"):  # a CPU infers in fp32
        assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="inference precision"):
        inference_autocast(torch.device("cpu"), "fp8")


def test_batch_q_under_bf16_autocast_gives_float32_for_mixed_batches():
    """collector.precision=bf16 on a GPU: exploring and greedy cars' values, computed in
    bf16, land in one float32 array (run here under the CPU's bf16 autocast)."""
    plan = smoke_plan("network=iqn_floats", "collector.device=cpu")
    live = make_inference_network(plan.new_network())
    k = plan.network.n_quantiles_inference
    frozen = FrozenGreedy(live, k, 4)
    greedy = np.array([True, False, True, False])
    frozen.update(greedy, np.ones(4, bool), 3)
    floats = torch.randn(4, plan.float_dim)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q = batch_q(live, frozen, k, torch.Generator(), None, floats, np.arange(4), greedy)
    assert q.dtype == torch.float32 and q.shape == (4, live.net.n_actions)
    assert torch.isfinite(q).all()
