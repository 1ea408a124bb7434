"""GameInstanceManager: runs races with a policy and records them as rollout_results.

One rollout_results dict per race (the seeds' keys, see design.md): per-action lists of
length T (actions, action_was_greedy, q_values, rewards, input_w) and per-state lists of
length T + 1 (frames, state_float, meters_advanced_along_centerline, current_zone_idx,
car_gear_and_wheels, positions, speeds, and each potential in `potentials`), plus race_time
(ms, None when the race was cut), finished, map, car (its index in the batch),
furthest_zone_idx, end (the termination terms that fired).

With the vectorized sim every car runs its own race: `races()` steps them together with
batched inference and yields each race as it ends; `begin()`/`advance()` are the same loop
one step at a time (the Ray RolloutWorker batches the inference of several games with
them); `rollout()` is the single-race form used with the real game and for evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from trackmind.env.race import VecRace
from trackmind.game.actions import ACTIONS
from trackmind.game.map_cycle import CycleEntry, MapCycle
from trackmind.game.monitor import PipelineMonitor

# policy(obs (batched dict), greedy (B,) bool) -> (actions (B,), q_values (B, A), was_greedy (B,))
Policy = Callable[[Any, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


class _RaceRecord:
    """The growing rollout_results of one car's current race."""

    def __init__(self, entry: CycleEntry, greedy: bool) -> None:
        self.entry, self.greedy = entry, greedy
        self.r: dict[str, Any] = {
            "frames": [],
            "state_float": [],
            "actions": [],
            "action_was_greedy": [],
            "q_values": [],
            "rewards": [],
            "potentials": {},
            "meters_advanced_along_centerline": [],
            "current_zone_idx": [],
            "input_w": [],
            "car_gear_and_wheels": [],
            "positions": [],
            "speeds": [],
            "furthest_zone_idx": 0,
        }

    def add_state(self, race: VecRace, obs: dict, potentials: dict, c: int) -> None:
        r, car = self.r, race.car
        if "frame" in obs:
            r["frames"].append(obs["frame"][c].copy())
        r["state_float"].append(obs["float"][c].copy())
        for name, phi in potentials.items():
            r["potentials"].setdefault(name, []).append(float(phi[c]))
        r["meters_advanced_along_centerline"].append(float(car.progress_m[c]))
        r["positions"].append(car.position[c, :2].astype(np.float32))
        r["speeds"].append(float(car.speed[c]))
        zone = int(car.zone_idx[c])
        r["current_zone_idx"].append(zone)
        r["furthest_zone_idx"] = max(r["furthest_zone_idx"], zone)
        r["car_gear_and_wheels"].append(
            np.concatenate(
                [[car.gear[c], car.rpm[c]], car.wheel_contact[c], car.wheel_sliding[c]]
            ).astype(np.float32)
        )

    def add_action(self, a: int, q: np.ndarray, greedy: bool, reward: float) -> None:
        r = self.r
        r["actions"].append(int(a))
        r["q_values"].append(np.asarray(q, np.float32).copy())
        r["action_was_greedy"].append(bool(greedy))
        r["rewards"].append(float(reward))
        r["input_w"].append(float(ACTIONS[a, 0]))

    def finish(self, race: VecRace, c: int, fired: dict) -> dict:
        r, car = self.r, race.car
        finished = bool(car.finished[c])
        r["race_time"] = int(car.race_time_ms[c]) if finished else None
        r["finished"] = finished
        r["map"] = self.entry.name
        r["greedy"] = self.greedy
        r["end"] = [name for name, hit in fired.items() if hit[c]]
        r["race_time_ms"] = int(car.race_time_ms[c])
        r["car"] = c
        return r


class GameInstanceManager:
    """Drives a VecRace with a policy over a map cycle; records every race."""

    def __init__(self, race: VecRace, cycle: MapCycle, monitor: PipelineMonitor | None = None):
        self.race = race
        self.cycle = cycle
        self.monitor = monitor or PipelineMonitor()
        self.obs: Any = None  # the batched observation of the current step (after begin())
        self.greedy = np.zeros(race.n_cars, bool)  # which cars race greedily (evaluation)
        self.started = np.zeros(race.n_cars, bool)  # whose race began at the last step
        self._records: list[_RaceRecord] = []

    def begin(self) -> None:
        """Start a race on every car (the next maps of the cycle); fills `obs` and `greedy`."""
        race = self.race
        n = race.n_cars
        plan = [self.cycle.next() for _ in range(n)]
        self.obs, _ = race.reset(maps=[e.track for e, _ in plan])
        self._records = [_RaceRecord(e, g) for e, g in plan]
        phis = race.potentials()
        for c in range(n):
            self._records[c].add_state(race, self.obs, phis, c)
        self.greedy = np.array([g for _, g in plan])
        self.started[:] = True

    def advance(
        self, actions: np.ndarray, q: np.ndarray, was_greedy: np.ndarray
    ) -> list[tuple[int, dict]]:
        """Apply one action per car; returns (car, rollout_results) of the races that ended.

        Cars whose race ended start the next race of the cycle at once; `obs`, `greedy` and
        `started` then describe the new races. The step-wise form of `races()`, for callers
        that batch the inference of several games.
        """
        race, mon = self.race, self.monitor
        with mon.stage("game_step"):
            self.obs, reward, terminated, truncated, info = race.step(actions)
        mon.count_actions(race.n_cars)
        phis = race.potentials()
        done = terminated | truncated
        self.started[:] = False
        records = self._records
        for c in range(race.n_cars):
            rec = records[c]
            rec.add_action(actions[c], q[c], was_greedy[c], reward[c])
            rec.add_state(race, self.obs, phis, c)
        if not done.any():
            return []
        ended = np.flatnonzero(done)
        results = [(int(c), records[c].finish(race, c, info["termination_terms"])) for c in ended]
        nxt = [self.cycle.next() for _ in ended]
        with mon.stage("game_step"):
            self.obs, _ = race.reset(cars=ended, maps=[e.track for e, _ in nxt])
        phis = race.potentials()
        for c, (entry, g) in zip(ended, nxt):
            records[c] = _RaceRecord(entry, g)
            records[c].add_state(race, self.obs, phis, c)
            self.greedy[c] = g
            self.started[c] = True
        return results

    def races(
        self, policy: Policy, should_stop: Callable[[], bool] = lambda: False
    ) -> Iterator[dict]:
        """Race every car continuously; yield each finished or cut race's rollout_results."""
        self.begin()
        while not should_stop():
            with self.monitor.stage("inference"):
                actions, q, was_greedy = policy(self.obs, self.greedy)
            for _, r in self.advance(actions, q, was_greedy):
                yield r

    def rollout(self, policy: Policy, entry: CycleEntry | None = None, greedy: bool = False):
        """One race on a one-car game (the real game, evaluation); returns rollout_results."""
        if self.race.n_cars != 1:
            raise ValueError(f"rollout() races one car; this game has {self.race.n_cars}")
        saved = self.cycle
        if entry is not None:
            one = CycleEntry(entry.name, entry.track, int(not greedy), int(greedy))
            self.cycle = MapCycle([one])
        try:
            return next(self.races(policy))
        finally:
            self.cycle = saved
