"""make_buffers: buffer and buffer_test from the ``buffer`` config, held by ReplayBuffers.

ReplayBuffers is what the learner's DataModule talks to: add a race, grow on the frame
schedule, sample, update priorities, checkpoint. buffer_test holds test_fraction of the
capacity (chunks of test_fraction of the races go there), for an overfitting measure.
Every call that touches the storage holds one lock, so a prefetch thread may sample
(replay.prefetch) while races and priority updates arrive on the learner's thread.
"""

from __future__ import annotations

import math
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from trackmind.env.rollout_results import RolloutResults
from trackmind.replay.config import BufferConfig
from trackmind.replay.nstep import fill_buffer_from_rollout_with_n_steps_rule
from trackmind.replay.transition_buffer import TransitionBuffer

STATE_VERSION = 1

F = TypeVar("F", bound=Callable[..., Any])


def _locked(method: F) -> F:
    """Run the method holding the instance's lock."""

    @wraps(method)
    def run(self: ReplayBuffers, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]


class ReplayBuffers:
    """buffer (training) and buffer_test (held out), filled and grown together."""

    def __init__(
        self,
        config: BufferConfig,
        frame_shape: tuple[int, ...] | None,
        float_dim: int,
        horizon_actions: int,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> None:
        self.config = config
        self.device = torch.device(device)  # where the frames live
        self.lock = threading.RLock()
        self.sample_lock_wait_s = 0.0  # how long sample() waited for the lock, in all
        self.horizon_actions = horizon_actions
        self.frames = 0
        seeds = np.random.SeedSequence(seed).generate_state(3)

        def make(capacity: int, s: int) -> TransitionBuffer:
            return TransitionBuffer(
                capacity,
                frame_shape,
                float_dim,
                config.n_steps,
                horizon_actions,
                prioritized=config.prioritized,
                alpha=config.alpha,
                beta=config.beta,
                priority_eps=config.priority_eps,
                state_margin=config.state_margin,
                value_bound=config.value_bound(),
                seed=int(s),
                device=self.device,
            )

        capacity = config.capacity(0)
        self.buffer = make(capacity, seeds[0])
        self.buffer_test = (
            make(self.test_capacity(capacity), seeds[1]) if config.test_fraction > 0 else None
        )
        self.split_rng = np.random.default_rng(int(seeds[2]))

    def test_capacity(self, capacity: int) -> int:
        return max(1, math.ceil(capacity * self.config.test_fraction))

    def __len__(self) -> int:
        return len(self.buffer)

    @property
    def n_steps_now(self) -> int:
        """The n the learner reads at the frames played so far (buffer.n_steps_schedule)."""
        return self.config.n_steps_at(self.frames)

    def _read_n(self) -> int | None:
        """The n to read batches with; None (every stored step) without a schedule."""
        return None if self.config.n_steps_schedule is None else self.n_steps_now

    @property
    def ready(self) -> bool:
        """Enough transitions in buffer to start learning."""
        return len(self.buffer) >= self.config.learning_starts

    @_locked
    def add_rollout(
        self,
        rollout_results: RolloutResults,
        gamma: float,
        potential_weights: Mapping[str, float] | None = None,
    ) -> tuple[int, int]:
        """One race through the n-step rule into buffer / buffer_test."""
        c = self.config
        return fill_buffer_from_rollout_with_n_steps_rule(
            self.buffer,
            self.buffer_test,
            rollout_results,
            c.n_steps,
            gamma,
            potential_weights=potential_weights,
            cut_at_non_greedy=c.cut_at_non_greedy,
            lost_ends=c.lost_ends,
            lost_rate_actions=c.lost_rate_actions,
            lost_penalty=c.lost_penalty,
            test_fraction=c.test_fraction,
            chunk_length=c.chunk_length,
            rng=self.split_rng,
        )

    @_locked
    def update_capacity(self, frames: int) -> bool:
        """Follow the capacity schedule at ``frames`` frames played; True if it grew."""
        self.frames = max(self.frames, int(frames))
        capacity = self.config.capacity(self.frames)
        if capacity <= self.buffer.capacity:
            return False
        self.buffer.set_capacity(capacity)
        if self.buffer_test is not None:
            self.buffer_test.set_capacity(self.test_capacity(capacity))
        return True

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        t0 = time.perf_counter()
        with self.lock:
            self.sample_lock_wait_s += time.perf_counter() - t0
            return self.buffer.sample(batch_size, self._read_n())

    @_locked
    def sample_test(self, batch_size: int) -> dict[str, torch.Tensor]:
        if self.buffer_test is None or len(self.buffer_test) == 0:
            raise RuntimeError("buffer_test is empty (or test_fraction is 0)")
        return self.buffer_test.sample(batch_size, self._read_n())

    @_locked
    def update_priorities(self, indices: torch.Tensor, per_sample_loss: torch.Tensor) -> None:
        """For batches from ``sample`` (buffer_test is never trained on)."""
        self.buffer.update_priorities(indices, per_sample_loss)

    def bytes_per_transition(self) -> float:
        """Allocated bytes of both buffers per transition slot."""
        bufs = [b for b in (self.buffer, self.buffer_test) if b is not None]
        return sum(b.nbytes for b in bufs) / sum(b.capacity for b in bufs)

    # ---- checkpoints --------------------------------------------------------------------

    @_locked
    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "config": self.config.to_dict(),
            "frames": self.frames,
            "buffer": self.buffer.state_dict(),
            "buffer_test": None if self.buffer_test is None else self.buffer_test.state_dict(),
            "split_rng": self.split_rng.bit_generator.state,
        }

    @_locked
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(
                f"replay checkpoint version {state.get('version')!r}, expected {STATE_VERSION}"
            )
        if (state["buffer_test"] is None) != (self.buffer_test is None):
            raise ValueError("replay checkpoint and config disagree on having a buffer_test")
        self.buffer.load_state_dict(state["buffer"])
        if self.buffer_test is not None:
            self.buffer_test.load_state_dict(state["buffer_test"])
        self.split_rng.bit_generator.state = state["split_rng"]
        self.frames = int(state["frames"])

    def save(self, path: str | Path) -> None:
        """Write the buffers' contents (compact: live transitions and their states)."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        torch.save(self.state_dict(), tmp)
        tmp.replace(path)  # a crash mid-write leaves the previous checkpoint intact

    def load(self, path: str | Path) -> None:
        try:
            state = torch.load(Path(path), weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
            raise ValueError(f"{path}: not a readable replay checkpoint ({e})") from e
        self.load_state_dict(state)


def make_buffers(
    cfg: Mapping[str, Any] | BufferConfig | None,
    frame_shape: tuple[int, ...] | None,
    float_dim: int,
    *,
    ms_per_action: int = 50,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> ReplayBuffers:
    """buffer and buffer_test for frames of ``frame_shape`` and ``float_dim`` floats.

    ``frame_shape=None`` (a network without an image) stores no frames and gives batches
    without state_img / next_state_img.
    ``cfg`` is the ``buffer`` config group (validated here, ConfigError naming the key);
    ``ms_per_action`` comes from the game config and turns the mini-race duration into
    actions. ``device``: where the frames are stored and gathered (a GPU learner's device,
    see replay/states.py); batches then carry their frames there.
    """
    config = cfg if isinstance(cfg, BufferConfig) else BufferConfig.from_dict(cfg)
    horizon = config.horizon_actions(ms_per_action)
    frame_shape = None if frame_shape is None else tuple(frame_shape)
    return ReplayBuffers(config, frame_shape, int(float_dim), horizon, seed, device)
