"""CapturedStep: the learner's whole update captured once as a CUDA graph, then replayed.

An eager learner step of iqn_linesight at batch 512 launches several hundred kernels
(forwards, loss, backward, clipping, the optimizer's per-parameter arithmetic), and the GPU
waits for the Python that launches them: on an H200 the eager step took about 7 ms for about
1 ms of arithmetic. A replayed graph is one launch. What that asks of the update, which
``update`` (IQNLightningModule.device_update) is written for:

- static inputs: each batch is copied into buffers allocated at capture (``copy_``, no new
  tensors), and the learning rate is a device tensor read by a capturable optimizer. Inputs
  may come in pinned host memory: they are then copied once, host to static buffer, instead
  of to a new device tensor first and into the buffer second;
- no host synchronisation: a non-finite loss zeroes that step's gradients on the device and
  device counters count it; statistics stay on the device until a logged step reads them;
- autocast without its weight cache (``cache_enabled=False``); no fp16 loss scaling.

The first ``warmup`` batches run eagerly on a side stream (cuDNN autotuning, the optimizer's
state), as torch's whole-network capture recipe asks; they are real steps. On a CPU (tests)
every call runs ``update`` eagerly, the same function the graph records; so does a GPU whose
capture failed (a warning says why), since a slower learner beats a dead run.

Capture runs in ``thread_local`` mode: the batch-prefetch thread keeps sampling (pinning,
gathering frames on the GPU) on its own stream while the learner's thread records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import nullcontext

import torch

log = logging.getLogger(__name__)

Batch = Mapping[str, torch.Tensor]
Update = Callable[[Batch], dict[str, torch.Tensor]]


class CapturedStep:
    """Runs ``update(batch)``: eagerly ``warmup`` times, then as a replayed CUDA graph."""

    def __init__(
        self,
        update: Update,
        keys: tuple[str, ...],
        warmup: int = 3,
        autocast_dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        if warmup < 1:
            raise ValueError(f"a CUDA graph needs at least one warm-up step, got {warmup}")
        self.update = update
        self.keys = tuple(keys)  # the batch entries the update reads
        self.warmup = int(warmup)
        self.autocast_dtype = autocast_dtype
        # where the update runs; None: the device of the inputs (host inputs then mean the CPU)
        self.device = torch.device(device) if device is not None else None
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_in: dict[str, torch.Tensor] = {}
        self.static_out: dict[str, torch.Tensor] = {}
        self.failed: str | None = None  # why capture failed (then every step runs eagerly)

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def _autocast(self, device: torch.device):
        if self.autocast_dtype is None:
            return nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype, cache_enabled=False)

    def __call__(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The update's outputs for ``batch`` (static tensors once captured: read or copy
        them before the next call)."""
        self.calls += 1
        inputs = {k: batch[k] for k in self.keys if k in batch}
        device = self.device or next(iter(inputs.values())).device
        if self.graph is None:  # eager steps read device tensors; a replay copies host ones
            inputs = {k: v.to(device, non_blocking=True) for k, v in inputs.items()}
        if device.type != "cuda" or self.failed is not None:
            with self._autocast(device):
                return self.update(inputs)
        if self.graph is None:
            if self.calls <= self.warmup:
                return self._eager_on_side_stream(inputs, device)
            try:
                self._capture(inputs, device)
            except Exception as e:  # e.g. an op that syncs the host: learn on, eagerly
                self.failed = f"{type(e).__name__}: {e}"
                self.graph, self.static_in, self.static_out = None, {}, {}
                log.warning("CUDA graph capture failed, the learner runs eagerly: %s", self.failed)
                torch.cuda.synchronize(device)
                with self._autocast(device):
                    return self.update(inputs)
        for k, v in inputs.items():
            self.static_in[k].copy_(v, non_blocking=True)
        self.graph.replay()
        return self.static_out

    def _eager_on_side_stream(self, inputs: dict, device: torch.device) -> dict:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), self._autocast(device):
            out = self.update(inputs)
        torch.cuda.current_stream(device).wait_stream(side)
        return out

    def _capture(self, inputs: dict, device: torch.device) -> None:
        """Record the update on static copies of ``inputs``. Capture only records: the replay
        that follows in __call__ runs this batch's step."""
        self.static_in = {k: v.clone() for k, v in inputs.items()}
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(device)
        with torch.cuda.graph(graph, capture_error_mode="thread_local"), self._autocast(device):
            self.static_out = self.update(self.static_in)
        self.graph = graph
