"""VecRace: a batch of races on one GameInstance, seen through the three term managers.

This is "the environment" the terms are bound to: it owns what terms read besides the raw
observation (previous car state, action history, zone centers of each car's map, progress
trackers). It does not reset finished cars by itself: the gymnasium wrappers and the
collectors decide when to start a new race.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trackmind.env.observations import ObservationManager
from trackmind.env.rewards import RewardManager
from trackmind.env.terminations import TerminationManager
from trackmind.game.contract import CarState, GameInstance
from trackmind.sim.track import Track

ACTION_HISTORY = 16  # previous actions kept per car (the previous_actions term reads <= 16)


class VecRace:
    """Steps every car of a game and returns batched observations, rewards and flags."""

    def __init__(
        self,
        game: GameInstance,
        observation: ObservationManager,
        reward: RewardManager,
        termination: TerminationManager,
    ) -> None:
        self.game = game
        self.n_cars = game.n_cars
        self.frame_shape = tuple(game.frame_shape)
        self.action_ms = int(game.action_ms)
        # zone_idx comes from the game, so the zone table follows the game's spacing
        self.zone_spacing_m = float(getattr(game, "zone_spacing_m", 10.0))
        self.zones_before_start = int(getattr(game, "zones_before_start", 1))
        self.observation = observation
        self.reward = reward
        self.termination = termination
        b = self.n_cars
        self.action_history = np.full((b, ACTION_HISTORY), -1, np.int64)
        self.steps = np.zeros(b, np.int64)
        self.furthest_zone = np.zeros(b, np.int64)
        self.ms_since_new_zone = np.zeros(b, np.int64)
        self._zone_cache: dict[int, tuple[Track, np.ndarray, np.ndarray]] = {}
        self._zones = np.zeros((0, 2))
        self._zone_s = np.zeros(0)
        self._zone_off = np.zeros(b, np.int64)
        self._zone_n = np.zeros(b, np.int64)
        self.race_length_m = np.zeros(b)
        self.tracks: list[Track | None] = [None] * b
        raw = game.observe()
        self.raw = raw
        self.car: CarState = raw.car
        self.prev_car: CarState = raw.car
        self._refresh_maps(np.arange(b))
        for m in (observation, reward, termination):
            m.bind(self)

    # --- spaces -------------------------------------------------------------------------
    @property
    def observation_space(self):
        """Space of one car's observation."""
        return self.observation.observation_space

    # --- races --------------------------------------------------------------------------
    def reset(self, cars=None, maps=None) -> tuple[Any, dict]:
        """Start new races for `cars` (all by default); returns every car's observation."""
        cars = np.arange(self.n_cars) if cars is None else np.atleast_1d(cars).astype(np.int64)
        return self._begin(cars, self.game.reset(cars, maps), maps is not None)

    def restore(self, cars, states: list) -> tuple[Any, dict]:
        """Start new races for `cars` from saved states (mid-track starts); every car's obs.

        The car is where and as the snapshot left it (speed, race clock); what the race
        remembers (action history, zones, the terms' memory) starts afresh there.
        """
        cars = np.atleast_1d(cars).astype(np.int64)
        for c, state in zip(cars, states):
            self.game.restore_state(int(c), state)
        return self._begin(cars, self.game.observe(), True)

    def _begin(self, cars: np.ndarray, raw, maps_changed: bool) -> tuple[Any, dict]:
        """A new race's memory for `cars` from the raw observation they start with."""
        self._set_raw(raw)
        self.prev_car = raw.car
        if maps_changed:
            self._refresh_maps(cars)
        self.action_history[cars] = -1
        self.steps[cars] = 0
        self.furthest_zone[cars] = self.car.zone_idx[cars]
        self.ms_since_new_zone[cars] = 0
        for m in (self.observation, self.reward, self.termination):
            m.reset(cars)
        return self.observation.compute(raw)

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Advance every car one action; (obs, reward, terminated, truncated, info) batched."""
        actions = np.asarray(actions, dtype=np.int64)
        prev = self.car
        raw = self.game.step(actions)
        self.prev_car = prev
        self._set_raw(raw)
        self.action_history[:, 1:] = self.action_history[:, :-1]
        self.action_history[:, 0] = actions
        self.steps += 1
        zone = self.car.zone_idx
        new_zone = zone > self.furthest_zone
        self.furthest_zone = np.maximum(self.furthest_zone, zone)
        dt = self.car.race_time_ms - prev.race_time_ms
        self.ms_since_new_zone = np.where(new_zone, 0, self.ms_since_new_zone + dt)
        obs, info = self.observation.compute(raw)
        reward, parts = self.reward.compute()
        terminated, truncated, fired = self.termination.compute()
        info.update(reward_terms=parts, termination_terms=fired)
        return obs, reward, terminated, truncated, info

    def potentials(self) -> dict[str, np.ndarray]:
        """Weighted Phi(s) of the potential reward terms, for rollouts to record."""
        return self.reward.potentials()

    def close(self) -> None:
        self.game.close()

    # --- what terms read ----------------------------------------------------------------
    @property
    def frames(self) -> np.ndarray:
        return self.raw.frames

    def upcoming_zone_centers(self, n: int) -> np.ndarray:
        """World (x, y) of the `n` zone centers ahead of each car, shape (B, n, 2).

        zone_idx counts the zone centers already passed (zone 0 lies one spacing behind the
        start), so the center ahead is zone_idx + 1; past the finish the list runs on along
        the straight continuation and is clamped at its end.
        """
        return self._zones[self.upcoming_zone_rows(n)]

    def upcoming_zone_rows(self, n: int) -> np.ndarray:
        """Rows of zone_table (B, n) of the `n` zone centers ahead of each car (see above)."""
        k = self.car.zone_idx[:, None] + 1 + np.arange(n)[None, :]
        k = np.minimum(k, self._zone_n[:, None] - 1)
        return self._zone_off[:, None] + k

    @property
    def zone_table(self) -> np.ndarray:
        """Zone centers of every map in use, concatenated (Z, 2); see zone_offsets/counts."""
        return self._zones

    @property
    def zone_arclengths(self) -> np.ndarray:
        """Arclength along each map's line of every zone center in zone_table (Z,)."""
        return self._zone_s

    @property
    def zone_offsets(self) -> np.ndarray:
        return self._zone_off

    @property
    def zone_counts(self) -> np.ndarray:
        return self._zone_n

    # --- internals ----------------------------------------------------------------------
    def _set_raw(self, raw) -> None:
        self.raw = raw
        self.car = raw.car

    def _refresh_maps(self, cars: np.ndarray) -> None:
        for c in cars:
            self.tracks[c] = self.game.track(int(c))
        tables, arclengths, offs = [], [], {}
        n = 0
        for t in self.tracks:
            if id(t) in offs:
                continue
            cached = self._zone_cache.get(id(t))
            if cached is None:
                z, zs = t.zone_centers(self.zone_spacing_m, self.zones_before_start, 45)
                self._zone_cache[id(t)] = (t, z, zs)  # keeps t alive so its id stays unique
            else:
                z, zs = cached[1:]
            offs[id(t)] = (n, len(z))
            tables.append(z)
            arclengths.append(zs)
            n += len(z)
        self._zones = np.concatenate(tables)
        self._zone_s = np.concatenate(arclengths)
        for c, t in enumerate(self.tracks):
            self._zone_off[c], self._zone_n[c] = offs[id(t)]
            self.race_length_m[c] = t.length_m
