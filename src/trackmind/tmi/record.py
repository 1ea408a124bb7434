"""Recording a run's positions through TMInterface, the raw material of a reference line.

Drive the map (or validate a replay) in the game with the recorder connected: it keeps the
car's position at every physics step from race time 0 to the finish, in game coordinates
(x, y, z; y up), which scripts/make_map_from_run.py turns into the map's reference line. A
restarted race starts the recording over.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from tminterface.client import Client

from trackmind.tmi.connection import InterfaceFactory, connect


@dataclass(frozen=True)
class RecordedRun:
    positions: np.ndarray  # (N, 3) game coordinates, one per physics step from time 0
    times_ms: np.ndarray  # (N,)
    finish_time_ms: int


class RunRecorder(Client):
    """Keeps the positions of the current race; `done` is set at the finish."""

    def __init__(self) -> None:
        super().__init__()
        self.registered = False
        self.last_exception: str | None = None
        self.done = threading.Event()
        self.positions: list[list[float]] = []
        self.times: list[int] = []
        self.finish_time_ms: int | None = None
        self._cv = threading.Condition()
        self._last_t = -(10**9)

    def on_registered(self, iface: Any) -> None:
        with self._cv:
            self.registered = True
            self._cv.notify_all()

    def on_client_exception(self, iface: Any, exception: Exception) -> None:
        self.last_exception = f"{type(exception).__name__}: {exception}"

    def wait_registered(self, timeout_s: float) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: self.registered, timeout_s)

    def on_run_step(self, iface: Any, _time: int) -> None:
        self._step(iface, int(_time))

    def on_simulation_step(self, iface: Any, _time: int) -> None:
        self._step(iface, int(_time))

    def _step(self, iface: Any, t: int) -> None:
        if self.done.is_set():
            return
        if t < self._last_t:  # the race restarted: record the new one
            self.positions, self.times = [], []
        self._last_t = t
        if t >= 0:
            state = iface.get_simulation_state()
            self.positions.append(list(state.dyna.current_state.position))
            self.times.append(t)

    def on_checkpoint_count_changed(self, iface: Any, current: int, target: int) -> None:
        if current == target and target > 0 and not self.done.is_set() and self.positions:
            state = iface.get_simulation_state()
            self.positions.append(list(state.dyna.current_state.position))
            self.finish_time_ms = int(state.player_info.race_time)
            self.times.append(self.finish_time_ms)
            self.done.set()


def record_run(
    make_iface: InterfaceFactory, server: str, timeout_s: float, connect_timeout_s: float = 10.0
) -> RecordedRun:
    """Wait for the next finished run on `server` and return its positions."""
    recorder = RunRecorder()
    iface = connect(make_iface, server, recorder, connect_timeout_s)
    try:
        if not recorder.done.wait(timeout_s):
            raise TimeoutError(f"{server}: no finished run within {timeout_s:g} s")
    finally:
        iface.close()
    return RecordedRun(
        np.asarray(recorder.positions, np.float64),
        np.asarray(recorder.times, np.int64),
        int(recorder.finish_time_ms),
    )
