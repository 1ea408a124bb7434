"""Shrink-and-perturb resets of the online network (agent/resets.py), by hand and in a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from specs import FLOATS, fit_steps, float_learner, learner_batches

from trackmind.agent.network_config import build_network
from trackmind.agent.resets import reset_optimizer_state_, reset_slot, shrink_perturb_
from trackmind.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_resets_fall_every_n_frames_once_each_and_none_from_the_end():
    # every 100 frames, none at or after 350: slots 1, 2 and 3 (frames 100, 200, 300)
    assert reset_slot(99, 100, 350, last=0) is None
    assert reset_slot(100, 100, 350, last=0) == 1
    assert reset_slot(199, 100, 350, last=1) is None  # slot 1 done
    assert reset_slot(300, 100, 350, last=1) == 3  # slot 2 passed unseen: one reset, not two
    assert reset_slot(399, 100, 350, last=3) is None
    assert reset_slot(10_000, 100, 350, last=3) is None  # slot 4 falls at 400 >= 350
    assert reset_slot(1_500, 100, 0, last=3) == 15  # a resumed run: one reset, then slot 15
    assert reset_slot(1_550, 100, 0, last=15) is None
    assert reset_slot(10_000, 0, 0, last=0) is None  # every 0: off


def _config(**change) -> dict:
    raw = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "network" / "iqn_floats.yaml"))
    return {**raw, **change}


def _pair() -> torch.nn.Sequential:
    net = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1))
    net.register_buffer("stats", torch.tensor([3.0]))
    return net


def _fill(net: torch.nn.Sequential, w0: float, b0: float, w1: float, b1: float) -> None:
    with torch.no_grad():
        for layer, (w, b) in zip(net, ((w0, b0), (w1, b1))):
            layer.weight.fill_(w)
            layer.bias.fill_(b)


def test_shrink_perturb_moves_weights_towards_the_fresh_ones_and_renews_the_named():
    net, fresh = _pair(), _pair()
    _fill(net, 4.0, -2.0, 2.0, 1.0)
    _fill(fresh, 0.0, 2.0, 10.0, -5.0)
    fresh.stats.fill_(99.0)
    renewed = shrink_perturb_(net, fresh, 0.25, renew=["1"])
    # layer 0: 0.25 * 4 + 0.75 * 0 = 1; 0.25 * -2 + 0.75 * 2 = 1
    assert float(net[0].weight) == 1.0 and float(net[0].bias) == 1.0
    # layer 1 renewed: fresh's values outright
    assert float(net[1].weight) == 10.0 and float(net[1].bias) == -5.0
    assert renewed == ["1.weight", "1.bias"]
    assert float(net.stats) == 3.0  # buffers are left alone ...


def test_a_renewed_spectral_layer_takes_the_fresh_power_iteration_vector():
    """... but a renewed module's own buffers are fresh's: a SpectralLinear's u estimates the
    singular vector of the weights it had."""
    net = build_network(_config(spectral_norm=True), FLOATS, None)
    fresh = build_network(_config(spectral_norm=True), FLOATS, None)
    old_u = {n: b.clone() for n, b in net.named_buffers() if n.endswith(".u")}
    assert old_u and all(n.startswith(("advantage.", "value.")) for n in old_u)
    with torch.no_grad():
        for n, b in fresh.named_buffers():
            if n.endswith(".u"):
                b.fill_(0.5)
    stats = net.float_mean.clone()
    fresh.float_mean.fill_(7.0)
    shrink_perturb_(net, fresh, 0.5, renew=["advantage"])
    for n, b in net.named_buffers():
        if n.endswith(".u"):
            renewed = n.startswith("advantage.")
            assert torch.equal(b, torch.full_like(b, 0.5)) == renewed, n
            assert torch.equal(b, old_u[n]) == (not renewed), n
    assert torch.equal(net.float_mean, stats)  # not in a renewed module: kept


def test_shrink_one_keeps_the_weights_and_bad_arguments_are_refused():
    net, fresh = _pair(), _pair()
    _fill(net, 4.0, -2.0, 2.0, 1.0)
    _fill(fresh, 0.0, 2.0, 10.0, -5.0)
    shrink_perturb_(net, fresh, 1.0)
    assert [float(p) for p in net.parameters()] == [4.0, -2.0, 2.0, 1.0]
    with pytest.raises(ValueError, match="shrink"):
        shrink_perturb_(net, fresh, 1.5)
    with pytest.raises(ValueError, match="'head'"):
        shrink_perturb_(net, fresh, 0.5, renew=["head"])


def test_a_zeroed_optimizer_steps_as_a_new_one():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    opt = torch.optim.RAdam([p], lr=0.1)
    for g in ([1.0, 2.0], [3.0, -1.0]):
        p.grad = torch.tensor(g)
        opt.step()
    reset_optimizer_state_(opt)
    q = torch.nn.Parameter(p.detach().clone())
    new = torch.optim.RAdam([q], lr=0.1)
    for g in ([0.5, -0.5], [2.0, 1.0], [-1.0, 4.0], [1.0, 1.0], [0.1, 0.2], [3.0, 3.0]):
        p.grad, q.grad = torch.tensor(g), torch.tensor(g)
        opt.step()
        new.step()
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=0)


def test_reset_keys_are_checked_where_the_config_names_them():
    with pytest.raises(ConfigError, match=r"learner\.reset_modules.*'dueling'"):
        float_learner(reset_modules=["dueling"])
    with pytest.raises(ConfigError, match=r"learner\.reset_shrink"):
        float_learner(reset_shrink=1.5)
    with pytest.raises(ConfigError, match=r"learner\.reset_every_frames"):
        float_learner(reset_every_frames=-1)
    with pytest.raises(ConfigError, match=r"learner\.reset_until_frames.*no reset falls"):
        float_learner(reset_every_frames=2000, reset_until_frames=1000)


def test_a_run_resets_on_schedule_and_keeps_its_target(tmp_path):
    """Frames rise 1,000 a batch; resets every 2,000 until 5,000: two resets in 8 batches.
    A reset leaves the target network alone: with target updates off (one every 10^9
    samples) it stays the initial weights. Against a twin run without resets, the shrunk
    layers and the renewed heads are far from where eight small steps would take them."""
    quiet = {"target_update_every_transitions": 10**9, "publish_every_batches": 1000}
    module = float_learner(reset_every_frames=2000, reset_until_frames=5000, **quiet)
    twin = float_learner(**quiet)
    for m in (module, twin):
        m.frames = lambda m=m: 1000 * (m.global_step + 1)
    target_before = {k: v.clone() for k, v in module.target_network.state_dict().items()}
    fit_steps(module, learner_batches(8, FLOATS), tmp_path)
    fit_steps(twin, learner_batches(8, FLOATS), tmp_path)
    assert module.resets_done == 2 and twin.resets_done == 0
    for k, v in module.target_network.state_dict().items():
        assert torch.equal(v, target_before[k]), k
    ours, theirs = module.online_network, twin.online_network
    w, w_twin = ours.float_head[0].weight, theirs.float_head[0].weight
    # two shrinks by 0.5 towards independent draws: the norm of the difference is about
    # that of a weight matrix itself, far above eight steps of lr 1e-3
    assert float((w - w_twin).norm() / w_twin.norm()) > 0.3
    a, a_twin = ours.advantage[0].weight, theirs.advantage[0].weight
    assert float((a - a_twin).norm() / a_twin.norm()) > 1.0  # drawn anew: independent
    ckpt: dict = {}
    module.on_save_checkpoint(ckpt)
    assert ckpt["learner_counters"]["resets_done"] == 2
    assert ckpt["learner_counters"]["reset_slot"] == 2  # the last reset: slot 2, 4,000 frames
    # the optimizer state restarted at the last reset (batch 3, frames 4,000): 5 steps since
    opt = module.optimizers().optimizer
    assert {int(st["step"]) for st in opt.state.values()} == {5}
