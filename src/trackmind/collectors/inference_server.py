"""The inference server (collector.inference=server): one process computes the Q values of
every local collector's cars on the GPU, in one batch.

With one network per collector process (collector.inference=process, Linesight's layout) each
process opens its own CUDA context, and the GPU time-slices between the contexts: measured on
an H100 with 12 processes of 32 cars, a collector's inference took 3-6 times longer than with
4 processes. As in SEED RL's central inference, the collectors here never touch the GPU: each
writes its cars' observations into its rows of shared host tensors, raises its pending flag
and waits; the server takes every pending collector at once (they pile up while it computes,
so batches grow with the load), runs one forward for all exploring cars and one per frozen
greedy version (acting.batch_q, the rule a collector applies alone), and writes the Q values
back. Exploration (epsilon, Boltzmann, action holds) stays in the collectors.

The server pulls the shared weights whenever their version moves, so collectors act on
weights at least as fresh as with refresh_every_actions; each collector's greedy races stay
bound to the version they started with, as acting.FrozenGreedy keeps them.
"""

from __future__ import annotations

import copy
import logging
import os
import signal
import traceback
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import torch

from trackmind.agent.graphed_inference import bucket_sizes
from trackmind.collectors.shared_handles import (
    CollectorLink,
    pull_weights,
    put_message,
    release_link,
    should_stop,
)
from trackmind.collectors.spec import CollectorSpec
from trackmind.env.observations import FLOATS

log = logging.getLogger(__name__)
WAIT_S = 0.5  # how often a waiting side looks at the stop flag


@dataclass
class ServerLink:
    """Shared host tensors (rows: collector i owns rows i*cars .. (i+1)*cars - 1) and the
    flags and events of requests and answers. Picklable into spawned processes."""

    cars: int  # cars per collector
    frames: torch.Tensor  # (n * cars, *image_shape) uint8, or (n * cars, 0) without images
    floats: torch.Tensor  # (n * cars, F) float32
    greedy: torch.Tensor  # (n * cars,) bool: the car races greedily (evaluation)
    started: torch.Tensor  # (n * cars,) bool: its race began at the last step
    q: torch.Tensor  # (n * cars, A) float32: the answer
    bound: torch.Tensor  # (n * cars,) int64: the weights version of a greedy race, or -1
    version: torch.Tensor  # (n,) int64: the live weights version of each collector's answer
    pending: torch.Tensor  # (n,) int8: collector i waits for an answer
    requests: Any  # mp.Semaphore: released once per request
    answers: list  # mp.Event per collector: its answer is written

    def rows(self, i: int) -> slice:
        return slice(i * self.cars, (i + 1) * self.cars)


def make_server_link(network: torch.nn.Module, n_collectors: int, cars: int, ctx) -> ServerLink:
    """The shared tensors for `n_collectors` collectors of `cars` cars, shaped for `network`."""
    n = n_collectors * cars
    image = tuple(network.image_shape) if network.image_shape is not None else (0,)

    def shared(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype).share_memory_()

    return ServerLink(
        cars=int(cars),
        frames=shared(n, *image, dtype=torch.uint8),
        floats=shared(n, int(network.float_dim), dtype=torch.float32),
        greedy=shared(n, dtype=torch.bool),
        started=shared(n, dtype=torch.bool),
        q=shared(n, int(network.n_actions), dtype=torch.float32),
        bound=torch.full((n,), -1, dtype=torch.int64).share_memory_(),
        version=shared(n_collectors, dtype=torch.int64),
        pending=shared(n_collectors, dtype=torch.int8),
        requests=ctx.Semaphore(0),
        answers=[ctx.Event() for _ in range(n_collectors)],
    )


class RemoteQ:
    """A collector's side (acting.RemoteQ): its cars' observations in, their Q values out."""

    def __init__(self, link: ServerLink, index: int, should_stop) -> None:
        self.link, self.index, self.should_stop = link, int(index), should_stop
        self.rows = link.rows(index)

    def q_values(self, obs: dict, greedy: np.ndarray, started: np.ndarray) -> np.ndarray:
        """Q values (cars, A) from the server; zeros if the run stops while waiting."""
        link, r = self.link, self.rows
        if "frame" in obs:
            link.frames[r].copy_(torch.from_numpy(obs["frame"]))
        link.floats[r].copy_(torch.from_numpy(obs[FLOATS]))
        link.greedy[r].copy_(torch.from_numpy(np.asarray(greedy, bool)))
        link.started[r].copy_(torch.from_numpy(np.asarray(started, bool)))
        answer = link.answers[self.index]
        answer.clear()
        link.pending[self.index] = 1
        link.requests.release()
        while not answer.wait(WAIT_S):
            if self.should_stop():  # the race loop ends at its next look at the flag
                return np.zeros(tuple(link.q[r].shape), np.float32)
        return link.q[r].numpy().copy()

    def race_version(self, car: int) -> int:
        """The version a race of `car` ran on: its greedy race's, else the live one's."""
        v = int(self.link.bound[self.rows][car])
        return v if v >= 0 else int(self.link.version[self.index])


