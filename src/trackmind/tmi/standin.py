"""A stand-in for Trackmania with TMInterface, driven by the simulator (tests, demos).

The real game runs only on Windows. This module plays what the TMInterface backend talks
to. `StandinGame` is "the game process": a one-car SimGame ticking every 10 ms on its own
thread while a client is registered, calling the client's callbacks synchronously (the
game waits for the client, as it waits for TMInterface's); a `player` function can drive
it like a human at the keyboard. `StandinInterface` replaces
`tminterface.interface.TMInterface` with the same calls: register, close, set_timeout,
set_speed, set_input_state, get_simulation_state, rewind_to_state, give_up,
execute_command("map ..."), prevent_simulation_finish, log. Inputs move the sim car;
simulation states are real SimStateData bytes, built with `tminterface.structs` and read
back the way the real interface reads its shared memory, so the backend parses the real
layout. A game can be made to hang (stop ticking), be killed (vanish) or close (shut down
with a message). Games are found by server name in a process-wide registry, as TMInterface
servers are found by name.
"""

from __future__ import annotations

import io
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from tminterface.constants import MODE_RUN
from tminterface.structs import CheckpointData, CheckpointTime, SimStateData

from trackmind.game.actions import ACTIONS
from trackmind.game.contract import CarState
from trackmind.sim import physics as ph
from trackmind.sim.game import SavedCar, SimGame
from trackmind.sim.mapio import load_map
from trackmind.sim.track import MapError
from trackmind.tmi.state import rotation_to_game, world_to_game

ALL_FLAGS = 0xFF  # timers, dyna, scene mobil, wheels, plug solid, cmd buffer, inputs, player
_ACTION_OF = {tuple(bool(x) for x in row): i for i, row in enumerate(ACTIONS)}
_ROW_BYTES = ph.N_STATE * 8
Player = Callable[[CarState], int]


def _wire(state: SimStateData) -> SimStateData:
    """Read a state back as TMInterface.get_simulation_state reads its shared memory."""
    data = bytes(state.data)
    out = SimStateData(data[: SimStateData.min_size])
    out.cp_data.read_from_file(io.BytesIO(data[SimStateData.min_size :]))
    return out


