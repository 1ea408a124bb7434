"""GameInstanceManager: runs races with a policy and records them as rollout_results.

One rollout_results dict per race (RolloutResults, env/rollout_results.py): per-action lists of
length T (actions, action_was_greedy, q_values, rewards, input_w) and per-state lists of
length T + 1 (frames, state_float, meters_advanced_along_centerline, current_zone_idx,
car_gear_and_wheels, positions, speeds, and each potential in `potentials`), plus race_time
(ms, None when the race was cut), finished, map, car (its index in the batch),
furthest_zone_idx, end (the termination terms that fired), mid_track (the race started
from a saved state along the map, see game/starts.py; its time is no race time), demo (the
scripted driver drove it, see collectors/demos.py). `actions` are the policy's choices; with
sticky actions (env/sticky.py) an exploration car may have driven its previous one instead.

With the vectorized sim every car runs its own race: `races()` steps them together with
batched inference and yields each race as it ends; `begin()`/`advance()` are the same loop
one step at a time (the Ray RolloutWorker batches the inference of several games with
them); `rollout()` is the single-race form used with the real game and for evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from trackmind.env.map_cycle import CycleEntry, MapCycle
from trackmind.env.observations import FLOATS
from trackmind.env.race import VecRace
from trackmind.env.rollout_results import RolloutResults, new_rollout_results
from trackmind.game.actions import ACTIONS
from trackmind.game.monitor import PipelineMonitor
from trackmind.game.starts import StartBank

if TYPE_CHECKING:
    from trackmind.collectors.demos import Demonstrator
    from trackmind.env.sticky import StickyActions

# policy(obs (batched dict), greedy (B,) bool) -> (actions (B,), q_values (B, A), was_greedy (B,))
Policy = Callable[[Any, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


class _RaceRecord:
    """The growing rollout_results of one car's current race."""

    def __init__(
        self, entry: CycleEntry, greedy: bool, mid_track: bool = False, demo: bool = False
    ) -> None:
        self.entry, self.greedy, self.mid_track, self.demo = entry, greedy, mid_track, demo
        self.r: RolloutResults = new_rollout_results()

    def add_state(self, race: VecRace, obs: dict, potentials: dict, c: int) -> None:
        r, car = self.r, race.car
        if "frame" in obs:
            r["frames"].append(obs["frame"][c].copy())
        r["state_float"].append(obs[FLOATS][c].copy())
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

    def finish(self, race: VecRace, c: int, fired: dict) -> RolloutResults:
        r, car = self.r, race.car
        finished = bool(car.finished[c])
        r["race_time"] = int(car.race_time_ms[c]) if finished else None
        r["finished"] = finished
        r["map"] = self.entry.name
        r["greedy"] = self.greedy
        r["end"] = [name for name, hit in fired.items() if hit[c]]
        r["race_time_ms"] = int(car.race_time_ms[c])
        r["car"] = c
        r["mid_track"] = self.mid_track
        r["demo"] = self.demo
        return r


