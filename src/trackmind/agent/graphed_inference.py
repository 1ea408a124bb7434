"""GraphedQ: the live network's Q values for a batch of cars, the forward of each batch size
captured once as a CUDA graph and replayed (collector.cuda_graph).

Why: on an H100 the inference server answered 12.3k transitions/s (docs/gpu.md), although
its forward needs about 0.005 ms of GPU time a car. Collectors reach the server one or two at
a time, so most batches hold 32-64 cars, and the host then spends longer launching the
eager forward's ~100 kernels than the GPU spends running them; under bf16 autocast, which
adds cast kernels, capacity fell to 5.0k. A replayed graph is one launch whatever the
network, so the host's cost per batch no longer grows with the layers.

A graph replays fixed shapes on fixed tensors. So batches are padded up to a few sizes
(`bucket_sizes`: a collector's cars times 1, 2, 4, ...), each size gets static input tensors
that a batch is copied into, and the taus are drawn into a static tensor before each replay
(the generator stays outside the graph). The weights are read in place: a weights pull
(load_state_dict, in place) is seen by the next replay without capturing again. Rows past a
batch's size hold the last batch's data; their outputs are computed and never read.

Where capture is not possible (a CPU, or a failed capture, which warns once and leaves every
GraphedQ of the process eager), the same static-tensor path runs eagerly and writes the same
output tensor, so the CPU tests exercise the padding, the taus and the output's reuse.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from trackmind.agent.network import IQNNetwork, midpoint_taus

log = logging.getLogger(__name__)


def bucket_sizes(unit: int, max_units: int) -> tuple[int, ...]:
    """The batch sizes graphs are captured for: unit times 1, 2, 4, ... and unit times
    max_units (the largest batch). Padding a batch up to the next size at most doubles its
    rows, and a launch-bound forward hardly notices; a size per unit count would capture
    max_units graphs, each with its own memory."""
    if unit < 1 or max_units < 1:
        raise ValueError(f"bucket sizes need unit >= 1 and max_units >= 1, got {unit}, {max_units}")
    units, u = [], 1
    while u < max_units:
        units.append(u)
        u *= 2
    units.append(max_units)
    return tuple(unit * u for u in units)


def bucket_for(n: int, sizes: Sequence[int]) -> int:
    """The smallest of `sizes` (ascending) that holds a batch of n rows."""
    for s in sizes:
        if n <= s:
            return int(s)
    raise ValueError(f"a batch of {n} rows is larger than the largest bucket ({sizes[-1]})")


@dataclass
class CaptureState:
    """Shared by the GraphedQ of one process (the live network's and every frozen copy's):
    the first failed capture leaves them all eager, with one warning."""

    failed: str | None = None  # why a capture failed


@dataclass
class _Bucket:
    """One batch size's static tensors and, once captured, its graph."""

    img: torch.Tensor | None
    floats: torch.Tensor
    taus: torch.Tensor
    out: torch.Tensor | None = None
    graph: torch.cuda.CUDAGraph | None = None


