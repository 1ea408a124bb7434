"""Real-time stepping over any GameInstance: rtgym's elastic time steps (seed 004).

A game that cannot be paused keeps running while the policy thinks, so the time between
actions must be held steady. As in rtgym, `step(a)` returns the observation captured during
the previous time step (with the action buffer appended) and starts a new time step in a
background thread: the action is sent at once, the observation is taken
`start_obs_capture` seconds in, and the step lasts `time_step_duration`. Steps are
elastic: a caller up to `time_step_duration * time_step_timeout_factor` late still gets a
time step on the nominal grid (it starts where the previous one ended); a caller later
than that gets a RealTimeWarning and the clock restarts from now. A reset or `wait()` is a
pause, so the step after it restarts the clock without a warning.

The wrapped game decides what "send" means: a real-time game (TMInterfaceGame in realtime
mode) has `apply_action` (applied at its next tick, returns at once) and its `observe()`
reads the latest state; a turn-based game such as the SimGame advances one action step
when the action is sent, which makes the wrapper testable here with exact race times.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from trackmind.game.actions import validate_actions
from trackmind.game.contract import GameObservation
from trackmind.tmi.observation import BackendObservation


class RealTimeWarning(UserWarning):
    """A caller came back after the elastic margin: the real-time clock restarted."""


@dataclass(frozen=True)
class TimeStep:
    """When a time step starts, when its observation is taken, when it ends (seconds)."""

    start: float
    capture: float
    end: float
    late: bool  # the elasticity broke: the clock restarted at `start`


def next_time_step(
    now: float,
    prev_end: float | None,
    duration: float,
    start_obs_capture: float,
    timeout: float,
) -> TimeStep:
    """rtgym's timestamp update: keep the nominal grid while the caller is within timeout.

    `prev_end` None means a fresh clock (first step, after a reset or a pause).
    """
    if prev_end is not None and now < prev_end + timeout:
        start, late = prev_end, False
    else:
        start, late = now, prev_end is not None
    return TimeStep(start, start + start_obs_capture, start + duration, late)


class RealTimeGame:
    """A GameInstance whose steps run on the wall clock (see the module docstring).

    Args:
        game: the wrapped GameInstance.
        time_step_duration, start_obs_capture: seconds (rtgym's names).
        time_step_timeout_factor: elasticity, in time steps.
        act_buf_len: actions kept in the observations' action_buffer (oldest first).
        default_action: sent at reset and by wait().
        threaded: run time steps in a background thread (rtgym's async threading);
            False runs them inside step() (deterministic tests).
        clock, sleep: time source (seconds) and sleep function.
    """

    def __init__(
        self,
        game: Any,
        time_step_duration: float = 0.05,
        start_obs_capture: float = 0.04,
        time_step_timeout_factor: float = 1.0,
        act_buf_len: int = 1,
        default_action: int = 3,
        threaded: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 <= start_obs_capture <= time_step_duration:
            raise ValueError("start_obs_capture must lie in [0, time_step_duration]")
        if time_step_timeout_factor <= 0 or act_buf_len < 1:
            raise ValueError("time_step_timeout_factor must be > 0 and act_buf_len >= 1")
        self.game = game
        self.n_cars = int(game.n_cars)
        self.frame_shape = tuple(game.frame_shape)
        self.action_ms = int(game.action_ms)
        self.time_step_duration = float(time_step_duration)
        self.start_obs_capture = float(start_obs_capture)
        self.timeout = self.time_step_duration * float(time_step_timeout_factor)
        self.default_action = int(default_action)
        self.threaded = bool(threaded)
        self.late_steps = 0
        self.time_steps: list[TimeStep] = []  # the last few, for inspection
        self._clock, self._sleep = clock, sleep
        self._realtime_game = hasattr(game, "apply_action")
        self._default = np.full(self.n_cars, self.default_action, np.int64)
        self._buffer = np.tile(self._default[:, None], (1, int(act_buf_len)))
        self._last_sent = self._default.copy()
        self._t_end: float | None = None
        self._waiting = False
        self._captured: GameObservation | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __getattr__(self, name: str) -> Any:  # zone settings and the like of the game
        game = self.__dict__.get("game")
        if game is None:
            raise AttributeError(name)
        return getattr(game, name)

    # --- GameInstance ------------------------------------------------------------------------
    def reset(self, cars: Any = None, maps: Any = None) -> BackendObservation:
        """Reset the game, then restart the clock with the default action (a pause)."""
        self._join()
        obs = self.game.reset(cars, maps)
        idx = np.arange(self.n_cars) if cars is None else np.atleast_1d(cars).astype(np.int64)
        self._buffer[idx] = self.default_action
        self._last_sent[idx] = self.default_action
        out = self._with_buffer(obs)
        self._t_end = None
        self._begin(self._last_sent.copy())
        return out

    def step(self, actions: Any) -> BackendObservation:
        """The observation of the previous time step; `actions` run during the next one."""
        a = validate_actions(actions, self.n_cars)
        self._join()
        self._buffer[:, :-1] = self._buffer[:, 1:]
        self._buffer[:, -1] = a
        out = self._with_buffer(self._captured)
        self._begin(a)
        return out

    def observe(self) -> BackendObservation:
        self._join()
        return self._with_buffer(self._captured or self.game.observe())

    def wait(self) -> None:
        """Hold the cars still with the default action; the next step restarts the clock."""
        self._join()
        self._send(self._default.copy())
        self._last_sent = self._default.copy()
        self._waiting = True

    def save_state(self, car: int) -> Any:
        self._join()
        return self.game.save_state(car)

    def restore_state(self, car: int, state: Any) -> None:
        """Rewind (a pause): the next step returns the restored state and restarts the clock."""
        self._join()
        self.game.restore_state(car, state)
        self._captured = self.game.observe()
        self._waiting = True

    def track(self, car: int) -> Any:
        return self.game.track(car)

    def close(self) -> None:
        try:
            self._join()
        finally:
            self.game.close()

    # --- the clock ---------------------------------------------------------------------------
    def _begin(self, actions: np.ndarray) -> None:
        ts = next_time_step(
            self._clock(),
            self._t_end,
            self.time_step_duration,
            self.start_obs_capture,
            self.timeout,
        )
        if ts.late:
            self.late_steps += 1
            if not self._waiting:
                late_ms = 1000.0 * (ts.start - self._t_end)
                warnings.warn(
                    f"real-time step came {late_ms:.0f} ms after the previous one ended, more "
                    f"than the {1000.0 * self.timeout:.0f} ms allowed: the clock restarts now",
                    RealTimeWarning,
                    stacklevel=3,
                )
        self._waiting = False
        self._t_end = ts.end
        self._last_sent = actions.copy()
        self.time_steps = self.time_steps[-63:] + [ts]
        if self.threaded:
            self._thread = threading.Thread(target=self._run, args=(actions, ts), daemon=True)
            self._thread.start()
        else:
            self._run(actions, ts)
            self._join()

    def _run(self, actions: np.ndarray, ts: TimeStep) -> None:
        try:
            self._send(actions)
            self._sleep_until(ts.capture)
            self._captured = self.game.observe()
            self._sleep_until(ts.end)
        except BaseException as e:  # surfaced in the caller's thread by _join
            self._error = e

    def _send(self, actions: np.ndarray) -> None:
        if self._realtime_game:
            self.game.apply_action(actions)
        else:
            self.game.step(actions)

    def _sleep_until(self, t: float) -> None:
        left = t - self._clock()
        if left > 0:
            self._sleep(left)

    def _join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def _with_buffer(self, obs: GameObservation) -> BackendObservation:
        return BackendObservation(
            frames=obs.frames,
            car=obs.car,
            lost=getattr(obs, "lost", None),
            action_buffer=self._buffer.copy(),
        )
