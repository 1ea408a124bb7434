"""learner.compile: torch.compile of the learner's forward passes, on the CPU where torch allows.

The compiled forwards are plain functions over the networks, so the module's state_dict (and
every checkpoint) keeps its keys, and the loss on a batch is the eager loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from trackmind.agent.loss import iqn_loss
from trackmind.agent.network_config import build_network
from trackmind.errors import ConfigError
from trackmind.training.module import IQNLightningModule

ROOT = Path(__file__).resolve().parents[1]
FLOATS = 184


def _learner(**change) -> dict:
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "learner" / "iqn.yaml"))
    return {**cfg, **change}


def _module(mode: str, **change) -> IQNLightningModule:
    torch.manual_seed(0)
    raw = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "network" / "iqn_floats.yaml"))
    net = build_network(raw, FLOATS, None)
    return IQNLightningModule(net, _learner(compile=mode, **change))


def _batch(b: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {
        "state_float": torch.randn(b, FLOATS, generator=g),
        "next_state_float": torch.randn(b, FLOATS, generator=g),
        "action": torch.randint(0, 12, (b,), generator=g),
        "reward": torch.randn(b, generator=g),
        "discount": torch.full((b,), 0.99),
    }


def test_compiled_module_keeps_its_state_dict_keys():
    eager, compiled = _module("none"), _module("default")  # torch.compile is lazy: no compile
    assert list(compiled.state_dict()) == list(eager.state_dict())
    assert {k.split(".")[0] for k in eager.state_dict()} == {"online_network", "target_network"}
    compiled.load_state_dict(eager.state_dict())  # checkpoints load either way


def test_a_deep_copy_runs_its_own_networks():
    import copy

    module = _module("default")
    module._forwards()
    twin = copy.deepcopy(module)
    with torch.no_grad():
        for p in twin.online_network.parameters():
            p.zero_()
    online, _, _ = twin._forwards()  # made anew for the copy's networks
    assert online.__wrapped__.__self__ is twin.online_network
    assert module._forwards()[0].__wrapped__.__self__ is module.online_network


def test_unknown_compile_mode_names_the_key():
    with pytest.raises(ConfigError, match="learner.compile"):
        _module("jit")


def test_the_loss_is_compiled_only_when_asked_and_only_with_a_mode():
    assert _module("default")._forwards()[2] is iqn_loss  # compile_loss off: the function
    fused = _module("default", compile_loss=True)._forwards()[2]
    assert fused is not iqn_loss and fused.__wrapped__ is iqn_loss
    for mode in ("none", "reduce-overhead", "max-autotune"):
        with pytest.raises(ConfigError, match=r"learner\.compile_loss: .*must be default or"):
            _module(mode, compile_loss=True)
    with pytest.raises(ConfigError, match=r"learner\.compile_loss: .*not a valid bool"):
        _module("default", compile_loss="maybe")


@pytest.mark.slow
@pytest.mark.parametrize(
    "change",
    [{}, {"compile_loss": True}, {"self_predictive_weight": 1.0}],
    ids=["forwards", "loss", "self_predictive"],
)
def test_compiled_loss_matches_eager_on_cpu(change: dict):
    """Inductor compiles the forward passes (with the features the self-predictive loss
    reads), and with compile_loss the loss (a C++ compiler on the CPU): the same loss and
    per-sample losses."""
    torch.compiler.reset()
    spr = {k: v for k, v in change.items() if k == "self_predictive_weight"}
    eager, compiled = _module("none", **spr), _module("default", **change)
    compiled.load_state_dict(eager.state_dict())
    batch = _batch()
    torch.manual_seed(5)
    want = eager.compute_loss(batch)
    torch.manual_seed(5)
    got = compiled.compute_loss(batch)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.per_sample, want.per_sample, rtol=1e-4, atol=1e-5)
    got.loss.backward()  # gradients flow through the compiled passes into the network
    assert all(p.grad is not None for p in compiled.online_network.parameters())
