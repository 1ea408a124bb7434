"""The acting weights: a moving average of the online weights (Polyak averaging)."""

import copy

import pytest
import torch

from trackmind.training.module import ema_rate, soft_update


def test_ema_rate_by_hand():
    # the mean of the iterates first (the random start fades at once), then exponential
    assert [ema_rate(k, 4) for k in range(6)] == [1.0, 0.5, 1 / 3, 0.25, 0.25, 0.25]
    assert ema_rate(10, 1) == 1.0  # a horizon of one batch: the online weights


def test_acting_average_tracks_the_mean_then_the_exponential_average():
    online = torch.nn.Linear(1, 1, bias=False)
    acting = copy.deepcopy(online)
    seen = []
    for k, w in enumerate([4.0, 2.0, 6.0, 8.0, 0.0]):
        with torch.no_grad():
            online.weight.fill_(w)
        soft_update(acting, online, ema_rate(k, 3))
        seen.append(float(acting.weight))
    # k=0: 4; k=1: mean(4, 2) = 3; k=2: mean(4, 2, 6) = 4; then rate 1/3:
    # 4 + (8 - 4) / 3 = 16/3; 16/3 + (0 - 16/3) / 3 = 32/9
    assert seen == pytest.approx([4.0, 3.0, 4.0, 16 / 3, 32 / 9])


def test_an_averaged_spectral_copy_takes_the_online_power_iteration():
    """The acting average is never run in training mode, so soft_update hands it the online
    network's power-iteration vectors: it divides by the current singular value, not by the
    one of its first weights."""
    from trackmind.agent.network import SpectralLinear

    online = torch.nn.Sequential(SpectralLinear(3, 2), torch.nn.Linear(2, 1))
    acting = copy.deepcopy(online)
    with torch.no_grad():
        online[0].weight.copy_(torch.tensor([[0.0, 5.0, 0.0], [0.0, 0.0, 1.0]]))
    for _ in range(10):
        online(torch.ones(1, 3))  # training mode: u follows the new weights
    soft_update(acting, online, 1.0)
    assert torch.equal(acting[0].u, online[0].u)
    acting.eval()
    x = torch.tensor([[1.0, 1.0, 1.0]])
    torch.testing.assert_close(acting[0](x), x @ online[0].weight.t() / 5.0 + online[0].bias)
