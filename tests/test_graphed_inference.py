"""collector.cuda_graph: the live forward on static tensors per padded batch size, replayed as
CUDA graphs on a GPU (agent/graphed_inference.py).

On the CPU the same static-tensor path runs eagerly: the bucket sizes, the padding, the
taus drawn into the bucket and in-place weight pulls are checked value by value here, through
batch_q and the inference server; the capture itself is checked where CUDA is.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from specs import smoke_plan

from trackmind.agent.acting import (
    FrozenGreedy,
    batch_q,
    cars_q_tensor,
    graph_factory,
    greedy_and_graphs,
)
from trackmind.agent.graphed_inference import GraphedQ, bucket_for, bucket_sizes
from trackmind.agent.inference import make_inference_network
from trackmind.agent.network_config import Risk
from trackmind.collectors.inference_server import InferenceServer, make_server_link
from trackmind.collectors.shared_handles import make_shared, publish_weights, spawn_context
from trackmind.errors import ConfigError


def _inputs(net, n: int, seed: int):
    rng = np.random.default_rng(seed)
    img = torch.from_numpy(rng.integers(0, 256, (n, *net.image_shape), np.uint8))
    floats = torch.from_numpy(rng.standard_normal((n, net.float_dim), np.float32))
    return img, floats


def _expected(net, img, floats, taus) -> torch.Tensor:
    with torch.inference_mode():
        return net(img, floats, taus).mean(dim=1)


def _same(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal up to float rounding: a padded batch's GEMMs may sum in another order."""
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bucket_sizes_double_up_to_the_largest_batch():
    assert bucket_sizes(32, 13) == (32, 64, 128, 256, 416)
    assert bucket_sizes(16, 1) == (16,)
    assert bucket_sizes(4, 4) == (4, 8, 16)
    assert bucket_sizes(3, 5) == (3, 6, 12, 15)
    sizes = (32, 64, 128)
    assert [bucket_for(n, sizes) for n in (1, 32, 33, 64, 65, 128)] == [32, 32, 64, 64, 128, 128]
    with pytest.raises(ValueError, match="129 rows is larger than the largest bucket"):
        bucket_for(129, sizes)
    with pytest.raises(ValueError, match="unit >= 1"):
        bucket_sizes(0, 3)


def test_padded_batches_give_each_rows_own_values_with_the_buckets_taus():
    net = smoke_plan("network=iqn_cpu", "collector.device=cpu").new_network().eval()
    k = 4
    graphed = GraphedQ(net, k, (4, 8), torch.Generator().manual_seed(3))
    assert not graphed.capture  # a CPU: the static path, eagerly
    img7, floats7 = _inputs(net, 7, 0)
    q7 = graphed(img7, floats7).clone()
    b = graphed.buckets[8]
    want_taus = torch.rand((8, k), generator=torch.Generator().manual_seed(3))
    assert torch.equal(b.taus, want_taus)  # the whole bucket's taus, drawn in one call
    _same(q7, _expected(net, img7, floats7, b.taus[:7]))
    view7 = graphed(img7, floats7)  # not copied: the bucket's output, as a replay writes it
    img5, floats5 = _inputs(net, 5, 1)  # rows 5-7 still hold the last batch: never read
    q5 = graphed(img5, floats5)
    assert view7.data_ptr() == q5.data_ptr()  # one output tensor per bucket, rewritten ...
    assert not torch.equal(view7[:5], q7[:5])  # ... so a view read late sees the next batch
    assert q5.shape == (5, net.n_actions) and q5.dtype == torch.float32
    _same(q5, _expected(net, img5, floats5, b.taus[:5]))
    last_img, last_floats = graphed.last_inputs()
    assert torch.equal(last_img, img5) and torch.equal(last_floats, floats5)
    img3, floats3 = _inputs(net, 3, 2)  # a smaller bucket of its own
    q3 = graphed(img3, floats3)
    assert sorted(graphed.buckets) == [4, 8]
    _same(q3, _expected(net, img3, floats3, graphed.buckets[4].taus[:3]))
    fresh = smoke_plan("network=iqn_cpu", "collector.device=cpu").new_network()
    with torch.no_grad():  # a weights pull copies in place: the next call reads the new ones
        for p in fresh.parameters():
            p.add_(0.1)
    net.load_state_dict(fresh.state_dict())
    q3 = graphed(img3, floats3)
    _same(q3, _expected(fresh.eval(), img3, floats3, graphed.buckets[4].taus[:3]))


