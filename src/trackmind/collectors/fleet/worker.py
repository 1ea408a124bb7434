"""RolloutWorker and its EnvWorkers: races with batched inference, no Ray in sight.

An EnvWorker is one game instance (the vectorized sim with its cars, or one real game)
with the race records of its cars; the steps of each car are buffered there until its
race ends. A RolloutWorker owns several EnvWorkers and the policy: each step it gathers
every EnvWorker's observation, runs one batched inference, hands each game its actions,
and passes every ended race as a SampleFragment to its progress handler (the wrapper's).
Weights come from a callable at every race end and every `refresh_every_actions` actions,
as the local collectors pull theirs. The real game's EnvWorkers would be its own game
processes behind TMInterface; the sim steps in this process, which is its fastest form.
Inference runs on `collector.device`; a worker uses a GPU only when its actor reserved a
share of one (collector.gpus_per_worker > 0).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from trackmind.collectors.fleet.fragment import SampleFragment
from trackmind.collectors.spec import CollectorSpec
from trackmind.env.rollout import GameInstanceManager
from trackmind.env.rollout_results import pack_rollout
from trackmind.game.monitor import PipelineMonitor

# weights(held_version) -> (version, state_dict of arrays, frames) when newer, else None
WeightsSource = Callable[[int], tuple[int, Mapping[str, Any], int] | None]


class EnvWorker:
    """One game instance and the races in progress on its cars."""

    def __init__(
        self,
        index: int,
        race: Any,
        cycle: Any,
        monitor: PipelineMonitor,
        starts: Any = None,
        demos: Any = None,
        sticky: Any = None,
    ) -> None:
        self.index = index
        self.gim = GameInstanceManager(race, cycle, monitor, starts, demos, sticky)
        self.n_cars = int(race.n_cars)
        self.start_version = np.zeros(self.n_cars, np.int64)  # weights version at race start

    def begin(self, version: int) -> None:
        self.gim.begin()
        self.start_version[:] = version

    @property
    def obs(self) -> dict[str, np.ndarray]:
        return self.gim.obs

    @property
    def greedy(self) -> np.ndarray:
        return self.gim.greedy

    def step(
        self, actions: np.ndarray, q: np.ndarray, was_greedy: np.ndarray
    ) -> list[tuple[int, int, dict]]:
        """One action per car; (car, version at its start, rollout_results) per ended race.

        The cars of ended races are already on their next race: `started()` dates them.
        """
        return [
            (c, int(self.start_version[c]), r) for c, r in self.gim.advance(actions, q, was_greedy)
        ]

    def started(self, cars: list[int], version: int) -> None:
        """The weights version the new races of `cars` start with."""
        self.start_version[cars] = version

    def close(self) -> None:
        self.gim.race.close()


def concat_obs(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The observations of several games as one batch (cars stacked game after game)."""
    if len(parts) == 1:
        return parts[0]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def fleet_frames(frames_at_sync: int, own_actions: int, n_workers: int) -> int:
    """The fleet's frame count as one worker estimates it between two weight updates.

    The learner sends its count with every weights version; until the next one, the other
    workers are assumed to collect as fast as this one.
    """
    return int(frames_at_sync) + int(own_actions) * int(n_workers)