class StandinGame:
    """The game side: a one-car simulator race behind a TMInterface-like server."""

    def __init__(
        self,
        server: str,
        map_spec: str = "starter",
        frame_shape: tuple[int, int] | None = (24, 32),
        countdown_ms: int = 1000,
        paced: bool = False,
        speed: float = 1.0,
        player: Player | None = None,
        load_ms: int = 0,
    ) -> None:
        self.server = server
        self.sim = SimGame(1, map_spec, frame_shape=frame_shape, tick_ms=10, ticks_per_action=1)
        self.countdown_ms = int(countdown_ms)
        self.paced = bool(paced)
        self.speed = float(speed)
        self.player = player  # "a human driving", until a client sets inputs
        self._client_inputs = False
        self.load_ms = int(load_ms)
        self.timeout_ms = 2000
        self.inputs = {"accelerate": False, "brake": False, "left": False, "right": False}
        self.client: Any = None
        self.iface: Any = None
        self.commands: list[str] = []  # console commands received
        self.log_lines: list[str] = []
        self.hung = False
        self.alive = True
        self.ticks = 0
        self._registering = False
        self._prevent = False
        self._stall_until = 0.0
        self._restart_race()
        self._thread = threading.Thread(target=self._loop, name=f"standin-{server}", daemon=True)
        self._thread.start()

    # --- the game's life ---------------------------------------------------------------------
    @property
    def cp_target(self) -> int:
        return len(self.sim.track(0).checkpoints_s) + 1

    def frame(self) -> np.ndarray:
        """What the game window shows now: (1, H, W) uint8."""
        return self.sim.frames[0].copy()

    def hang(self) -> None:
        """Freeze: the process lives but no physics step or callback happens any more."""
        self.hung = True

    def kill(self) -> None:
        """Vanish without a word, as a crashed or killed process does."""
        self.alive = False
        _unregister(self)

    def close_game(self) -> None:
        """Quit normally: TMInterface tells its client that it shuts down."""
        client, iface = self.client, self.iface
        self.kill()
        if client is not None:
            iface.registered = False
            client.on_shutdown(iface)

    def connect(self, iface: Any, client: Any) -> None:
        """A client asks to register; like TMInterface, one client at a time."""
        if self.client is not None:
            return
        self.client, self.iface, self._registering = client, iface, True

    def disconnect(self, iface: Any) -> None:
        if self.iface is iface:
            self.client = self.iface = None

    def _loop(self) -> None:
        next_tick = time.monotonic()
        while self.alive:
            if self.hung or time.monotonic() < self._stall_until:
                time.sleep(0.005)
                continue
            if self._registering:
                self._registering = False
                self.iface.registered = True
                self._call("on_registered")
                continue
            if self.client is None or self.speed <= 0 or self._finish_screen:
                time.sleep(0.002)
                next_tick = time.monotonic()
                continue
            if self.paced:
                now = time.monotonic()
                if now < next_tick:
                    time.sleep(next_tick - now)
                next_tick = max(next_tick, now) + 0.01 / self.speed
            self._tick()
            time.sleep(0)

    def _tick(self) -> None:
        self._call("on_run_step", self.t)
        if not self.alive or self.hung:
            return
        t = self.t  # a rewind, give-up or map load in the callback moved the clock
        if t >= 0 and not self._finish_screen:
            self.sim.advance(np.array([self._action()]))
            self._check_checkpoints()
        self.t = t + 10
        self.ticks += 1

    def _action(self) -> int:
        if self.player is not None and not self._client_inputs:
            return int(self.player(self.sim.car_state()))
        i = self.inputs
        key = (
            i["accelerate"],
            i["brake"],
            i["left"] and not i["right"],
            i["right"] and not i["left"],
        )
        return _ACTION_OF[key]

    def _check_checkpoints(self) -> None:
        row = self.sim.state[0]
        current = int(row[ph.NEXT_CP]) + int(row[ph.FINISHED] > 0)
        if current == self.cp_count:
            return
        self.cp_count = current
        self.cp_times[current - 1] = int(row[ph.TIME_MS])
        self._prevent = False
        self._call("on_checkpoint_count_changed", current, self.cp_target)
        if current == self.cp_target and not self._prevent:
            self._finish_screen = True  # the race ends: no run steps until a restart

    def _call(self, name: str, *args: Any) -> None:
        client, iface = self.client, self.iface
        if client is None:
            return
        t0 = time.monotonic()
        getattr(client, name)(iface, *args)
        late = (time.monotonic() - t0) * 1000.0 > self.timeout_ms >= 0
        if late and self.client is client:  # TMInterface stops waiting for a slow client
            self.client = self.iface = None
            iface.registered = False
            client.on_deregistered(iface)

    def _restart_race(self) -> None:
        self.t = -self.countdown_ms
        self.cp_count = 0
        self.cp_times = [-1] * self.cp_target
        self._finish_screen = False

    # --- what TMInterface calls do -------------------------------------------------------------
    def set_input_state(self, **keys: bool) -> None:
        self._client_inputs = True
        for k in ("accelerate", "brake", "left", "right"):
            if k in keys:
                self.inputs[k] = bool(keys[k])

    def give_up(self) -> None:
        self.sim.reset()
        self._restart_race()

    def execute_command(self, command: str) -> None:
        self.commands.append(command)
        name, _, arg = command.strip().partition(" ")
        if name != "map":
            return
        try:
            track = load_map(arg.strip().strip('"'))
        except MapError as e:
            self.log_lines.append(f"map: cannot load {arg!r}: {e}")
            return
        self.sim.reset(maps=track)
        self._restart_race()
        self._stall_until = time.monotonic() + self.load_ms / 1000.0

    def prevent_simulation_finish(self) -> None:
        self._prevent = True
        self.cp_times[-1] = -1

    def simulation_state(self) -> SimStateData:
        """The current state as real SimStateData bytes (see module docstring)."""
        s = SimStateData()
        s.version, s.context_mode, s.flags = 1, MODE_RUN, ALL_FLAGS
        car = self.sim.car_state()
        row = self.sim.state[0]
        dyna = s.dyna.current_state
        dyna.position = list(world_to_game(car.position[0]))
        dyna.rotation = rotation_to_game(car.rotation[0])
        dyna.linear_speed = list(world_to_game(car.rotation[0] @ car.velocity[0]))
        dyna.angular_speed = list(world_to_game(car.rotation[0] @ car.angular_velocity[0]))
        mobil = s.scene_mobil
        mobil.engine.gear = int(car.gear[0])
        mobil.engine.actual_rpm = float(car.rpm[0])
        mobil.has_any_lateral_contact = bool(car.wall_contact[0])
        for i in range(4):
            w = s.simulation_wheels[i].real_time_state
            w.has_ground_contact = bool(car.wheel_contact[0, i])
            w.is_sliding = bool(car.wheel_sliding[0, i])
            w.damper_absorb = 0.01
            w.contact_material_id = 0  # concrete
        player = s.player_info
        player.race_time = int(row[ph.TIME_MS]) if self.t >= 0 else self.t
        player.race_finished = bool(row[ph.FINISHED] > 0)
        # the game's own memory, restored verbatim on a rewind: here the sim's state row
        opaque = row.astype("<f8").tobytes() + struct.pack("<q", self.t)
        s.cmd_buffer_core = opaque + bytes(264 - len(opaque))
        times = [CheckpointTime(time=int(t), stunts_score=0) for t in self.cp_times]
        passed = [i < self.cp_count for i in range(self.cp_target)]
        s.cp_data = CheckpointData(passed, times)
        return _wire(s)

    def rewind(self, state: SimStateData) -> None:
        raw = bytes(state.cmd_buffer_core.to_bytearray())
        row = np.frombuffer(raw[:_ROW_BYTES], "<f8").astype(np.float64)
        self.sim.restore_state(0, SavedCar(row=row))
        self.t = struct.unpack("<q", raw[_ROW_BYTES : _ROW_BYTES + 8])[0]
        self.cp_times = [int(c.time) for c in state.cp_data.cp_times]
        self.cp_count = sum(1 for t in self.cp_times if t != -1)
        self._finish_screen = False


