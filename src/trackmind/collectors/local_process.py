"""The collector process: races a game with the latest weights and ships every race.

Each collector owns a game (the vectorized sim by default: several cars, one batched
inference per step), an inference network on `collector.device` refreshed from the shared
network at every race end and every `refresh_every_actions` actions (a device-to-device copy
when both are on the GPU), and an exploration policy whose epsilon
follows the shared frame counter. Races go to the learner's queue as rollout_results with
the arrays stacked. The process ignores Ctrl-C (the learner stops it) and exits by itself
when the stop flag is set or the learner disappears, so no collector outlives its run.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import traceback
from functools import partial
from typing import Any

import numpy as np
import torch

from trackmind.collectors.inference_server import RemoteQ, ServerLink
from trackmind.collectors.shared_handles import (
    CollectorLink,
    pull_weights,
    put_message,
    release_link,
    should_stop,
    write_spool,
)
from trackmind.collectors.spec import CollectorSpec
from trackmind.env.rollout_results import pack_rollout
from trackmind.queueing import CollectorError, CollectorStats, RaceFile


def collector_process_fn(
    spec: CollectorSpec,
    idx: int,
    shared: CollectorLink,
    seed: int,
    server: ServerLink | None = None,
) -> None:
    """Entry point of a collector process (spawned; `spec` is the run's CollectorSpec).
    With `server`, an inference server computes its Q values (collector.inference=server)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    try:
        _run(spec, idx, shared, seed, parent, server)
    except Exception:
        put_message(shared, CollectorError(idx, traceback.format_exc()), parent)
        raise
    finally:
        release_link(shared)


class AgentWeights:
    """The collector's copy of the shared weights: pulled every `every` actions and at race
    ends, so a collector acts at most `every` actions behind the learner."""

    def __init__(
        self, shared: CollectorLink, net: torch.nn.Module | None, version: int, every: int
    ) -> None:
        self.shared, self.net, self.version, self.every = shared, net, version, every
        self.since_refresh = 0

    def refresh(self) -> int:
        """Pull newer weights if there are any; the version acted with from now on. Without
        a network (an inference server acts for this collector) there is nothing to pull."""
        if self.net is not None:
            self.version = pull_weights(self.shared, self.net, self.version)
        self.since_refresh = 0
        return self.version

    def tick(self) -> int:
        """Count one action; refresh when `every` actions passed. The version to act with."""
        if self.since_refresh >= self.every:
            self.refresh()
        self.since_refresh += 1
        return self.version


def _run(
    spec: CollectorSpec,
    idx: int,
    shared: CollectorLink,
    seed: int,
    parent: int,
    server: ServerLink | None = None,
) -> None:
    from trackmind.agent.device import resolve_device
    from trackmind.agent.inference import make_inference_network
    from trackmind.collectors.parts import (
        build_collector_parts,
        make_demonstrator,
        make_policy,
        make_start_bank,
        make_sticky,
    )
    from trackmind.env.rollout import GameInstanceManager

    col = spec.collector
    torch.set_num_threads(col.torch_threads)

    def frames() -> int:
        return shared.frames.value

    race, cycle, net = build_collector_parts(spec, col.cars_per_process, idx, frames)
    stop = partial(should_stop, shared, parent)
    if server is not None:  # the server holds the weights: this process never pulls them
        remote = RemoteQ(server, idx, stop)
        infer, weights = None, AgentWeights(shared, None, -1, 0)
    else:
        remote = None
        net.to(resolve_device(col.device, torch.cuda.is_available()))
        version = pull_weights(shared, net, -1)
        infer = make_inference_network(net, spec.network.compile)
        weights = AgentWeights(shared, infer.net, version, col.refresh_every_actions)

    acting = make_policy(spec, infer, race.n_cars, seed, frames=frames, remote=remote)
    starts = make_start_bank(spec, seed)
    gim = GameInstanceManager(
        race,
        cycle,
        starts=starts,
        demos=make_demonstrator(spec, race, seed, frames),
        sticky=make_sticky(spec, race.n_cars, seed, frames),
    )

    def policy(obs: dict[str, Any], greedy: np.ndarray):
        return acting.act(obs, greedy, gim.started, weights.tick())

    last_stats = time.monotonic()
    for seq, r in enumerate(gim.races(policy, stop)):
        r["collector"] = idx
        r["weights_version"] = acting.race_version(r["car"], weights.version)
        with shared.frames.get_lock():
            shared.frames.value += len(r["actions"])
        with gim.monitor.stage("queue"):
            path = write_spool(shared, pack_rollout(r), seq)
            if not put_message(shared, RaceFile(path), parent):
                break
        weights.refresh()  # a race starts on the newest weights
        if time.monotonic() - last_stats > 5.0:
            last_stats = time.monotonic()
            stats = gim.monitor.summary()
            put_message(shared, CollectorStats(idx, stats), parent)
    race.close()
    if os.getppid() != parent:  # the learner died (kill -9): nobody else will clear the spool
        shutil.rmtree(shared.spool_dir, ignore_errors=True)