class RolloutWorker:
    """Several EnvWorkers, one inference network, one exploration policy."""

    def __init__(self, spec: CollectorSpec, index: int, seed: int, n_workers: int = 1) -> None:
        from trackmind.agent.device import resolve_device
        from trackmind.agent.inference import make_inference_network
        from trackmind.collectors.fleet.settings import RayCollectorConfig, worker_cuda_available
        from trackmind.collectors.parts import (
            build_collector_parts,
            make_demonstrator,
            make_policy,
            make_start_bank,
            make_sticky,
        )

        col = spec.collector
        assert isinstance(col, RayCollectorConfig), "a RolloutWorker runs collector=ray"
        torch.set_num_threads(col.torch_threads)
        self.index = int(index)
        self.n_workers = int(n_workers)
        self.monitor = PipelineMonitor()
        n_envs, n_cars = col.envs_per_worker, col.cars_per_process
        self.envs: list[EnvWorker] = []
        net = None
        for e in range(n_envs):  # game e of worker i starts where local collector i*n+e would
            race, cycle, env_net = build_collector_parts(
                spec, n_cars, index * n_envs + e, self.frames
            )
            starts = make_start_bank(spec, seed * 1000 + e)
            demos = make_demonstrator(spec, race, seed * 1000 + e, self.frames)
            sticky = make_sticky(spec, n_cars, seed * 1000 + e, self.frames)
            self.envs.append(EnvWorker(e, race, cycle, self.monitor, starts, demos, sticky))
            net = net if net is not None else env_net
        cuda = worker_cuda_available(col, torch.cuda.is_available())  # a GPU it reserved
        net.to(resolve_device(col.device, cuda))
        self.infer = make_inference_network(net, spec.network.compile)
        all_cars = sum(env.n_cars for env in self.envs)
        self.acting = make_policy(spec, self.infer, all_cars, seed, frames=self.frames)
        self.refresh_every = col.refresh_every_actions
        self.version = -1  # no weights yet
        self.frames_at_sync = 0
        self.own_actions = 0  # since the last weights

    def frames(self) -> int:
        return fleet_frames(self.frames_at_sync, self.own_actions, self.n_workers)

    def load_weights(self, version: int, state: Mapping[str, Any], frames: int) -> None:
        """Copy a published state dict (numpy arrays) into the inference network (to its
        device: the one host-to-device copy of weights that crosses machines)."""
        with self.monitor.stage("weights"), warnings.catch_warnings():
            # arrays read from Ray's object store are read-only; they are only copied from
            warnings.filterwarnings("ignore", ".*not writable.*", UserWarning)
            tensors = {k: torch.as_tensor(v) for k, v in state.items()}
            self.infer.load_state_dict(tensors)
        self.version, self.frames_at_sync, self.own_actions = int(version), int(frames), 0

    def refresh(self, weights: WeightsSource) -> None:
        new = weights(self.version)
        if new is not None:
            self.load_weights(*new)

    def act(self, obs: dict[str, np.ndarray], greedy: np.ndarray, started: np.ndarray):
        """(actions, q_values, was_greedy) for a batch: exploration, greedy where asked
        (greedy races with the weights they started with)."""
        return self.acting.act(obs, greedy, started, self.version)

    def run(
        self,
        handler: Callable[[SampleFragment], bool],
        should_stop: Callable[[], bool],
        weights: WeightsSource,
        on_stats: Callable[[dict], None] | None = None,
        stats_every_s: float = 5.0,
    ) -> None:
        """Race until should_stop() or the handler returns False (it is stopping)."""
        mon = self.monitor
        self.refresh(weights)
        for env in self.envs:
            env.begin(self.version)
        since_refresh, last_stats = 0, time.monotonic()
        while not should_stop():
            if since_refresh >= self.refresh_every:
                self.refresh(weights)
                since_refresh = 0
            since_refresh += 1
            obs = concat_obs([env.obs for env in self.envs])
            greedy = np.concatenate([env.greedy for env in self.envs])
            started = np.concatenate([env.gim.started for env in self.envs])
            with mon.stage("inference"):
                actions, q, was_greedy = self.act(obs, greedy, started)
            ended: list[tuple[EnvWorker, int]] = []
            start = 0
            for env in self.envs:
                part = slice(start, start + env.n_cars)
                for car, first_version, r in env.step(actions[part], q[part], was_greedy[part]):
                    ended.append((env, car))
                    raced = self.acting.race_version(start + car, self.version)
                    frag = self._fragment(env.index, car, first_version, raced, r)
                    with mon.stage("send"):
                        if not handler(frag):
                            return
                start += env.n_cars
            self.own_actions += len(actions)
            if ended:  # like a local collector, take the newest weights at every race end
                self.refresh(weights)
                since_refresh = 0
                for env, car in ended:
                    env.started([car], self.version)
            if on_stats is not None and time.monotonic() - last_stats > stats_every_s:
                last_stats = time.monotonic()
                on_stats(mon.summary())

    def _fragment(self, env: int, car: int, started: int, raced: int, r: dict) -> SampleFragment:
        """`started`: the version at race start; `raced`: the version recorded for the race
        (the newest for an exploration race, the frozen one for a greedy race)."""
        r["collector"] = self.index
        r["weights_version"] = raced
        r["policy_version"] = started
        return SampleFragment(
            worker=self.index,
            env=env,
            car=car,
            policy_version=started,
            weights_version=raced,
            n_steps=len(r["actions"]),
            rollout=pack_rollout(r),
        )

    def close(self) -> None:
        for env in self.envs:
            env.close()
