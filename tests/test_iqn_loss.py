"""iqn_loss on a hand-computed case, and the non-finite loss guard.

The case (B=1, N=2 online taus, N'=2 target taus, A=2 actions):
  q_online  rows = online quantiles, columns = actions: [[1, 5], [3, 0]], taus [0.2, 0.6]
  action 0 -> Z(s, a) = [1, 3]
  q_target_next = [[2, 0], [4, 1]]: mean per action [3, 0.5] -> a* = 0 -> Z' = [2, 4]
  reward 0.5, discount 0.5 -> target = 0.5 + 0.5 * [2, 4] = [1.5, 2.5]
  u_ij = target_j - Z_i:  i=0 (tau 0.2): [0.5, 1.5] (>= 0: weight |0.2 - 0| = 0.2)
                          i=1 (tau 0.6): [-1.5, -0.5] (< 0: weight |0.6 - 1| = 0.4)
"""

from pathlib import Path

import pytest
import torch

from trackmind.agent.loss import (
    Munchausen,
    NonFiniteGuard,
    action_gap,
    bound_clipped_share,
    cvar_means,
    iqn_loss,
    munchausen_target,
    quantile_huber,
)

ROOT = Path(__file__).resolve().parents[1]

Q_ONLINE = [[[1.0, 5.0], [3.0, 0.0]]]
TAUS = [[0.2, 0.6]]
Q_TARGET_NEXT = [[[2.0, 0.0], [4.0, 1.0]]]


def case(discounts=(0.5,)):
    """The hand-computed sample, repeated once per discount."""
    b = len(discounts)
    q = torch.tensor(Q_ONLINE * b, requires_grad=True)
    taus = torch.tensor(TAUS * b)
    actions = torch.zeros(b, dtype=torch.int64)
    qn = torch.tensor(Q_TARGET_NEXT * b, requires_grad=True)
    rewards = torch.full((b,), 0.5)
    return q, taus, actions, qn, rewards, torch.tensor(discounts)


def test_pure_quantile_loss_kappa_zero():
    # rho = weight * |u|: i=0: 0.2 * [0.5, 1.5] = [0.1, 0.3], mean 0.2
    #                     i=1: 0.4 * [1.5, 0.5] = [0.6, 0.2], mean 0.4 -> sum 0.6
    loss, per_sample = iqn_loss(*case(), kappa=0.0)
    assert per_sample.tolist() == pytest.approx([0.6])
    assert loss.item() == pytest.approx(0.6)


def test_huber_branch_kappa_one():
    # huber/kappa: |u| <= 1: 0.5 u^2; else |u| - 0.5. |u| = 0.5 -> 0.125, 1.5 -> 1.0
    # i=0: 0.2 * [0.125, 1.0] = [0.025, 0.2], mean 0.1125
    # i=1: 0.4 * [1.0, 0.125] = [0.4, 0.05], mean 0.225 -> sum 0.3375
    loss, per_sample = iqn_loss(*case(), kappa=1.0)
    assert per_sample.tolist() == pytest.approx([0.3375])
    assert loss.item() == pytest.approx(0.3375)


def test_small_kappa_tends_to_the_quantile_loss():
    loss, _ = iqn_loss(*case(), kappa=1e-6)
    assert loss.item() == pytest.approx(0.6, abs=1e-5)


def test_terminal_discount_zero_ignores_the_next_state():
    # target = [0.5, 0.5]; i=0 (Z=1): u = -0.5 twice, weight 0.8 -> 0.4
    #                      i=1 (Z=3): u = -2.5 twice, weight 0.4 -> 1.0 -> sum 1.4
    _, per_sample = iqn_loss(*case(discounts=(0.0,)), kappa=0.0)
    assert per_sample.tolist() == pytest.approx([1.4])


def test_double_dqn_picks_the_action_with_the_online_network():
    # q_online_next means per action [0, 1] -> a* = 1 -> Z' = target column 1 = [0, 1]
    # target = 0.5 + 0.5 * [0, 1] = [0.5, 1.0]
    # i=0 (Z=1, tau 0.2): u = [-0.5, 0.0] -> 0.8 * [0.5, 0] -> mean 0.2
    # i=1 (Z=3, tau 0.6): u = [-2.5, -2.0] -> 0.4 * [2.5, 2.0] -> mean 0.9 -> sum 1.1
    q_online_next = torch.tensor([[[0.0, 1.0], [0.0, 1.0]]])
    _, per_sample = iqn_loss(*case(), kappa=0.0, q_online_next=q_online_next)
    assert per_sample.tolist() == pytest.approx([1.1])


def test_action_gap_is_the_distance_to_the_best_action():
    q_mean = torch.tensor([[2.0, 2.5, 1.0], [0.0, -1.0, -3.0]])
    gaps = action_gap(q_mean, torch.tensor([0, 2]))
    assert gaps.tolist() == pytest.approx([0.5, 3.0])


