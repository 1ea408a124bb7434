"""Validate a ``network/`` config group against the environment, then build the network.

Every mistake becomes one ConfigError naming the key (``network.image_shape``), raised
before any process starts, so a bad preset never costs a collector or a checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trackmind.agent.network import IQNNetwork, conv_output_shape
from trackmind.errors import ConfigError, check_known_keys, require

PREFIX = "network"
COMPILE_MODES = ("none", "script", "compile")
DEFAULTS = {
    "conv_channels": [16, 32, 64, 32],
    "conv_kernels": [4, 4, 3, 3],
    "conv_strides": [2, 2, 2, 1],
    "float_hidden": [256, 256],
    "embedding_dim": 64,
    "dense_hidden": 512,
    "n_actions": 12,
    "n_quantiles_train": 8,
    "n_quantiles_inference": 32,
    "compile": "none",
}
KNOWN = {"image_shape", "float_dim", *DEFAULTS}


@dataclass(frozen=True)
class NetworkConfig:
    """A checked network config: constructor arguments plus how the learner uses them."""

    image_shape: tuple[int, int, int] | None
    float_dim: int
    conv_channels: tuple[int, ...]
    conv_kernels: tuple[int, ...]
    conv_strides: tuple[int, ...]
    float_hidden: tuple[int, ...]
    embedding_dim: int
    dense_hidden: int
    n_actions: int
    n_quantiles_train: int
    n_quantiles_inference: int
    compile: str

    def constructor_kwargs(self) -> dict:
        """Arguments for IQNNetwork (everything but the three learner/collector settings)."""
        skip = {"n_quantiles_train", "n_quantiles_inference", "compile"}
        return {k: v for k, v in self.__dict__.items() if k not in skip}


def _to_dict(cfg: Mapping) -> dict:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    return dict(cfg)


def _positive_int(value: object, key: str) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    require(ok, f"{PREFIX}.{key}", f"must be a positive integer, got {value!r}")
    return int(value)  # type: ignore[arg-type]


def _int_list(value: object, key: str) -> tuple[int, ...]:
    ok = isinstance(value, list | tuple)
    require(ok, f"{PREFIX}.{key}", f"must be a list of positive integers, got {value!r}")
    return tuple(_positive_int(v, key) for v in value)  # type: ignore[union-attr]


def _image_shape(cfg: dict, frame_shape: tuple[int, int] | None) -> tuple[int, int, int] | None:
    key = f"{PREFIX}.image_shape"
    require("image_shape" in cfg, key, "missing (a [C, H, W] list, or null for no image)")
    value = cfg["image_shape"]
    if value is None:
        return None
    shape = _int_list(value, "image_shape")
    require(len(shape) == 3, key, f"must be [C, H, W], got {list(shape)}")
    require(frame_shape is not None, key, "the environment renders no frames: set it to null")
    env = (1, *frame_shape)  # type: ignore[misc]
    require(
        shape == env,
        key,
        f"{list(shape)} does not match the environment's frames {env}",
    )
    return shape  # type: ignore[return-value]


def _conv_stack(cfg: dict, image_shape: tuple[int, int, int] | None) -> tuple[tuple, ...]:
    lists = tuple(_int_list(cfg[k], k) for k in ("conv_channels", "conv_kernels", "conv_strides"))
    if image_shape is None:
        return lists
    require(
        len(set(map(len, lists))) == 1,
        f"{PREFIX}.conv_channels",
        "conv_channels, conv_kernels and conv_strides need the same length, "
        f"got {', '.join(str(len(x)) for x in lists)}",
    )
    _, h, w = conv_output_shape(image_shape, *lists)
    require(
        h > 0 and w > 0,
        f"{PREFIX}.conv_kernels",
        f"the conv stack shrinks the {image_shape[1]}x{image_shape[2]} image to nothing "
        f"({h}x{w}): use fewer layers, smaller kernels or strides",
    )
    return lists


def network_config(
    cfg: Mapping, float_dim: int, frame_shape: tuple[int, int] | None
) -> NetworkConfig:
    """Check ``cfg`` (the ``network`` group) against the environment's floats and frames.

    ``float_dim`` may be null in the config (take the environment's); ``frame_shape`` is
    (H, W) of the environment's 1-channel frames, or None when it renders none.
    """
    given = _to_dict(cfg)
    check_known_keys(given, KNOWN, PREFIX)
    merged = {**DEFAULTS, **given}

    cfg_float_dim = merged.get("float_dim")
    if cfg_float_dim is not None:
        _positive_int(cfg_float_dim, "float_dim")
        require(
            cfg_float_dim == float_dim,
            f"{PREFIX}.float_dim",
            f"{cfg_float_dim} does not match the environment's {float_dim} floats",
        )
    image_shape = _image_shape(merged, frame_shape)
    channels, kernels, strides = _conv_stack(merged, image_shape)

    n_train = _positive_int(merged["n_quantiles_train"], "n_quantiles_train")
    require(
        n_train % 2 == 0,
        f"{PREFIX}.n_quantiles_train",
        f"must be even for stratified symmetric taus, got {n_train}",
    )
    mode = merged["compile"] if merged["compile"] is not None else "none"
    if mode not in COMPILE_MODES:
        raise ConfigError(
            f"{PREFIX}.compile", f"must be one of {', '.join(COMPILE_MODES)}, got {mode!r}"
        )
    return NetworkConfig(
        image_shape=image_shape,
        float_dim=float_dim,
        conv_channels=channels,
        conv_kernels=kernels,
        conv_strides=strides,
        float_hidden=_int_list(merged["float_hidden"], "float_hidden"),
        embedding_dim=_positive_int(merged["embedding_dim"], "embedding_dim"),
        dense_hidden=_positive_int(merged["dense_hidden"], "dense_hidden"),
        n_actions=_positive_int(merged["n_actions"], "n_actions"),
        n_quantiles_train=n_train,
        n_quantiles_inference=_positive_int(
            merged["n_quantiles_inference"], "n_quantiles_inference"
        ),
        compile=mode,
    )


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
