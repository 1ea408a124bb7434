"""Mirror augmentation: the maps by hand, the simulator's symmetry, the learner's batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from specs import float_learner, learner_cfg

from trackmind.agent.inference import observation_q
from trackmind.agent.network_config import build_network
from trackmind.env import manager
from trackmind.env.build import build_managers, default_env_config, make_race
from trackmind.env.mirror import (
    MIRRORED_ACTIONS,
    FloatMirror,
    concatenated,
    lateral_flipped,
    mirror_batch,
    mirror_observation,
    mirrored_actions,
    pairs_swapped,
    unchanged,
)
from trackmind.env.observations import VectorlikeTerm
from trackmind.errors import ConfigError
from trackmind.sim.driver import PurePursuitDriver
from trackmind.sim.maps import line_from_recipe
from trackmind.sim.track import Track
from trackmind.training.module import learner_config

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_mirrored_actions_by_hand():
    # accel, accel+left, accel+right, nothing, left, right, brake, brake+left, brake+right,
    # accel+brake, accel+brake+left, accel+brake+right
    assert mirrored_actions().tolist() == [0, 2, 1, 3, 5, 4, 6, 8, 7, 9, 11, 10]
    with pytest.raises(ValueError, match="action 1 .* no mirror"):
        mirrored_actions(np.array([[1, 0, 0, 0], [1, 0, 1, 0]]))


def test_float_mirror_blocks_by_hand():
    assert pairs_swapped(8, 4, [(2, 3)]).perm.tolist() == [0, 1, 3, 2, 4, 5, 7, 6]
    assert lateral_flipped(6, 3, [1]).sign.tolist() == [1, -1, 1, 1, -1, 1]
    both = concatenated([unchanged(1), pairs_swapped(4, 4, [(0, 1), (2, 3)])])
    assert both.perm.tolist() == [0, 2, 1, 4, 3]
    x = np.array([10.0, 1.0, 2.0, 3.0, 4.0])
    assert both.apply(x).tolist() == [10.0, 2.0, 1.0, 4.0, 3.0]
    with pytest.raises(ValueError, match="permutation"):
        FloatMirror(np.array([0, 0]), np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        FloatMirror(np.array([0, 1]), np.array([1.0, 0.5], np.float32))


def test_default_floats_mirror_by_hand_and_twice_is_identity():
    obs, _, _ = build_managers(default_env_config(), {})
    m = obs.float_mirror()
    assert m.size == 184
    x = np.arange(184, dtype=np.float32) + 1
    y = m.apply(x)
    assert y[0] == 1 and y[183] == 184  # clock, freewheeling
    assert y[1:5].tolist() == [2, 3, 5, 4]  # previous action: left and right keys swap
    assert y[21:25].tolist() == [23, 22, 25, 24]  # sliding: left and right wheels swap
    assert y[37:41].tolist() == [42, 43, 44, 45]  # contact material: wheel 1's groups first
    assert y[53:62].tolist() == [-54, 55, -56, 57, -58, 59, 60, -61, 62]  # roll, yaw, v_left
    assert y[62:68].tolist() == [63, -64, 65, 66, -67, 68]  # zone centres: left flips
    np.testing.assert_array_equal(m.apply(y), x)


def test_float_mirror_refuses_a_term_that_does_not_say():
    env = default_env_config()
    env["observation"]["terms"]["floats"]["group"]["lateral_offset"] = {}

    @manager.register_term("observation", "lateral_offset")
    class LateralOffset(VectorlikeTerm):  # a custom term with no mirror
        size = 1

    try:
        obs, _, _ = build_managers(env, {})
        with pytest.raises(ConfigError, match=r"floats.*\['lateral_offset'\] do not"):
            obs.float_mirror()
    finally:
        manager._REGISTRY["observation"].pop("lateral_offset")


ENV = {**default_env_config(), "frame_shape": [24, 32]}
ACTION_MS = ENV["tick_ms"] * ENV["ticks_per_action"]


def _race(track: Track):
    return make_race(ENV, n_cars=1, maps=track)


def test_the_simulated_race_is_mirror_symmetric():
    """A map and its reflection, driven by mirrored actions: the floats are each other's
    mirror (to 1e-4), the rewards equal, and the frames each other's left-right flip
    but where the road's texture cells fall differently (edges, a pixel wide)."""
    line = line_from_recipe([("S", 60.0), ("L", 30.0, 90.0), ("S", 40.0), ("R", 25.0, 120.0)])
    race = _race(Track.build("a", line, 6.0, 8.0, closed=False))
    twin = _race(Track.build("b", line * [1.0, -1.0], 8.0, 6.0, closed=False))
    m, amap = race.observation.float_mirror(), mirrored_actions()
    race.reset(), twin.reset()
    driver = PurePursuitDriver([race.game.track(0)], speed_share=0.8, action_ms=ACTION_MS)
    same_pixels, steered = [], set()
    for _ in range(60):
        a = driver.act(race.car)
        steered.add(int(a[0]))
        o, r, term, trunc, _ = race.step(a)
        o2, r2, term2, trunc2, _ = twin.step(amap[a])
        np.testing.assert_allclose(m.apply(o["floats"]), o2["floats"], atol=1e-4)
        np.testing.assert_allclose(r, r2, atol=1e-5)
        assert (term, trunc) == (term2, trunc2)
        same_pixels.append(np.mean(o["frame"][..., ::-1] == o2["frame"]))
    assert o["floats"][0, 56] > 10 and o["floats"][0, 182] < 100  # it drove round both bends
    assert {1, 2} <= steered or {4, 5} <= steered or {7, 8} <= steered  # left and right
    assert np.median(same_pixels) > 0.9 and min(same_pixels) > 0.8