class GameInstanceManager:
    """Drives a VecRace with a policy over a map cycle; records every race."""

    def __init__(
        self,
        race: VecRace,
        cycle: MapCycle,
        monitor: PipelineMonitor | None = None,
        starts: StartBank | None = None,
        demos: Demonstrator | None = None,
        sticky: StickyActions | None = None,
    ):
        self.race = race
        self.cycle = cycle
        self.monitor = monitor or PipelineMonitor()
        self.starts = starts  # mid-track starts of exploration races (None: off)
        self.demos = demos  # exploration races the scripted driver drives (None: off)
        self.sticky = sticky  # exploration races' cars may repeat their last action (None: off)
        self._next_point = np.zeros(race.n_cars, np.int64)  # next point to save a state at
        self.obs: Any = None  # the batched observation of the current step (after begin())
        self.greedy = np.zeros(race.n_cars, bool)  # which cars race greedily (evaluation)
        self.started = np.zeros(race.n_cars, bool)  # whose race began at the last step
        self._records: list[_RaceRecord] = []

    def begin(self) -> None:
        """Start a race on every car (the next maps of the cycle); fills `obs` and `greedy`."""
        n = self.race.n_cars
        self._records = [None] * n
        self._start_races(np.arange(n), [self.cycle.next() for _ in range(n)])

    def advance(
        self, actions: np.ndarray, q: np.ndarray, was_greedy: np.ndarray
    ) -> list[tuple[int, dict]]:
        """Apply one action per car; returns (car, rollout_results) of the races that ended.

        Cars whose race ended start the next race of the cycle at once; `obs`, `greedy` and
        `started` then describe the new races. The step-wise form of `races()`, for callers
        that batch the inference of several games.
        """
        race, mon = self.race, self.monitor
        if self.demos is not None:
            actions, was_greedy = self.demos.drive(
                race.car, race.tracks, race.action_ms / 1000.0, actions, q, was_greedy
            )
        executed = actions  # the records keep the chosen actions; the game may stick
        if self.sticky is not None:
            exploring = ~self.greedy
            if self.demos is not None:
                exploring &= ~self.demos.active
            executed = self.sticky.apply(actions, exploring)
        with mon.stage("game_step"):
            self.obs, reward, terminated, truncated, info = race.step(executed)
        mon.count_actions(race.n_cars)
        phis = race.potentials()
        done = terminated | truncated
        self.started[:] = False
        records = self._records
        for c in range(race.n_cars):
            rec = records[c]
            rec.add_action(actions[c], q[c], was_greedy[c], reward[c])
            rec.add_state(race, self.obs, phis, c)
        if self.starts is not None:
            self._save_states(done)
        if not done.any():
            return []
        ended = np.flatnonzero(done)
        results = [(int(c), records[c].finish(race, c, info["termination_terms"])) for c in ended]
        if self.starts is not None:
            for _, r in results:
                if not r["finished"]:  # where the policy still fails
                    self.starts.race_ended(r["map"], max(r["meters_advanced_along_centerline"]))
        self._start_races(ended, [self.cycle.next() for _ in ended])
        return results

    def _start_races(self, cars: np.ndarray, plan: list) -> None:
        """Start the planned races on `cars`: at the start line, or from a saved state."""
        race, bank = self.race, self.starts
        saved: dict[int, object] = {}
        if bank is not None and bank.cfg.share > 0:
            for c, (entry, greedy) in zip(cars, plan):
                if not greedy and bank.rng.random() < bank.cfg.share:
                    drawn = bank.draw(entry.name)
                    if drawn is not None:
                        saved[int(c)] = drawn[0]
        fresh = [i for i, c in enumerate(cars) if int(c) not in saved]
        with self.monitor.stage("game_step"):
            if fresh:
                self.obs, _ = race.reset(cars=cars[fresh], maps=[plan[i][0].track for i in fresh])
            if saved:
                self.obs, _ = race.restore(list(saved), list(saved.values()))
        phis = race.potentials()
        if self.sticky is not None:
            self.sticky.reset(cars, [entry for entry, _ in plan])
        demos = self.demos
        if demos is not None:  # exploration races from the start line may be demonstrations
            eligible = np.array([not g and int(c) not in saved for c, (_, g) in zip(cars, plan)])
            demos.start(cars, eligible, [entry for entry, _ in plan])
        for c, (entry, g) in zip(cars, plan):
            c = int(c)
            demo = demos is not None and bool(demos.active[c])
            self._records[c] = _RaceRecord(entry, g, mid_track=c in saved, demo=demo)
            self._records[c].add_state(race, self.obs, phis, c)
            self.greedy[c] = g
            self.started[c] = True
            if bank is not None:
                self._next_point[c] = bank.point_of(race.car.progress_m[c]) + 1

    def _save_states(self, done: np.ndarray) -> None:
        """Save the state of cars that reached their next point driving (not stuck, not out)."""
        bank, car = self.starts, self.race.car
        at = car.progress_m >= self._next_point * bank.cfg.spacing_m
        ok = at & ~done & ~car.finished & ~car.wall_contact & (car.speed >= bank.cfg.min_speed)
        for c in np.flatnonzero(at):
            point = bank.point_of(car.progress_m[c])
            if ok[c]:
                bank.save(self._records[c].entry.name, point, self.race.game.save_state(int(c)))
            self._next_point[c] = point + 1

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
            one = replace(entry, exploration=int(not greedy), greedy=int(greedy))
            self.cycle = MapCycle([one])
        try:
            return next(self.races(policy))
        finally:
            self.cycle = saved
