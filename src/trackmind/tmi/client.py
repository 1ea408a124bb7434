"""RaceClient: TMInterface callbacks turned into action steps that a caller drives.

TMInterface calls its client on every 10 ms physics tick (`on_run_step`) from its own
thread, and the game waits while a callback runs. Every TMInterface call trackmind makes is
made here, inside those callbacks, so the interface (one shared-memory buffer) is only ever
used from one thread; the caller only posts commands and waits for results.

Two modes:
- lockstep (default): at each action boundary (every `action_ms` of race time) the callback
  publishes the simulation state and holds the game until the caller sends the next
  command. If none comes within `hold_timeout_s` (kept below TMInterface's own response
  timeout) the game is released and the race counts as spoiled.
- realtime (games that cannot be paused): callbacks never hold; commands apply at the next
  tick and the latest boundary state is published for whoever reads it.

Races start by rewinding to a saved start state (saved at race time 0 the first time a map
runs, after a give-up or a map load), checkpoints and the finish come from
`on_checkpoint_count_changed`, and the finish is kept from ending the race
(`prevent_simulation_finish`) so the caller decides what happens next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tminterface.client import Client

from trackmind.game.actions import ACTIONS

INPUTS = [
    {"accelerate": bool(a), "brake": bool(b), "left": bool(lf), "right": bool(r)}
    for a, b, lf, r in ACTIONS
]
NEUTRAL = {"accelerate": False, "brake": False, "left": False, "right": False}
# A give-up or map load restarts the race countdown, which shows as race time jumping back.
# Issued early in a countdown (before -JUMP_GUARD_MS) the new countdown need not jump back,
# and the old race cannot reach 0 before the command takes effect, so its 0 is the start.
JUMP_GUARD_MS = 100


class GameLost(RuntimeError):
    """The game stopped answering (hung, closed, deregistered); the message says how."""


class RaceSpoiled(RuntimeError):
    """The game was released mid-race because no command came in time; the game is fine."""


@dataclass(frozen=True)
class Boundary:
    """The game at an action boundary: its SimStateData and the race bookkeeping."""

    seq: int
    state: Any  # tminterface.structs.SimStateData
    time_ms: int  # race time of the boundary
    cp_current: int  # checkpoints passed, the finish included once reached
    cp_target: int  # checkpoints of the race, the finish included
    finished: bool
    finish_time_ms: int | None


@dataclass(frozen=True)
class Command:
    """What the caller asks for: start a race, apply an action, rewind to a boundary."""

    kind: str  # "start" | "act" | "rewind"
    action: int = 3
    challenge: str | None = None
    boundary: Boundary | None = None


class RaceClient(Client):
    """The TMInterface client of one game (see the module docstring)."""

    def __init__(
        self,
        action_ms: int = 50,
        lockstep: bool = True,
        hold_timeout_s: float = 8.0,
        server_timeout_ms: int = 10_000,
        game_speed: float = 1.0,
        map_command: str = "map {challenge}",
    ) -> None:
        super().__init__()
        self.action_ms = int(action_ms)
        self.lockstep = bool(lockstep)
        self.hold_timeout_s = float(hold_timeout_s)
        self.server_timeout_ms = int(server_timeout_ms)
        self.game_speed = float(game_speed)
        self.map_command = map_command
        self.registered = False
        self.gone: str | None = None  # why the game went away
        self.last_exception: str | None = None
        self.last_tick: float | None = None  # monotonic time of the last physics tick
        self.releases = 0  # holds that timed out
        self._cv = threading.Condition(threading.RLock())
        self._pending: list[Command] = []
        self._latest: Boundary | None = None
        self._seq = 0
        self._phase = "free"  # free | wait_start | running | holding
        self._next_boundary = 0
        self._loaded: str | None = None  # challenge loaded through map_command
        self._start_states: dict[str, Any] = {}
        self._start_key = ""
        self._jumped_back = False
        self._need_jump = True
        self._prev_t = 0
        self._cp = (0, 0)
        self._finished = False
        self._finish_time: int | None = None
        self._in_command = False
        self._closing = False
        self._t: int | None = None

    # --- TMInterface callbacks (the interface's thread) ------------------------------------
    def on_registered(self, iface: Any) -> None:
        with self._failures_lose_the_game():
            iface.set_timeout(self.server_timeout_ms)
            iface.set_speed(self.game_speed)
        with self._cv:
            self.registered = True
            self._cv.notify_all()

    def on_deregistered(self, iface: Any) -> None:
        self._lose("TMInterface deregistered trackmind (the game stopped waiting for it)")

    def on_shutdown(self, iface: Any) -> None:
        self._lose("the game closed")

    def on_client_exception(self, iface: Any, exception: Exception) -> None:
        self.last_exception = f"{type(exception).__name__}: {exception}"

    def on_checkpoint_count_changed(self, iface: Any, current: int, target: int) -> None:
        with self._failures_lose_the_game(), self._cv:
            self._cp = (int(current), int(target))
            finish = current == target and target > 0
            if self._in_command or not finish or self._finished:
                return
            iface.prevent_simulation_finish()  # the race goes on: trackmind decides what next
            if self._phase != "running":
                return  # nobody waits for this race (the game was released)
            state = iface.get_simulation_state()
            self._finished = True
            self._finish_time = int(state.player_info.race_time)
            self._publish(state, self._t if self._t is not None else self._finish_time)
            if self.lockstep:
                self._phase = "holding"
                self._hold()  # a command is executed at the next run step, not here

    def on_run_step(self, iface: Any, _time: int) -> None:
        self.last_tick = time.monotonic()
        self._t = t = int(_time)
        with self._failures_lose_the_game(), self._cv:
            while not self._closing:
                started = False
                while self._pending:  # a rewind moves this tick to the state's race time
                    restart, t = self._execute(iface, self._pending.pop(0), t)
                    started |= restart
                if started:
                    return  # a give-up or map load: the new race shows up in later ticks
                if self._phase == "wait_start":
                    # the new race shows as race time jumping back (JUMP_GUARD_MS)
                    self._jumped_back |= t < self._prev_t
                    self._prev_t = t
                    if (self._jumped_back or not self._need_jump) and t >= 0:
                        state = iface.get_simulation_state()
                        self._start_states[self._start_key] = state
                        self._begin(state, t)
                elif self._phase == "running" and t >= self._next_boundary:
                    self._publish(iface.get_simulation_state(), t)
                    if self.lockstep:
                        self._phase = "holding"
                    else:
                        while self._next_boundary <= t:
                            self._next_boundary += self.action_ms
                if self._phase != "holding" or not self._hold():
                    return

    # --- the caller's side -----------------------------------------------------------------
    def wait_registered(self, timeout_s: float) -> bool:
        """True once TMInterface registered this client, False after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while not self.registered:
                left = deadline - time.monotonic()
                if left <= 0 or self.gone:
                    return False
                self._cv.wait(min(left, 0.05))
        return True

    def send(self, cmd: Command) -> int:
        """Post a command for the next callback; returns the boundary count at posting."""
        with self._cv:
            if self.gone:
                raise GameLost(self.gone)
            if cmd.kind == "act" and self.lockstep and self._phase == "free" and self._latest:
                raise RaceSpoiled(
                    f"the game was released after {self.hold_timeout_s:g} s without an action"
                )
            if cmd.kind == "act" and self._pending and self._pending[-1].kind == "act":
                self._pending[-1] = cmd  # real time: only the newest action matters
            else:
                self._pending.append(cmd)
            self._cv.notify_all()
            return self._seq

    def wait_boundary(self, after_seq: int, timeout_s: float) -> Boundary:
        """The first boundary published after `after_seq`; GameLost after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._seq <= after_seq:
                if self.gone:
                    raise GameLost(self.gone)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GameLost(self._stall_reason(timeout_s))
                self._cv.wait(min(left, 0.05))
            assert self._latest is not None
            return self._latest

    def request(self, cmd: Command, timeout_s: float) -> Boundary:
        """Send a command and wait for the boundary it leads to."""
        return self.wait_boundary(self.send(cmd), timeout_s)

    @property
    def latest(self) -> Boundary | None:
        return self._latest

    def forget_map(self) -> None:
        """Load the challenge again at the next start (a start that never came)."""
        with self._cv:
            self._loaded = None

    def release(self) -> None:
        """Stop holding the game for good (before closing the connection)."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()

    # --- internals (called with the lock held) ---------------------------------------------
    def _execute(self, iface: Any, cmd: Command, t: int) -> tuple[bool, int]:
        """Apply one command: (the race restarts later (give-up, map load), race time now)."""
        self._in_command = True
        try:
            if cmd.kind == "act":
                iface.set_input_state(**INPUTS[cmd.action])
                if self.lockstep:
                    self._next_boundary = self._boundary_time() + self.action_ms
                    self._phase = "running"
                return False, t
            if cmd.kind == "rewind":
                b = cmd.boundary
                iface.rewind_to_state(b.state)
                self._cp, self._finished = (b.cp_current, b.cp_target), b.finished
                self._finish_time = b.finish_time_ms
                self._publish(b.state, b.time_ms)
                self._after_boundary(b.time_ms)
                return False, b.time_ms
            # start a race
            key = cmd.challenge or ""
            iface.set_input_state(**NEUTRAL)
            if cmd.challenge and cmd.challenge != self._loaded:
                iface.execute_command(self.map_command.format(challenge=cmd.challenge))
                self._loaded = cmd.challenge
                self._start_states.pop(key, None)
                need_jump = t >= -JUMP_GUARD_MS  # see JUMP_GUARD_MS
            elif key in self._start_states:
                state = self._start_states[key]
                iface.rewind_to_state(state)
                self._begin(state, 0)
                return False, 0
            else:
                iface.give_up()
                need_jump = t >= -JUMP_GUARD_MS
            self._phase, self._start_key = "wait_start", key
            self._jumped_back, self._prev_t, self._need_jump = False, t, need_jump
            self._finished, self._finish_time = False, None
            return True, t
        finally:
            self._in_command = False

    def _begin(self, state: Any, t: int) -> None:
        self._finished, self._finish_time = False, None
        self._cp = (0, self._cp[1])
        self._publish(state, t)
        self._after_boundary(t)

    def _after_boundary(self, t: int) -> None:
        if self.lockstep:
            self._phase = "holding"
        else:
            self._phase, self._next_boundary = "running", t + self.action_ms

    def _publish(self, state: Any, t: int) -> None:
        self._seq += 1
        self._latest = Boundary(
            self._seq, state, int(t), self._cp[0], self._cp[1], self._finished, self._finish_time
        )
        self._cv.notify_all()

    def _boundary_time(self) -> int:
        return self._latest.time_ms if self._latest is not None else 0

    def _hold(self) -> bool:
        """Wait for a command while the game waits for us; False when released."""
        deadline = time.monotonic() + self.hold_timeout_s
        while not self._pending:
            left = deadline - time.monotonic()
            if self._closing or self.gone or left <= 0:
                if not self._closing and not self.gone:
                    self.releases += 1
                self._phase = "free"
                return False
            self._cv.wait(min(left, 0.05))
        return True

    @contextmanager
    def _failures_lose_the_game(self) -> Iterator[None]:
        """A TMInterface call failing in a callback ends the connection, not the thread."""
        try:
            yield
        except Exception as e:
            self._lose(f"a TMInterface call failed ({type(e).__name__}: {e})")

    def _lose(self, reason: str) -> None:
        with self._cv:
            self.gone = self.gone or reason
            self.registered = False
            self._phase = "free"
            self._cv.notify_all()

    def _stall_reason(self, timeout_s: float) -> str:
        if self.last_tick is None:
            return f"no physics step within {timeout_s:g} s (is a race running in the game?)"
        age = time.monotonic() - self.last_tick
        if age > min(1.0, timeout_s / 2):
            return f"no physics step for {age:.1f} s (the game hung, is paused or minimized)"
        return (
            f"physics runs (race time {self._t} ms) but no action step came within "
            f"{timeout_s:g} s (a menu or the finish screen may be open)"
        )
