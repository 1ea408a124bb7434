"""A collector's parts from its CollectorSpec: the race, the map cycle, the network, the policy.

Local collector processes, the inference server and Ray workers all build here, so a
collector anywhere drives the same race with the same network and exploration policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from trackmind.agent.acting import BatchedPolicy
from trackmind.agent.network_config import build_network
from trackmind.collectors.demos import Demonstrator
from trackmind.env.build import float_dim_of, frame_shape_of, make_race
from trackmind.env.map_cycle import MapCycle
from trackmind.env.map_prices import price_walls_by_map
from trackmind.env.observations import FLOATS
from trackmind.env.sticky import StickyActions, sticky_on
from trackmind.game.starts import StartBank

if TYPE_CHECKING:
    from trackmind.agent.inference import InferenceNetwork
    from trackmind.agent.network import IQNNetwork
    from trackmind.collectors.inference_server import RemoteQ
    from trackmind.collectors.spec import CollectorSpec
    from trackmind.env.race import VecRace


def build_collector_parts(
    spec: CollectorSpec,
    n_cars: int,
    offset: int = 0,
    frames: Callable[[], int] | None = None,
) -> tuple[VecRace, MapCycle, IQNNetwork]:
    """(VecRace, MapCycle, network) for one collector; the cycle starts `offset` races in, and
    reward weights given as schedules follow `frames` (the frames played by all collectors)."""
    cycle = MapCycle(spec.cycle)
    for _ in range(offset * n_cars):
        cycle.next()
    race = make_race(
        spec.env,
        spec.reward,
        n_cars=n_cars,
        maps=cycle.entries[0].track,
        instance=offset,  # a real game per collector: TMInterface server <prefix><offset>
        challenges=cycle.challenges,
    )
    price_walls_by_map(race, cycle.entries)  # the maps' own wall prices, if they name any
    if frames is not None:
        race.reward.follow(frames)
    stats = race.observation.term(FLOATS)
    net = build_network(
        spec.network,
        float_dim_of(race.observation),
        frame_shape_of(spec.env),
        float_mean=stats.mean,
        float_std=stats.std,
    )
    return race, cycle, net


def make_policy(
    spec: CollectorSpec,
    live: InferenceNetwork | None,
    n_cars: int,
    seed: int,
    frames: Callable[[], int],
    remote: RemoteQ | None = None,
) -> BatchedPolicy:
    """A collector's policy (exploration, the network's inference taus and risk levels, the
    collector's precision); with `remote` (and no `live` network) an inference server
    computes the Q values."""
    return BatchedPolicy(
        live,
        spec.exploration,
        spec.network.n_quantiles_inference,
        n_cars,
        seed,
        frames,
        risk=spec.network.risk,
        remote=remote,
        precision=spec.collector.precision,
        cuda_graph=spec.collector.cuda_graph,
    )


def make_start_bank(spec: CollectorSpec, seed: int) -> StartBank | None:
    """A collector's bank of mid-track start states (None when exploration.starts is off)."""
    return StartBank(spec.starts, seed) if spec.starts.share > 0 else None


def make_sticky(
    spec: CollectorSpec, n_cars: int, seed: int, frames: Callable[[], int]
) -> StickyActions | None:
    """A collector's sticky actions for its exploration races (None when no map has them)."""
    every = spec.exploration.sticky
    if not sticky_on(every, spec.cycle):
        return None
    return StickyActions(every, n_cars, seed, frames)


def make_demonstrator(
    spec: CollectorSpec, race: VecRace, seed: int, frames: Callable[[], int]
) -> Demonstrator | None:
    """A collector's scripted driver for demonstration races (None when exploration.demos is
    off); it drives the sim's car with the sim's own vehicle parameters."""
    if not spec.demos.enabled_on(spec.cycle):
        return None
    return Demonstrator(spec.demos, race.n_cars, seed, frames, race.game.vehicle)
