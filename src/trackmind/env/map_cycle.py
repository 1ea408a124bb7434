"""The map cycle: which map each new race runs, and whether it explores or races greedily.

Linesight mixes exploration races with greedy evaluation races per map; all of them fill
the buffer, and the greedy race times are what we report. Maps are loaded and validated
once, when the cycle is built, so an unknown map stops the run before any process starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import MISSING

from trackmind.errors import ConfigError, check_schema, require
from trackmind.schedules import Schedule, share_schedule, sticky_schedule
from trackmind.sim.mapio import load_map
from trackmind.sim.maps import expand_seed_range
from trackmind.sim.track import MapError, Track


@dataclass
class CycleEntryConfig:
    """One item of `map.cycle` (a bare string is `{map: <string>}`)."""

    map: str = MISSING  # a built-in map's name or a map file
    exploration: int = 4  # exploring races, then ...
    greedy: int = 1  # ... greedy (evaluation) races
    laps: int | None = None  # None: what the map itself says
    closed: bool | None = None
    # a real map also names its challenge file and its author/medal time (conf/map/<name>.yaml)
    challenge: str | None = None
    reference_time_ms: float | None = None
    # this map's share of demonstration races (collectors/demos.py): one value or
    # [[frames, share], ...]; None: 0. exploration.demos.share, when set, overrides it
    demos: Any = None
    # this map's probability of sticky actions in exploration races (env/sticky.py): one
    # value or [[frames, p], ...]; None: 0. exploration.sticky, when set, overrides it
    sticky: Any = None
    # this map's wall price (env/map_prices.py): the reward's cost per m/s its cars lose into a
    # wall on a step (wall_impact's per_mps, <= 0); None: none. A run's reward.terms.wall_impact,
    # when set, prices every map and takes precedence
    wall_price: float | None = None

    def __post_init__(self) -> None:
        require(bool(self.map), "map", f"must be a map name or file, got {self.map!r}")
        price = self.wall_price
        require(
            price is None or price <= 0.0,
            "wall_price",
            f"is a cost per m/s lost into a wall: must be <= 0, got {price!r}",
        )
        for name in ("exploration", "greedy"):
            v = getattr(self, name)
            require(v >= 0, name, f"must be an integer >= 0, got {v!r}")
        laps, ref = self.laps, self.reference_time_ms
        require(laps is None or laps >= 1, "laps", f"must be an integer >= 1, got {laps!r}")
        require(
            self.challenge is None or bool(self.challenge),
            "challenge",
            f"must be a challenge file name, got {self.challenge!r}",
        )
        require(ref is None or ref > 0, "reference_time_ms", f"must be a time > 0 ms, got {ref!r}")


@dataclass(frozen=True)
class CycleEntry:
    """One map of the cycle: `exploration` exploring races, then `greedy` greedy ones."""

    name: str
    track: Track
    exploration: int = 4
    greedy: int = 1
    challenge: str | None = None  # the real game's challenge file (env.backend=tminterface)
    demos: Schedule | None = None  # this map's share of demonstration races (None: 0)
    sticky: Schedule | None = None  # this map's sticky-action probability (None: 0)
    wall_price: float | None = None  # this map's wall price per m/s lost (None: none)


class MapCycle:
    """Endless sequence of (track, greedy) over the entries, in order."""

    def __init__(self, entries: Sequence[CycleEntry]) -> None:
        if not entries or all(e.exploration + e.greedy == 0 for e in entries):
            raise ValueError("a map cycle needs at least one race")
        self.entries = list(entries)
        self._plan = [
            (e, greedy)
            for e in self.entries
            for greedy in [False] * e.exploration + [True] * e.greedy
        ]
        self._i = 0

    def next(self) -> tuple[CycleEntry, bool]:
        entry = self._plan[self._i % len(self._plan)]
        self._i += 1
        return entry

    @property
    def maps(self) -> dict[str, Track]:
        return {e.name: e.track for e in self.entries}

    @property
    def challenges(self) -> dict[str, str]:
        """Track fingerprint -> challenge file, for the entries that name one."""
        return {e.track.fingerprint(): e.challenge for e in self.entries if e.challenge}

    @classmethod
    def from_config(cls, cfg: Any, key: str = "map.cycle") -> MapCycle:
        """Entries `{map, exploration, greedy, ...}`; a bare string is one map with defaults."""
        if isinstance(cfg, (str, Mapping)):
            cfg = [cfg]
        try:
            from omegaconf import ListConfig, OmegaConf

            if isinstance(cfg, ListConfig):
                cfg = OmegaConf.to_container(cfg, resolve=True)
        except ImportError:  # pragma: no cover
            pass
        if not isinstance(cfg, Sequence) or not cfg:
            raise ConfigError(key, "must be a non-empty list of {map, exploration, greedy}")
        entries, loaded = [], {}
        for i, item in enumerate(cfg):
            k = f"{key}[{i}]"
            c = check_schema({"map": item} if isinstance(item, str) else item, CycleEntryConfig, k)
            try:
                names = expand_seed_range(c.map)  # "narrow:301-420": an entry per seed
            except MapError as e:
                raise ConfigError(f"{k}.map", str(e)) from None
            demos = None if c.demos is None else share_schedule(c.demos, f"{k}.demos")
            sticky = None if c.sticky is None else sticky_schedule(c.sticky, f"{k}.sticky")
            for name in names:
                track = _load_entry(name, c, k, loaded)
                entries.append(
                    CycleEntry(
                        name,
                        track,
                        c.exploration,
                        c.greedy,
                        c.challenge,
                        demos,
                        sticky,
                        c.wall_price,
                    )
                )
        if all(e.exploration + e.greedy == 0 for e in entries):
            raise ConfigError(key, "every entry has 0 races")
        return cls(entries)


def _load_entry(name: str, c: CycleEntryConfig, k: str, loaded: dict) -> Track:
    """The track of one map of entry `k` (each map and shape loaded once per cycle)."""
    shape = (c.laps, c.closed)
    if (name, *shape) not in loaded:
        try:
            track = load_map(name)  # a map that loads as it is: a problem lies in laps/closed
        except MapError as e:
            raise ConfigError(f"{k}.map", str(e)) from None
        try:
            if shape != (None, None):
                track = load_map(name, laps=c.laps, closed=c.closed)
            loaded[(name, *shape)] = track
        except MapError as e:
            bad = "laps" if c.laps is not None else "closed"
            raise ConfigError(f"{k}.{bad}", str(e)) from None
    track = loaded[(name, *shape)]
    if c.reference_time_ms is not None:
        track = replace(track, reference_time_ms=float(c.reference_time_ms))
    return track


def loadable_cycle(maps: list[str | dict]) -> tuple[MapCycle | None, list[tuple[str, str]]]:
    """(MapCycle of the maps that load, once each and greedily, or None; [(map, one-line
    problem)] of the others): evaluation and validation races skip or refuse a bad map alone."""
    entries = [{"map": m} if isinstance(m, str) else dict(m) for m in maps]
    once = {str(e["map"]): {**e, "exploration": 0, "greedy": 1} for e in entries}  # map once
    good, failed = [], []
    for name, entry in once.items():
        try:
            loaded = MapCycle.from_config([entry], key="map").entries  # a range: a map per seed
        except ConfigError as e:
            failed.append((name, str(e).removeprefix("map[0].map: ")))
            continue
        raced = {e.name for e in good}  # overlapping ranges race their shared seeds once
        good += [e for e in loaded if e.name not in raced]
    return (MapCycle(good) if good else None), failed