def server_process_fn(
    spec: CollectorSpec, link: ServerLink, shared: CollectorLink, device: str, seed: int
) -> None:
    """Entry point of the server process (spawned): answers until the stop flag or the
    learner's death; an error goes to the learner's log as the collectors' would."""
    from trackmind.queueing import CollectorError

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    try:
        InferenceServer(spec, link, shared, device, seed).serve(
            partial(should_stop, shared, parent)
        )
    except Exception:
        put_message(shared, CollectorError(-1, traceback.format_exc()), parent)
        raise
    finally:
        release_link(shared)


class InferenceServer:
    """The server's state: the live network on `device`, frozen greedy copies, and which
    cars race greedily (all collectors' cars, in the link's row order)."""

    def __init__(
        self, spec: CollectorSpec, link: ServerLink, shared: CollectorLink, device: str, seed: int
    ) -> None:
        from trackmind.agent.acting import greedy_and_graphs
        from trackmind.agent.inference import make_inference_network

        torch.set_num_threads(spec.collector.torch_threads)
        self.link, self.shared = link, shared
        self.device = torch.device(device)
        net = copy.deepcopy(shared.network).to(self.device)
        self.version = pull_weights(shared, net, -1)
        self.live = make_inference_network(net, spec.network.compile)
        n_cars = len(link.greedy)
        self.k = spec.network.n_quantiles_inference
        self.gen = torch.Generator(device=self.device).manual_seed(int(seed))
        self.greedy = np.zeros(n_cars, bool)
        self.precision = spec.collector.precision
        sizes = None
        if spec.collector.cuda_graph:  # batches of 1, 2, 4, ... collectors' cars
            sizes = bucket_sizes(link.cars, len(link.pending))
        risk = spec.network.risk
        self.explore_cvar = risk.explore
        self.frozen, self.graphed = greedy_and_graphs(
            self.live, self.k, n_cars, risk, self.gen, sizes, self.precision
        )
        self.stage = HostStage(link, self.device)
        self.batches = 0

    def serve(self, should_stop) -> None:
        link = self.link
        while not should_stop():
            # a timeout still looks at the flags: a restarted server finds the requests its
            # predecessor took the semaphore for but never answered
            link.requests.acquire(timeout=WAIT_S)
            # a snapshot: collectors raise their flags while numpy would be counting them
            waiting = np.flatnonzero(link.pending.numpy().copy())
            if len(waiting):  # an extra release (answered in an earlier batch) finds none
                link.pending[torch.from_numpy(waiting)] = 0
                self.answer(waiting)

    def answer(self, collectors: np.ndarray) -> None:
        """One batch: the Q values of every car of `collectors`, written to their rows."""
        from trackmind.agent.acting import batch_q
        from trackmind.agent.inference import inference_autocast

        link = self.link
        self.version = pull_weights(self.shared, self.live.net, self.version)
        cars = (collectors[:, None] * link.cars + np.arange(link.cars)).ravel()
        rows = torch.from_numpy(cars)
        started = np.zeros(len(self.greedy), bool)
        self.greedy[cars] = link.greedy[rows].numpy()
        started[cars] = link.started[rows].numpy()
        self.frozen.update(self.greedy, started, self.version)
        img, floats = self.stage.gather(rows, self.live.net.image_shape is not None)
        if self.graphed is None:  # the eager forward reads its inputs on the device
            img = None if img is None else img.to(self.device, non_blocking=True)
            floats = floats.to(self.device, non_blocking=True)
        with inference_autocast(self.device, self.precision):
            q = batch_q(
                self.live,
                self.frozen,
                self.k,
                self.gen,
                img,
                floats,
                cars,
                self.greedy,
                self.graphed,
                self.explore_cvar,
            )
        link.q[rows] = q.float().cpu()
        link.bound[rows] = torch.from_numpy(self.frozen.bound[cars])
        link.version[torch.from_numpy(collectors)] = self.version
        for i in collectors:
            link.answers[int(i)].set()
        self.batches += 1


class HostStage:
    """The waiting cars' rows of the shared tensors, gathered into one host buffer: pinned
    when the server infers on a GPU, so the copy to it runs asynchronously (a gather out of
    shared memory gives pageable memory, which the driver would stage once more)."""

    def __init__(self, link: ServerLink, device: torch.device) -> None:
        pin = device.type == "cuda"
        self.frames = torch.empty_like(link.frames, pin_memory=pin)
        self.floats = torch.empty_like(link.floats, pin_memory=pin)
        self.link = link

    def gather(self, rows: torch.Tensor, images: bool) -> tuple[torch.Tensor | None, torch.Tensor]:
        """(frames or None, floats) of `rows`, views of the stage valid until the next gather
        (the server reads the answer back to the host, which ends every copy, before then)."""
        n = len(rows)
        floats = torch.index_select(self.link.floats, 0, rows, out=self.floats[:n])
        if not images:
            return None, floats
        return torch.index_select(self.link.frames, 0, rows, out=self.frames[:n]), floats
