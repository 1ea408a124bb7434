"""Validate a ``network/`` config group against the environment, then build the network.

Every mistake becomes one ConfigError naming the key (``network.image_shape``), raised
before any process starts, so a bad preset never costs a collector or a checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from trackmind.agent.network import ENCODERS, IQNNetwork, conv_output_shape, impala_output_shape
from trackmind.errors import check_schema, require

PREFIX = "network"
COMPILE_MODES = ("none", "script", "compile")


@dataclass(frozen=True)
class Risk:
    """The two CVaR levels a collector acts with, handed down together: greedy races act on
    the mean of the lowest `greedy` share of the quantiles (network.greedy_cvar), exploring
    cars on random taus in [0, `explore`] (network.policy_cvar). 1 is the plain mean."""

    greedy: float = 1.0
    explore: float = 1.0


RISK_NEUTRAL = Risk()  # both levels the plain mean


@dataclass
class NetworkConfig:
    """The ``network`` group: IQNNetwork's arguments plus how the learner and collectors use
    it (quantile counts, compile). Checked by check_schema; ``network_config`` then checks
    it against the environment. Unset keys take Linesight's sizes."""

    image_shape: Any = MISSING  # [C, H, W], or null for a floats-only network
    float_dim: Any = None  # null: the environment's
    conv_channels: list[int] = field(default_factory=lambda: [16, 32, 64, 32])
    conv_kernels: list[int] = field(default_factory=lambda: [4, 4, 3, 3])
    conv_strides: list[int] = field(default_factory=lambda: [2, 2, 2, 1])
    float_hidden: list[int] = field(default_factory=lambda: [256, 256])
    embedding_dim: int = 64
    dense_hidden: int = 512
    n_actions: int = 12
    # a LayerNorm before every hidden activation of the dense layers (docs/learning.md)
    layer_norm: bool = False
    # the dueling heads' hidden layers spectrally normalised (agent/network.SpectralLinear)
    spectral_norm: bool = False
    # the frame encoder: conv (the conv_* stack above) or impala (residual stages: impala_*)
    encoder: str = "conv"
    impala_channels: list[int] = field(default_factory=lambda: [16, 32, 32])
    impala_blocks: int = 2  # residual blocks per stage
    impala_pool: Any = None  # [H, W]: an adaptive max-pool to this grid; null: none
    n_quantiles_train: int = 8
    n_quantiles_target: int = 8  # random taus of the target's next-state quantiles
    n_quantiles_inference: int = 32
    # greedy races act on the mean of the lowest greedy_cvar share of the quantiles (CVaR):
    # 1 is the plain mean (risk-neutral), 0.5 the worse half of the returns (risk-averse)
    greedy_cvar: float = 1.0
    # the risk level the agent learns and explores with: the target's greedy action (learner)
    # and the exploring cars' values (collectors) take the mean of the lowest policy_cvar share
    # of the quantiles, so the values learned are those of the risk-averse policy that acts
    policy_cvar: float = 1.0
    compile: Any = "none"  # none | script | compile (null: none)

    def __post_init__(self) -> None:
        for name in ("conv_channels", "conv_kernels", "conv_strides", "float_hidden"):
            setattr(self, name, _int_list(getattr(self, name), name))
        require(
            self.encoder in ENCODERS,
            f"{PREFIX}.encoder",
            f"must be one of {', '.join(ENCODERS)}, got {self.encoder!r}",
        )
        self.impala_channels = _int_list(self.impala_channels, "impala_channels")
        require(len(self.impala_channels) > 0, f"{PREFIX}.impala_channels", "needs a stage")
        blocks = self.impala_blocks
        ok = isinstance(blocks, int) and not isinstance(blocks, bool) and blocks >= 0
        require(ok, f"{PREFIX}.impala_blocks", f"must be an integer >= 0, got {blocks!r}")
        if self.impala_pool is not None:
            pool = _int_list(self.impala_pool, "impala_pool")
            require(len(pool) == 2, f"{PREFIX}.impala_pool", f"must be [H, W], got {list(pool)}")
            self.impala_pool = pool
        counts = ("n_quantiles_target", "n_quantiles_inference")
        for name in ("embedding_dim", "dense_hidden", "n_actions", *counts):
            _positive_int(getattr(self, name), name)
        n_train = _positive_int(self.n_quantiles_train, "n_quantiles_train")
        require(
            n_train % 2 == 0,
            f"{PREFIX}.n_quantiles_train",
            f"must be even for stratified symmetric taus, got {n_train}",
        )
        for name in ("layer_norm", "spectral_norm"):
            value = getattr(self, name)
            require(
                isinstance(value, bool), f"{PREFIX}.{name}", f"must be true or false, got {value!r}"
            )
        self.compile = self.compile if self.compile is not None else "none"
        require(
            self.compile in COMPILE_MODES,
            f"{PREFIX}.compile",
            f"must be one of {', '.join(COMPILE_MODES)}, got {self.compile!r}",
        )
        for name in ("greedy_cvar", "policy_cvar"):
            c = getattr(self, name)
            ok = isinstance(c, int | float) and not isinstance(c, bool) and 0 < c <= 1
            require(ok, f"{PREFIX}.{name}", f"must be in (0, 1], got {c!r}")
        if self.float_dim is not None:
            _positive_int(self.float_dim, "float_dim")
        if self.image_shape is not None:
            shape = _int_list(self.image_shape, "image_shape")
            key = f"{PREFIX}.image_shape"
            require(len(shape) == 3, key, f"must be [C, H, W], got {list(shape)}")
            self.image_shape = shape

    @property
    def risk(self) -> Risk:
        """greedy_cvar and policy_cvar as the collectors use them."""
        return Risk(float(self.greedy_cvar), float(self.policy_cvar))

    def constructor_kwargs(self) -> dict:
        """Arguments for IQNNetwork (everything but the learner's and collectors' settings)."""
        counts = {"n_quantiles_train", "n_quantiles_target", "n_quantiles_inference"}
        skip = {*counts, "greedy_cvar", "policy_cvar", "compile"}
        return {k: v for k, v in self.__dict__.items() if k not in skip}


