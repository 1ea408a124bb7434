"""TMInterfaceGame: one Trackmania game through TMInterface 1.x, as a one-car GameInstance.

The learning loop does not know it races the real game: reset() starts a race on a map
(loading its challenge the first time, then rewinding to the saved start state), step()
applies one of the 12 actions for one action step (50 ms of race time by default) and
returns the car state read from the game's SimStateData plus a captured frame; progress
and zones come from projecting the car on the map's reference line.

A real game misbehaves: it hangs, closes, or stops answering. A step that gets no answer
within step_timeout_s, or a game that closed, is reported in one warning line naming the
server; the game is restarted with the launch command (if one is configured) or
reconnected, and the race in progress is returned cut (`lost`, which the game_lost
termination term ends). Only when every restart attempt fails does GameUnavailable
escape, and the collector process it kills is restarted by the collector pool.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trackmind.game.actions import validate_actions
from trackmind.sim.mapio import load_map
from trackmind.sim.track import Track
from trackmind.tmi.capture import FrameCapture, NullCapture
from trackmind.tmi.client import Boundary, Command, GameLost, RaceClient, RaceSpoiled
from trackmind.tmi.config import TMInterfaceConfig, tminterface_config
from trackmind.tmi.connection import GameUnavailable, InterfaceFactory, abandon, connect
from trackmind.tmi.launcher import GameLauncher
from trackmind.tmi.observation import BackendObservation
from trackmind.tmi.progress import LineTracker, zone_index
from trackmind.tmi.state import RealCarState, read_kinematics

log = logging.getLogger(__name__)
MAX_START_FAILURES = 3  # races that would not start in a row before giving up (bad challenge)


@dataclass(frozen=True)
class SavedRace:
    """A snapshot for rewinds: the game's boundary (SimStateData and race bookkeeping)."""

    boundary: Boundary