class GraphedQ:
    """Q values (n, A) of `net` for n cars with k random taus each (or, with `midpoint`, the
    greedy races' fixed midpoint taus), on static tensors per bucket size, replayed as CUDA
    graphs where `capture` (a CUDA network) allows."""

    def __init__(
        self,
        net: IQNNetwork,
        k_taus: int,
        sizes: Sequence[int],
        generator: torch.Generator | None,
        autocast_dtype: torch.dtype | None = None,
        capture: bool | None = None,
        warmup: int = 2,
        midpoint: bool = False,
        cvar: float = 1.0,
        state: CaptureState | None = None,
    ) -> None:
        self.net = net
        self.k = int(k_taus)
        # midpoint: the fixed taus of greedy races (a frozen copy's), set once per bucket;
        # cvar: the taus span [0, cvar] (risk-averse values), midpoint or random
        self.midpoint, self.cvar = bool(midpoint), float(cvar)
        self.sizes = tuple(sorted(int(s) for s in sizes))
        self.gen = generator
        self.device = net.float_mean.device
        self.autocast_dtype = autocast_dtype
        self.capture = self.device.type == "cuda" if capture is None else bool(capture)
        self.warmup = int(warmup)
        self.buckets: dict[int, _Bucket] = {}
        self.state = CaptureState() if state is None else state
        self.pool = None  # one memory pool for the buckets' graphs: they replay one at a time
        self.last: tuple[_Bucket, int] | None = None  # the last call's bucket and rows

    @property
    def failed(self) -> str | None:
        """Why a capture of this process failed (then every batch runs eagerly), or None."""
        return self.state.failed

    @property
    def graphs(self) -> int:
        """How many buckets run as captured graphs."""
        return sum(b.graph is not None for b in self.buckets.values())

    def __call__(self, img: torch.Tensor | None, floats: torch.Tensor) -> torch.Tensor:
        """Q values (n, A), float32, on the network's device: a view of the bucket's static
        output, valid until the next call (read or copy it first)."""
        self.stage(img, floats)
        b, n = self.last
        if not self.midpoint:
            torch.rand(b.taus.shape, generator=self.gen, device=self.device, out=b.taus)
            if self.cvar < 1.0:
                b.taus.mul_(self.cvar)
        if b.graph is not None and self.failed is not None:
            b.graph = None  # another GraphedQ of this process failed: all run eagerly
        if b.graph is None and self.capture and self.failed is None:
            self._capture(b)
        if b.graph is not None:
            b.graph.replay()
        else:  # into the same output tensor, as a replay writes, so callers see one behaviour
            out = self._forward(b)
            if b.out is None:
                b.out = out
            else:
                with torch.inference_mode():
                    b.out.copy_(out)
        return b.out[:n]

    def stage(
        self, img: torch.Tensor | None, floats: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Copy a batch into its bucket's static inputs without running the network: what
        last_inputs() then returns. For a batch that only frozen greedy copies read."""
        n = int(floats.shape[0])
        size = bucket_for(n, self.sizes)
        b = self.buckets.get(size) or self._new_bucket(size)
        if b.img is not None:
            b.img[:n].copy_(img, non_blocking=True)
        b.floats[:n].copy_(floats, non_blocking=True)
        self.last = (b, n)
        return self.last_inputs()

    def last_inputs(self) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(frames, floats) of the last call, on the network's device: the rows its static
        tensors hold (the frozen greedy copies read them, with no second copy to the GPU)."""
        b, n = self.last
        return (None if b.img is None else b.img[:n]), b.floats[:n]

    def _new_bucket(self, size: int) -> _Bucket:
        """Static inputs as normal tensors (not inference tensors, even when made inside
        inference mode), so they can be written in and out of it."""
        net, dev = self.net, self.device
        with torch.inference_mode(False):
            img = None
            if net.image_shape is not None:
                img = torch.zeros((size, *net.image_shape), dtype=torch.uint8, device=dev)
            floats = torch.zeros((size, int(net.float_dim)), device=dev)
            taus = midpoint_taus(size, self.k, dev, self.cvar) if self.midpoint else None
            taus = torch.full((size, self.k), 0.5, device=dev) if taus is None else taus
        self.buckets[size] = _Bucket(img, floats, taus)
        return self.buckets[size]

    def _autocast(self):
        if self.autocast_dtype is None:
            return nullcontext()
        # no weight cache: a replay must cast the weights as they are now, after a pull
        return torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=False)

    def _forward(self, b: _Bucket) -> torch.Tensor:
        with torch.inference_mode(), self._autocast():
            return self.net(b.img, b.floats, b.taus).mean(dim=1).float()

    def _capture(self, b: _Bucket) -> None:
        """Warm up on a side stream (as torch's capture recipe asks), then record the
        forward on the bucket's static tensors. The replay that follows computes this batch."""
        try:
            current = torch.cuda.current_stream(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                for _ in range(self.warmup):
                    self._forward(b)
            current.wait_stream(side)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                b.out = self._forward(b)
            b.graph = graph
        except Exception as e:  # an op that cannot be captured: infer on, eagerly
            cause = e.__context__  # the op's own error, when ending the capture raised too
            why = f"{type(e).__name__}: {e}"
            if cause is not None:
                why += f" (during capture: {type(cause).__name__}: {cause})"
            self.state.failed = why
            for other in self.buckets.values():
                other.graph = None
            b.out = None
            log.warning("inference CUDA graph capture failed, running eagerly: %s", why)
            torch.cuda.synchronize(self.device)