def test_advantage_learning_lowers_the_target_by_alpha_times_the_gap():
    # online means per action at s: [(1 + 3) / 2, (5 + 0) / 2] = [2, 2.5]; action 0 -> gap 0.5
    # alpha 0.5: target = [1.5, 2.5] - 0.25 = [1.25, 2.25]
    # i=0 (Z=1, tau 0.2): u = [0.25, 1.25] -> 0.2 * u -> mean 0.15
    # i=1 (Z=3, tau 0.6): u = [-1.75, -0.75] -> 0.4 * |u| -> mean 0.5 -> sum 0.65
    _, per_sample = iqn_loss(*case(), kappa=0.0, advantage_learning=0.5)
    assert per_sample.tolist() == pytest.approx([0.65])


def test_advantage_learning_leaves_the_greedy_action_alone():
    q, taus, _, qn, rewards, discounts = case()
    greedy = torch.ones(1, dtype=torch.int64)  # mean 2.5: the best action, gap 0
    plain = iqn_loss(q, taus, greedy, qn, rewards, discounts, kappa=0.0)[1]
    al = iqn_loss(q, taus, greedy, qn, rewards, discounts, kappa=0.0, advantage_learning=0.9)[1]
    assert al.tolist() == pytest.approx(plain.tolist())


@pytest.mark.parametrize("alpha", [-0.1, 1.0])
def test_advantage_learning_outside_zero_one_is_refused(alpha):
    with pytest.raises(ValueError, match="advantage_learning"):
        iqn_loss(*case(), kappa=0.0, advantage_learning=alpha)


def test_weights_and_per_sample_output():
    # sample 0: the base case (0.6); sample 1: terminal (1.4)
    args = case(discounts=(0.5, 0.0))
    loss, per_sample = iqn_loss(*args, kappa=0.0)
    assert per_sample.shape == (2,)
    assert per_sample.tolist() == pytest.approx([0.6, 1.4])
    assert loss.item() == pytest.approx(1.0)
    loss_w, _ = iqn_loss(*args, kappa=0.0, weights=torch.tensor([1.0, 3.0]))
    assert loss_w.item() == pytest.approx((0.6 * 1 + 1.4 * 3) / 2)


def test_gradient_reaches_only_the_online_quantiles_of_the_taken_action():
    q, taus, actions, qn, rewards, discounts = case()
    loss, per_sample = iqn_loss(q, taus, actions, qn, rewards, discounts, kappa=0.0)
    loss.backward()
    # d/dZ_0 of mean_j 0.2 * (target_j - Z_0) = -0.2; d/dZ_1 of mean_j 0.4 * (Z_1 - t_j) = 0.4
    torch.testing.assert_close(q.grad, torch.tensor([[[-0.2, 0.0], [0.4, 0.0]]]))
    assert qn.grad is None
    assert not per_sample.requires_grad


def test_quantile_huber_is_continuous_at_kappa():
    u = torch.tensor([0.999999, 1.0, 1.000001])
    rho = quantile_huber(u, torch.tensor(0.5), kappa=1.0)
    assert rho.tolist() == pytest.approx([0.25, 0.25, 0.25], abs=1e-5)


def test_negative_kappa_is_refused():
    with pytest.raises(ValueError, match="kappa"):
        iqn_loss(*case(), kappa=-1.0)


def test_guard_skips_counts_and_resets_the_streak():
    guard = NonFiniteGuard(max_in_a_row=3)
    assert guard.check(torch.tensor(1.0))
    assert not guard.check(torch.tensor(float("nan")))
    assert not guard.check(float("inf"))
    assert guard.check(torch.tensor(0.5))  # a finite loss ends the streak
    assert guard.skipped == 2 and guard.in_a_row == 0
    assert not guard.check(torch.tensor(float("nan")))
    assert not guard.check(torch.tensor(float("nan")))
    with pytest.raises(FloatingPointError, match="3 steps in a row .5 skipped in total"):
        guard.check(torch.tensor(float("-inf")))


def test_guard_needs_a_positive_limit():
    with pytest.raises(ValueError):
        NonFiniteGuard(0)


