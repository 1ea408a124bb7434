"""A self-predictive auxiliary loss (SPR, Schwarzer et al. 2021), one transition ahead.

The value loss alone shapes the encoder through a few scalar targets per state, and on the
hard maps the greedy action is decided by Q gaps of a few thousandths. SPR adds a dense
signal: from the online features of s and the action taken, predict the target network's
projection of the features of s', the state the batch's n-step transition lands on. The
prediction is compared by cosine (BYOL), so nothing collapses the features to a constant:
the target side takes no gradient and moves only by the target network's soft updates.

Where it differs from SPR: one step of the replay's n-step transition, not five steps of
single actions, so no sequence is sampled and the target's features of s' are the ones the
value target computes anyway; the transition model works on the projection (dim wide), not
on the conv maps. The action taken is the first of the n; the others are the behaviour's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trackmind.agent.network import LEAK


class SelfPredictiveHead(nn.Module):
    """projection (features -> dim), transition ([projection, one-hot action] -> dim) and
    predictor (dim -> dim) of the online side; `target_projection` is the target side's
    copy of `projection`, which the learner soft-updates with the target network."""

    def __init__(self, feature_dim: int, n_actions: int, dim: int) -> None:
        super().__init__()
        self.n_actions = n_actions
        self.projection = nn.Linear(feature_dim, dim)
        self.transition = nn.Sequential(
            nn.Linear(dim + n_actions, dim), nn.LeakyReLU(LEAK), nn.Linear(dim, dim)
        )
        self.predictor = nn.Linear(dim, dim)
        self.target_projection = nn.Linear(feature_dim, dim)
        self.target_projection.load_state_dict(self.projection.state_dict())
        self.target_projection.requires_grad_(False)

    def predict(self, features: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The predicted projection of s' (B, dim) from the online features of s (B, D) and
        the actions taken (B,)."""
        a = F.one_hot(actions.long(), self.n_actions).to(features.dtype)
        return self.predictor(self.transition(torch.cat([self.projection(features), a], 1)))

    def target(self, next_features: torch.Tensor) -> torch.Tensor:
        """The target side's projection of the target network's features of s' (no grad)."""
        with torch.no_grad():
            return self.target_projection(next_features)


def self_predictive_loss(
    predicted: torch.Tensor, target: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, per-sample) of 2 - 2 cos(predicted, target), the squared distance of the two
    unit vectors (0 when aligned, 2 when orthogonal, 4 when opposite); the loss is the mean
    over the samples where `mask` is true (a real s': not terminal), 0 when none is."""
    cos = F.cosine_similarity(predicted, target.detach(), dim=1, eps=1e-8)
    per_sample = (2.0 - 2.0 * cos) * mask.to(cos.dtype)
    return per_sample.sum() / mask.sum().clamp(min=1).to(cos.dtype), per_sample
