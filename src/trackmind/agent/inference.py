"""Inference networks for collectors: optionally compiled, always sharing the eager weights.

A collector refreshes its weights often (every race start, every few actions), so the
compiled callable must read the very tensors the eager network holds: loading a state dict
into ``InferenceNetwork.net`` (in place) updates it without recompiling.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import nullcontext

import numpy as np
import torch

from trackmind.agent.network import IQNNetwork, conv_layout_for, midpoint_taus, random_taus
from trackmind.env.mirror import MIRRORED_ACTIONS, FloatMirror, mirror_observation
from trackmind.env.observations import FLOATS

MODES = ("none", "script", "compile")
Forward = Callable[[torch.Tensor | None, torch.Tensor, torch.Tensor], torch.Tensor]


class InferenceNetwork:
    """An eager IQNNetwork plus the callable that runs it (scripted, compiled or itself)."""

    def __init__(self, net: IQNNetwork, fn: Forward, mode: str) -> None:
        self.net = net
        self.fn = fn
        self.mode = mode

    def __call__(self, img, floats: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        return self.fn(img, floats, taus)

    def load_state_dict(self, state_dict: dict) -> None:
        """Copy new weights into the shared parameters (no recompilation)."""
        self.net.load_state_dict(state_dict)


def _example_inputs(net: IQNNetwork, batch: int, n_taus: int):
    device = net.float_mean.device
    img = None
    if net.image_shape is not None:
        img = torch.zeros((batch, *net.image_shape), dtype=torch.uint8, device=device)
    floats = torch.zeros(batch, net.float_dim, device=device)
    return img, floats, torch.full((batch, n_taus), 0.5, device=device)


def make_inference_network(
    net: IQNNetwork, mode: str = "none", warmup_batches: tuple[int, ...] = (1, 2)
) -> InferenceNetwork:
    """Wrap ``net`` for acting: ``none`` (eager), ``script`` (TorchScript) or ``compile``.

    The network goes to eval mode; compilation is tried at once on example batches, and
    if it fails the wrapper warns and runs eagerly, since a slower collector beats a dead one.
    """
    if mode not in MODES:
        raise ValueError(f"inference mode must be one of {', '.join(MODES)}, got {mode!r}")
    net.eval()
    if net.float_mean.device.type == "cuda":
        tune_cuda_process()
        conv_layout_for(net, "cuda")
    if mode == "none":
        return InferenceNetwork(net, net, "none")
    try:
        if mode == "script":
            with warnings.catch_warnings():  # deprecated in torch 2.13, still fastest here
                warnings.filterwarnings("ignore", ".*jit.script.*deprecated", DeprecationWarning)
                fn = torch.jit.script(net)
        else:
            fn = torch.compile(net)
        with torch.inference_mode():
            for b in warmup_batches:
                fn(*_example_inputs(net, b, 8))
    except Exception as e:  # any compiler failure means: run eagerly
        warnings.warn(
            f"inference compilation '{mode}' failed, running eagerly: {type(e).__name__}: {e}",
            RuntimeWarning,
            stacklevel=2,
        )
        return InferenceNetwork(net, net, "none")
    return InferenceNetwork(net, fn, mode)


def tune_cuda_process() -> None:
    """TF32 tensor-core matmuls for float32 layers in a collector or server process that
    infers on the GPU: a spawned process starts with full-precision float32 matmuls (H100,
    416 cars, 32 taus: 5.65 ms fp32, 2.12 ms TF32, cuDNN autotuned in both).

    cuDNN's autotuning stays off, unlike the learner's: a server's batch size changes with
    the number of collectors waiting, and each new size would be autotuned in the middle of
    collection. With it on, an 8-second capacity window measured 12.3k transitions/s (bf16:
    5.0k), against 16.4k for the server before it (fp32, no autotuning); that this is the
    cause is likely, not yet measured apart."""
    torch.set_float32_matmul_precision("high")


PRECISIONS = ("fp32", "bf16")


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype collectors infer in: bf16 on a GPU (collector.precision=bf16),
    else None (fp32, as the weights are)."""
    if precision not in PRECISIONS:
        raise ValueError(f"inference precision must be one of {PRECISIONS}, got {precision!r}")
    return torch.bfloat16 if precision == "bf16" and device.type == "cuda" else None


def inference_autocast(device: torch.device, precision: str):
    """The context collectors infer in (autocast_dtype's). The Q values come out as float32
    either way."""
    dtype = autocast_dtype(device, precision)
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def greedy_q(
    net: Forward,
    img: torch.Tensor | None,
    floats: torch.Tensor,
    k: int,
    generator: torch.Generator | None = None,
    midpoint: bool = False,
    cvar: float = 1.0,
) -> torch.Tensor:
    """Q values (B, A): quantiles averaged over k taus, without autograd.

    Random taus (Linesight's acting) by default; `midpoint` uses the fixed stratum midpoints,
    which evaluation races use so that they depend on the weights alone. `cvar` < 1 averages
    the lowest share of the quantiles only (taus in [0, cvar]): risk-averse values.
    """
    if not 0.0 < cvar <= 1.0:
        raise ValueError(f"cvar must be in (0, 1], got {cvar}")
    with torch.inference_mode():
        b, dev = floats.shape[0], floats.device
        if midpoint:
            taus = midpoint_taus(b, k, dev, cvar)
        else:
            taus = random_taus(b, k, generator, dev) * cvar
        return net(img, floats, taus).mean(dim=1)


def observation_q(
    net,
    obs: dict,
    k: int,
    generator=None,
    midpoint: bool = True,
    cvar: float = 1.0,
    mirror: FloatMirror | None = None,
) -> np.ndarray:
    """Q values (cars, actions) of one race observation: the frame if the race has one, the
    floats, k taus (the quantile midpoints unless `midpoint` is False). With `mirror`, the
    mean of Q(s, a) and Q(mirror(s), mirror(a)): the policy and its mirror image as one,
    whose greedy action does not depend on which way the road turns."""

    def q_of(o: dict) -> np.ndarray:
        img = torch.from_numpy(o["frame"]) if "frame" in o else None
        floats = torch.from_numpy(o[FLOATS])
        return greedy_q(net, img, floats, k, generator, midpoint, cvar).numpy()

    q = q_of(obs)
    if mirror is None:
        return q
    return (q + q_of(mirror_observation(obs, mirror))[:, MIRRORED_ACTIONS]) / 2
