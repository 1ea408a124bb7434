"""The collectors' policy over a batch of cars: exploration races and evaluation races.

Collectors refresh their weights during races (every few actions) so that exploration
follows the learner closely. An evaluation (greedy) race driven that way would measure a
blend of versions, and best.pt, the weights kept for the best greedy race, could not repeat
it. So a greedy race is bound to the weights version current when it starts: a frozen copy
of those weights drives it to its end, with the quantile midpoints as taus, which makes the
race a deterministic function of one version (evaluate.py repeats it exactly in the sim).
Copies are kept per version in use and reused, at most MAX_FROZEN_VERSIONS at once: once that
many are in use, a greedy race that starts binds to the newest of them. A GPU learner publishes
a few versions a second and a GPU server drives hundreds of cars, a third of them greedily, so
one copy per start version meant dozens of copies, each a forward per batch and a set of CUDA
graphs: inference went from 0.4 to 6 ms a car-action and GPU memory to 77 GB within 150 s
(H200, docs/gpu.md).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from trackmind.agent.exploration import (
    ActionHold,
    Exploration,
    select_actions,
)
from trackmind.agent.graphed_inference import CaptureState, GraphedQ
from trackmind.agent.inference import (
    InferenceNetwork,
    autocast_dtype,
    greedy_q,
    inference_autocast,
    make_inference_network,
)
from trackmind.agent.network import IQNNetwork
from trackmind.agent.network_config import RISK_NEUTRAL, Risk
from trackmind.env.observations import FLOATS

log = logging.getLogger(__name__)

MAX_FROZEN_VERSIONS = 4  # frozen greedy copies held at once (module docstring)


def cars_q_tensor(
    net: InferenceNetwork,
    img: torch.Tensor | None,
    floats: torch.Tensor,
    cars: np.ndarray,
    k: int,
    generator: torch.Generator | None = None,
    midpoint: bool = False,
    cvar: float = 1.0,
) -> torch.Tensor:
    """Q values (len(cars), A) of some cars of the batch (all of them: no gather), on the
    batch's device."""
    if len(cars) < len(floats):
        idx = torch.from_numpy(cars).to(floats.device)
        img, floats = (None if img is None else img[idx]), floats[idx]
    return greedy_q(net, img, floats, k, generator, midpoint, cvar)


def network_device(net: torch.nn.Module) -> torch.device:
    """The device a network's weights are on (where its inputs must go)."""
    return next(net.parameters()).device


def _put_rows(q: np.ndarray | torch.Tensor, cars: np.ndarray, values: torch.Tensor) -> None:
    """q[cars] = values, for a numpy array (values come to the CPU) or a tensor (no copy);
    values computed under bf16 autocast are cast to q's float32."""
    if isinstance(q, np.ndarray):
        q[cars] = values.float().cpu().numpy()
    else:
        q[torch.from_numpy(cars).to(q.device)] = values.to(q.dtype)