def test_munchausen_target_by_hand():
    """munchausen_target on the module's case with tau_m = 1 and alpha = 0.5.

    s': target means [3, 0.5] -> log pi' = [3, 0.5] - logsumexp = [-0.07889, -2.57889],
    pi' = [0.92414, 0.07586]; soft value per target quantile j = sum_b pi'_b (Z'_jb - log pi'_b):
    j=0 (Z' = [2, 0]): 2.11682; j=1 (Z' = [4, 1]): 4.04097.
    s: online means [2, 2.5], action 0 -> log pi(0|s) = -0.5 - log(1 + e^-0.5) = -0.97408
    (inside the clip at -1) -> bonus 0.5 * -0.97408 = -0.48704.
    target = 0.5 - 0.48704 + 0.5 * [2.11682, 4.04097] = [1.07137, 2.03345].
    """
    q, taus, actions, qn, rewards, discounts = case()
    m = Munchausen(alpha=0.5, temperature=1.0, clip=-1.0)
    target = munchausen_target(qn.detach(), q.detach().mean(dim=1), actions, rewards, discounts, m)
    assert target.tolist()[0] == pytest.approx([1.07137, 2.03345], abs=1e-5)
    # the loss against it, kappa 0: i=0 (Z=1, tau 0.2): 0.2 * [0.07137, 1.03345] -> mean 0.110482
    # i=1 (Z=3, tau 0.6): 0.4 * [1.92863, 0.96655] -> mean 0.579036 -> sum 0.689518
    _, per_sample = iqn_loss(q, taus, actions, qn, rewards, discounts, kappa=0.0, munchausen=m)
    assert per_sample.tolist() == pytest.approx([0.689518], abs=1e-5)


def test_munchausen_bonus_is_clipped_and_cold_limit_is_the_greedy_target():
    q, taus, actions, qn, rewards, discounts = case()
    q_state = torch.tensor([[0.0, 2.0]])  # log pi(0|s) = -log(1 + e^2) = -2.12693 -> clip -0.5
    hot = munchausen_target(qn, q_state, actions, rewards, discounts, Munchausen(1.0, 1.0, -0.5))
    no_bonus = munchausen_target(qn, q_state, actions, rewards, discounts, Munchausen(0.0, 1.0))
    assert (hot - no_bonus).tolist()[0] == pytest.approx([-0.5, -0.5])
    # tau_m -> 0: pi' is the argmax (action 0 of means [3, 0.5]) and the soft value its Z'
    cold = munchausen_target(qn, q_state, actions, rewards, discounts, Munchausen(0.0, 1e-4))
    assert cold.tolist()[0] == pytest.approx([1.5, 2.5], abs=1e-4)


def test_munchausen_is_refused_with_double_dqn_or_advantage_learning():
    m = Munchausen()
    with pytest.raises(ValueError, match="exclude"):
        iqn_loss(*case(), kappa=0.0, advantage_learning=0.5, munchausen=m)
    with pytest.raises(ValueError, match="temperature"):
        Munchausen(temperature=0.0)
    from omegaconf import OmegaConf

    from trackmind.errors import ConfigError
    from trackmind.training.module import learner_config

    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "learner" / "iqn.yaml"))
    assert learner_config(cfg).munchausen() is None  # off by default
    assert learner_config({**cfg, "munchausen_alpha": 0.9}).munchausen() == Munchausen()
    with pytest.raises(ConfigError) as e:
        learner_config({**cfg, "munchausen_alpha": 0.9, "double_dqn": True})
    assert e.value.key == "learner.munchausen_alpha"


def test_value_bound_clips_the_bootstrapped_quantiles():
    # target_max 3: Z'(a=0) = [2, 4] -> [2, 3], means [2.5, 0.5] -> a* = 0
    # target = 0.5 + 0.5 * [2, 3] = [1.5, 2.0]
    # i=0 (Z=1, tau 0.2): u = [0.5, 1.0] -> 0.2 * u -> mean 0.15
    # i=1 (Z=3, tau 0.6): u = [-1.5, -1.0] -> 0.4 * |u| -> mean 0.5 -> sum 0.65
    _, per_sample = iqn_loss(*case(), kappa=0.0, target_max=torch.tensor([3.0]))
    assert per_sample.tolist() == pytest.approx([0.65])


def test_bound_clipped_share_counts_every_actions_quantiles_above_the_bound():
    # q_target_next [[2, 0], [4, 1]]: above 3 only the 4 (1 of 4); above 1.5: 2 and 4 (2 of 4)
    _, _, _, qn, _, _ = case()
    assert bound_clipped_share(qn, torch.tensor([3.0])).item() == pytest.approx(0.25)
    assert bound_clipped_share(qn, torch.tensor([1.5])).item() == pytest.approx(0.5)
    assert bound_clipped_share(qn, torch.tensor([4.0])).item() == 0.0  # equal is not above
    # per-sample bounds: sample 0 at 3 (1 of 4), sample 1 at -1 (4 of 4) -> 5 of 8
    two = torch.cat([qn, qn]).detach()
    assert bound_clipped_share(two, torch.tensor([3.0, -1.0])).item() == pytest.approx(0.625)


def test_value_bound_above_every_quantile_changes_nothing():
    free, _ = iqn_loss(*case(), kappa=0.0)
    bounded, _ = iqn_loss(*case(), kappa=0.0, target_max=torch.tensor([4.0]))
    assert bounded.item() == free.item() == pytest.approx(0.6)


