"""Value-churn reduction (CHAIN, Tang and Berseth 2024) for the IQN learner.

Every update moves the Q values of states that were not in its batch too: the greedy action
of such a state can flip between two weights versions that were never trained on it. On
technical, consecutive versions drive different lines through the same hairpin, and the
greedy finish rate swings by tens of points from one minute to the next. CHAIN adds a loss on
a reference batch kept out of the value loss: the squared change of its Q values since the
previous update, so that an update moves the values of the states it trains on and as little
else as it can. Its weight is set each step so that this loss stays a fixed share
(`learner.churn_ratio`) of the value loss, as the paper's automatic coefficient does.

Here the reference states are the first `learner.churn_rows` next states s' of the batch: the
online network never regresses them (only the target reads them), and they are drawn from the
replay like the batch. Their Q values are read at the midpoint taus, the greedy races' own,
so that what is kept still is what the greedy policy reads, without the noise of new taus.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def value_churn(z_now: torch.Tensor, z_prev: torch.Tensor) -> torch.Tensor:
    """Mean over states and actions of the squared change of Q = the mean of Z over its taus.

    z_now, z_prev: (R, N, A) quantiles at the same taus; z_prev carries no gradient.
    """
    return (z_now.mean(dim=1) - z_prev.mean(dim=1)).pow(2).mean()


def churn_weight(ratio: float, value_loss_mean: float, churn_mean: float) -> float:
    """The churn loss's weight that makes it `ratio` times the value loss, from running means.

    0 while no churn was seen (the first update compares the weights with themselves).
    """
    if churn_mean <= 0.0:
        return 0.0
    return ratio * value_loss_mean / churn_mean


def running_mean(mean: float | None, value: float, rate: float) -> float:
    """Exponential running mean; the first value starts it."""
    return value if mean is None else mean + rate * (value - mean)


class ChurnReduction:
    """The previous weights version and the running means that weigh the churn loss.

    A plain object, not a module: the copy is not part of the checkpoint (a resumed run
    starts comparing from its first update) and follows the online network's device.
    """

    def __init__(self, ratio: float, rows: int, rate: float = 0.01) -> None:
        self.ratio = float(ratio)
        self.rows = int(rows)
        self.rate = float(rate)
        self.previous: nn.Module | None = None
        self.value_loss_mean: float | None = None
        self.churn_mean: float | None = None

    def remember(self, online: nn.Module) -> None:
        """Keep the weights about to be updated: the next step's churn is measured from them."""
        first = next(online.parameters())
        if self.previous is None or next(self.previous.parameters()).device != first.device:
            self.previous = copy.deepcopy(online).requires_grad_(False)
            return
        with torch.no_grad():
            torch._foreach_copy_(list(self.previous.parameters()), list(online.parameters()))
            buffers = list(self.previous.buffers())
            if buffers:  # spectral normalisation's power-iteration vectors
                torch._foreach_copy_(buffers, list(online.buffers()))

    def loss(
        self, z_ref: torch.Tensor, img: torch.Tensor | None, floats: torch.Tensor, taus
    ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """(weighted churn loss, raw churn, weight) for the reference rows' online quantiles
        z_ref; the previous version reads the same rows at the same taus."""
        if self.previous is None:
            zero = z_ref.sum() * 0.0
            return zero, zero.detach(), 0.0
        with torch.no_grad():
            z_prev = self.previous(img, floats, taus)
        churn = value_churn(z_ref, z_prev)
        weight = churn_weight(self.ratio, self.value_loss_mean or 0.0, self.churn_mean or 0.0)
        return churn * weight, churn.detach(), weight

    def observe(self, value_loss: float, churn: float) -> None:
        """Update the running means after a step (plain floats: the eager CPU learner)."""
        self.value_loss_mean = running_mean(self.value_loss_mean, value_loss, self.rate)
        if churn > 0.0:
            self.churn_mean = running_mean(self.churn_mean, churn, self.rate)
