"""Mini-race re-reading and clock distribution, value by value."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from trackmind.replay.collate import buffer_collate_function
from trackmind.replay.minirace import (
    clock_bounds,
    mini_race_clock_pmf,
    mini_race_reread,
    sample_mini_race_clock,
    value_upper_bound,
)
from trackmind.replay.states import StateStore

H = 140
INF = float("inf")


def reread(rows, horizon=H, end_rate=None):
    """rows: (clock, n_steps, rewards[3], terminal_actions).

    gammas are 0.5^(i+1), Phi(s) = 2 and Phi(s') = 4 for every row."""
    b = len(rows)
    floats = torch.full((b, 3), 7.0)
    return mini_race_reread(
        clock=torch.tensor([r[0] for r in rows]),
        n_steps=torch.tensor([r[1] for r in rows]),
        rewards=torch.tensor([r[2] for r in rows], dtype=torch.float32),
        gammas=torch.tensor([[0.5, 0.25, 0.125]] * b),
        terminal_actions=torch.tensor([r[3] for r in rows], dtype=torch.float32),
        state_potential=torch.full((b,), 2.0),
        next_state_potential=torch.full((b,), 4.0),
        state_float=floats,
        next_state_float=floats + 1,
        horizon_actions=horizon,
        end_rate=None if end_rate is None else torch.tensor(end_rate),
    )


def test_reread_exact_values():
    full = [1.0, 3.0, 6.0]  # rewards[i] for i = 0, 1, 2
    out = reread(
        [
            # t=0, n=3: end 3 < 140, reduced 3, discount .125, reward 6 + .125*4 - 2 = 4.5
            (0, 3, full, INF),
            # t=136: end 139 < 140, same as t=0
            (136, 3, full, INF),
            # t=137: end 140 >= 140 -> terminal, reduced 3 - 0 = 3, reward 6 + 0 - 2 = 4
            (137, 3, full, INF),
            # t=138: end 141, reduced 3 - 1 = 2, terminal, reward rewards[1] - 2 = 1
            (138, 3, full, INF),
            # t=139: reduced 1, terminal, reward 1 - 2 = -1
            (139, 3, full, INF),
            # finish inside: n=2, terminal_actions 2 <= 2 -> terminal, reward 3 - 2 = 1
            (10, 2, [1.0, 3.0, 3.0], 2.0),
            # finish beyond a non-greedy cut: n=1, terminal_actions 3 > 1 -> not terminal,
            # discount .5, reward 1 + .5*4 - 2 = 1
            (0, 1, [1.0, 1.0, 1.0], 3.0),
            # finish 3 actions on, horizon cuts first: t=138, n=3 -> reduced 2, reward 3-2 = 1
            (138, 3, full, 3.0),
        ]
    )
    np.testing.assert_array_equal(out.reduced_n, [3, 3, 3, 2, 1, 2, 1, 2])
    np.testing.assert_array_equal(out.terminal, [0, 0, 1, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(out.discount, [0.125, 0.125, 0, 0, 0, 0, 0.5, 0])
    np.testing.assert_array_equal(out.reward, [4.5, 4.5, 4, 1, -1, 1, 1, 1])
    # clocks: state t; next state t + reduced_n = min(t + n, 140)
    np.testing.assert_array_equal(out.state_float[:, 0], [0, 136, 137, 138, 139, 10, 0, 138])
    np.testing.assert_array_equal(out.next_state_float[:, 0], [3, 139, 140, 140, 140, 12, 1, 140])
    # the other features are untouched, and the inputs were not modified (copy=True)
    assert (out.state_float[:, 1:] == 7).all() and (out.next_state_float[:, 1:] == 8).all()


def test_lost_race_pays_its_end_rate_for_the_rest_of_the_mini_race():
    rows = [
        # lost 2 actions on (n=2, terminal_actions 2): t=10 -> 140 - 10 - 2 = 128 actions
        # left at -0.5: reward rewards[1] 3 + 0 * Phi' - 2 + (-0.5 * 128) = -63
        (10, 2, [1.0, 3.0, 3.0], 2.0),
        # the same end seen from t=137 (reduced n 2 fits: 137 + 2 = 139 < 140): 1 left,
        # 3 - 2 - 0.5 = 0.5
        (137, 2, [1.0, 3.0, 3.0], 2.0),
        # the end lies beyond the steps (terminal_actions 3 > n 1): no end, no rate:
        # 1 + .5*4 - 2 = 1
        (0, 1, [1.0, 1.0, 1.0], 3.0),
        # a finish (rate 0) inside the steps: 3 - 2 = 1, nothing added
        (10, 2, [1.0, 3.0, 3.0], 2.0),
        # a cut race that bootstraps (inf): unchanged, 6 + .125*4 - 2 = 4.5
        (0, 3, [1.0, 3.0, 6.0], INF),
    ]
    out = reread(rows, end_rate=[-0.5, -0.5, -0.5, 0.0, -0.5])
    np.testing.assert_array_equal(out.terminal, [1, 1, 0, 1, 0])
    np.testing.assert_array_equal(out.discount, [0, 0, 0.5, 0, 0.125])
    np.testing.assert_array_equal(out.reward, [-63.0, 0.5, 1.0, 1.0, 4.5])


def test_shaping_uses_discount_zero_when_terminal():
    # Same transition, non-terminal (t=0) and terminal (t=139): shaping gamma^n Phi' - Phi
    # becomes 0 * Phi' - Phi; with rewards 0: 0.125*4 - 2 = -1.5, then -2.
    out = reread([(0, 3, [0.0, 0.0, 0.0], INF), (139, 3, [0.0, 0.0, 0.0], INF)])
    np.testing.assert_array_equal(out.reward, [-1.5, -2.0])


def test_clock_pmf_matches_definition():
    # horizon 140: v uniform on [-35, 145) (180 values); t=0: 11/180, 1..30: 2/180, 31..139: 1/180
    assert clock_bounds(140) == (-35, 145)
    pmf = mini_race_clock_pmf(140)
    expected = np.concatenate(([11], [2] * 30, [1] * 109)) / 180
    np.testing.assert_allclose(pmf, expected, rtol=0, atol=1e-15)
    # a small horizon keeps the support [0, H - 1]: H = 8, v in [-2, 13), 15 values;
    # t = 0 from v in -2..5 (8 values), t = 1..7 from v = 6..12 (1 each)
    np.testing.assert_allclose(mini_race_clock_pmf(8), np.array([8, 1, 1, 1, 1, 1, 1, 1]) / 15)


def test_clock_samples_follow_the_pmf():
    # 1.8M draws, fixed seed: chi-square against the exact pmf over the 140 values.
    g = torch.Generator().manual_seed(1234)
    t = sample_mini_race_clock(g, 1_800_000, 140)
    assert t.dtype == torch.int64 and int(t.min()) == 0 and int(t.max()) == 139
    counts = np.bincount(t.numpy(), minlength=140)
    expected = mini_race_clock_pmf(140) * len(t)
    assert chisquare(counts, expected).pvalue > 1e-3
    # per-value check: t = 0 has 11/180 = 6.11%, t = 1 has 1.11%, t = 100 has 0.56%
    freq = counts / len(t)
    np.testing.assert_allclose(freq[[0, 1, 100]], [11 / 180, 2 / 180, 1 / 180], rtol=0.03)


def test_collate_reads_states_and_applies_the_mini_race():
    # A store of 6 states (frame value = 10 * gid, floats [0, gid], Phi = gid), two
    # records: state 1 with n=3 (next 4), state 4 with n=1 (next 5), clocks 0 and 139.
    store = StateStore(8, (1, 2, 2), 2)
    gids = np.arange(6)
    store.append(
        np.repeat((10 * gids).astype(np.uint8), 4).reshape(6, 1, 2, 2),
        np.stack([np.zeros(6), gids], 1).astype(np.float32),
        gids.astype(np.float32),
    )
    records = {
        "state_gid": torch.tensor([1, 4]),
        "action": torch.tensor([5, 11], dtype=torch.uint8),
        "n_steps": torch.tensor([3, 1], dtype=torch.uint8),
        "rewards": torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]),
        "gammas": torch.tensor([[1.0, 1.0, 1.0]] * 2),
        "terminal_actions": torch.tensor([INF, INF]),
    }
    batch = buffer_collate_function(
        records,
        store,
        horizon_actions=H,
        generator=None,
        indices=torch.tensor([7, 9]),
        clock=torch.tensor([0, 139]),
    )
    assert batch["state_img"].dtype == torch.uint8 and batch["state_img"].shape == (2, 1, 2, 2)
    np.testing.assert_array_equal(batch["state_img"][:, 0, 0, 0], [10, 40])
    np.testing.assert_array_equal(batch["next_state_img"][:, 0, 0, 0], [40, 50])
    np.testing.assert_array_equal(batch["state_float"], [[0, 1], [139, 4]])
    np.testing.assert_array_equal(batch["next_state_float"], [[3, 4], [140, 5]])
    # row 0: 3 + 1*Phi(4) - Phi(1) = 6;  row 1 (terminal at the horizon): 0.5 + 0 - 4 = -3.5
    np.testing.assert_array_equal(batch["reward"], [6.0, -3.5])
    np.testing.assert_array_equal(batch["discount"], [1.0, 0.0])
    np.testing.assert_array_equal(batch["terminal"], [False, True])
    assert batch["action"].dtype == torch.int64 and batch["action"].tolist() == [5, 11]
    assert batch["weights"].tolist() == [1.0, 1.0] and batch["indices"].tolist() == [7, 9]
    for key in ("state_float", "next_state_float", "reward", "discount", "weights"):
        assert batch[key].dtype == torch.float32, key


def test_value_upper_bound_by_hand():
    # B = (H - t') * rate + once - Phi(s'), H = 70: t' = 10, Phi 2 -> 60 * -0.02 + 1 - 2 = -2.2;
    # t' = 70 (the horizon), Phi -1.5 -> 0 + 1 + 1.5 = 2.5; t' = 69, Phi 0 -> -0.02 + 1 = 0.98
    b = value_upper_bound(
        torch.tensor([10.0, 70.0, 69.0]), torch.tensor([2.0, -1.5, 0.0]), 70, -0.02, 1.0
    )
    assert b.dtype == torch.float32
    assert b.tolist() == pytest.approx([-2.2, 2.5, 0.98])


def test_collate_adds_the_value_bound_of_the_next_state():
    # rate 0.5, once 0, H 10: state 1 (n=3, clock 2) -> t' = 5, Phi(s'=4) = 4: 5 * 0.5 - 4
    store = StateStore(8, None, 2)
    gids = np.arange(6)
    store.append(None, np.zeros((6, 2), np.float32), gids.astype(np.float32))
    records = {
        "state_gid": torch.tensor([1]),
        "action": torch.tensor([0], dtype=torch.uint8),
        "n_steps": torch.tensor([3], dtype=torch.uint8),
        "rewards": torch.tensor([[1.0, 2.0, 3.0]]),
        "gammas": torch.tensor([[1.0, 1.0, 1.0]]),
        "terminal_actions": torch.tensor([INF]),
    }
    kw = dict(horizon_actions=10, generator=None, indices=torch.tensor([0]))
    batch = buffer_collate_function(
        records, store, clock=torch.tensor([2]), value_bound=(0.5, 0.0), **kw
    )
    assert batch["target_max"].tolist() == pytest.approx([-1.5])
    assert "target_max" not in buffer_collate_function(
        records, store, clock=torch.tensor([2]), **kw
    )
