"""The self-predictive auxiliary loss: its value by hand, its head, and a learner using it."""

from __future__ import annotations

import pytest
import torch
from specs import FLOATS, fit_steps, float_learner, learner_batches, learner_cfg

from trackmind.agent.self_predictive import SelfPredictiveHead, self_predictive_loss
from trackmind.errors import ConfigError
from trackmind.training.module import learner_config


def test_loss_is_the_squared_distance_of_unit_vectors_by_hand():
    predicted = torch.tensor([[1.0, 0.0], [3.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    target = torch.tensor([[0.0, 2.0], [0.5, 0.0], [-1.0, 0.0], [1.0, 0.0]])
    mask = torch.tensor([True, True, True, True])
    loss, per = self_predictive_loss(predicted, target, mask)
    # orthogonal: 2; aligned (any lengths): 0; opposite: 4; 45 degrees: 2 - 2 / sqrt(2)
    expected = torch.tensor([2.0, 0.0, 4.0, 2.0 - 2.0**0.5])
    torch.testing.assert_close(per, expected)
    torch.testing.assert_close(loss, expected.mean())
    # a terminal sample (no real s') counts for nothing, in the sum and in the count
    loss, per = self_predictive_loss(predicted, target, torch.tensor([True, False, True, False]))
    torch.testing.assert_close(per, torch.tensor([2.0, 0.0, 4.0, 0.0]))
    torch.testing.assert_close(loss, torch.tensor(3.0))
    loss, _ = self_predictive_loss(predicted, target, torch.zeros(4, dtype=torch.bool))
    assert float(loss) == 0.0  # no real s' in the batch: no signal, no division by zero


def test_the_loss_takes_no_gradient_through_its_target():
    predicted = torch.tensor([[1.0, 0.0]], requires_grad=True)
    target = torch.tensor([[1.0, 1.0]], requires_grad=True)
    loss, _ = self_predictive_loss(predicted, target, torch.tensor([True]))
    loss.backward()
    assert target.grad is None
    # d/dp of -2 p.t / (|p| |t|) at p = (1, 0), t = (1, 1) / sqrt(2): (0, -sqrt(2))
    torch.testing.assert_close(predicted.grad, torch.tensor([[0.0, -(2.0**0.5)]]))


def test_the_head_starts_with_its_target_projection_equal_and_frozen():
    torch.manual_seed(0)
    head = SelfPredictiveHead(feature_dim=6, n_actions=3, dim=4)
    assert torch.equal(head.target_projection.weight, head.projection.weight)
    assert not any(p.requires_grad for p in head.target_projection.parameters())
    features, actions = torch.randn(5, 6), torch.tensor([0, 1, 2, 1, 0])
    assert head.predict(features, actions).shape == (5, 4)
    # the action is an input: the same features under two actions predict two s'
    one, two = head.predict(features[:1], actions[:1]), head.predict(features[:1], actions[1:2])
    assert not torch.allclose(one, two)
    assert head.target(features).shape == (5, 4) and not head.target(features).requires_grad


def test_keys_are_checked_where_the_config_names_them():
    with pytest.raises(ConfigError, match=r"learner\.self_predictive_weight.*non-negative"):
        learner_config(learner_cfg(self_predictive_weight=-1.0))
    with pytest.raises(ConfigError, match=r"learner\.self_predictive_dim.*positive"):
        learner_config(learner_cfg(self_predictive_dim=0))


def test_a_learner_with_the_loss_trains_its_head_and_moves_its_target(tmp_path):
    """Off, there is no head; on, the loss adds the prediction's error, the optimizer trains
    the head and the encoder through it, and the target projection follows the online one
    by the target network's soft updates (one every 16 samples here)."""
    assert float_learner().self_predictive is None
    module = float_learner(self_predictive_weight=1.0, target_update_every_transitions=16)
    head = module.self_predictive
    assert head is not None
    opt_params = {id(p) for g in module.configure_optimizers().param_groups for p in g["params"]}
    assert {id(p) for p in head.predictor.parameters()} <= opt_params
    assert not {id(p) for p in head.target_projection.parameters()} & opt_params
    batch = learner_batches(1, FLOATS)[0]
    plain_module = float_learner()  # the same seed: the same network
    torch.manual_seed(5)
    parts = module.compute_loss(batch)
    torch.manual_seed(5)  # the same taus
    plain = plain_module.compute_loss(batch)
    aux = parts.stats["train/self_predictive_loss"]
    torch.testing.assert_close(parts.loss, plain.loss + aux)
    projection_before = head.projection.weight.detach().clone()
    target_before = head.target_projection.weight.detach().clone()
    fit_steps(module, learner_batches(4, FLOATS), tmp_path)
    moved = head.projection.weight.detach() - projection_before
    assert float(moved.norm()) > 0  # trained
    target_moved = head.target_projection.weight.detach() - target_before
    # four soft updates of tau 0.005 towards a projection that moved by small steps
    assert 0 < float(target_moved.norm()) < float(moved.norm())
