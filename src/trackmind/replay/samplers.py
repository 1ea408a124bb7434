"""torchrl samplers that draw only from the live window of a FIFO transition ring.

The window is the ``count`` positions starting at ``start`` (mod capacity), oldest first:
the transitions whose states are still stored. torchrl's RandomSampler would also draw the
slots behind the window, and its PrioritizedSampler needs the C++ extension, which does not
load with the torch build here (torchrl 0.14.1 against torch 2.13); these two are plain
torch and numpy. Both take the replay buffer's generator (``_rng``), so sampling is reproducible.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import Sampler
from torchrl.data.replay_buffers.storages import Storage


class WindowSampler(Sampler):
    """Uniform over the live window."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.start = 0
        self.count = 0

    def set_window(self, start: int, count: int) -> None:
        self.start, self.count = int(start), int(count)

    def _sampleable_count(self, storage: Storage, batch_size: int) -> int:
        return self.count

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        if self.count == 0:
            raise RuntimeError("cannot sample from an empty buffer")
        offset = torch.randint(self.count, (batch_size,), generator=self._rng)
        return (offset + self.start) % self.capacity, {}

    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """Uniform sampling has no priorities: nothing to update."""

    def _empty(self) -> None:
        self.start = self.count = 0

    def state_dict(self) -> dict[str, Any]:
        return {"start": self.start, "count": self.count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.set_window(state_dict["start"], state_dict["count"])

    def dumps(self, path: Any) -> None:
        raise NotImplementedError("save the TransitionBuffer's state_dict instead")

    def loads(self, path: Any) -> None:
        raise NotImplementedError("load the TransitionBuffer's state_dict instead")


class WindowPrioritizedSampler(WindowSampler):
    """Proportional prioritized replay (Schaul et al. 2015) over the live window.

    P(i) = q_i / sum q with q = (priority + eps)^alpha; importance weights
    w_i = (q_i / min q)^-beta, i.e. (N P(i))^-beta divided by its largest value. New
    transitions get the largest priority seen so far, so each is likely drawn soon.
    Slots outside the window have q = 0 and are never drawn. Sampling is a cumulative sum
    and a binary search in numpy: O(capacity), about 1 ms at 200k, and single-threaded
    (torch's parallel kernels stall when other processes keep the cores busy).
    """

    def __init__(self, capacity: int, alpha: float, beta: float, eps: float = 1e-6) -> None:
        super().__init__(capacity)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.q = np.zeros(self.capacity, dtype=np.float64)
        self.max_priority = 1.0

    def _transform(self, priority: np.ndarray) -> np.ndarray:
        return (np.abs(priority) + self.eps) ** self.alpha

    def _window_slices(self) -> list[slice]:
        end = self.start + self.count
        if end <= self.capacity:
            return [slice(self.start, end)]
        return [slice(self.start, self.capacity), slice(0, end - self.capacity)]

    def set_window(self, start: int, count: int) -> None:
        super().set_window(start, count)
        if self.count < self.capacity:  # zero the complement of the window
            out_start = (self.start + self.count) % self.capacity
            out_end = out_start + self.capacity - self.count
            self.q[out_start : min(out_end, self.capacity)] = 0.0
            self.q[: max(0, out_end - self.capacity)] = 0.0

    def extend(self, index: torch.Tensor) -> None:
        self.q[torch.as_tensor(index).numpy()] = self._transform(np.float64(self.max_priority))

    def add(self, index: int) -> None:
        self.extend(torch.tensor([index]))

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict]:
        if self.count == 0:
            raise RuntimeError("cannot sample from an empty buffer")
        cum = np.cumsum(self.q)
        u = torch.rand(batch_size, generator=self._rng, dtype=torch.float64).numpy() * cum[-1]
        u = np.minimum(u, np.nextafter(cum[-1], 0.0))  # u < total, so no empty slot is hit
        index = np.searchsorted(cum, u, side="right")
        q_min = min(self.q[s].min() for s in self._window_slices())
        weight = (self.q[index] / q_min) ** (-self.beta)
        return torch.from_numpy(index), {
            "priority_weight": torch.from_numpy(weight.astype(np.float32))
        }

    def update_priority(self, index: Any, priority: Any, *, storage: Any = None) -> None:
        """New priorities (e.g. per-sample losses) for slots still in the window."""
        index = torch.as_tensor(index, dtype=torch.int64).reshape(-1).numpy()
        priority = torch.as_tensor(priority).detach().to(torch.float64).reshape(-1).numpy()
        if priority.size == 1 and index.size > 1:
            priority = np.broadcast_to(priority, index.shape)
        if priority.shape != index.shape:
            raise ValueError(f"{index.size} indices but {priority.size} priorities")
        if not np.isfinite(priority).all():
            raise ValueError("priorities must be finite")
        live = self.q[index] > 0  # a slot that left the window since sampling stays out
        index, priority = index[live], priority[live]
        if index.size:
            self.q[index] = self._transform(priority)
            self.max_priority = max(self.max_priority, float(np.abs(priority).max()))

    def _empty(self) -> None:
        super()._empty()
        self.q[:] = 0.0
        self.max_priority = 1.0

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "q": self.q.copy(), "max_priority": self.max_priority}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.q = np.array(state_dict["q"], dtype=np.float64)
        self.max_priority = float(state_dict["max_priority"])
        WindowSampler.set_window(self, state_dict["start"], state_dict["count"])