class FrozenGreedy:
    """Per car, the weights version its greedy race started with, and those weights."""

    def __init__(
        self,
        live: InferenceNetwork,
        k_taus: int,
        n_cars: int,
        cvar: float = 1.0,
        graphs: Callable[[IQNNetwork], GraphedQ] | None = None,
        max_versions: int = MAX_FROZEN_VERSIONS,
    ) -> None:
        if max_versions < 1:
            raise ValueError(f"max_versions must be >= 1, got {max_versions}")
        self.live = live
        self.max_versions = int(max_versions)
        self.k = int(k_taus)
        self.cvar = float(cvar)  # greedy races act on the mean of the lowest `cvar` quantiles
        self.bound = np.full(n_cars, -1, np.int64)  # version of each car's greedy race, or -1
        self.nets: dict[int, InferenceNetwork] = {}  # version -> frozen copy
        self._spare: list[InferenceNetwork] = []
        # collector.cuda_graph: a copy's GraphedQ (midpoint taus), made once per copy object;
        # a spare copy is refilled in place, so its graphs stay valid for the next version
        self.graphs = graphs
        self._graphed: dict[int, GraphedQ] = {}

    def update(self, greedy: np.ndarray, started: np.ndarray, version: int) -> None:
        """Bind greedy races starting now to `version` (the live weights), or to the newest
        frozen version when max_versions are in use; free the copies no race uses."""
        new = greedy & (started | (self.bound < 0))
        self.bound[~greedy | new] = -1
        in_use = set(self.bound.tolist())
        for v in [v for v in self.nets if v not in in_use]:
            self._spare.append(self.nets.pop(v))
        if not new.any():
            return
        if version not in self.nets:
            if len(self.nets) < self.max_versions:
                self.nets[version] = self._copy_of_live()
            else:
                version = max(self.nets)
        self.bound[new] = version

    def fill(
        self,
        q: np.ndarray | torch.Tensor,
        img: torch.Tensor | None,
        floats: torch.Tensor,
        bound: np.ndarray | None = None,
    ) -> None:
        """Write the greedy cars' Q values (their frozen weights, midpoint taus) into `q`: a
        numpy array, or a tensor on the networks' device (no host copy per version).
        `bound`: the versions of the batch's rows when they are not all cars (default)."""
        bound = self.bound if bound is None else bound
        for v, net in self.nets.items():
            cars = np.flatnonzero(bound == v)
            if not len(cars):
                continue
            if self.graphs is not None:  # one replay of this version's rows, padded
                graphed = self._graphed.get(id(net))
                if graphed is None:
                    graphed = self._graphed[id(net)] = self.graphs(net.net)
                if len(cars) < len(floats):
                    idx = torch.from_numpy(cars).to(floats.device)
                    values = graphed(None if img is None else img[idx], floats[idx])
                else:
                    values = graphed(img, floats)
            else:
                values = cars_q_tensor(net, img, floats, cars, self.k, None, True, self.cvar)
            _put_rows(q, cars, values)

    def _copy_of_live(self) -> InferenceNetwork:
        if self._spare:
            net = self._spare.pop()
        else:  # as the live one is run (on its device), never torch.compile (minutes a copy)
            mode = "script" if self.live.mode == "compile" else self.live.mode
            net = make_inference_network(copy.deepcopy(self.live.net), mode)
        net.load_state_dict(self.live.net.state_dict())
        return net


def graph_factory(
    k: int, sizes: tuple[int, ...], dtype: torch.dtype | None, risk: Risk
) -> Callable[..., GraphedQ]:
    """collector.cuda_graph's graphs for a network: given a generator, the live network's
    (random taus in [0, risk.explore]); without one, a frozen greedy copy's (midpoint taus,
    risk.greedy)."""

    state = CaptureState()  # one failed capture leaves them all eager

    def make(net: IQNNetwork, generator: torch.Generator | None = None) -> GraphedQ:
        if generator is not None:
            return GraphedQ(net, k, sizes, generator, dtype, cvar=risk.explore, state=state)
        return GraphedQ(net, k, sizes, None, dtype, midpoint=True, cvar=risk.greedy, state=state)

    return make


def greedy_and_graphs(
    live: InferenceNetwork,
    k: int,
    n_cars: int,
    risk: Risk,
    gen: torch.Generator,
    graph_sizes: tuple[int, ...] | None,
    precision: str,
) -> tuple[FrozenGreedy, GraphedQ | None]:
    """A collector's (or the server's) frozen greedy copies and, with `graph_sizes`
    (collector.cuda_graph), the live network's GraphedQ, both sharing one graph factory."""
    if graph_sizes is None:
        return FrozenGreedy(live, k, n_cars, risk.greedy), None
    device = network_device(live.net)
    if device.type != "cuda":  # a Ray worker placed without a GPU: one line per collector
        log.warning(
            "collector.cuda_graph: this collector's network is on %s, not a GPU: its "
            "forward runs on the same static tensors, eagerly (no graph is captured)",
            device,
        )
    graphs = graph_factory(k, graph_sizes, autocast_dtype(device, precision), risk)
    return FrozenGreedy(live, k, n_cars, risk.greedy, graphs), graphs(live.net, gen)


class RemoteQ(Protocol):
    """Q values computed elsewhere, with BatchedPolicy's rule (collectors/inference_server.py)."""

    def q_values(self, obs: dict, greedy: np.ndarray, started: np.ndarray) -> np.ndarray: ...

    def race_version(self, car: int) -> int: ...


