"""The IQN network: image and float heads, cosine quantile embedding, dueling quantile heads.

Inputs stay raw (uint8 frames, unnormalised floats) until they reach the network, which
scales them itself: batches travel small and every caller normalises the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

LEAK = 0.01


def stratified_symmetric_taus(
    batch: int, n: int, generator: torch.Generator | None = None, device=None
) -> torch.Tensor:
    """Training taus (batch, n): (k + U) / n for k < n/2, mirrored as 1 - tau for the rest.

    One draw per stratum covers (0, 1) evenly and the mirror makes the set symmetric around
    1/2, which lowers the variance of the loss for the same n.
    """
    if n <= 0 or n % 2:
        raise ValueError(f"stratified symmetric taus need a positive even n, got {n}")
    half = n // 2
    u = torch.rand(batch, half, generator=generator, device=device)
    low = (torch.arange(half, device=device, dtype=u.dtype) + u) / n
    return torch.cat([low, 1.0 - low], dim=1)


def random_taus(
    batch: int, k: int, generator: torch.Generator | None = None, device=None
) -> torch.Tensor:
    """Inference taus (batch, k), uniform on [0, 1)."""
    if k <= 0:
        raise ValueError(f"need a positive number of taus, got {k}")
    return torch.rand(batch, k, generator=generator, device=device)


# how a set of training taus is drawn, by name (learner.target_taus): each draw's taus are
# uniform on (0, 1), so either gives an unbiased quantile loss
TAU_DRAWS = {"random": random_taus, "stratified": stratified_symmetric_taus}


def midpoint_taus(batch: int, k: int, device=None, cvar: float = 1.0) -> torch.Tensor:
    """Evaluation taus (batch, k): the stratum midpoints (i + 1/2) / k * cvar, every call alike.

    Their mean of Z is the midpoint rule for E[Z] (cvar 1): a greedy action that depends only
    on the state and the weights, so an evaluation race can be repeated exactly. cvar < 1
    spreads them over [0, cvar] instead: the mean of the worst `cvar` share of returns
    (CVaR), a risk-averse choice (Dabney et al. 2018, IQN's distortion risk measures).
    """
    if k <= 0:
        raise ValueError(f"need a positive number of taus, got {k}")
    if not 0.0 < cvar <= 1.0:
        raise ValueError(f"cvar must be in (0, 1], got {cvar}")
    row = (torch.arange(k, device=device, dtype=torch.float32) + 0.5) / k * cvar
    return row.repeat(batch, 1)


def conv_output_shape(
    image_shape: Sequence[int], channels: Sequence[int], kernels: Sequence[int], strides
) -> tuple[int, int, int]:
    """(C, H, W) after the unpadded conv stack; H or W <= 0 means the stack is too deep."""
    _, h, w = image_shape
    c = image_shape[0]
    for c_out, k, s in zip(channels, kernels, strides, strict=True):
        h, w, c = (h - k) // s + 1, (w - k) // s + 1, c_out
    return c, h, w


class SpectralLinear(nn.Linear):
    """A Linear layer whose weight is divided by its largest singular value (Miyato et al.
    2018), estimated by one power iteration per training forward.

    Used on the dueling heads' hidden layers (Gogianu et al. 2021: spectral normalisation of
    the penultimate layer steadies a value network's optimisation). Written as a plain
    module, not torch's parametrization, so the network still scripts for the collectors and
    its state_dict keeps the plain keys (plus the power iteration's vector ``u``). In eval
    mode ``u`` is not updated: an acting copy divides by the learner's last estimate.
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.register_buffer("u", F.normalize(torch.randn(out_features), dim=0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        with torch.no_grad():
            v = F.normalize(torch.mv(w.t(), self.u), dim=0)
            if self.training:
                self.u.copy_(F.normalize(torch.mv(w, v), dim=0))
                v = F.normalize(torch.mv(w.t(), self.u), dim=0)
        sigma = torch.dot(self.u, torch.mv(w, v))
        return F.linear(x, w / sigma, self.bias)


class PatchConv2d(nn.Conv2d):
    """A Conv2d of few input channels (the frames' first conv) that runs on a GPU as one matmul
    over its input's patches, and whose output is channels_last (NHWC) in memory.

    cuDNN has no good kernel for one input channel: on an H100 the first conv of
    iqn_linesight (1 -> 16 channels, 4x4, stride 2) took a generic engine plus an NCHW -> NHWC
    conversion, about 1 ms of a 5.8 ms learner step at batch 512, for 0.6 GFLOP. As patches
    (B*Ho*Wo, C*k*k) times the weight (C*k*k, C_out) it is one small GEMM, and the NHWC result
    is what the following convolutions read best. Same parameters as a Conv2d (state dicts
    are unchanged); on a CPU it is the plain convolution. Zero padding (the Impala encoder's
    first conv) is padded first, then the same GEMM; undilated, ungrouped only.
    """

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, pad: int = 0) -> None:
        super().__init__(c_in, c_out, kernel, stride, padding=pad)
        self.pad = pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda:
            return self._conv_forward(x, self.weight, self.bias)
        if self.pad > 0:
            x = F.pad(x, [self.pad, self.pad, self.pad, self.pad])
        return patch_conv2d(x, self.weight, self.bias, self.stride)


def patch_conv2d(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: tuple[int, int]
) -> torch.Tensor:
    """conv2d(x, weight, bias, stride) without padding, as patches times the weight: (B, C_out,
    Ho, Wo) in channels_last memory. Every output position's (C, kh, kw) window is a view of
    x; the reshape copies them into the GEMM's rows (x needs no gradient here, so nothing is
    scattered back)."""
    b, c, h, w = x.shape
    c_out, _, kh, kw = weight.shape
    sh, sw = stride
    ho, wo = (h - kh) // sh + 1, (w - kw) // sw + 1
    x = x.contiguous()
    patches = x.as_strided((b, ho, wo, c, kh, kw), (c * h * w, sh * w, sw, h * w, w, 1))
    y = F.linear(patches.reshape(b * ho * wo, c * kh * kw), weight.reshape(c_out, -1), bias)
    return y.view(b, ho, wo, c_out).permute(0, 3, 1, 2)


def conv_layout_for(net: nn.Module, device: torch.device | str) -> nn.Module:
    """``net`` with its conv weights channels_last (NHWC) on a CUDA device, where cuDNN's
    tensor-core convolutions read that layout (H100, bf16 learner step: 6.40 -> 5.75 ms), and
    as it is elsewhere (CPU runs keep their measured layout). Converts in place; returns net."""
    if torch.device(device).type == "cuda":
        net.to(memory_format=torch.channels_last)
    return net


ENCODERS = ("conv", "impala")


class ResidualBlock(nn.Module):
    """x + conv(act(conv(act(x)))): the Impala-CNN block (Espeholt et al. 2018). Two 3x3
    convolutions that keep the shape, so a deep encoder still passes gradients straight
    through its skips."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.LeakyReLU(LEAK),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.LeakyReLU(LEAK),
            nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


def impala_output_shape(
    image_shape: Sequence[int], channels: Sequence[int], pool: Sequence[int] | None
) -> tuple[int, int, int]:
    """(C, H, W) after the Impala stages: each halves H and W, rounding up (3x3 max-pool,
    stride 2, padding 1), then the adaptive max-pool to ``pool`` (H, W) if one is given."""
    _, h, w = image_shape
    for _ in channels:
        h, w = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    if pool is not None:
        h, w = pool
    return channels[-1], h, w


def impala_layers(
    c_in: int, channels: Sequence[int], blocks: int, pool: Sequence[int] | None
) -> list[nn.Module]:
    """The Impala-CNN encoder (Espeholt et al. 2018; with IQN in BTR, Clark et al. 2024): per
    stage a 3x3 conv, a 3x3 max-pool of stride 2 and ``blocks`` residual blocks; then the
    activation and, as BTR does, an adaptive max-pool to a fixed ``pool`` grid, so the state
    features do not grow with the frame size. A first conv of few channels is a PatchConv2d,
    as in the plain stack (one GEMM on a GPU)."""
    if not channels:
        raise ValueError("the Impala encoder needs at least one stage")
    layers: list[nn.Module] = []
    for c_out in channels:
        shape = (c_in, c_out, 3, 1)
        conv = PatchConv2d(*shape, pad=1) if c_in <= 4 else nn.Conv2d(*shape, padding=1)
        layers += [conv, nn.MaxPool2d(3, 2, padding=1)]
        layers += [ResidualBlock(c_out) for _ in range(blocks)]
        c_in = c_out
    layers.append(nn.LeakyReLU(LEAK))
    if pool is not None:
        layers.append(nn.AdaptiveMaxPool2d(tuple(pool)))
    return layers


def encoder_macs(image_head: nn.Module, image_shape: Sequence[int]) -> int:
    """Multiply-adds of the convolutions of ``image_head`` for one frame of ``image_shape``,
    read from the output shapes of one forward pass (pooling and activations left out)."""
    macs = 0

    def count(conv: nn.Module, _inputs: tuple, out: torch.Tensor) -> None:
        nonlocal macs
        k = conv.kernel_size[0] * conv.kernel_size[1] * conv.in_channels // conv.groups
        macs += out[0].numel() * k

    convs = [m for m in image_head.modules() if isinstance(m, nn.Conv2d)]
    hooks = [m.register_forward_hook(count) for m in convs]
    weight = convs[0].weight  # the frame goes where the head is (a GPU's head: on the GPU)
    try:
        with torch.no_grad():
            image_head(torch.zeros(1, *image_shape, device=weight.device, dtype=weight.dtype))
    finally:
        for h in hooks:
            h.remove()
    return macs


def _hidden(a: int, b: int, layer_norm: bool, spectral_norm: bool = False) -> list[nn.Module]:
    """Linear -> [LayerNorm] -> leaky ReLU: one hidden layer of the dense parts."""
    norm: list[nn.Module] = [nn.LayerNorm(b)] if layer_norm else []
    linear = SpectralLinear(a, b) if spectral_norm else nn.Linear(a, b)
    return [linear, *norm, nn.LeakyReLU(LEAK)]


def _mlp(sizes: Sequence[int], layer_norm: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += _hidden(a, b, layer_norm)
    return nn.Sequential(*layers)


class IQNNetwork(nn.Module):
    """Quantile values Z(s, tau, a) for a batch of states and taus.

    forward(img, floats, taus) -> (B, N, A); img is (B, C, H, W) uint8 (None when the
    network has no image head), floats (B, F) raw, taus (B, N) in [0, 1].

    ``layer_norm`` puts a LayerNorm before every hidden activation of the dense parts (float
    head, tau embedding, dueling heads): it bounds the features a value is read from, which
    keeps Q from extrapolating far on states the buffer rarely holds (Ball et al. 2023; Lyle
    et al. 2023). The conv stack is left as it is. ``spectral_norm`` makes the dueling heads'
    hidden layers SpectralLinear. ``encoder`` picks the frame encoder: "conv" (Linesight's
    plain stack, conv_*) or "impala" (residual stages, impala_*; see impala_layers).
    """

    def __init__(
        self,
        image_shape: Sequence[int] | None,
        float_dim: int,
        conv_channels: Sequence[int] = (16, 32, 64, 32),
        conv_kernels: Sequence[int] = (4, 4, 3, 3),
        conv_strides: Sequence[int] = (2, 2, 2, 1),
        float_hidden: Sequence[int] = (256, 256),
        embedding_dim: int = 64,
        dense_hidden: int = 512,
        n_actions: int = 12,
        float_mean: torch.Tensor | None = None,
        float_std: torch.Tensor | None = None,
        layer_norm: bool = False,
        spectral_norm: bool = False,
        encoder: str = "conv",
        impala_channels: Sequence[int] = (16, 32, 32),
        impala_blocks: int = 2,
        impala_pool: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.has_image = image_shape is not None
        self.image_shape = tuple(image_shape) if image_shape is not None else None
        self.float_dim = float_dim
        self.embedding_dim = embedding_dim
        self.n_actions = n_actions

        conv: list[nn.Module] = []
        image_features = 0
        if encoder not in ENCODERS:
            raise ValueError(f"encoder must be one of {', '.join(ENCODERS)}, got {encoder!r}")
        if image_shape is not None and encoder == "impala":
            conv += impala_layers(image_shape[0], impala_channels, impala_blocks, impala_pool)
            c, h, w = impala_output_shape(image_shape, impala_channels, impala_pool)
        elif image_shape is not None:
            c_in = image_shape[0]
            for c_out, k, s in zip(conv_channels, conv_kernels, conv_strides, strict=True):
                layer = PatchConv2d if c_in <= 4 else nn.Conv2d  # few channels: one GEMM
                conv += [layer(c_in, c_out, k, s), nn.LeakyReLU(LEAK)]
                c_in = c_out
            c, h, w = conv_output_shape(image_shape, conv_channels, conv_kernels, conv_strides)
        if image_shape is not None:
            if h <= 0 or w <= 0:
                raise ValueError(f"conv stack shrinks the image {tuple(image_shape)} to nothing")
            image_features = c * h * w
            conv.append(nn.Flatten())
        self.image_head = nn.Sequential(*conv)
        self.float_head = _mlp([float_dim, *float_hidden], layer_norm)
        float_features = float_hidden[-1] if float_hidden else float_dim
        self.feature_dim = image_features + float_features

        self.tau_embedding = nn.Sequential(*_hidden(embedding_dim, self.feature_dim, layer_norm))
        self.advantage = nn.Sequential(
            *_hidden(self.feature_dim, dense_hidden, layer_norm, spectral_norm),
            nn.Linear(dense_hidden, n_actions),
        )
        self.value = nn.Sequential(
            *_hidden(self.feature_dim, dense_hidden, layer_norm, spectral_norm),
            nn.Linear(dense_hidden, 1),
        )
        # the heads' first layers can run as one GEMM (dueling): plain Linear -> leaky ReLU
        self.fuse_heads = not (layer_norm or spectral_norm)
        self.register_buffer("cos_freqs", torch.arange(1, embedding_dim + 1) * math.pi)
        self.register_buffer("float_mean", torch.zeros(float_dim))
        self.register_buffer("float_std", torch.ones(float_dim))
        self.set_float_stats(float_mean, float_std)
        self.init_weights()

    def set_float_stats(self, mean=None, std=None) -> None:
        """Fix the float normalisation ((x - mean) / std); std must be positive."""
        if mean is not None:
            mean = torch.as_tensor(mean, dtype=torch.float32).reshape(-1)
            if mean.shape != (self.float_dim,):
                raise ValueError(f"float_mean needs {self.float_dim} values, got {mean.numel()}")
            self.float_mean.copy_(mean)
        if std is not None:
            std = torch.as_tensor(std, dtype=torch.float32).reshape(-1)
            if std.shape != (self.float_dim,):
                raise ValueError(f"float_std needs {self.float_dim} values, got {std.numel()}")
            if not bool(torch.all(std > 0)):
                raise ValueError("float_std must be positive everywhere")
            self.float_std.copy_(std)

    def init_weights(self) -> None:
        """Draw every weight afresh (as constructed; a reset's fresh copy comes from here):
        Kaiming for leaky layers, LayerNorms at the identity, and the last layers of the
        heads small (Q near 0)."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                nn.init.kaiming_uniform_(m.weight, a=LEAK, nonlinearity="leaky_relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                m.reset_parameters()
        for head in (self.advantage, self.value):
            nn.init.orthogonal_(head[-1].weight, gain=0.01)

    def features(self, img: torch.Tensor | None, floats: torch.Tensor) -> torch.Tensor:
        """State features (B, feature_dim): conv(image) next to mlp(floats), both scaled here."""
        # the first op makes a fresh tensor, so the in-place one never touches the caller's
        x = self.float_head(torch.sub(floats.float(), self.float_mean).div_(self.float_std))
        if self.has_image:
            assert img is not None, "this network has an image head: pass the frames"
            y = self.image_head(torch.sub(img.float(), 128.0).mul_(1.0 / 128.0))
            x = torch.cat([y, x], dim=1)
        return x

    def quantiles(self, features: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        """Z (B, N, A) from state features (B, D) and taus (B, N)."""
        b, n = taus.shape
        emb = self.tau_embedding(torch.cos(taus.unsqueeze(-1) * self.cos_freqs))  # (B, N, D)
        x = (emb * features.unsqueeze(1)).reshape(b * n, self.feature_dim)
        adv, value = self.dueling(x, fused=x.is_cuda and self.fuse_heads)
        z = value + adv - adv.mean(dim=1, keepdim=True)
        return z.reshape(b, n, self.n_actions)

    def dueling(self, x: torch.Tensor, fused: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantage (M, A), value (M, 1)) of rows x (M, D).

        ``fused`` (only where ``fuse_heads``: plain Linear -> leaky ReLU -> Linear heads): the
        heads' first layers as one GEMM of twice the width over their concatenated weights.
        On a GPU learner x is (batch x taus, 5,888), read once instead of twice, and its
        gradient is one GEMM instead of two summed; the parameters and the state dict stay the
        heads' own. The GPU runs it (quantiles); the CPU keeps the plain path, where copying
        the weights each call costs more than it saves.
        """
        if not fused:
            return self.advantage(x), self.value(x)
        a0, v0 = self.advantage[0], self.value[0]
        w = torch.cat([a0.weight, v0.weight])
        b = torch.cat([a0.bias, v0.bias])
        h = F.leaky_relu(F.linear(x, w, b), 0.01)  # LEAK (a literal: TorchScript)
        n = a0.weight.shape[0]
        return self.advantage[2](h[:, :n]), self.value[2](h[:, n:])

    def forward_features(
        self, img: torch.Tensor | None, floats: torch.Tensor, taus: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(Z, state features): the learner's forward, whose self-predictive loss reads the
        features too; one call, so that a compiled learner compiles it whole."""
        features = self.features(img, floats)
        return self.quantiles(features, taus), features

    def forward(
        self, img: torch.Tensor | None, floats: torch.Tensor, taus: torch.Tensor
    ) -> torch.Tensor:
        return self.forward_features(img, floats, taus)[0]
