"""IQN network: presets, parameter count, taus, config validation, input scaling, inference."""

import inspect
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from trackmind.agent.inference import greedy_q, make_inference_network
from trackmind.agent.network import (
    IQNNetwork,
    ResidualBlock,
    SpectralLinear,
    encoder_macs,
    impala_output_shape,
    random_taus,
    stratified_symmetric_taus,
)
from trackmind.agent.network_config import build_network, network_config
from trackmind.errors import ConfigError

CONF = Path(__file__).resolve().parents[1] / "conf" / "network"
PRESETS = {
    "iqn_linesight": (120, 160),
    "iqn_cpu": (48, 64),
    "iqn_floats": None,
    "iqn_impala": (120, 160),
}
FLOATS = 184


def preset(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))


def inputs(net: IQNNetwork, batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    img = None
    if net.image_shape is not None:
        img = torch.randint(0, 256, (batch, *net.image_shape), dtype=torch.uint8, generator=g)
    return img, torch.randn(batch, FLOATS, generator=g)


@pytest.mark.parametrize("name", PRESETS)
def test_presets_output_quantiles(name):
    net = build_network(preset(name), FLOATS, PRESETS[name])
    img, floats = inputs(net, 3)
    n = preset(name)["n_quantiles_train"]
    z = net(img, floats, stratified_symmetric_taus(3, n))
    assert z.shape == (3, n, 12)
    assert torch.isfinite(z).all()


def test_linesight_parameter_count():
    net = build_network(preset("iqn_linesight"), FLOATS, (120, 160))
    assert sum(p.numel() for p in net.parameters()) == 6_578_333
    assert net.feature_dim == 5632 + 256


@pytest.mark.parametrize("name", PRESETS)
def test_preset_keys_mirror_the_constructor(name):
    args = set(inspect.signature(IQNNetwork).parameters) - {"float_mean", "float_std"}
    extra = {"n_quantiles_train", "n_quantiles_target", "n_quantiles_inference", "compile"}
    extra |= {"greedy_cvar", "policy_cvar"}
    assert set(preset(name)) == args | extra


def test_stratified_symmetric_taus():
    n = 8
    taus = stratified_symmetric_taus(1000, n, torch.Generator().manual_seed(0))
    assert taus.shape == (1000, n)
    # symmetric: the second half mirrors the first around 1/2
    torch.testing.assert_close(taus[:, : n // 2] + taus[:, n // 2 :], torch.ones(1000, n // 2))
    # stratified: exactly one tau in each interval [k/n, (k+1)/n)
    strata = torch.sort((taus * n).floor().long(), dim=1).values
    assert (strata == torch.arange(n)).all()
    # uniform inside its stratum: the first one averages 1/(2n)
    assert taus[:, 0].mean().item() == pytest.approx(1 / (2 * n), abs=0.005)


def test_taus_reproducible_and_random_taus():
    a = random_taus(4, 32, torch.Generator().manual_seed(1))
    b = random_taus(4, 32, torch.Generator().manual_seed(1))
    assert a.shape == (4, 32) and torch.equal(a, b)
    assert ((a >= 0) & (a < 1)).all()


@pytest.mark.parametrize("n", [7, 0, -2])
def test_odd_or_empty_tau_count_is_refused(n):
    with pytest.raises(ValueError, match="even"):
        stratified_symmetric_taus(2, n)


@pytest.mark.parametrize(
    ("change", "float_dim", "frame_shape", "key", "fragment"),
    [
        ({"n_quantiles_train": 7}, FLOATS, (48, 64), "n_quantiles_train", "even"),
        ({}, FLOATS, (120, 160), "image_shape", "(1, 120, 160)"),
        ({}, FLOATS, None, "image_shape", "renders no frames"),
        ({}, 100, (48, 64), "float_dim", "100 floats"),
        ({"hidden": 3}, FLOATS, (48, 64), "hidden", "unknown key"),
        ({"dense_hidden": 0}, FLOATS, (48, 64), "dense_hidden", "positive"),
        ({"n_quantiles_target": 0}, FLOATS, (48, 64), "n_quantiles_target", "positive"),
        ({"float_hidden": [128, -1]}, FLOATS, (48, 64), "float_hidden", "positive"),
        ({"conv_kernels": [8, 4]}, FLOATS, (48, 64), "conv_channels", "same length"),
        ({"conv_kernels": [8, 4, 5]}, FLOATS, (48, 64), "conv_kernels", "to nothing"),
        ({"compile": "jit"}, FLOATS, (48, 64), "compile", "none, script, compile"),
        ({"greedy_cvar": 0}, FLOATS, (48, 64), "greedy_cvar", "(0, 1]"),
        ({"greedy_cvar": 1.5}, FLOATS, (48, 64), "greedy_cvar", "(0, 1]"),
        ({"policy_cvar": 0}, FLOATS, (48, 64), "policy_cvar", "(0, 1]"),
        ({"image_shape": [48, 64]}, FLOATS, (48, 64), "image_shape", "[C, H, W]"),
        ({"layer_norm": "sometimes"}, FLOATS, (48, 64), "layer_norm", "not a valid bool"),
        ({"spectral_norm": "yes!"}, FLOATS, (48, 64), "spectral_norm", "not a valid bool"),
        ({"encoder": "resnet"}, FLOATS, (48, 64), "encoder", "conv, impala"),
        ({"encoder": "impala", "impala_pool": [7, 8]}, FLOATS, (48, 64), "impala_pool", "6x8"),
        ({"impala_pool": [6]}, FLOATS, (48, 64), "impala_pool", "[H, W]"),
        ({"impala_blocks": -1}, FLOATS, (48, 64), "impala_blocks", ">= 0"),
        ({"impala_channels": []}, FLOATS, (48, 64), "impala_channels", "needs a stage"),
    ],
)
def test_bad_config_names_the_key(change, float_dim, frame_shape, key, fragment):
    cfg = {**preset("iqn_cpu"), **change}
    with pytest.raises(ConfigError) as e:
        build_network(cfg, float_dim, frame_shape)
    assert e.value.key == f"network.{key}"
    assert fragment in str(e.value)


def test_layer_norm_sits_before_every_dense_activation_and_scripts():
    """network.layer_norm: a LayerNorm after each hidden Linear of the dense parts (float head,
    tau embedding, both dueling heads), none in the conv stack; the network still scripts."""
    net = build_network({**preset("iqn_cpu"), "layer_norm": True}, FLOATS, (48, 64))
    norms = [m for m in net.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert [n.normalized_shape for n in norms] == [(128,), (128,), (256,), (64,), (64,)]
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in net.image_head)
    img, floats = inputs(net, 3)
    taus = stratified_symmetric_taus(3, 8)
    z = net(img, floats, taus)
    torch.testing.assert_close(torch.jit.script(net)(img, floats, taus), z)
    # what LayerNorm buys: the features no longer scale with the layer before them
    with torch.no_grad():
        net.float_head[0].weight.mul_(7.0)
        net.float_head[0].bias.mul_(7.0)
    torch.testing.assert_close(net(img, floats, taus), z, atol=1e-5, rtol=1e-4)
    plain = build_network(preset("iqn_cpu"), FLOATS, (48, 64))
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.modules())


def test_spectral_linear_divides_by_the_largest_singular_value():
    """SpectralLinear: power iteration in training converges to the top singular value of a
    hand-made weight, the output is x (W / sigma)^T + b, and eval mode leaves u alone."""
    torch.manual_seed(0)
    layer = SpectralLinear(3, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[3.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))  # sigma = 3
        layer.bias.copy_(torch.tensor([0.5, -0.5]))
    x = torch.tensor([[1.0, 2.0, 3.0]])
    for _ in range(20):
        y = layer(x)
    torch.testing.assert_close(y, torch.tensor([[1.0 + 0.5, 2.0 / 3.0 - 0.5]]))
    layer.eval()
    u = layer.u.clone()
    torch.testing.assert_close(layer(x), y)
    assert torch.equal(layer.u, u)
    # the gradient flows through sigma too: d/dW of sum(W x / sigma) is not x alone
    layer.train()
    layer(x).sum().backward()
    assert layer.weight.grad is not None and not torch.allclose(
        layer.weight.grad, torch.stack([x[0], x[0]]) / 3.0
    )


def test_spectral_norm_network_scripts_and_keeps_plain_keys():
    net = build_network({**preset("iqn_cpu"), "spectral_norm": True}, FLOATS, (48, 64))
    spectral = [n for n, m in net.named_modules() if isinstance(m, SpectralLinear)]
    assert spectral == ["advantage.0", "value.0"]
    keys = set(net.state_dict())
    assert {"advantage.0.weight", "advantage.0.u", "value.0.u"} <= keys
    img, floats = inputs(net, 3)
    taus = stratified_symmetric_taus(3, 8)
    net.eval()
    torch.testing.assert_close(torch.jit.script(net)(img, floats, taus), net(img, floats, taus))


def test_config_defaults_and_env_float_dim():
    cfg = network_config({"image_shape": None, "float_dim": None}, 20, (48, 64))
    assert cfg.float_dim == 20 and cfg.n_quantiles_train == 8 and cfg.compile == "none"
    assert cfg.dense_hidden == 512  # Linesight's size when not given


def test_uint8_frames_are_scaled_inside_the_network():
    net = build_network(preset("iqn_cpu"), FLOATS, (48, 64))
    seen = {}
    net.image_head.register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    img = torch.tensor([0, 128, 255], dtype=torch.uint8).repeat_interleave(1024)
    img = img.reshape(1, 1, 48, 64)
    net(img, torch.zeros(1, FLOATS), torch.full((1, 2), 0.5))
    x = seen["x"].flatten()
    assert x.dtype == torch.float32
    assert x[0].item() == -1.0 and x[1024].item() == 0.0 and x[2048].item() == 127 / 128
    assert img.dtype == torch.uint8 and img.flatten()[2048].item() == 255  # input untouched


def test_floats_are_normalised_by_buffers():
    mean, std = torch.linspace(-1, 1, FLOATS), torch.linspace(0.5, 2, FLOATS)
    net = build_network(preset("iqn_floats"), FLOATS, None, float_mean=mean, float_std=std)
    assert {"float_mean", "float_std"} <= set(net.state_dict())  # saved with checkpoints
    seen = {}
    net.float_head.register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    floats = torch.randn(2, FLOATS)
    net(None, floats, torch.full((2, 2), 0.5))
    torch.testing.assert_close(seen["x"], (floats - mean) / std)
    with pytest.raises(ValueError, match="positive"):
        net.set_float_stats(std=torch.zeros(FLOATS))
    with pytest.raises(ValueError, match="184 values"):
        net.set_float_stats(mean=torch.zeros(3))


def test_greedy_q_is_the_mean_over_random_taus():
    net = build_network(preset("iqn_floats"), FLOATS, None).eval()
    _, floats = inputs(net, 5)
    q = greedy_q(net, None, floats, 32, torch.Generator().manual_seed(3))
    taus = random_taus(5, 32, torch.Generator().manual_seed(3))
    torch.testing.assert_close(q, net(None, floats, taus).mean(dim=1))
    assert q.shape == (5, 12)


@pytest.mark.parametrize("name", ["iqn_cpu", "iqn_floats"])
def test_script_mode_matches_eager_and_follows_new_weights(name):
    net = build_network(preset(name), FLOATS, PRESETS[name])
    inf = make_inference_network(net, "script")
    assert inf.mode == "script"
    img, floats = inputs(net, 16)
    taus = random_taus(16, 32)
    torch.testing.assert_close(inf(img, floats, taus), net(img, floats, taus))
    fresh = build_network(preset(name), FLOATS, PRESETS[name])
    inf.load_state_dict(fresh.state_dict())  # a collector pulling the learner's weights
    torch.testing.assert_close(inf(img, floats, taus), fresh(img, floats, taus))


def test_failed_compilation_falls_back_to_eager(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch.jit, "script", broken)
    net = build_network(preset("iqn_floats"), FLOATS, None)
    with pytest.warns(RuntimeWarning, match="no compiler here"):
        inf = make_inference_network(net, "script")
    assert inf.mode == "none" and inf.fn is net
    with pytest.raises(ValueError, match="inference mode"):
        make_inference_network(net, "fast")


@pytest.mark.slow
def test_compile_mode_matches_eager():
    net = build_network(preset("iqn_floats"), FLOATS, None)
    inf = make_inference_network(net, "compile")
    _, floats = inputs(net, 4)
    taus = random_taus(4, 32)
    torch.testing.assert_close(inf(None, floats, taus), net(None, floats, taus))
    assert math.isfinite(greedy_q(inf, None, floats, 32).sum().item())


def test_fused_dueling_heads_take_the_same_values_and_gradients():
    """The heads' first layers as one GEMM (what a GPU runs) against each head on its own:
    the same outputs and the same gradients for every weight and for the input."""
    torch.manual_seed(0)
    net = build_network(preset("iqn_floats"), FLOATS, None)
    assert net.fuse_heads
    x = torch.randn(24, net.feature_dim) * 3  # many negative pre-activations: the leak counts
    outs, grads = [], []
    for fused in (False, True):
        xi = x.clone().requires_grad_()
        adv, value = net.dueling(xi, fused=fused)
        net.zero_grad()
        (adv.square().sum() + value.sum() * 3).backward()
        outs.append((adv.detach(), value.detach()))
        grads.append([xi.grad] + [p.grad.clone() for p in net.parameters() if p.grad is not None])
    for a, b in zip(outs[0], outs[1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert len(grads[0]) == len(grads[1]) == 1 + 8  # x, then both heads' 4 tensors each
    for a, b in zip(grads[0], grads[1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for change in ({"layer_norm": True}, {"spectral_norm": True}):
        assert not build_network({**preset("iqn_floats"), **change}, FLOATS, None).fuse_heads


def test_impala_output_shape_by_hand():
    """Each stage halves H and W, rounding up (3x3 max-pool, stride 2, padding 1); the
    adaptive pool then sets the grid."""
    assert impala_output_shape((1, 48, 64), (16, 32, 32), None) == (32, 6, 8)
    assert impala_output_shape((1, 120, 160), (16, 32, 32), None) == (32, 15, 20)
    assert impala_output_shape((1, 5, 7), (8, 4), None) == (4, 2, 2)  # 5x7 -> 3x4 -> 2x2
    assert impala_output_shape((1, 120, 160), (16, 32, 32), (6, 8)) == (32, 6, 8)


def test_encoder_macs_by_hand():
    """iqn_cpu's convs on 48x64: 11x15x8 outputs of 1x8x8 taps, 4x6x16 of 8x4x4, 2x4x16 of
    16x3x3; the Impala stages (16, 32, 32; 2 blocks) on the same frame: a 3x3 conv per stage
    at the stage's input size, four 3x3 convs per stage at half of it."""
    net = build_network(preset("iqn_cpu"), FLOATS, (48, 64))
    plain = 11 * 15 * 8 * 64 + 4 * 6 * 16 * 8 * 16 + 2 * 4 * 16 * 16 * 9
    assert encoder_macs(net.image_head, net.image_shape) == plain == 152_064
    impala = build_network({**preset("iqn_cpu"), "encoder": "impala"}, FLOATS, (48, 64))
    stages = [(1, 16, 48 * 64, 24 * 32), (16, 32, 24 * 32, 12 * 16), (32, 32, 12 * 16, 6 * 8)]
    by_hand = sum(9 * (cin * c * hw_in + 4 * c * c * hw_out) for cin, c, hw_in, hw_out in stages)
    assert encoder_macs(impala.image_head, impala.image_shape) == by_hand == 21_676_032


def test_impala_encoder_features_script_and_pool():
    """encoder=impala: three stages of residual blocks, features C x grid next to the floats'
    (32 x 6 x 8 + 128 on 48x64 frames; 32 x 3 x 4 + 128 pooled), and the network scripts."""
    cfg = {**preset("iqn_cpu"), "encoder": "impala"}
    net = build_network(cfg, FLOATS, (48, 64))
    assert sum(isinstance(m, ResidualBlock) for m in net.image_head) == 6
    assert net.feature_dim == 32 * 6 * 8 + 128
    img, floats = inputs(net, 3)
    taus = stratified_symmetric_taus(3, 8)
    z = net(img, floats, taus)
    assert z.shape == (3, 8, 12) and torch.isfinite(z).all()
    net.eval()
    torch.testing.assert_close(torch.jit.script(net)(img, floats, taus), net(img, floats, taus))
    pooled = build_network({**cfg, "impala_pool": [3, 4]}, FLOATS, (48, 64))
    assert pooled.feature_dim == 32 * 3 * 4 + 128
    assert pooled(img, floats, taus).shape == (3, 8, 12)
    assert build_network({**cfg, "impala_blocks": 0}, FLOATS, (48, 64)).feature_dim == 1664


def test_residual_block_is_the_identity_when_its_last_conv_is_zero():
    """x + body(x): with the second conv's weight and bias zero the block passes x through,
    and the gradient reaches x through the skip unchanged."""
    block = ResidualBlock(4)
    with torch.no_grad():
        block.body[3].weight.zero_()
        block.body[3].bias.zero_()
    x = torch.randn(2, 4, 5, 6, requires_grad=True)
    y = block(x)
    torch.testing.assert_close(y, x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones_like(x))
