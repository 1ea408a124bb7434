"""TransitionBuffer: one replay buffer (``buffer`` or ``buffer_test``) with frames stored once.

Two FIFO rings. The StateStore holds every state (frame, floats, potential) once. A torchrl
ReplayBuffer over a LazyTensorStorage holds the small transition records (state gid,
action, n_steps, rewards, gammas, terminal_actions, end_rate: 42 bytes at n = 3); the next
state is state gid + n_steps. The state ring has ``state_margin`` more rows than the
record ring has slots (a race of T actions has T + 1 states), so normally records leave
first. If states ever run out first (very short races), the records whose states were
overwritten leave the live window: the samplers draw only from it, so no sample ever
reads an overwritten frame.

Capacity grows by copying the live part into larger rings (oldest first); save/load does
the same through a compact state_dict. Not thread-safe: one thread adds, samples and updates
priorities (the learner's); indices from ``sample`` are valid until the next add, resize or
load.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict
from torchrl.data import LazyTensorStorage, ReplayBuffer

from trackmind.replay.collate import buffer_collate_function
from trackmind.replay.experience import Experience
from trackmind.replay.samplers import WindowPrioritizedSampler, WindowSampler
from trackmind.replay.states import NO_FRAMES, StateStore

# The records live on the host, and a race's records are made there. A TensorDict without
# this device is moved to the storage's by ``.to()``, which on a CUDA machine waits for the
# current stream (the learner's step in flight) while the intake thread holds the buffers'
# lock: the prefetch thread then waited for it (docs/gpu.md).
RECORDS_DEVICE = torch.device("cpu")


def _identity(x: Any) -> Any:
    return x


def record_nbytes(n_steps: int) -> int:
    """Bytes of one stored transition record (without its states)."""
    return 8 + 1 + 1 + 4 * n_steps * 2 + 4 + 4


class TransitionBuffer:
    """Transitions of many races; ``sample`` returns mini-race batches ready for the learner."""

    def __init__(
        self,
        capacity: int,
        frame_shape: tuple[int, ...] | None,
        float_dim: int,
        n_steps: int,
        horizon_actions: int,
        *,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        priority_eps: float = 1e-6,
        state_margin: float = 0.05,
        value_bound: tuple[float, float] | None = None,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        if capacity < 1 or n_steps < 1 or horizon_actions < 1 or state_margin < 0:
            raise ValueError(
                f"bad TransitionBuffer sizes: capacity={capacity}, n_steps={n_steps}, "
                f"horizon={horizon_actions}, state_margin={state_margin}"
            )
        if n_steps > 255:
            raise ValueError("n_steps is stored as uint8: at most 255")
        self.frame_shape = NO_FRAMES if frame_shape is None else tuple(int(s) for s in frame_shape)
        self.float_dim = int(float_dim)
        self.n_steps = int(n_steps)
        self.horizon_actions = int(horizon_actions)
        self.prioritized = bool(prioritized)
        self.alpha, self.beta, self.priority_eps = float(alpha), float(beta), float(priority_eps)
        self.state_margin = float(state_margin)
        self.value_bound = value_bound  # (rate, once): batches carry target_max (collate.py)
        self.generator = torch.Generator().manual_seed(int(seed))
        self._build(int(capacity))
        self.device = torch.device(device)  # where the frames live (StateStore)
        self.states = StateStore(
            self.state_rows(self.capacity), self.frame_shape, self.float_dim, self.device
        )

    # ---- layout -------------------------------------------------------------------------

    def state_rows(self, capacity: int) -> int:
        """capacity (1 + margin) rows, plus room for the next states of the newest race."""
        margin = math.ceil(round(capacity * self.state_margin, 6))  # 120 * 0.05 is 6, not 7
        return capacity + margin + self.n_steps + 1

    def _build(self, capacity: int) -> None:
        """Fresh empty record ring of ``capacity`` slots."""
        self.capacity = capacity
        if self.prioritized:
            self.sampler: WindowSampler = WindowPrioritizedSampler(
                capacity, self.alpha, self.beta, self.priority_eps
            )
        else:
            self.sampler = WindowSampler(capacity)
        self.rb = ReplayBuffer(
            storage=LazyTensorStorage(capacity, device=RECORDS_DEVICE),
            sampler=self.sampler,
            collate_fn=_identity,
            generator=self.generator,
        )
        self._live = 0  # records in the live window, which ends just before _cursor
        self._cursor = 0

    def __len__(self) -> int:
        return self._live

    def _window_start(self) -> int:
        return (self._cursor - self._live) % self.capacity

    def _live_positions(self) -> torch.Tensor:
        return (torch.arange(self._live) + self._window_start()) % self.capacity

    # ---- writing ------------------------------------------------------------------------

    def add(self, experience: Experience) -> int:
        """Store an Experience's states and transitions; returns how many transitions."""
        exp = experience
        if exp.rewards.shape[1:] != (self.n_steps,):
            raise ValueError(
                f"rewards of shape {exp.rewards.shape}, buffer uses n = {self.n_steps}"
            )
        k = exp.n_transitions
        if k == 0:
            return 0
        if exp.action.min() < 0 or exp.action.max() > 255:
            raise ValueError("actions are stored as uint8: 0..255")
        first_gid = self.states.append(exp.frames, exp.floats, exp.potential)
        keep = slice(max(0, k - self.capacity), k)  # more than the ring holds: newest only
        records = TensorDict(
            {
                "state_gid": first_gid + torch.arange(k)[keep],
                "action": torch.as_tensor(exp.action[keep]).to(torch.uint8),
                "n_steps": torch.as_tensor(exp.n_steps[keep]).to(torch.uint8),
                "rewards": torch.as_tensor(exp.rewards[keep], dtype=torch.float32),
                "gammas": torch.as_tensor(exp.gammas[keep], dtype=torch.float32),
                "terminal_actions": torch.as_tensor(
                    exp.terminal_actions[keep], dtype=torch.float32
                ),
                "end_rate": torch.as_tensor(exp.end_rate[keep], dtype=torch.float32),
            },
            batch_size=[len(range(k)[keep])],
            device=RECORDS_DEVICE,  # the storage's: no .to(), whose CUDA sync held the lock
        )
        index = self.rb.extend(records)
        self._cursor = (int(index[-1]) + 1) % self.capacity
        self._live = min(self._live + len(index), self.capacity)
        self._drop_stale()
        return k

    def _state_gid_at(self, j: int) -> int:
        """State gid of the j-th oldest live record."""
        pos = (self._window_start() + j) % self.capacity
        return int(self.rb.storage.get(pos)["state_gid"])

    def _drop_stale(self) -> None:
        """Shrink the window to records whose state rows were not overwritten.

        State gids grow along the window, so the stale records are its oldest ones: find the
        first live one by bisection.
        """
        lo_gid = self.states.lo
        if self._live and self._state_gid_at(0) < lo_gid:
            lo, hi = 0, self._live  # gid(lo) is stale; hi: first fresh j, or _live if none
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._state_gid_at(mid) < lo_gid:
                    lo = mid
                else:
                    hi = mid
            self._live -= hi
        self.sampler.set_window(self._window_start(), self._live)

    # ---- sampling -----------------------------------------------------------------------

    def sample(self, batch_size: int, max_n: int | None = None) -> dict[str, torch.Tensor]:
        """A mini-race batch (see collate.buffer_collate_function for its keys), each
        transition read with at most ``max_n`` of its stored steps when given."""
        records, info = self.rb.sample(batch_size, return_info=True)
        return buffer_collate_function(
            records,
            self.states,
            horizon_actions=self.horizon_actions,
            generator=self.generator,
            indices=info["index"],
            weights=info.get("priority_weight"),
            value_bound=self.value_bound,
            max_n=max_n,
        )

    def update_priorities(self, indices: torch.Tensor, per_sample_loss: torch.Tensor) -> None:
        """Priorities from the learner's per-sample losses (no-op without prioritized replay)."""
        if self.prioritized:
            self.rb.update_priority(indices.detach().cpu(), per_sample_loss.detach().cpu())

    # ---- resizing and checkpoints -------------------------------------------------------

    def live_records(self) -> TensorDict | None:
        """The live transition records, oldest first (a copy), or None when empty."""
        return self.rb.storage.get(self._live_positions()) if self._live else None

    def _export(self) -> dict[str, Any]:
        pos = self._live_positions()
        records = self.live_records()
        from_gid = int(records["state_gid"][0]) if self._live else self.states.written
        out: dict[str, Any] = {
            "capacity": self.capacity,
            "records": records.to_dict() if records is not None else None,
            "states": self.states.export(from_gid),
            "generator": self.generator.get_state(),
        }
        if self.prioritized:
            sampler: WindowPrioritizedSampler = self.sampler  # type: ignore[assignment]
            out["q"] = torch.from_numpy(sampler.q[pos.numpy()].copy())
            out["max_priority"] = sampler.max_priority
        return out

    def _import(self, data: dict[str, Any]) -> None:
        capacity = int(data["capacity"])
        records = data["records"]
        n = 0 if records is None else len(records["state_gid"])
        if n > capacity:
            raise ValueError(f"{n} records do not fit in capacity {capacity}")
        states = StateStore.from_export(
            data["states"], self.state_rows(capacity), self.frame_shape, self.float_dim, self.device
        )
        self._build(capacity)
        self.states = states
        if n:
            records = dict(records)
            if "end_rate" not in records:  # saved before lost races had an end rate
                records["end_rate"] = torch.zeros(n, dtype=torch.float32)
            self.rb.extend(TensorDict(records, batch_size=[n]))
            self._cursor, self._live = n % capacity, n
        if self.prioritized:
            sampler: WindowPrioritizedSampler = self.sampler  # type: ignore[assignment]
            sampler.max_priority = float(data["max_priority"])
            if n:
                sampler.q[:n] = torch.as_tensor(data["q"]).numpy()
        self._drop_stale()

    def set_capacity(self, capacity: int) -> None:
        """Grow to ``capacity`` transitions, keeping every live transition and its states."""
        if capacity < self.capacity:
            raise ValueError(f"capacity only grows: {self.capacity} -> {capacity} refused")
        if capacity == self.capacity:
            return
        data = self._export()
        data["capacity"] = capacity
        self._import(data)

    def state_dict(self) -> dict[str, Any]:
        """The live contents, compact (oldest first), plus the sampling generator state."""
        return self._export()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if tuple(state_dict["states"]["frames"].shape[1:]) != self.frame_shape:
            raise ValueError(
                f"checkpoint frames {tuple(state_dict['states']['frames'].shape[1:])} do not match "
                f"this buffer's {self.frame_shape}"
            )
        records = state_dict["records"]
        if records is not None and tuple(records["rewards"].shape[1:]) != (self.n_steps,):
            raise ValueError(f"checkpoint n_steps does not match this buffer's n = {self.n_steps}")
        self._import(state_dict)
        self.generator.set_state(state_dict["generator"])

    # ---- memory -------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes allocated for a full buffer: state rows, transition records, priorities.

        Measured on the tensors (the record ring is allocated on the first add; before that
        its size is computed from the record layout).
        """
        states = sum(
            t.nbytes for t in (self.states.frames, self.states.floats, self.states.potential)
        )
        storage = self.rb.storage
        if getattr(storage, "initialized", False):
            records = int(storage._storage.bytes())
        else:
            records = self.capacity * record_nbytes(self.n_steps)
        priorities = (
            self.sampler.q.nbytes if isinstance(self.sampler, WindowPrioritizedSampler) else 0
        )
        return states + records + priorities

    def bytes_per_transition(self) -> float:
        """Allocated bytes per transition slot (what a full buffer costs per transition)."""
        return self.nbytes / self.capacity
