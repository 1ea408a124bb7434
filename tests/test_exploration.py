"""Exploration policies: greedy limits, uniform and softmax frequencies, Q noise, configs."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from trackmind.agent.exploration import (
    ActionHold,
    PolicyParams,
    build_exploration,
    hold_pmf,
    sample_hold_lengths,
    select_actions,
    softmax_probabilities,
)
from trackmind.errors import ConfigError

CONF = Path(__file__).resolve().parents[1] / "conf" / "exploration"
N_ACTIONS = 12


def q_batch(b: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(b, N_ACTIONS))


@pytest.mark.parametrize(
    "params",
    [
        PolicyParams("greedy"),
        PolicyParams("epsilon_greedy", epsilon=0.0),
        PolicyParams("linesight", epsilon=0.0, epsilon_boltzmann=0.0),
    ],
)
def test_no_exploration_is_greedy(params):
    q = q_batch(500)
    actions, was_greedy = select_actions(q, params, np.random.default_rng(1))
    assert actions.dtype == np.int64 and was_greedy.dtype == bool
    np.testing.assert_array_equal(actions, q.argmax(axis=1))
    assert was_greedy.all()


def test_epsilon_one_is_uniform():
    b = 120_000
    actions, was_greedy = select_actions(
        q_batch(b), PolicyParams("epsilon_greedy", epsilon=1.0), np.random.default_rng(2)
    )
    counts = np.bincount(actions, minlength=N_ACTIONS)
    expected = b / N_ACTIONS  # 10,000 each, binomial sd ~96: allow 5 sd
    assert np.abs(counts - expected).max() < 5 * math.sqrt(expected * (1 - 1 / N_ACTIONS))
    # an action drawn uniformly is greedy when it hits argmax Q: about 1 in 12
    assert was_greedy.mean() == pytest.approx(1 / N_ACTIONS, abs=0.005)


def test_was_greedy_means_the_action_equals_argmax():
    q = q_batch(2000)
    params = PolicyParams("linesight", epsilon=0.3, epsilon_boltzmann=0.5, noise_scale=1.0)
    actions, was_greedy = select_actions(q, params, np.random.default_rng(3))
    np.testing.assert_array_equal(was_greedy, actions == q.argmax(axis=1))
    assert 0 < was_greedy.mean() < 1


def test_boltzmann_frequencies_match_the_softmax():
    b, temperature = 200_000, 0.05
    row = np.linspace(0.0, 0.11, N_ACTIONS)  # small Q gaps, as in racing
    q = np.tile(row, (b, 1))
    actions, was_greedy = select_actions(
        q, PolicyParams("boltzmann", temperature=temperature), np.random.default_rng(4)
    )
    freq = np.bincount(actions, minlength=N_ACTIONS) / b
    e = np.exp(row / temperature)
    np.testing.assert_allclose(freq, e / e.sum(), atol=0.004)
    assert was_greedy.mean() == pytest.approx(e[-1] / e.sum(), abs=0.004)


def test_softmax_probabilities_by_hand():
    p = softmax_probabilities(np.array([[0.0, math.log(3.0)]]), temperature=1.0)
    np.testing.assert_allclose(p, [[0.25, 0.75]])
    with pytest.raises(ValueError):
        softmax_probabilities(np.zeros((1, 2)), temperature=0.0)


def test_gaussian_noise_policy():
    b = 100_000
    rng = np.random.default_rng(5)
    q = np.full((b, N_ACTIONS), -1.0)
    q[:, 0], q[:, 1] = 0.0, 0.01  # action 1 is greedy by 0.01, the noise scale
    params = PolicyParams("linesight", epsilon=0.0, epsilon_boltzmann=1.0, noise_scale=0.01)
    actions, was_greedy = select_actions(q, params, rng)
    # P(a0) = P(n0 - n1 > 0.01) with n0 - n1 ~ N(0, 2 * 0.01^2) = 1 - Phi(1 / sqrt 2)
    p0 = 0.5 * (1 - math.erf(0.5))
    assert (actions == 0).mean() == pytest.approx(p0, abs=0.006)  # p0 ~ 0.2398
    assert set(np.unique(actions)) == {0, 1}
    np.testing.assert_array_equal(was_greedy, actions == 1)


def test_linesight_branches_are_conditional():
    # a clear gap: the noise branch stays greedy, only the uniform one moves away:
    # non-greedy rate = epsilon * 11/12, whatever epsilon_boltzmann is
    b = 100_000
    q = np.tile(np.arange(N_ACTIONS, dtype=float), (b, 1))
    params = PolicyParams("linesight", epsilon=0.5, epsilon_boltzmann=0.9, noise_scale=0.01)
    _, was_greedy = select_actions(q, params, np.random.default_rng(6))
    assert 1 - was_greedy.mean() == pytest.approx(0.5 * 11 / 12, abs=0.006)


def test_torch_q_values_are_accepted():
    q = torch.tensor(q_batch(8), dtype=torch.float32)
    actions, was_greedy = select_actions(q, PolicyParams("greedy"), np.random.default_rng(7))
    np.testing.assert_array_equal(actions, q.argmax(dim=1).numpy())
    assert was_greedy.all()


def test_bad_q_shape_and_policy():
    with pytest.raises(ValueError, match="shape"):
        select_actions(np.zeros(12), PolicyParams("greedy"), np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown exploration policy"):
        select_actions(np.zeros((1, 12)), PolicyParams("softmax"), np.random.default_rng(0))


def test_presets_follow_their_schedules():
    eps = build_exploration(OmegaConf.load(CONF / "epsilon_greedy.yaml"))
    assert eps.params(0).epsilon == 1.0
    assert eps.params(300_000).epsilon == pytest.approx(0.1)
    assert eps.params(3_000_000).epsilon == pytest.approx(0.03)
    ls = build_exploration(OmegaConf.load(CONF / "linesight.yaml"))
    assert ls.params(0).epsilon_boltzmann == pytest.approx(0.15)
    assert ls.params(1e9).epsilon_boltzmann == pytest.approx(0.03)
    assert ls.params(0).noise_scale == 0.01
    bz = build_exploration(OmegaConf.load(CONF / "boltzmann.yaml"))
    assert bz.params(0).temperature == pytest.approx(0.1)
    assert bz.params(1e9).temperature == pytest.approx(0.005)
    assert bz.params(0, explore=False) == PolicyParams("greedy")


@pytest.mark.parametrize(
    ("cfg", "key"),
    [
        ({"policy": "epsilon_greedy", "epsilon": 0.1, "temperature": 1.0}, "temperature"),
        ({"policy": "softmax"}, "policy"),
        ({"policy": "epsilon_greedy"}, "epsilon"),
        ({"policy": "epsilon_greedy", "epsilon": [[0, 1.5]]}, "epsilon"),
        ({"policy": "epsilon_greedy", "epsilon": [[0, 1.0]], "epsilon_kind": "x"}, "epsilon_kind"),
        ({"policy": "boltzmann", "temperature": [[0, 1.0], [10, 0.0]]}, "temperature"),
        (
            {"policy": "linesight", "epsilon": 0.1, "epsilon_boltzmann": 0.1, "noise_scale": -1},
            "noise_scale",
        ),
        ({"policy": "epsilon_greedy", "epsilon": [[0, 0.1]], "hold_max": 0}, "hold_max"),
        ({"policy": "epsilon_greedy", "epsilon": [[0, 0.1]], "hold_max": 2.5}, "hold_max"),
        ({"policy": "epsilon_greedy", "epsilon": [[0, 0.1]], "hold_mu": -1}, "hold_mu"),
        ({"policy": "boltzmann", "temperature": [[0, 1.0]], "hold_max": 4}, "hold_max"),
    ],
)
def test_bad_config_names_the_key(cfg, key):
    with pytest.raises(ConfigError) as e:
        build_exploration(cfg)
    assert e.value.key == f"exploration.{key}"


def test_hold_pmf_by_hand():
    # P(n) = n^-2 / (1 + 1/4 + 1/9) for n = 1, 2, 3
    z = 1 + 1 / 4 + 1 / 9
    assert hold_pmf(2.0, 3) == pytest.approx([1 / z, 0.25 / z, (1 / 9) / z])
    assert hold_pmf(0.0, 4) == pytest.approx([0.25] * 4)  # mu = 0: uniform durations
    assert hold_pmf(2.0, 1) == pytest.approx([1.0])


def test_hold_lengths_follow_the_pmf():
    n = sample_hold_lengths(np.random.default_rng(0), 200_000, 2.0, 5)
    assert n.min() == 1 and n.max() == 5
    freq = np.bincount(n, minlength=6)[1:] / len(n)
    assert freq == pytest.approx(hold_pmf(2.0, 5), abs=0.005)


def test_held_random_actions_repeat_until_their_duration_ends():
    q = np.zeros((1, N_ACTIONS))
    q[0, 0] = 1.0  # greedy action 0
    hold = ActionHold(1)
    # uniform durations of 1..4 and epsilon 1: every action is a held random one
    params = PolicyParams("epsilon_greedy", epsilon=1.0, hold_mu=0.0, hold_max=4)
    rng = np.random.default_rng(3)
    actions, runs = [], []
    for _ in range(400):
        left_before = int(hold.left[0])
        a, _ = select_actions(q, params, rng, hold)
        if left_before == 0:
            runs.append(int(hold.left[0]) + 1)  # a new hold: its drawn duration
        actions.append(int(a[0]))
    # every run of held steps repeats one action for exactly its drawn duration
    i = 0
    for n in runs:
        assert len(set(actions[i : i + n])) == 1
        i += n
    assert i - runs[-1] < len(actions) <= i  # the last hold may outlast the loop
    assert set(runs) == {1, 2, 3, 4}


def test_holds_release_at_race_start_and_leave_greedy_cars_alone():
    q = np.zeros((2, N_ACTIONS))
    q[:, 5] = 1.0
    hold = ActionHold(2)
    hold.left[:] = 3
    hold.action[:] = 7
    params = PolicyParams("epsilon_greedy", epsilon=0.0, hold_max=10)
    hold.release(np.array([1]))
    a, g = select_actions(q, params, np.random.default_rng(0), hold)
    assert a.tolist() == [7, 5]  # car 0 still holds 7; car 1's race began: greedy
    assert g.tolist() == [False, True]
    assert hold.left.tolist() == [2, 0]
    # without holds (hold_max 1) the same draw is Linesight's single random action
    params1 = PolicyParams("epsilon_greedy", epsilon=0.0, hold_max=1)
    assert select_actions(q, params1, np.random.default_rng(0), hold)[0].tolist() == [5, 5]
