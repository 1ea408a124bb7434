"""BufferConfig: the ``buffer`` config group, validated; errors name ``buffer.<key>``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import MISSING

from trackmind.defaults import checked_with_defaults, conf_option
from trackmind.errors import require
from trackmind.schedules import schedule_value, validate_points


def capacity_at(schedule: Sequence[tuple[int, int]], frames: float) -> int:
    """Buffer capacity after ``frames`` frames: the size of the last point reached.

    A staircase, not an interpolation: each growth copies the buffer into a larger one, so
    it happens a few times, at the listed frame counts.
    """
    size = schedule[0][1]
    for f, s in schedule:
        if frames >= f:
            size = s
    return int(size)


def n_steps_at(schedule: Sequence[tuple[float, int]], frames: float) -> int:
    """The n of a [[frames, n], ...] schedule after ``frames`` frames: linear between the
    points, rounded half up (3 -> 6 over 1M frames reads 4 from 166,667 frames on)."""
    return int(math.floor(schedule_value(schedule, frames) + 0.5))


FRAMES_ON = ("auto", "host", "device")
GPU_SHARE_FOR_FRAMES = 0.5  # auto keeps frames on the GPU when they take at most this share


def frames_device(
    frames_on: str, learner_device: str, frame_bytes: int, gpu_bytes: int | None
) -> str:
    """Where the buffers store their frames (a torch device type).

    ``device`` puts them on the learner's device; ``auto`` does so for a GPU learner when the
    frames of the full buffers (``frame_bytes``) take at most half of its memory
    (``gpu_bytes``), so that the batch's frame gather never crosses the bus; ``host`` and a
    CPU learner keep them in host memory.
    """
    require(frames_on in FRAMES_ON, "buffer.frames_on", f"must be one of {FRAMES_ON}")
    if learner_device == "cpu" or frames_on == "host":
        return "cpu"
    if frames_on == "device":
        return learner_device
    fits = gpu_bytes is not None and frame_bytes <= GPU_SHARE_FOR_FRAMES * gpu_bytes
    return learner_device if fits else "cpu"


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass
class BufferConfig:
    """Replay settings; its fields are the keys of conf/buffer/default.yaml (check_schema)."""

    # the defaults are conf/buffer/default.yaml's, merged in by from_dict (written once)
    capacity_schedule: Any = MISSING  # [[frames, capacity], ...]: a staircase, made pairs
    learning_starts: int = MISSING
    test_fraction: float = MISSING
    chunk_length: int = MISSING
    n_steps: int = MISSING
    # the n the learner reads, growing or falling with the frames played: [[frames, n], ...]
    # (linear between points, rounded), each n in [1, n_steps]; transitions are stored with
    # n_steps and read with fewer (their partial returns are kept). None: n_steps throughout;
    # a default here too, for the checkpoints of runs from before the key
    n_steps_schedule: Any = None
    cut_at_non_greedy: bool = MISSING
    mini_race_duration_ms: int = MISSING
    prioritized: bool = MISSING
    alpha: float = MISSING
    beta: float = MISSING
    priority_eps: float = MISSING
    state_margin: float = MISSING
    # a race cut by one of these termination terms is lost: it ends there, and the rest of
    # its mini-race goes on at the reward rate of its last `lost_rate_actions` actions
    # (nstep.py); empty (the default) bootstraps from the cut state, as Linesight does
    lost_ends: Any = MISSING
    lost_rate_actions: int = MISSING
    # paid once more on a lost race's last action (>= 0; nstep.py); a default here too, for
    # the checkpoints of runs from before the key
    lost_penalty: float = 0.0
    # the most raw reward one action can earn (null: no bound), and what a finish can add
    # once: the learner clips its bootstrapped values at what the rest of the mini-race can
    # pay (minirace.value_upper_bound); defaults here too, for checkpoints from before the keys
    value_bound_rate: float | None = None
    value_bound_once: float = 0.0
    # where the frames are stored: the learner's GPU (device), host memory, or auto
    # (frames_device); a default here too, for the checkpoints of runs from before the key
    frames_on: str = "auto"

    def __post_init__(self) -> None:
        self.capacity_schedule = _schedule(self.capacity_schedule, "buffer")
        ends = self.lost_ends
        ok = isinstance(ends, list | tuple) and all(isinstance(e, str) for e in ends)
        require(ok, "buffer.lost_ends", f"must be a list of termination terms, got {ends!r}")
        self.lost_ends = tuple(ends)
        self.validate()
        if self.n_steps_schedule is not None:
            self.n_steps_schedule = _n_steps_schedule(self.n_steps_schedule, self.n_steps)

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any] | None) -> BufferConfig:
        """The ``buffer`` group (plain dict or DictConfig) checked; conf/buffer/default.yaml's
        values fill the keys it does not set."""
        return checked_with_defaults(cfg, conf_option("buffer", "default"), cls, "buffer")

    def validate(self, prefix: str = "buffer") -> None:
        def key(name: str) -> str:
            return f"{prefix}.{name}"

        sizes = [s for _, s in self.capacity_schedule]
        require(
            self.frames_on in FRAMES_ON,
            key("frames_on"),
            f"must be one of {', '.join(FRAMES_ON)}, got {self.frames_on!r}",
        )
        for name in (
            "learning_starts",
            "chunk_length",
            "n_steps",
            "mini_race_duration_ms",
            "lost_rate_actions",
        ):
            v = getattr(self, name)
            require(_is_int(v) and v >= 1, key(name), f"must be an integer >= 1, got {v!r}")
        require(
            self.learning_starts <= max(sizes),
            key("learning_starts"),
            f"{self.learning_starts} exceeds the largest capacity {max(sizes)}: learning would "
            "never start",
        )
        require(
            _is_number(self.test_fraction) and 0.0 <= self.test_fraction <= 0.5,
            key("test_fraction"),
            f"must be in [0, 0.5], got {self.test_fraction!r}",
        )
        require(self.n_steps <= 255, key("n_steps"), f"at most 255, got {self.n_steps}")
        for name in ("cut_at_non_greedy", "prioritized"):
            v = getattr(self, name)
            require(isinstance(v, bool), key(name), f"must be true or false, got {v!r}")
        require(
            _is_number(self.alpha) and self.alpha >= 0,
            key("alpha"),
            f"must be >= 0, got {self.alpha!r}",
        )
        require(
            _is_number(self.beta) and 0 <= self.beta <= 1,
            key("beta"),
            f"must be in [0, 1], got {self.beta!r}",
        )
        require(
            _is_number(self.priority_eps) and self.priority_eps > 0,
            key("priority_eps"),
            f"must be > 0 (a zero priority would hide a transition), got {self.priority_eps!r}",
        )
        require(
            _is_number(self.lost_penalty) and self.lost_penalty >= 0,
            key("lost_penalty"),
            f"must be a number >= 0 (it is subtracted), got {self.lost_penalty!r}",
        )
        rate = self.value_bound_rate
        require(
            rate is None or _is_number(rate),
            key("value_bound_rate"),
            f"must be null (no bound) or a number, got {rate!r}",
        )
        require(
            _is_number(self.value_bound_once) and self.value_bound_once >= 0,
            key("value_bound_once"),
            f"must be a number >= 0, got {self.value_bound_once!r}",
        )
        require(
            _is_number(self.state_margin) and 0 <= self.state_margin <= 1,
            key("state_margin"),
            f"must be in [0, 1], got {self.state_margin!r}",
        )

    def horizon_actions(self, ms_per_action: int, prefix: str = "buffer") -> int:
        """The mini-race horizon in actions (7000 ms / 50 ms = 140)."""
        require(
            _is_int(ms_per_action) and ms_per_action > 0,
            "ms_per_action",
            f"must be a positive integer, got {ms_per_action!r}",
        )
        k = f"{prefix}.mini_race_duration_ms"
        require(
            self.mini_race_duration_ms % ms_per_action == 0,
            k,
            f"{self.mini_race_duration_ms} ms is not a whole number of {ms_per_action} ms actions",
        )
        horizon = self.mini_race_duration_ms // ms_per_action
        require(
            horizon > self.n_steps,
            k,
            f"a horizon of {horizon} actions must exceed n_steps = {self.n_steps}",
        )
        return horizon

    def value_bound(self) -> tuple[float, float] | None:
        """(rate, once) for the collate's value bound, or None when it is off."""
        if self.value_bound_rate is None:
            return None
        return float(self.value_bound_rate), float(self.value_bound_once)

    def capacity(self, frames: float) -> int:
        return capacity_at(self.capacity_schedule, frames)

    def n_steps_at(self, frames: float) -> int:
        """The n the learner reads after ``frames`` frames (n_steps without a schedule)."""
        if self.n_steps_schedule is None:
            return self.n_steps
        return n_steps_at(self.n_steps_schedule, frames)

    def max_frame_bytes(self, frame_bytes: int) -> int:
        """Bytes of frames when buffer and buffer_test are full at the largest capacity."""
        top = max(s for _, s in self.capacity_schedule)
        rows = top * (1 + self.test_fraction) * (1 + self.state_margin)
        return int(rows * frame_bytes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["capacity_schedule"] = [list(p) for p in self.capacity_schedule]
        d["lost_ends"] = list(self.lost_ends)
        if self.n_steps_schedule is not None:
            d["n_steps_schedule"] = [list(p) for p in self.n_steps_schedule]
        return d


def _schedule(points: Any, prefix: str) -> tuple[tuple[int, int], ...]:
    """[[frames, size], ...] starting at frame 0, frames rising, sizes >= 1 never shrinking."""
    k = f"{prefix}.capacity_schedule"
    try:
        pairs = [(p[0], p[1]) for p in points if len(p) == 2]
        ok = len(pairs) == len(points)
    except (TypeError, KeyError):
        ok = False
    require(ok, k, f"must be a list of [frames, size] pairs, got {points!r}")
    require(len(pairs) > 0, k, "needs at least one [frames, size] point")
    for i, (f, s) in enumerate(pairs):
        require(_is_int(f) and _is_int(s), k, f"point {i} must be two integers, got {[f, s]}")
        require(s >= 1, k, f"point {i}: size must be >= 1, got {s}")
        if i == 0:
            require(f == 0, k, f"the first point must be at frame 0, got {f}")
        else:
            require(f > pairs[i - 1][0], k, f"frames must increase: {pairs[i - 1][0]} then {f}")
            require(s >= pairs[i - 1][1], k, f"capacity only grows: {pairs[i - 1][1]} then {s}")
    return tuple((int(f), int(s)) for f, s in pairs)


def _n_steps_schedule(points: Any, n_steps: int) -> tuple[tuple[float, int], ...]:
    """[[frames, n], ...] with integer n in [1, n_steps] (the n stored), or ConfigError."""
    k = "buffer.n_steps_schedule"
    pairs = validate_points(points, "linear", k)
    for i, (_, n) in enumerate(pairs):
        require(
            n == int(n) and 1 <= n <= n_steps,
            k,
            f"point {i}: n must be an integer in [1, buffer.n_steps = {n_steps}] (the n stored), "
            f"got {n:g}",
        )
    return tuple((f, int(n)) for f, n in pairs)