class TMInterfaceGame:
    """The GameInstance of one real game (n_cars = 1); see the module docstring.

    Args:
        server: TMInterface server name (TMInterface0 for the first game).
        track: the map the first race runs on (its reference line).
        make_iface: builds the interface object for a server name (real or stand-in).
        settings: the env.tminterface section.
        challenges: Track.fingerprint() -> challenge file the game loads for that map;
            None races whatever map the game shows.
        capture: takes the frames; launcher: restarts a hung game (None: reconnect only).
    """

    n_cars = 1

    def __init__(
        self,
        server: str,
        track: Track,
        make_iface: InterfaceFactory,
        settings: TMInterfaceConfig | None = None,
        *,
        action_ms: int = 50,
        zone_spacing_m: float = 10.0,
        zones_before_start: int = 1,
        challenges: Mapping[str, str] | None = None,
        capture: FrameCapture | None = None,
        launcher: GameLauncher | None = None,
    ) -> None:
        self.server = server
        self.settings = settings or tminterface_config({})
        self.action_ms = int(action_ms)
        self.zone_spacing_m = float(zone_spacing_m)
        self.zones_before_start = int(zones_before_start)
        self.capture = capture or NullCapture()
        self.frame_shape = tuple(self.capture.shape)
        self.launcher = launcher
        self.lockstep = self.settings.mode == "lockstep"
        self.restarts = 0
        self.lost_races = 0
        self._make_iface = make_iface
        self._challenges = None if challenges is None else dict(challenges)
        self._iface: Any = None
        self._client: RaceClient | None = None
        self._boundary: Boundary | None = None
        self._last: BackendObservation | None = None
        self._track = track
        self._tracker = self._new_tracker(track)
        self._connect_first()
        self.reset()

    # --- GameInstance ------------------------------------------------------------------------
    def reset(self, cars: Any = None, maps: Any = None) -> BackendObservation:
        self._check_cars(cars)
        if maps is not None:
            spec = maps[0] if isinstance(maps, (list, tuple)) else maps
            self._track = spec if isinstance(spec, Track) else load_map(spec)
            self._tracker = self._new_tracker(self._track)
        challenge = self._challenge_for(self._track)
        failures = 0
        while True:
            try:
                start = Command("start", challenge=challenge)  # a map load, or a give-up
                b = self._client.request(start, self.settings.map_load_timeout_s)
                break
            except GameLost as e:
                failures += 1
                if failures >= MAX_START_FAILURES:
                    raise GameUnavailable(
                        f"{self.server}: no race started in {failures} tries ({e}); check the "
                        f"challenge {challenge!r} (map.cycle[].challenge) and the game"
                    ) from None
                if self._alive():  # ticking, but no new race: load and start again
                    log.warning("%s: %s; starting the race again", self.server, e)
                    self._client.forget_map()
                else:
                    self._recover(str(e))
        self._tracker.reset()
        return self._publish(b)

    def step(self, actions: Any) -> BackendObservation:
        a = int(validate_actions(actions, 1)[0])
        try:
            if self.lockstep:
                b = self._client.request(Command("act", action=a), self.settings.step_timeout_s)
            else:
                seq = self._client.send(Command("act", action=a))
                b = self._client.wait_boundary(seq, self.settings.step_timeout_s)
        except RaceSpoiled as e:
            log.warning("%s: %s; the race is cut", self.server, e)
            return self._lost()
        except GameLost as e:
            self._recover(str(e))
            return self._lost()
        return self._publish(b)

    def apply_action(self, actions: Any) -> None:
        """Real-time mode: send an action for the next tick without waiting (rtgym's
        send_control)."""
        a = int(validate_actions(actions, 1)[0])
        try:
            self._client.send(Command("act", action=a))
        except (GameLost, RaceSpoiled):
            pass  # observe() notices and reports the race lost

    def observe(self) -> BackendObservation:
        if not self.lockstep and self._client is not None:
            if self._client.gone:
                self._recover(self._client.gone)
                return self._lost()
            b = self._client.latest
            if b is not None and b is not self._boundary:
                return self._publish(b)
            out = copy.copy(self._last)
            out.frames = self.capture.grab()[None]  # real time: the picture of now
            return out
        return copy.copy(self._last)

    def save_state(self, car: int) -> SavedRace:
        self._check_cars([car])
        return SavedRace(self._boundary)

    def restore_state(self, car: int, state: SavedRace) -> None:
        self._check_cars([car])
        if not isinstance(state, SavedRace):
            raise ValueError("restore_state: expected a snapshot taken with save_state")
        b = self._client.request(
            Command("rewind", boundary=state.boundary), self.settings.step_timeout_s
        )
        self._tracker.reset()
        self._publish(b)

    def track(self, car: int) -> Track:
        self._check_cars([car])
        return self._track

    def close(self) -> None:
        self._disconnect()
        if self.launcher is not None:
            self.launcher.close()
        self.capture.close()

    # --- connection --------------------------------------------------------------------------
    def _new_client(self) -> RaceClient:
        s = self.settings
        return RaceClient(
            action_ms=self.action_ms,
            lockstep=self.lockstep,
            hold_timeout_s=s.hold_timeout_s,
            server_timeout_ms=s.server_timeout_ms,
            game_speed=s.game_speed,
            map_command=s.map_command,
        )

    def _connect(self, timeout_s: float) -> None:
        client = self._new_client()
        self._iface = connect(self._make_iface, self.server, client, timeout_s)
        self._client = client

    def _connect_first(self) -> None:
        try:
            self._connect(self.settings.connect_timeout_s)
        except GameUnavailable as e:
            if self.launcher is None:
                raise GameUnavailable(
                    f"{e}: start the game with TMInterface or set env.tminterface.launch_command"
                ) from None
            self.launcher.launch()
            self._connect(self.settings.launch_timeout_s)

    def _disconnect(self) -> None:
        client, iface = self._client, self._iface
        self._client = self._iface = None
        if client is not None:
            client.release()
        if iface is None:
            return
        if client is not None and client.registered and not client.gone:
            iface.close()  # a healthy game: deregister properly
        else:
            abandon(iface)  # a hung or closed game: make sure nothing waits on it

    def _alive(self) -> bool:
        c = self._client
        recent = c is not None and c.last_tick is not None and time.monotonic() - c.last_tick < 1.0
        return bool(recent and not c.gone)

    def _recover(self, reason: str) -> None:
        """Restart (or reconnect to) the game; GameUnavailable when every attempt fails."""
        s = self.settings
        self._disconnect()
        if s.restart_attempts == 0:
            raise GameUnavailable(f"{self.server}: {reason} (restart_attempts is 0)")
        what = "restarting it" if self.launcher is not None else "reconnecting"
        log.warning("%s: %s; %s", self.server, reason, what)
        attempt = 0
        while True:
            attempt += 1
            try:
                if self.launcher is not None:
                    self.launcher.restart()
                    self._connect(s.launch_timeout_s)
                else:
                    self._connect(s.connect_timeout_s)
                self.restarts += 1
                log.warning("%s: back after %d attempt(s)", self.server, attempt)
                return
            except GameUnavailable as e:
                if 0 < s.restart_attempts <= attempt:
                    raise GameUnavailable(
                        f"{self.server}: gave up after {attempt} attempt(s) ({reason}): {e}"
                    ) from None
                log.warning("%s: attempt %d failed: %s", self.server, attempt, e)
                time.sleep(s.retry_wait_s)

    # --- observations ------------------------------------------------------------------------
    def _new_tracker(self, track: Track) -> LineTracker:
        return LineTracker(track, self.settings.projection_window_m)

    def _challenge_for(self, track: Track) -> str | None:
        if self._challenges is None:
            return None
        challenge = self._challenges.get(track.fingerprint())
        if challenge is None:
            raise ValueError(
                f"{self.server}: no challenge file registered for map {track.name!r} "
                "(map.cycle[].challenge)"
            )
        return challenge

    def _check_cars(self, cars: Any) -> None:
        if cars is not None and any(int(c) != 0 for c in np.atleast_1d(cars)):
            raise IndexError(f"{self.server}: a TMInterface game has one car (index 0)")

    def _publish(self, b: Boundary) -> BackendObservation:
        self._boundary = b
        self._last = self._observation(b)
        return copy.copy(self._last)

    def _observation(self, b: Boundary) -> BackendObservation:
        k = read_kinematics(b.state)
        progress, lateral = self._tracker.locate(k.position[:2])
        finished = bool(b.finished)
        race_ms = b.finish_time_ms if finished and b.finish_time_ms is not None else b.time_ms
        car = RealCarState(
            position=k.position[None],
            yaw=np.array([k.yaw]),
            rotation=k.rotation[None],
            velocity=k.velocity[None],
            angular_velocity=k.angular_velocity[None],
            gear=np.array([k.gear], np.int64),
            rpm=np.array([k.rpm]),
            wheel_contact=k.wheel_contact[None],
            wheel_sliding=k.wheel_sliding[None],
            wall_contact=np.array([k.wall_contact]),
            race_time_ms=np.array([max(int(race_ms), 0)], np.int64),
            finished=np.array([finished]),
            progress_m=np.array([progress]),
            lateral_m=np.array([lateral]),
            zone_idx=np.array(
                [zone_index(progress, self.zone_spacing_m, self.zones_before_start)], np.int64
            ),
            checkpoints_passed=np.array([min(b.cp_current, max(b.cp_target - 1, 0))], np.int64),
            damper_absorb=k.damper_absorb[None],
            material_group=k.material_group[None],
        )
        frames = self.capture.grab()[None]
        return BackendObservation(frames=frames, car=car, lost=np.array([False]))

    def _lost(self) -> BackendObservation:
        """The last observation, one action step later, flagged lost (the race is cut)."""
        self.lost_races += 1
        last = self._last
        car = replace(last.car, race_time_ms=last.car.race_time_ms + self.action_ms)
        self._last = BackendObservation(frames=last.frames, car=car, lost=np.array([True]))
        return copy.copy(self._last)
