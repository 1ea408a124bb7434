"""Value-churn reduction (CHAIN): the churn and its weight by hand, and a learner using it."""

from __future__ import annotations

import pytest
import torch
from specs import FLOATS, fit_steps, float_learner, learner_batches, learner_cfg

from trackmind.agent.churn import ChurnReduction, value_churn
from trackmind.agent.network import midpoint_taus
from trackmind.errors import ConfigError
from trackmind.training.module import learner_config


def test_churn_is_the_mean_squared_change_of_q_by_hand():
    # two states, two taus, two actions; Q = the mean over taus
    prev = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]])  # Q: (2,3), (0,0)
    now = torch.tensor([[[1.0, 2.0], [5.0, 4.0]], [[1.0, -1.0], [1.0, -3.0]]])  # Q: (3,3), (1,-2)
    # changes: (1, 0) and (1, -2): squares 1, 0, 1, 4, mean 1.5
    assert float(value_churn(now, prev)) == pytest.approx(1.5)
    # a change of the quantiles that keeps their mean is no churn: the greedy policy reads Q
    spread = torch.tensor([[[0.0, 2.0], [4.0, 4.0]], [[1.0, 0.0], [-1.0, 0.0]]])
    assert float(value_churn(spread, prev)) == pytest.approx(0.0)


class _Net(torch.nn.Module):
    """A stand-in network: Z (R, N=1, A) from the floats, as the IQN network's call takes."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(3, 2)

    def forward(self, img, floats, taus):
        return self.head(floats).unsqueeze(1)


def test_remember_copies_the_weights_and_the_loss_compares_with_them():
    torch.manual_seed(0)
    net = _Net()
    churn = ChurnReduction(weight=0.5, rows=4)
    x = torch.randn(4, 3)
    first, raw = churn.loss(net(None, x, None), None, x, None)
    assert float(first.detach()) == 0.0 == float(raw)  # no previous version: nothing to compare
    churn.remember(net)
    with torch.no_grad():
        net.head.bias += torch.tensor([1.0, -1.0])  # an update that moves every Q by 1
    assert not torch.equal(churn.previous.head.bias, net.head.bias)  # a copy, not the same
    loss, raw = churn.loss(net(None, x, None), None, x, None)
    assert float(raw) == pytest.approx(1.0)
    assert float(loss.detach()) == pytest.approx(0.5)  # times the weight
    loss.backward()  # the gradient pulls the moved bias back, the previous copy takes none
    # d/db of 0.5 x the mean over 4 rows and 2 actions of (db)^2: 0.5 x 2 db / 2 = db / 2
    torch.testing.assert_close(net.head.bias.grad, torch.tensor([0.5, -0.5]))
    assert all(p.grad is None for p in churn.previous.parameters())
    churn.remember(net)  # the next comparison starts from the updated weights
    assert torch.equal(churn.previous.head.bias, net.head.bias)
    churn.forget()  # after a reset of the weights: nothing to pull back towards
    loss, raw = churn.loss(net(None, x, None), None, x, None)
    assert float(loss.detach()) == 0.0 == float(raw)


def test_keys_are_checked_where_the_config_names_them():
    with pytest.raises(ConfigError, match=r"learner\.churn_weight.*non-negative"):
        learner_config(learner_cfg(churn_weight=-0.1))
    with pytest.raises(ConfigError, match=r"learner\.churn_rows.*at most learner\.batch_size"):
        learner_config(learner_cfg(churn_weight=10.0, churn_rows=1000))
    # off, the rows are not read: a batch smaller than them is no error
    assert learner_config(learner_cfg(batch_size=16)).churn_rows == 32
    with pytest.raises(ConfigError, match=r"^learner\.batch_size"):  # its own error first
        learner_config(learner_cfg(churn_weight=10.0, batch_size=0))
    with pytest.raises(ConfigError, match=r"learner\.churn_weight.*split_step=false"):
        learner_config(learner_cfg(churn_weight=10.0, split_step=True))


def test_a_learner_with_churn_reduction_adds_it_to_the_value_loss(tmp_path):
    """Off, nothing changes; on, the first step compares with nothing, and from the second on
    the loss is the value loss plus the weighted churn of the next states' Q values since the
    last update, read at the midpoint taus."""
    assert float_learner().churn is None
    module = float_learner(churn_weight=1.0e5, churn_rows=8)
    plain_module = float_learner()  # the same seed: the same network
    batches = learner_batches(3, FLOATS)
    torch.manual_seed(5)
    first = module.compute_loss(batches[0])
    torch.manual_seed(5)  # the same taus
    plain = plain_module.compute_loss(batches[0])
    torch.testing.assert_close(first.loss, plain.loss)  # no previous version yet
    torch.testing.assert_close(first.z, plain.z)  # the reference rows do not leak into z
    fit_steps(module, batches, tmp_path)
    churn = module.churn
    assert churn.previous is not None
    parts = module.compute_loss(batches[0])
    stats = parts.stats
    batch = batches[0]
    taus = midpoint_taus(8, module.n_train)
    with torch.no_grad():
        now = module.online_network(None, batch["next_state_float"][:8], taus)
        before = churn.previous(None, batch["next_state_float"][:8], taus)
    torch.testing.assert_close(stats["train/churn"], value_churn(now, before))
    assert float(stats["train/churn"]) > 0  # the last update moved the reference rows' Q
    torch.testing.assert_close(parts.loss, stats["train/value_loss"] + 1.0e5 * stats["train/churn"])