def test_live_graphs_draw_their_random_taus_in_the_policys_risk_share():
    """network.policy_cvar: the live forward's random taus span [0, cvar], drawn as before
    and scaled, so its values are the mean of the lowest cvar share of the quantiles."""
    net = smoke_plan("network=iqn_cpu", "collector.device=cpu").new_network().eval()
    graphs = graph_factory(4, (8,), None, Risk(explore=0.25))
    graphed = graphs(net, torch.Generator().manual_seed(3))
    img, floats = _inputs(net, 8, 0)
    q = graphed(img, floats)
    want_taus = 0.25 * torch.rand((8, 4), generator=torch.Generator().manual_seed(3))
    assert torch.equal(graphed.buckets[8].taus, want_taus)
    _same(q, _expected(net, img, floats, want_taus))


def test_batch_q_with_graphs_keeps_greedy_cars_on_their_frozen_weights():
    plan = smoke_plan("network=iqn_cpu", "collector.device=cpu")
    live = make_inference_network(plan.new_network())
    k, n = plan.network.n_quantiles_inference, 6
    graphs = graph_factory(k, (8,), None, Risk())
    frozen = FrozenGreedy(live, k, n, graphs=graphs)  # frozen copies replay graphs too
    greedy = np.array([0, 1, 0, 0, 1, 0], bool)
    frozen.update(greedy, np.ones(n, bool), 2)
    graphed = graphs(live.net, torch.Generator().manual_seed(0))
    img, floats = _inputs(live.net, n, 5)
    cars = np.arange(n)
    q = batch_q(live, frozen, k, None, img, floats, cars, greedy, graphed)
    eager = FrozenGreedy(live, k, n)
    eager.update(greedy, np.ones(n, bool), 2)
    plain = batch_q(live, eager, k, torch.Generator(), img, floats, cars, greedy)
    _same(q[greedy], plain[greedy])  # frozen copies, midpoint taus: no randomness
    taus = graphed.buckets[8].taus[:n]
    _same(q[~greedy], _expected(live.net, img, floats, taus)[~greedy])
    q_explore = q[~greedy].clone()
    graphed(img[:2], floats[:2])  # a later call rewrites the static output, not q (a clone)
    _same(q[greedy], plain[greedy])
    assert torch.equal(q[~greedy], q_explore)


def test_a_batch_of_greedy_cars_alone_replays_no_live_graph():
    plan = smoke_plan("network=iqn_cpu", "collector.device=cpu")
    live = make_inference_network(plan.new_network())
    k, n = plan.network.n_quantiles_inference, 5
    graphs = graph_factory(k, (8,), None, Risk())
    frozen = FrozenGreedy(live, k, n, graphs=graphs)  # as greedy_and_graphs makes them
    first = np.array([1, 1, 1, 0, 0], bool)
    frozen.update(first, np.ones(n, bool), 1)  # cars 0-2 start greedy races at version 1
    with torch.no_grad():  # new live weights, then cars 3 and 4 start theirs at version 2
        for p in live.net.parameters():
            p.add_(0.05)
    greedy = np.ones(n, bool)
    frozen.update(greedy, ~first, 2)
    assert frozen.bound.tolist() == [1, 1, 1, 2, 2]
    graphed = graphs(live.net, torch.Generator().manual_seed(0))
    img, floats = _inputs(live.net, n, 6)
    q = batch_q(live, frozen, k, None, img, floats, np.arange(n), greedy, graphed)
    b = graphed.buckets[8]
    assert b.out is None  # the live network never ran: no output was ever written
    assert bool((b.taus == 0.5).all())  # and no taus were drawn for it (still the filler)
    staged_img, staged_floats = graphed.last_inputs()  # the rows the frozen copies read
    assert torch.equal(staged_img, img) and torch.equal(staged_floats, floats)
    assert q.shape == (n, live.net.n_actions) and q.dtype == torch.float32
    for v, rows in ((1, np.arange(3)), (2, np.arange(3, 5))):  # every row, by its version
        want = cars_q_tensor(frozen.nets[v], img, floats, rows, k, None, True, 1.0)
        _same(q[rows], want)
    other = cars_q_tensor(frozen.nets[1], img, floats, np.arange(3, 5), k, None, True, 1.0)
    assert not torch.allclose(q[3:], other)  # the two versions' weights differ


