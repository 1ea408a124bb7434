"""learner.target_thread: the target's forward on a side thread gives the same step."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from trackmind.agent.network_config import build_network
from trackmind.training import side_thread
from trackmind.training.module import IQNLightningModule

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
    assert _module(True)._target_on_thread()
    assert not _module(False)._target_on_thread()
    compiled = _module(True)
    compiled.cfg.compile = "default"
    assert not compiled._target_on_thread()


def test_a_side_job_runs_without_grad_under_the_callers_autocast():
    def state() -> tuple[bool, bool, torch.dtype]:
        return (
            torch.is_grad_enabled(),
            torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"),
        )

    assert side_thread.submit_no_grad(state).result() == (False, False, torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert side_thread.submit_no_grad(state).result() == (False, True, torch.bfloat16)


def test_an_error_on_the_side_thread_reaches_the_caller():
    def broken() -> None:
        raise ValueError("shapes do not match")

    with pytest.raises(ValueError, match="shapes do not match"):
        side_thread.submit_no_grad(broken).result()


def test_a_forked_child_gets_a_pool_of_its_own(monkeypatch):
    parent = side_thread.side_pool()
    assert side_thread.side_pool() is parent
    monkeypatch.setattr(side_thread.os, "getpid", lambda: -1)
    child = side_thread.side_pool()
    assert child is not parent
    assert child.submit(lambda: 3).result() == 3
