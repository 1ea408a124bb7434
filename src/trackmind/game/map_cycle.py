"""The map cycle: which map each new race runs, and whether it explores or races greedily.

Linesight mixes exploration races with greedy evaluation races per map; all of them fill
the buffer, and the greedy race times are what we report. Maps are loaded and validated
once, when the cycle is built, so an unknown map stops the run before any process starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trackmind.errors import ConfigError, check_known_keys
from trackmind.sim.mapio import load_map
from trackmind.sim.track import MapError, Track


@dataclass(frozen=True)
class CycleEntry:
    """One map of the cycle: `exploration` exploring races, then `greedy` greedy ones."""

    name: str
    track: Track
    exploration: int = 4
    greedy: int = 1


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
            check_known_keys(item, {"map", "exploration", "greedy"}, k)
            spec = item.get("map")
            if not isinstance(spec, str) or not spec:
                raise ConfigError(f"{k}.map", f"must be a map name or file, got {spec!r}")
            counts = {}
            for name, default in (("exploration", 4), ("greedy", 1)):
                v = item.get(name, default)
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise ConfigError(f"{k}.{name}", f"must be an integer >= 0, got {v!r}")
                counts[name] = v
            if spec not in loaded:
                try:
                    loaded[spec] = load_map(spec)
                except MapError as e:
                    raise ConfigError(f"{k}.map", str(e)) from None
            entries.append(CycleEntry(spec, loaded[spec], **counts))
        if all(e.exploration + e.greedy == 0 for e in entries):
            raise ConfigError(key, "every entry has 0 races")
        return cls(entries)
