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