def test_graphs_asked_for_off_a_gpu_say_so_in_one_line(caplog):
    """A Ray worker placed without a GPU runs the static path eagerly: said, not silent."""
    plan = smoke_plan("network=iqn_cpu", "collector.device=cpu")
    live = make_inference_network(plan.new_network())
    k = plan.network.n_quantiles_inference
    with caplog.at_level("WARNING", logger="trackmind.agent.acting"):
        _, graphed = greedy_and_graphs(live, k, 4, Risk(), torch.Generator(), (4,), "fp32")
    assert graphed is not None and not graphed.capture
    (record,) = caplog.records
    assert "collector.cuda_graph" in record.message and "on cpu, not a GPU" in record.message
    caplog.clear()
    with caplog.at_level("WARNING", logger="trackmind.agent.acting"):
        greedy_and_graphs(live, k, 4, Risk(), torch.Generator(), None, "fp32")
    assert not caplog.records  # no graphs asked for: nothing to say


def test_frozen_copies_replay_midpoint_graphs_kept_with_their_spare_copy():
    plan = smoke_plan("network=iqn_cpu", "collector.device=cpu")
    live = make_inference_network(plan.new_network())
    k, n, cvar = 4, 4, 0.5
    graphs = graph_factory(k, (4,), None, Risk(greedy=cvar))
    frozen = FrozenGreedy(live, k, n, cvar, graphs)
    plain = FrozenGreedy(live, k, n, cvar)
    img, floats = _inputs(live.net, n, 9)
    greedy, started = np.array([1, 0, 1, 0], bool), np.ones(n, bool)
    for f in (frozen, plain):
        f.update(greedy, started, 1)
    q, want = np.zeros((n, 12), np.float32), np.zeros((n, 12), np.float32)
    frozen.fill(q, img, floats)
    plain.fill(want, img, floats)
    _same(torch.from_numpy(q), torch.from_numpy(want))  # the zeros of exploring rows too
    (b,) = frozen._graphed.values()
    assert torch.equal(b.buckets[4].taus[0], torch.tensor([1, 3, 5, 7]) / 8 * cvar)
    with torch.no_grad():  # new live weights for each later version
        for p in live.net.parameters():
            p.mul_(0.9)
    for version, greedy in ((2, np.array([0, 1, 0, 0], bool)), (3, np.array([0, 0, 1, 0], bool))):
        for f in (frozen, plain):
            f.update(greedy, started, version)
        q, want = np.zeros((n, 12), np.float32), np.zeros((n, 12), np.float32)
        frozen.fill(q, img, floats)
        plain.fill(want, img, floats)
        _same(torch.from_numpy(q), torch.from_numpy(want))
        with torch.no_grad():
            for p in live.net.parameters():
                p.mul_(0.9)
    # each version's race started as the last one's ended: the copies are freed before a new
    # one is taken, so versions 2 and 3 refilled version 1's copy in place, which kept its graphs
    assert len(frozen._graphed) == 1 and len(frozen.nets) == 1


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA graph needs a GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_the_server_answers_from_its_buckets_with_staged_rows(device):
    """On the CPU the static path runs eagerly; on a GPU the same batch is captured and
    replayed, its rows staged in pinned memory, a greedy car on its frozen copy's graph."""
    plan = smoke_plan("network=iqn_cpu", f"collector.device={device}")
    collector = dataclasses.replace(plan.collectors.collector, cuda_graph=True)
    spec = dataclasses.replace(plan.collectors, collector=collector)
    shared = make_shared(plan.new_network(), 4, device)
    try:
        publish_weights(shared, plan.new_network())
        cars = 3
        link = make_server_link(shared.network, 3, cars, spawn_context())
        server = InferenceServer(spec, link, shared.link(3), device, seed=7)
        assert server.graphed.sizes == (3, 6, 9)
        assert server.stage.frames.is_pinned() == (device == "cuda")
        rng = np.random.default_rng(0)
        link.frames.copy_(torch.from_numpy(rng.integers(0, 256, link.frames.shape, np.uint8)))
        link.floats.copy_(torch.from_numpy(rng.standard_normal(link.floats.shape, np.float32)))
        greedy = np.array([0, 0, 0, 0, 0, 0, 1, 0, 0], bool)
        link.greedy.copy_(torch.from_numpy(greedy))
        link.started.fill_(True)
        server.answer(np.array([0, 2]))  # 6 cars: the bucket of 6, rows 0-2 and 6-8
        assert server.graphed.graphs == (1 if device == "cuda" else 0)
        rows = torch.from_numpy(np.r_[0:3, 6:9])
        img, floats = link.frames[rows], link.floats[rows]
        taus = server.graphed.buckets[6].taus
        net = server.live.net
        want = _expected(net, img.to(device), floats.to(device), taus).cpu()
        got = link.q[rows]
        tol = 1e-3 * float(want.abs().max()) if device == "cuda" else 1e-6  # TF32 on a GPU
        torch.testing.assert_close(got[[0, 1, 2, 4, 5]], want[[0, 1, 2, 4, 5]], atol=tol, rtol=1e-5)
        live = make_inference_network(plan.new_network())  # the rule, on the CPU
        live.net.load_state_dict(shared.network.state_dict())
        frozen = FrozenGreedy(live, plan.network.n_quantiles_inference, 1)
        frozen.update(np.array([True]), np.array([True]), 1)
        q_greedy = np.zeros((1, live.net.n_actions), np.float32)
        frozen.fill(q_greedy, img[3:4], floats[3:4])
        want_greedy = torch.from_numpy(q_greedy[0])  # car 6: its frozen copy, graphed too
        torch.testing.assert_close(got[3], want_greedy, atol=tol, rtol=1e-5)
        assert not link.q[3:6].any()
    finally:
        shared.cleanup()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_cuda_graphs_need_collectors_on_a_gpu():
    with pytest.raises(ConfigError, match="^collector.cuda_graph: CUDA graphs need the collectors"):
        smoke_plan("collector.cuda_graph=true")
    with pytest.raises(ConfigError, match="^collector.cuda_graph: CUDA graphs need the collectors"):
        smoke_plan("collector.cuda_graph=true", "collector.device=cpu")


