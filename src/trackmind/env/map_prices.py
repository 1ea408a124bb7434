"""A map's own wall price: the wall_impact reward term on the cars that race that map alone.

Some maps need a reward term that others do not. On technical the sim's outer walls brake a
car at the hairpins for free, so the agent learns to use them and finishes 77-80% of its
greedy races; a price per m/s lost into a wall turns it to braking before the corners
(96-98% finished), and on the fast maps no such term is needed. A map's cycle row names its
price (`{map: technical, ..., wall_price: -0.035}`), like its share of demonstrations, so
that a cycle of several maps prices each car by the map it races. A run's own
`reward.terms.wall_impact`, when set, prices every map and takes precedence, as
`exploration.demos.share` does over the rows' `demos`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from trackmind.env.reward_terms import WallImpactPenalty
from trackmind.sim.maps import expand_seed_range

if TYPE_CHECKING:
    from trackmind.env.map_cycle import CycleEntry
    from trackmind.env.race import VecRace


def map_wall_prices(entries: Sequence[CycleEntry]) -> dict[str, float]:
    """Track fingerprint -> wall price of the entries that name one."""
    return {e.track.fingerprint(): e.wall_price for e in entries if e.wall_price is not None}


def price_walls_by_map(race: VecRace, entries: Sequence[CycleEntry]) -> bool:
    """Add a wall_impact term priced per map (0 on maps without a price) to `race`'s reward
    when some entry names a price and the run's reward has no wall_impact of its own; True
    when it did."""
    prices = map_wall_prices(entries)
    if not prices or any(isinstance(t, WallImpactPenalty) for t in race.reward.terms):
        return False
    term = WallImpactPenalty(per_mps=0.0)  # named wall_impact, as in reward.terms
    term.price_maps(prices)
    race.reward.add(term)
    return True


def priced_as_recorded(entries: Sequence[CycleEntry], rows: Any) -> list[CycleEntry]:
    """`entries` with the wall prices a run's own cycle rows (`map.cycle` as a checkpoint
    recorded it) gave their maps, matched by name: a checkpoint raced again on a map named
    alone (value_audit's returns, evaluation) pays what it learned to pay there."""
    prices: dict[str, float] = {}
    for row in [rows] if isinstance(rows, (str, Mapping)) else list(rows or []):
        if isinstance(row, Mapping) and row.get("wall_price") is not None:
            for name in expand_seed_range(str(row["map"])):
                prices[name] = float(row["wall_price"])
    return [replace(e, wall_price=prices.get(e.name, e.wall_price)) for e in entries]
