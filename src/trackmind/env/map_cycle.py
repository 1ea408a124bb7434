"""The map cycle: which map each new race runs, and whether it explores or races greedily.

Linesight mixes exploration races with greedy evaluation races per map; all of them fill
the buffer, and the greedy race times are what we report. Maps are loaded and validated
once, when the cycle is built, so an unknown map stops the run before any process starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trackmind.errors import ConfigError, check_known_keys
from trackmind.sim.mapio import load_map
from trackmind.sim.track import MapError, Track

# a real map also names its challenge file and its author/medal time (conf/map/<name>.yaml)
ENTRY_KEYS = {"map", "exploration", "greedy", "challenge", "reference_time_ms", "laps", "closed"}


@dataclass(frozen=True)
class CycleEntry:
    """One map of the cycle: `exploration` exploring races, then `greedy` greedy ones."""

    name: str
    track: Track
    exploration: int = 4
    greedy: int = 1
    challenge: str | None = None  # the real game's challenge file (env.backend=tminterface)


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
        """Entries `{map, exploration, greedy}`; a bare string is one map with defaults."""
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
            item = {"map": item} if isinstance(item, str) else dict(item)
            check_known_keys(item, ENTRY_KEYS, k)
            spec = item.get("map")
            if not isinstance(spec, str) or not spec:
                raise ConfigError(f"{k}.map", f"must be a map name or file, got {spec!r}")
            counts = {}
            for name, default in (("exploration", 4), ("greedy", 1)):
                v = item.get(name, default)
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise ConfigError(f"{k}.{name}", f"must be an integer >= 0, got {v!r}")
                counts[name] = v
            shape = circuit_keys(item, k)
            if (spec, *shape) not in loaded:
                try:
                    load_map(spec)  # a map that loads as it is: a problem lies in laps/closed
                except MapError as e:
                    raise ConfigError(f"{k}.map", str(e)) from None
                try:
                    loaded[(spec, *shape)] = load_map(spec, laps=shape[0], closed=shape[1])
                except MapError as e:
                    bad = "laps" if shape[0] is not None else "closed"
                    raise ConfigError(f"{k}.{bad}", str(e)) from None
            track, challenge = real_map_keys(item, loaded[(spec, *shape)], k)
            entries.append(CycleEntry(spec, track, **counts, challenge=challenge))
        if all(e.exploration + e.greedy == 0 for e in entries):
            raise ConfigError(key, "every entry has 0 races")
        return cls(entries)


def circuit_keys(item: Mapping, key: str) -> tuple[int | None, bool | None]:
    """The entry's `laps` and `closed` (None: what the map itself says)."""
    laps, closed = item.get("laps"), item.get("closed")
    if laps is not None and (isinstance(laps, bool) or not isinstance(laps, int) or laps < 1):
        raise ConfigError(f"{key}.laps", f"must be an integer >= 1, got {laps!r}")
    if closed is not None and not isinstance(closed, bool):
        raise ConfigError(f"{key}.closed", f"must be true or false, got {closed!r}")
    return laps, closed


def real_map_keys(item: Mapping, track: Track, key: str) -> tuple[Track, str | None]:
    """The entry's challenge file, and its track carrying the given reference time."""
    challenge, ref = item.get("challenge"), item.get("reference_time_ms")
    if challenge is not None and (not isinstance(challenge, str) or not challenge):
        raise ConfigError(f"{key}.challenge", f"must be a challenge file name, got {challenge!r}")
    if ref is not None:
        if isinstance(ref, bool) or not isinstance(ref, (int, float)) or not ref > 0:
            raise ConfigError(f"{key}.reference_time_ms", f"must be a time > 0 ms, got {ref!r}")
        track = replace(track, reference_time_ms=float(ref))
    return track, challenge