def _batch(b: int = 4, f: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "state_float": torch.randn(b, f, generator=g),
        "next_state_float": torch.randn(b, f, generator=g),
        "state_img": torch.randint(0, 255, (b, 1, 2, 3), generator=g, dtype=torch.uint8),
        "next_state_img": torch.randint(0, 255, (b, 1, 2, 3), generator=g, dtype=torch.uint8),
        "action": torch.tensor([1, 4, 0, 8]),
        "reward": torch.tensor([0.5, -1.0, 2.0, 0.0]),
    }


def test_mirror_batch_changes_only_the_masked_samples():
    batch = _batch()
    perm, sign = torch.tensor([0, 2, 1, 3, 4]), torch.tensor([1.0, 1.0, 1.0, -1.0, 1.0])
    mask = torch.tensor([True, False, True, False])
    out = mirror_batch(batch, mask, perm, sign, torch.as_tensor(mirrored_actions()))
    assert out["action"].tolist() == [2, 4, 0, 8]
    x, y = batch["state_float"][0], out["state_float"][0]
    assert y.tolist() == [x[0], x[2], x[1], -x[3], x[4]]
    assert torch.equal(out["next_state_img"][2, 0], batch["next_state_img"][2, 0].flip(-1))
    for i in (1, 3):  # unmasked: untouched
        for k in ("state_float", "next_state_float", "state_img", "next_state_img"):
            assert torch.equal(out[k][i], batch[k][i])
    assert out["reward"] is batch["reward"]
    assert batch["action"].tolist() == [1, 4, 0, 8]  # the input is not changed


def test_learner_mirrors_its_share_and_needs_the_map():
    with pytest.raises(ConfigError, match="learner.mirror_share"):
        float_learner(mirror_share=0.5)
    obs, _, _ = build_managers(default_env_config(), {})
    module = float_learner({"float_mirror": obs.float_mirror()}, mirror_share=1.0)
    batch = {
        "state_float": torch.randn(3, 184),
        "next_state_float": torch.randn(3, 184),
        "action": torch.tensor([1, 2, 7]),
    }
    out = module.mirrored(batch)
    assert out["action"].tolist() == [2, 1, 8]
    assert torch.equal(out["state_float"][:, 55], -batch["state_float"][:, 55])  # yaw rate
    assert torch.equal(out["state_float"][:, 54], batch["state_float"][:, 54])  # pitch rate
    none = float_learner(mirror_share=0.0)
    assert none.mirrored(batch) is batch
    with pytest.raises(ConfigError, match=r"learner.mirror_share.*\[0, 1\]"):
        learner_config(learner_cfg(mirror_share=1.5))


def test_mirror_averaged_q_turns_left_and_right_alike():
    """Q_sym(s, a) = (Q(s, a) + Q(m(s), m(a))) / 2: the mirror image of an observation gets
    the mirror image of its Q values, which a plain network does not."""
    obs_manager, _, _ = build_managers(default_env_config(), {})
    m = obs_manager.float_mirror()
    raw = OmegaConf.to_container(OmegaConf.load(CONF / "network" / "iqn_floats.yaml"))
    net = build_network(raw, 184, None).eval()
    floats = np.random.default_rng(0).normal(size=(3, 184)).astype(np.float32)
    obs, twin = {"floats": floats}, mirror_observation({"floats": floats}, m)
    q, q_twin = observation_q(net, obs, 8, mirror=m), observation_q(net, twin, 8, mirror=m)
    np.testing.assert_allclose(q_twin, q[:, MIRRORED_ACTIONS], rtol=1e-5, atol=1e-6)
    plain, plain_twin = observation_q(net, obs, 8), observation_q(net, twin, 8)
    assert not np.allclose(plain_twin, plain[:, MIRRORED_ACTIONS], atol=1e-6)
    np.testing.assert_allclose(q, (plain + plain_twin[:, MIRRORED_ACTIONS]) / 2, rtol=1e-6)
    frame = np.arange(6, dtype=np.uint8).reshape(1, 1, 2, 3)
    seen = mirror_observation({"floats": floats[:1], "frame": frame}, m)["frame"]
    assert seen[0, 0].tolist() == [[2, 1, 0], [5, 4, 3]]
