"""average_state_dicts: the mean of a run's weights, value by value."""

from __future__ import annotations

import pytest
import torch

from trackmind.agent.weight_average import average_state_dicts


def test_the_mean_of_each_tensor_by_hand():
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor([1.0]), "n": torch.tensor(3)}
    c = {"w": torch.tensor([4.0, 1.0]), "b": torch.tensor([1.0]), "n": torch.tensor(3)}
    out = average_state_dicts([a, b, c])
    assert out["w"].tolist() == pytest.approx([8 / 3, 3.0])
    assert out["b"].tolist() == pytest.approx([2 / 3])
    assert out["w"].dtype == torch.float32 and out["n"].dtype == torch.int64
    assert int(out["n"]) == 3  # counters agree and are kept
    assert average_state_dicts([a])["w"].tolist() == [1.0, 2.0]  # one dict: itself
    assert a["w"].tolist() == [1.0, 2.0]  # the inputs are not changed


def test_summed_in_float64_then_cast_back():
    # 0.1 three times in float32 sums to 0.3000000119; the float64 sum gives float32(0.1) exactly
    x = {"w": torch.full((1,), 0.1, dtype=torch.float32)}
    out = average_state_dicts([x, x, x])
    assert out["w"].item() == torch.tensor(0.1, dtype=torch.float32).item()


def test_weights_that_do_not_match_are_refused():
    a = {"w": torch.zeros(2)}
    with pytest.raises(ValueError, match="no weights"):
        average_state_dicts([])
    with pytest.raises(ValueError, match="other tensors than weights 0: v"):
        average_state_dicts([a, {"v": torch.zeros(2)}])
    with pytest.raises(ValueError, match=r"w has shape \(3,\), weights 0 \(2,\)"):
        average_state_dicts([a, {"w": torch.zeros(3)}])
    with pytest.raises(ValueError, match="non-float tensor differs"):
        average_state_dicts([{"n": torch.tensor(1)}, {"n": torch.tensor(2)}])