def batch_q(
    live: InferenceNetwork,
    frozen: FrozenGreedy,
    k: int,
    gen: torch.Generator | None,
    img: torch.Tensor | None,
    floats: torch.Tensor,
    cars: np.ndarray,
    greedy: np.ndarray,
    graphed: GraphedQ | None = None,
    explore_cvar: float = 1.0,
) -> torch.Tensor:
    """Q values (len(cars), A) on the live network's device for the cars whose observations
    are the rows of img/floats, `cars` their indices in `frozen` and `greedy`: exploring cars
    from the live weights (random taus in [0, `explore_cvar`]: network.policy_cvar), greedy
    ones from the frozen copy of their race's version.

    With `graphed` (collector.cuda_graph) the live weights' values come from its replayed
    graph for every row, and greedy rows are then overwritten: one replay, not a gather. A
    batch of greedy cars alone replays no live graph: its rows are only staged on the device."""
    explore = np.flatnonzero(~greedy[cars])
    if graphed is not None:
        if len(explore) == 0:
            img, floats = graphed.stage(img, floats)  # the batch on the device, no replay
            q = torch.empty(
                (len(cars), live.net.n_actions), dtype=torch.float32, device=floats.device
            )
        else:
            q = graphed(img, floats)
            if len(explore) == len(cars):
                return q
            q = q.clone()  # the graph's static output is rewritten by the next replay
            img, floats = graphed.last_inputs()  # the batch on the device (the server's is not)
        with torch.inference_mode():
            frozen.fill(q, img, floats, frozen.bound[cars])
        return q
    with torch.inference_mode():
        if len(explore) == len(cars):  # no greedy race: the batch's Q values as they are
            return cars_q_tensor(live, img, floats, explore, k, gen, False, explore_cvar)
        q = torch.empty((len(cars), live.net.n_actions), dtype=torch.float32, device=floats.device)
        if len(explore):
            values = cars_q_tensor(live, img, floats, explore, k, gen, False, explore_cvar)
            _put_rows(q, explore, values)
        frozen.fill(q, img, floats, frozen.bound[cars])
        return q


class BatchedPolicy:
    """Actions for a batch of cars: explored from the live weights, greedy from frozen ones.

    Inference runs where the live network is (collector.device): each step the observations
    go there once for the whole batch, the taus are drawn there (a generator on that device,
    seeded), and the Q values of every car come back to the CPU in one copy.
    """

    def __init__(
        self,
        live: InferenceNetwork | None,
        explorer: Exploration,
        k_taus: int,
        n_cars: int,
        seed: int,
        frames: Callable[[], int],
        risk: Risk = RISK_NEUTRAL,
        remote: RemoteQ | None = None,
        precision: str = "fp32",
        cuda_graph: bool = False,
    ) -> None:
        self.remote = remote  # Q values from an inference server instead of `live`
        self.precision = precision  # collector.precision: bf16 autocast on a GPU
        self.graphed: GraphedQ | None = None  # collector.cuda_graph: the live forward replayed
        self.live = live
        self.explore_cvar = risk.explore  # exploring cars' risk level (network.policy_cvar)
        self.explorer = explorer
        self.k = int(k_taus)
        self.frames = frames
        self.hold = ActionHold(n_cars)  # temporally extended random actions (exploration)
        self.rng = np.random.default_rng(seed)
        if live is not None:
            self.device = network_device(live.net)
            self.gen = torch.Generator(device=self.device).manual_seed(seed)
            sizes = (n_cars,) if cuda_graph else None  # one batch size: this collector's cars
            self.frozen, self.graphed = greedy_and_graphs(
                live, self.k, n_cars, risk, self.gen, sizes, precision
            )

    def act(self, obs: dict, greedy: np.ndarray, started: np.ndarray, version: int):
        """(actions, q_values, was_greedy); `version` is the live weights' version."""
        if self.remote is not None:  # an inference server computes them (inference_server.py)
            q = self.remote.q_values(obs, greedy, started)
        else:
            self.frozen.update(greedy, started, version)
            img = self._to_device(obs["frame"]) if "frame" in obs else None
            floats = self._to_device(obs[FLOATS])
            cars = np.arange(len(greedy))
            with inference_autocast(self.device, self.precision):
                q = batch_q(
                    self.live,
                    self.frozen,
                    self.k,
                    self.gen,
                    img,
                    floats,
                    cars,
                    greedy,
                    self.graphed,
                    self.explore_cvar,
                )
            q = q.float().cpu().numpy()  # one copy to the host per step (none on the CPU)
        self.hold.release(np.flatnonzero(started))
        params = self.explorer.params(self.frames())
        actions, was_greedy = select_actions(q, params, self.rng, self.hold)
        actions[greedy] = q[greedy].argmax(axis=1)  # evaluation races act greedily
        was_greedy[greedy] = True
        return actions, q, was_greedy

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        """One array of the batch on the inference device (the CPU: the array itself)."""
        return torch.from_numpy(array).to(self.device, non_blocking=True)

    def race_version(self, car: int, live_version: int) -> int:
        """The weights version to record for the race `car` just ended (before the next act)."""
        if self.remote is not None:
            return self.remote.race_version(car)
        v = int(self.frozen.bound[car])
        return v if v >= 0 else int(live_version)