def _positive_int(value: object, key: str) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    require(ok, f"{PREFIX}.{key}", f"must be a positive integer, got {value!r}")
    return int(value)  # type: ignore[arg-type]


def _int_list(value: object, key: str) -> tuple[int, ...]:
    ok = isinstance(value, list | tuple)
    require(ok, f"{PREFIX}.{key}", f"must be a list of positive integers, got {value!r}")
    return tuple(_positive_int(v, key) for v in value)  # type: ignore[union-attr]


def _image_shape(
    shape: tuple[int, int, int] | None, frame_shape: tuple[int, int] | None
) -> tuple[int, int, int] | None:
    if shape is None:
        return None
    key = f"{PREFIX}.image_shape"
    require(frame_shape is not None, key, "the environment renders no frames: set it to null")
    env = (1, *frame_shape)  # type: ignore[misc]
    require(shape == env, key, f"{list(shape)} does not match the environment's frames {env}")
    return shape


def _check_conv_stack(nc: NetworkConfig) -> None:
    if nc.image_shape is None:
        return
    if nc.encoder == "impala":
        _check_impala(nc)
        return
    lists = (nc.conv_channels, nc.conv_kernels, nc.conv_strides)
    require(
        len(set(map(len, lists))) == 1,
        f"{PREFIX}.conv_channels",
        "conv_channels, conv_kernels and conv_strides need the same length, "
        f"got {', '.join(str(len(x)) for x in lists)}",
    )
    _, h, w = conv_output_shape(nc.image_shape, *lists)
    require(
        h > 0 and w > 0,
        f"{PREFIX}.conv_kernels",
        f"the conv stack shrinks the {nc.image_shape[1]}x{nc.image_shape[2]} image to nothing "
        f"({h}x{w}): use fewer layers, smaller kernels or strides",
    )


def _check_impala(nc: NetworkConfig) -> None:
    """The adaptive pool may shrink the last stage's grid, not grow it (a larger grid only
    repeats features)."""
    if nc.impala_pool is None:
        return
    _, h, w = impala_output_shape(nc.image_shape, nc.impala_channels, None)
    ph, pw = nc.impala_pool
    require(
        ph <= h and pw <= w,
        f"{PREFIX}.impala_pool",
        f"{[ph, pw]} is larger than the {h}x{w} grid the {len(nc.impala_channels)} stages leave",
    )


def network_config(
    cfg: Mapping, float_dim: int, frame_shape: tuple[int, int] | None
) -> NetworkConfig:
    """Check ``cfg`` (the ``network`` group) against the environment's floats and frames.

    ``float_dim`` may be null in the config (take the environment's); ``frame_shape`` is
    (H, W) of the environment's 1-channel frames, or None when it renders none.
    """
    nc = check_schema(cfg, NetworkConfig, PREFIX)
    if nc.float_dim is not None:
        require(
            nc.float_dim == float_dim,
            f"{PREFIX}.float_dim",
            f"{nc.float_dim} does not match the environment's {float_dim} floats",
        )
    nc.float_dim = float_dim
    nc.image_shape = _image_shape(nc.image_shape, frame_shape)
    _check_conv_stack(nc)
    return nc


def build_network(
    cfg: Mapping | NetworkConfig,
    float_dim: int,
    frame_shape: tuple[int, int] | None,
    float_mean=None,
    float_std=None,
) -> IQNNetwork:
    """A fresh IQNNetwork from a ``network`` config, validated against the environment."""
    if not isinstance(cfg, NetworkConfig):
        cfg = network_config(cfg, float_dim, frame_shape)
    return IQNNetwork(**cfg.constructor_kwargs(), float_mean=float_mean, float_std=float_std)