def test_value_bound_applies_to_the_munchausen_soft_value():
    q, taus, actions, qn, rewards, discounts = case()
    m = Munchausen(alpha=0.9, temperature=0.03, clip=-1.0)
    clipped = qn.detach().clamp(max=1.0)
    want, _ = iqn_loss(q, taus, actions, clipped, rewards, discounts, kappa=0.0, munchausen=m)
    got, _ = iqn_loss(
        q,
        taus,
        actions,
        qn,
        rewards,
        discounts,
        kappa=0.0,
        munchausen=m,
        target_max=torch.tensor([1.0]),
    )
    assert got.item() == pytest.approx(want.item())


def test_cvar_means_average_the_quantiles_at_low_taus():
    # quantiles (1, 4, 2) at taus [0.1, 0.3, 0.6, 0.9]; cvar 0.5 keeps the first two rows:
    # action 0: (1 + 3) / 2 = 2, action 1: (10 + 20) / 2 = 15; cvar 1: the plain mean
    q = torch.tensor([[[1.0, 10.0], [3.0, 20.0], [5.0, 30.0], [7.0, 40.0]]])
    taus = torch.tensor([[0.1, 0.3, 0.6, 0.9]])
    assert cvar_means(q, taus, 0.5)[0].tolist() == pytest.approx([2.0, 15.0])
    assert cvar_means(q, taus, 0.3)[0].tolist() == pytest.approx([2.0, 15.0])
    assert cvar_means(q, taus, 0.2)[0].tolist() == pytest.approx([1.0, 10.0])
    assert cvar_means(q, taus, 1.0)[0].tolist() == pytest.approx([4.0, 25.0])


def test_cvar_means_take_the_lowest_tau_when_none_is_low_enough():
    # row 0 has no tau <= 0.25: its lowest tau (0.6, the second quantile) alone; row 1 keeps 0.1
    q = torch.tensor([[[1.0], [3.0], [5.0]], [[2.0], [4.0], [6.0]]])
    taus = torch.tensor([[0.9, 0.6, 0.7], [0.1, 0.8, 0.2]])
    assert cvar_means(q, taus, 0.25)[:, 0].tolist() == pytest.approx([3.0, 4.0])


@pytest.mark.parametrize("cvar", [0.0, 1.5])
def test_cvar_outside_zero_one_is_refused(cvar):
    with pytest.raises(ValueError, match="cvar"):
        cvar_means(torch.zeros(1, 2, 2), torch.zeros(1, 2), cvar)


def risky_case():
    """Action 0 at s' has the higher mean (2 against 0.75), action 1 the higher low quantile
    (0.5 against -2 at tau 0.1)."""
    q, taus, actions, _, rewards, discounts = case()
    qn = torch.tensor([[[-2.0, 0.5], [6.0, 1.0]]])
    return (q, taus, actions, qn, rewards, discounts), torch.tensor([[0.1, 0.7]])


def test_risk_neutral_target_takes_the_best_mean():
    # a* = 0: target = 0.5 + 0.5 * [-2, 6] = [-0.5, 3.5]
    # i=0 (Z=1, tau 0.2): u = [-1.5, 2.5] -> [0.8 * 1.5, 0.2 * 2.5] = [1.2, 0.5] -> mean 0.85
    # i=1 (Z=3, tau 0.6): u = [-3.5, 0.5] -> [0.4 * 3.5, 0.6 * 0.5] = [1.4, 0.3] -> mean 0.85
    args, taus_next = risky_case()
    _, per_sample = iqn_loss(*args, kappa=0.0, taus_next=taus_next, cvar=1.0)
    assert per_sample.tolist() == pytest.approx([1.7])


def test_risk_averse_target_takes_the_best_low_quantiles():
    # cvar 0.5 keeps tau 0.1: action values [-2, 0.5] -> a* = 1
    # target = 0.5 + 0.5 * [0.5, 1.0] = [0.75, 1.0]
    # i=0 (Z=1, tau 0.2): u = [-0.25, 0.0] -> [0.8 * 0.25, 0] -> mean 0.1
    # i=1 (Z=3, tau 0.6): u = [-2.25, -2.0] -> 0.4 * [2.25, 2.0] -> mean 0.85 -> sum 0.95
    args, taus_next = risky_case()
    _, per_sample = iqn_loss(*args, kappa=0.0, taus_next=taus_next, cvar=0.5)
    assert per_sample.tolist() == pytest.approx([0.95])


def test_risk_averse_target_needs_the_taus_and_excludes_munchausen():
    args, taus_next = risky_case()
    with pytest.raises(ValueError, match="taus_next"):
        iqn_loss(*args, cvar=0.5)
    with pytest.raises(ValueError, match="munchausen"):
        iqn_loss(*args, cvar=0.5, taus_next=taus_next, munchausen=Munchausen())
