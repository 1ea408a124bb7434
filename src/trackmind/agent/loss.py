"""The IQN quantile Huber loss as a pure function, and a guard against non-finite losses.

Convention (Dabney et al. 2018): rho(u) = |tau - 1{u < 0}| * huber_kappa(u) / kappa with
u = target - online, so kappa -> 0 is the pure quantile (pinball) loss |tau - 1{u<0}| * |u|.
Linesight's loss omits the / kappa: ours is theirs * (1 / kappa) (x200 at kappa = 5e-3),
which matters for absolute thresholds such as gradient-norm clipping, not for Adam steps.

Advantage learning (Bellemare et al. 2016, "Increasing the action gap"): the target of a
non-greedy action is lowered by alpha times its gap to the greedy one, T_AL Q(s, a) =
T Q(s, a) - alpha * (max_b Q(s, b) - Q(s, a)). The greedy policy and its values are the same
fixed point; the gaps between actions grow about 1 / (1 - alpha) times, so that a 50 ms
choice (brake now or next action) is not decided by estimation noise of the gap's size.

Munchausen targets (Vieillard et al. 2020, M-IQN): the target adds alpha times the scaled log
of the softmax policy of the taken action, alpha * clip(tau_m * log pi(a|s), clip, 0), and
bootstraps the soft value sum_b pi(b|s') (Z(s', b) - tau_m * log pi(b|s')) instead of the
greedy action's quantiles; pi = softmax(Q / tau_m). This is an implicit KL penalty between
consecutive policies, and it also widens the action gaps, more gently than advantage learning.

Risk-averse targets (Dabney et al. 2018, section 3.1): the greedy action at s' maximises the
CVaR of its returns, the mean of the lowest ``cvar`` share of the quantiles, instead of the
mean. The target distribution is then that action's whole Z(s', a*), so the values learned are
those of the risk-averse policy, which the collectors act with too (network.policy_cvar). The
target's own taus say which of its quantiles lie in [0, cvar]; no extra forward is needed.

A value bound (``target_max``, from replay/minirace.value_upper_bound): a mini-race's return
from s' cannot exceed what its remaining actions can earn, so the bootstrapped quantiles are
clipped there, min(Z(s', a), B(s')), before the target is formed. Clipping a return
distribution to a support that holds the true one is a non-expansion: it leaves a correct
value alone and stops an overestimate from feeding on itself through the target network.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def quantile_huber(u: torch.Tensor, taus: torch.Tensor, kappa: float) -> torch.Tensor:
    """Elementwise rho_tau^kappa(u) for TD errors u and matching taus (broadcastable)."""
    abs_u = u.abs()
    if kappa > 0:
        huber = torch.where(abs_u <= kappa, 0.5 * u * u / kappa, abs_u - 0.5 * kappa)
    else:
        huber = abs_u
    return (taus - (u.detach() < 0).to(u.dtype)).abs() * huber


def action_gap(q_mean: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """max_b Q(s, b) - Q(s, a) per sample (B,) from mean quantiles (B, A) and actions (B,)."""
    taken = q_mean.gather(1, actions.view(-1, 1)).squeeze(1)
    return q_mean.max(dim=1).values - taken


def bound_clipped_share(q_target_next: torch.Tensor, target_max: torch.Tensor) -> torch.Tensor:
    """Share of the target quantiles at s' (B, N', A), every action's, that the value bound
    ``target_max`` (B,) clips: how hard the bound weighs on the bootstrapped values."""
    b = q_target_next.shape[0]
    return (q_target_next > target_max.view(b, 1, 1)).float().mean()


def cvar_means(quantiles: torch.Tensor, taus: torch.Tensor, cvar: float) -> torch.Tensor:
    """Mean over the quantiles (B, N, A) whose taus (B, N) lie in [0, cvar]: a sample estimate
    of each action's CVaR (B, A). A row with no tau that low takes its lowest-tau quantile.
    cvar 1 is the plain mean."""
    if not 0.0 < cvar <= 1.0:
        raise ValueError(f"cvar must be in (0, 1], got {cvar}")
    if cvar >= 1.0:
        return quantiles.mean(dim=1)
    low = taus <= cvar
    lowest = torch.nn.functional.one_hot(taus.argmin(dim=1), taus.shape[1]).bool()
    w = (low | (lowest & ~low.any(dim=1, keepdim=True))).to(quantiles.dtype)  # (B, N)
    return (quantiles * w.unsqueeze(2)).sum(dim=1) / w.sum(dim=1, keepdim=True)


@dataclass(frozen=True)
class Munchausen:
    """Munchausen settings: alpha (0: off), the softmax temperature tau_m and the lower clip
    of the scaled log-policy bonus (the paper's 0.9, 0.03 and -1)."""

    alpha: float = 0.9
    temperature: float = 0.03
    clip: float = -1.0

    def __post_init__(self) -> None:
        if not 0 <= self.alpha <= 1:
            raise ValueError(f"munchausen alpha must be in [0, 1], got {self.alpha}")
        if self.temperature <= 0:
            raise ValueError(f"munchausen temperature must be > 0, got {self.temperature}")
        if self.clip >= 0:
            raise ValueError(f"munchausen clip must be < 0, got {self.clip}")


def munchausen_target(
    z_next: torch.Tensor,
    q_state: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    m: Munchausen,
) -> torch.Tensor:
    """Target quantiles (B, N') r + bonus + discount * soft value of s'.

    z_next (B, N', A) target quantiles at s', whose means give pi(.|s'); q_state (B, A) the
    values at s that give log pi(a|s) for the bonus. With n-step returns the bonus is paid
    once, for the first action of the transition.
    """
    tau_m = m.temperature
    log_pi_next = torch.log_softmax(z_next.mean(dim=1) / tau_m, dim=1)  # (B, A)
    soft = (log_pi_next.exp().unsqueeze(1) * (z_next - tau_m * log_pi_next.unsqueeze(1))).sum(2)
    log_pi = torch.log_softmax(q_state / tau_m, dim=1).gather(1, actions.view(-1, 1)).squeeze(1)
    bonus = m.alpha * (tau_m * log_pi).clamp(min=m.clip, max=0.0)
    return (rewards + bonus).unsqueeze(1) + discounts.unsqueeze(1) * soft


def iqn_loss(
    q_online: torch.Tensor,
    taus: torch.Tensor,
    actions: torch.Tensor,
    q_target_next: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    kappa: float = 5e-3,
    weights: torch.Tensor | None = None,
    q_online_next: torch.Tensor | None = None,
    advantage_learning: float = 0.0,
    munchausen: Munchausen | None = None,
    target_max: torch.Tensor | None = None,
    taus_next: torch.Tensor | None = None,
    cvar: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean weighted quantile Huber loss and the per-sample losses (B,).

    q_online (B, N, A) online quantiles at s for ``taus`` (B, N); actions (B,) int64;
    q_target_next (B, N', A) target quantiles at s'; rewards (B,) n-step summed; discounts
    (B,) gamma^n, 0 when terminal. The target r + discount * Z_target(s', a*) uses
    a* = argmax of the mean target quantiles, or of ``q_online_next`` (B, N'', A) when it is
    given (double DQN). ``advantage_learning`` alpha in [0, 1) lowers the target by alpha
    times the taken action's gap in the online quantiles' means at s (detached). Per sample:
    summed over online quantiles, averaged over target ones. ``weights`` (B,) are importance
    weights (prioritized replay); no gradient reaches the target. Per-sample losses come back
    detached, ready to become priorities or logs. ``munchausen`` (alpha > 0) replaces the
    target by munchausen_target, its bonus read from the online quantiles' means at s
    (detached, no extra forward); it excludes double DQN and advantage learning.
    ``target_max`` (B,) clips every target quantile at s' (all actions) from above first.
    ``cvar`` < 1 chooses a* by cvar_means over the quantiles at ``taus_next`` (B, N'), the
    taus both next-state forwards ran at (risk-averse targets); Munchausen excludes it.
    """
    if kappa < 0:
        raise ValueError(f"kappa must be >= 0, got {kappa}")
    if not 0 <= advantage_learning < 1:
        raise ValueError(f"advantage_learning must be in [0, 1), got {advantage_learning}")
    m = munchausen if munchausen is not None and munchausen.alpha > 0 else None
    if m is not None and (q_online_next is not None or advantage_learning > 0):
        raise ValueError("munchausen targets exclude double DQN and advantage learning")
    if cvar < 1.0 and (taus_next is None or m is not None):
        raise ValueError("a risk-averse target needs taus_next and excludes munchausen targets")
    b, n, a = q_online.shape
    if target_max is not None:
        q_target_next = torch.minimum(q_target_next, target_max.view(b, 1, 1))
    z = q_online.gather(2, actions.view(b, 1, 1).expand(b, n, 1)).squeeze(2)  # (B, N)
    if m is not None:
        with torch.no_grad():
            target = munchausen_target(
                q_target_next, q_online.detach().mean(dim=1), actions, rewards, discounts, m
            )
        return _quantile_loss(z, taus, target, kappa, weights)
    with torch.no_grad():
        chooser = q_target_next if q_online_next is None else q_online_next
        if cvar < 1.0:
            best = cvar_means(chooser, taus_next, cvar).argmax(dim=1)  # (B,)
        else:
            best = chooser.mean(dim=1).argmax(dim=1)
        n_next = q_target_next.shape[1]
        z_next = q_target_next.gather(2, best.view(b, 1, 1).expand(b, n_next, 1)).squeeze(2)
        target = rewards.view(b, 1) + discounts.view(b, 1) * z_next  # (B, N')
        if advantage_learning > 0:
            gap = action_gap(q_online.detach().mean(dim=1), actions)
            target = target - advantage_learning * gap.view(b, 1)
    return _quantile_loss(z, taus, target, kappa, weights)


def _quantile_loss(
    z: torch.Tensor,
    taus: torch.Tensor,
    target: torch.Tensor,
    kappa: float,
    weights: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantiles z (B, N) at taus (B, N) against target samples (B, N'): summed over online
    quantiles, averaged over target ones; the weighted mean and the detached per-sample."""
    u = target.unsqueeze(1) - z.unsqueeze(2)  # (B, N, N')
    rho = quantile_huber(u, taus.unsqueeze(2), kappa)
    per_sample = rho.mean(dim=2).sum(dim=1)  # (B,)
    loss = per_sample.mean() if weights is None else (weights * per_sample).mean()
    return loss, per_sample.detach()


class NonFiniteGuard:
    """Skip steps whose loss is NaN/inf and count them; stop after too many in a row.

    One bad batch (an fp16 overflow, a rare outlier) should not end a run, but a stream of
    them means the weights are gone, and training on must stop with a clear message.
    """

    def __init__(self, max_in_a_row: int) -> None:
        if max_in_a_row < 1:
            raise ValueError(f"max_in_a_row must be >= 1, got {max_in_a_row}")
        self.max_in_a_row = max_in_a_row
        self.skipped = 0
        self.in_a_row = 0

    def check(self, loss: torch.Tensor | float) -> bool:
        """True when the loss is finite (take the step); False when the step is skipped."""
        finite = bool(torch.isfinite(torch.as_tensor(loss)).all())
        if finite:
            self.in_a_row = 0
            return True
        self.skipped += 1
        self.in_a_row += 1
        if self.in_a_row >= self.max_in_a_row:
            self._stop()
        return False

    def observe(self, in_a_row: int, skipped: int) -> None:
        """Take counts kept elsewhere (a captured GPU step counts on the device); stop when
        too many in a row."""
        self.in_a_row, self.skipped = int(in_a_row), int(skipped)
        if self.in_a_row >= self.max_in_a_row:
            self._stop()

    def _stop(self) -> None:
        raise FloatingPointError(
            f"loss was not finite for {self.in_a_row} steps in a row "
            f"({self.skipped} skipped in total): stopping training"
        )
