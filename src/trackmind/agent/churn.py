"""Value-churn reduction (CHAIN, Tang and Berseth 2024) for the IQN learner.

Every update moves the Q values of states that were not in its batch too: the greedy action
of such a state can flip between two weights versions that were never trained on it. On
technical, consecutive versions drive different lines through the same hairpin, and the
greedy finish rate swings by tens of points from one minute to the next. CHAIN adds a loss on
a reference batch kept out of the value loss: the squared change of its Q values since the
previous update, so that an update moves the values of the states it trains on and as little
else as it can, weighed by `learner.churn_weight`.

A fixed weight, not the paper's automatic one (a weight that keeps this loss a fixed share of
the value loss): one update's churn is heavy-tailed (1e-10 to 1e-5 on technical), and as the
loss held it down the automatic weight rose from 4e1 to 1.5e7 in 8 minutes, until no update
could move the values of states outside its batch. Size the weight by the gradient, not by
the loss: the churn loss is tiny, its gradient is not, and (R)Adam divides every step by the
running size of the gradients. The value loss's gradient norm is 1-4; with a weight of 50 the
total passed 10 on a third of the steps, and that run learned technical far slower than its
control (docs/learning.md, "Value-churn reduction on technical").

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


class ChurnReduction:
    """The previous weights version, which the next update's churn is measured from.

    A plain object, not a module: the copy is not part of the checkpoint (a resumed run
    starts comparing from its first update) and follows the online network's device.
    """

    def __init__(self, weight: float, rows: int) -> None:
        self.weight = float(weight)
        self.rows = int(rows)
        self.previous: nn.Module | None = None

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

    def forget(self) -> None:
        """Drop the previous version (after a reset of the weights): the next update compares
        with nothing, the one after with the reset weights."""
        self.previous = None

    def loss(
        self, z_ref: torch.Tensor, img: torch.Tensor | None, floats: torch.Tensor, taus
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(weighted churn loss, raw churn) for the reference rows' online quantiles z_ref;
        the previous version reads the same rows at the same taus (none yet: 0)."""
        if self.previous is None:
            zero = z_ref.sum() * 0.0
            return zero, zero.detach()
        with torch.no_grad():
            z_prev = self.previous(img, floats, taus)
        churn = value_churn(z_ref, z_prev)
        return churn * self.weight, churn.detach()