@CUDA
@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_captured_buckets_replay_the_eager_values_and_follow_weight_pulls(dtype):
    plan = smoke_plan("network=iqn_cpu", "collector.device=cuda")
    net = make_inference_network(plan.new_network().cuda()).net
    for head in (net.advantage, net.value):  # Q of order 1, not the fresh heads' 0.01
        torch.nn.init.orthogonal_(head[-1].weight, gain=1.0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    graphed = GraphedQ(net, 8, (16, 32), gen, autocast_dtype=dtype)
    img, floats = (t.cuda() for t in _inputs(net, 20, 0))

    def eager_on_the_bucket() -> torch.Tensor:
        b = graphed.buckets[32]  # the same padded rows and taus the replay read
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            return _expected(net, b.img, b.floats, b.taus)[:20].float()

    q = graphed(img, floats).clone()
    assert graphed.graphs == 1 and graphed.failed is None
    want = eager_on_the_bucket()
    tol = (2e-2 if dtype is not None else 1e-3) * float(want.abs().max())  # TF32 matmuls: 1e-3
    torch.testing.assert_close(q, want, atol=tol, rtol=0)
    with torch.no_grad():  # a weights pull, in place
        for p in net.parameters():
            p.mul_(0.5)
    q2 = graphed(img, floats).clone()
    want2 = eager_on_the_bucket()
    torch.testing.assert_close(q2, want2, atol=tol, rtol=0)
    assert float((q2 - q).abs().max()) > 10 * tol  # a replay of the old weights would fail
