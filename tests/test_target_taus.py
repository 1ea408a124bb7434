"""learner.target_taus: how the target network's next-state taus are drawn."""

from __future__ import annotations

import json

import pytest
import torch
from specs import FLOATS, float_learner, learner_cfg

from trackmind.errors import ConfigError
from trackmind.training.module import IQNLightningModule, learner_config


def _next_state_taus(module: IQNLightningModule, batch_size: int = 64) -> torch.Tensor:
    """The taus the target network is called with in one compute_loss."""
    seen = []
    online, target, loss_fn = module._forwards()

    def spy(img, floats, taus):
        seen.append(taus.clone())
        return target(img, floats, taus)

    module._fwd = (online, spy, loss_fn)
    batch = {
        "state_float": torch.randn(batch_size, FLOATS),
        "next_state_float": torch.randn(batch_size, FLOATS),
        "action": torch.randint(0, 12, (batch_size,)),
        "reward": torch.randn(batch_size),
        "discount": torch.ones(batch_size),
    }
    module.compute_loss(batch)
    assert len(seen) == 1
    return seen[0]


def test_stratified_target_taus_hold_one_tau_per_stratum_mirrored_around_a_half():
    taus = _next_state_taus(float_learner(target_taus="stratified"))
    assert taus.shape == (64, 8)
    low, high = taus[:, :4], taus[:, 4:]
    strata = torch.arange(4).float()
    # tau_k in [k/8, (k+1)/8) for k < 4, and the upper half is 1 - the lower, k for k
    assert bool(((low >= strata / 8) & (low < (strata + 1) / 8)).all())
    torch.testing.assert_close(high, 1.0 - low)
    # each row's mean is exactly one half: the mean over taus is centred on every draw
    torch.testing.assert_close(taus.mean(dim=1), torch.full((64,), 0.5))


def test_random_target_taus_stay_the_default_uniform_draws():
    assert learner_cfg()["target_taus"] == "random"
    taus = _next_state_taus(float_learner())
    assert taus.shape == (64, 8)
    assert bool(((taus >= 0) & (taus < 1)).all())
    # uniform draws: row means scatter around a half (stratified rows would all be 0.5)
    assert float(taus.mean(dim=1).std()) > 0.02


def test_an_unknown_tau_draw_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"learner\.target_taus.*random, stratified"):
        learner_config(learner_cfg(target_taus="midpoint"))


def test_stratified_target_taus_need_an_even_count():
    with pytest.raises(ConfigError, match=r"learner\.target_taus.*even.*got 5"):
        float_learner({"n_quantiles_target": 5}, target_taus="stratified")


def test_argmax_agreement_counts_draws_that_pick_the_best_action_and_the_value_lost():
    from test_scripts import load_script

    ta = load_script("target_argmax")
    q_ref = torch.tensor([[1.0, 1.2, 0.0], [0.5, 0.0, 0.1]])  # best: 1, then 0
    draws = torch.tensor(
        [
            [[1.0, 1.3, 0.0], [0.4, 0.0, 0.5]],  # state 0 right; state 1 picks 2 (lost 0.4)
            [[1.5, 1.2, 0.0], [0.6, 0.0, 0.1]],  # state 0 picks 0 (lost 0.2); state 1 right
        ]
    )
    agree, lost = ta.argmax_agreement(q_ref, draws)
    assert agree == pytest.approx(0.5)  # 2 of 4
    assert lost == pytest.approx((0.0 + 0.4 + 0.2 + 0.0) / 4)
    torch.testing.assert_close(ta.action_gaps(q_ref), torch.tensor([0.2, 0.4]))
    # max per draw: state 0 -> 1.3, 1.5 (sd 0.1); state 1 -> 0.5, 0.6 (sd 0.05)
    assert ta.value_spread(draws) == pytest.approx((0.1 + 0.05) / 2)


def test_saved_rows_replace_their_own_label_and_keep_the_others(tmp_path):
    from test_scripts import load_script

    ta = load_script("target_argmax")
    path = tmp_path / "noise.json"
    row = ["a", "random", 8, "64.0%", "0.0017", "0.217", "0.0031"]
    ta.save_rows(path, "a", [row])
    ta.save_rows(path, "b", [["b", *row[1:]]])
    ta.save_rows(path, "a", [["a", "stratified", 8, "67.7%", "0.0012", "0.036", "0.0031"]])
    saved = json.loads(path.read_text())
    assert saved["columns"] == ta.COLUMNS
    assert [r[:2] for r in saved["rows"]] == [["b", "random"], ["a", "stratified"]]


def test_the_policys_cvar_chooses_the_targets_action_at_the_targets_own_taus():
    """network.policy_cvar reaches the loss with the taus the target network ran at, so
    cvar_means reads the right quantiles (agent/loss.py checks the choice value by value)."""
    module = float_learner({"policy_cvar": 0.5})
    online, target, loss_fn = module._forwards()
    calls = []

    def spy_loss(*args, **kwargs):
        calls.append(kwargs)
        return loss_fn(*args, **kwargs)

    module._fwd = (online, target, spy_loss)
    taus = _next_state_taus(module)
    assert calls[0]["cvar"] == 0.5
    assert torch.equal(calls[0]["taus_next"], taus)
    plain = float_learner()
    plain._forwards()
    assert plain.policy_cvar == 1.0