class StandinInterface:
    """Drop-in for tminterface.interface.TMInterface, talking to a StandinGame by name.

    With `autostart` (StandinGame keyword arguments) a missing game is started on
    register, which is how spawned collector processes get theirs.
    """

    def __init__(self, server_name: str = "TMInterface0", autostart: dict | None = None) -> None:
        self.server_name = server_name
        self.autostart = autostart
        self.running = True
        self.registered = False
        self.client: Any = None
        self._game: StandinGame | None = None

    def register(self, client: Any) -> bool:
        if self.client is not None or self.registered:
            return False
        self.client = client
        game = find_standin(self.server_name)
        if game is None and self.autostart is not None:
            game = start_standin(self.server_name, **self.autostart)
        if game is not None:  # no game: nobody ever answers, as with no TMInterface server
            self._game = game
            game.connect(self, client)
        return True

    def close(self) -> None:
        if self.registered:
            self.registered = False
            if self._game is not None:
                self._game.disconnect(self)
            self.client.on_deregistered(self)
        self.running = False

    def _g(self) -> StandinGame:
        if self._game is None or not self._game.alive:
            raise ConnectionError(f"{self.server_name}: the game is gone")
        return self._game

    def set_timeout(self, timeout_ms: int) -> None:
        self._g().timeout_ms = int(timeout_ms)

    def set_speed(self, speed: float) -> None:
        self._g().speed = float(speed)

    def set_input_state(self, sim_clear_buffer: bool = True, **kwargs: bool) -> None:
        self._g().set_input_state(**kwargs)

    def give_up(self) -> None:
        self._g().give_up()

    def execute_command(self, command: str) -> None:
        self._g().execute_command(command)

    def prevent_simulation_finish(self) -> None:
        self._g().prevent_simulation_finish()

    def get_context_mode(self) -> int:
        return MODE_RUN

    def get_simulation_state(self) -> SimStateData:
        return self._g().simulation_state()

    def get_checkpoint_state(self) -> CheckpointData:
        return self._g().simulation_state().cp_data

    def rewind_to_state(self, state: SimStateData) -> None:
        self._g().rewind(state)
        # what tminterface's TMInterface.rewind_to_state tells its client on its own side
        times = [c.time for c in state.cp_data.cp_times]
        count = len([t for t in times if t != -1])
        self.client.on_checkpoint_count_changed(self, count, len(times))
        n_states = len(state.cp_data.cp_states)
        if n_states > 0:
            self.client.on_laps_count_changed(self, count // n_states)

    def log(self, message: str, severity: str = "log") -> None:
        self._g().log_lines.append(f"[{severity}] {message}")


_GAMES: dict[str, StandinGame] = {}
_LOCK = threading.Lock()


def start_standin(server: str, **kwargs: Any) -> StandinGame:
    """Start (or restart) the stand-in game serving `server`."""
    stop_standin(server)
    game = StandinGame(server, **kwargs)
    with _LOCK:
        _GAMES[server] = game
    return game


def find_standin(server: str) -> StandinGame | None:
    with _LOCK:
        return _GAMES.get(server)


def stop_standin(server: str) -> None:
    game = find_standin(server)
    if game is not None:
        game.kill()


def stop_all_standins() -> None:
    with _LOCK:
        games = list(_GAMES.values())
    for g in games:
        g.kill()


def _unregister(game: StandinGame) -> None:
    with _LOCK:
        if _GAMES.get(game.server) is game:
            del _GAMES[game.server]
