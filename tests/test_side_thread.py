"""learner.target_thread: the target's forward on a side thread gives the same step."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from trackmind.agent.network_config import build_network
from trackmind.errors import ConfigError
from trackmind.training import side_thread
from trackmind.training.module import IQNLightningModule, learner_config

ROOT = Path(__file__).resolve().parents[1]
FLOATS = 184


def _conf(group: str, name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / group / f"{name}.yaml"))


def _module(target_thread: bool) -> IQNLightningModule:
    net = _conf("network", "iqn_cpu")
    torch.manual_seed(0)
    network = build_network(net, FLOATS, tuple(net["image_shape"][1:]))
    learner = {**_conf("learner", "iqn"), "target_thread": target_thread}
    return IQNLightningModule(network, learner)


def _batch(b: int = 32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    img = torch.randint(0, 256, (b, 1, 48, 64), generator=g, dtype=torch.uint8)
    return {
        "state_img": img,
        "next_state_img": img.roll(1, dims=0),
        "state_float": torch.randn(b, FLOATS, generator=g),
        "next_state_float": torch.randn(b, FLOATS, generator=g),
        "action": torch.randint(0, 12, (b,), generator=g),
        "reward": torch.randn(b, generator=g),
        "discount": torch.ones(b),
    }


def _step(module: IQNLightningModule, batch: dict) -> tuple[torch.Tensor, ...]:
    """compute_loss and backward from the same RNG state: loss, per-sample, Z, gradients."""
    torch.manual_seed(7)
    parts = module.compute_loss(batch)
    parts.loss.backward()
    grads = [p.grad.clone() for p in module.online_network.parameters()]
    return (parts.loss.detach(), parts.per_sample.detach(), parts.z.detach(), *grads)


def test_the_target_on_a_side_thread_gives_the_same_loss_and_gradients_bit_for_bit():
    batch = _batch()
    apart, beside = _module(False), _module(True)
    threads = []
    online, target, loss_fn = beside._forwards()

    def spy(*args):
        threads.append(threading.current_thread().name)
        return target(*args)

    beside._fwd = (online, spy, loss_fn)
    for a, b in zip(_step(apart, batch), _step(beside, batch), strict=True):
        assert torch.equal(a, b)
    assert len(threads) == 1 and threads[0].startswith("target-forward")


def test_the_side_thread_is_the_default_and_off_where_the_learner_is_compiled():
    assert _conf("learner", "iqn")["target_thread"] is True
    assert _module(True).targets_aside
    assert not _module(False).targets_aside
    compiled = _module(True)
    compiled.cfg.compile = "default"
    assert not compiled.targets_aside


def test_a_side_job_runs_without_grad_under_the_callers_autocast():
    def state() -> tuple[bool, bool, torch.dtype]:
        return (
            torch.is_grad_enabled(),
            torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"),
        )

    assert side_thread.on_side_thread(state).result() == (False, False, torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert side_thread.on_side_thread(state).result() == (False, True, torch.bfloat16)


def test_an_error_on_the_side_thread_reaches_the_caller():
    def broken() -> None:
        raise ValueError("shapes do not match")

    with pytest.raises(ValueError, match="shapes do not match"):
        side_thread.on_side_thread(broken).result()


def test_a_forked_child_gets_a_pool_of_its_own(monkeypatch):
    parent = side_thread.side_pool()
    assert side_thread.side_pool() is parent
    monkeypatch.setattr(side_thread.os, "getpid", lambda: -1)
    child = side_thread.side_pool()
    assert child is not parent
    assert child.submit(lambda: 3).result() == 3


def _split_step(split: bool) -> tuple[IQNLightningModule, tuple[torch.Tensor, ...]]:
    """One eager update's backward through the whole batch or its halves: loss, per-sample,
    Z and the gradients (no optimizer step, so the two can be compared)."""
    module = _module(True)
    module.cfg.split_step = split
    opt = torch.optim.SGD(module.online_network.parameters(), lr=0.0)
    torch.manual_seed(7)
    if split:
        parts = module.split_backward(_batch(), opt)
    else:
        parts = module.compute_loss(_batch())
        parts.loss.backward()
    grads = [p.grad.clone() for p in module.online_network.parameters()]
    return module, (parts.loss.detach(), parts.per_sample, parts.z.detach(), *grads)


def test_a_split_step_gives_the_whole_batchs_loss_and_gradients_up_to_rounding():
    _, whole = _split_step(False)
    _, halves = _split_step(True)
    assert [t.shape for t in whole] == [t.shape for t in halves]
    for a, b in zip(whole[:3], halves[:3], strict=True):  # the same taus, the same samples
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    for a, b in zip(whole[3:], halves[3:], strict=True):  # sums in another order
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert max(float(g.abs().max()) for g in halves[3:]) > 0


def test_a_split_step_is_refused_with_the_self_predictive_loss_and_spectral_norm():
    learner = {**_conf("learner", "iqn"), "split_step": True}
    with pytest.raises(ConfigError, match=r"learner\.split_step.*self_predictive_weight=0"):
        learner_config({**learner, "self_predictive_weight": 1.0})
    net = {**_conf("network", "iqn_floats"), "spectral_norm": True}
    with pytest.raises(ConfigError, match=r"learner\.split_step.*network\.spectral_norm=false"):
        IQNLightningModule(build_network(net, FLOATS, None), learner)
