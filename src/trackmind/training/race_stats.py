"""RaceStats: what the learner knows about the races it received, turned into metrics.

Greedy races are the evaluation: their times per map, the ratio to the map's reference time,
and the share of them that finish are the figures users compare. Exploration races count
towards finish_rate and throughput: with sticky actions or much exploration, finish_rate
reads far below greedy_finish_rate, which is what the learning benchmark reports. Metric
names: race/<map>/time, race/<map>/ratio, race/<map>/best_ratio, race/<map>/finish_rate,
race/<map>/greedy_finish_rate (the last `window` greedy races), race/<map>/progress (share of
the race distance driven), throughput/transitions_per_s, collector/<stage>_ms_per_action.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from trackmind.tracking.metric_names import metric_map_name


def race_ratio(race_time_ms: float | None, reference_ms: float) -> float | None:
    """Race time over reference time (lower is better); None for a race that did not finish."""
    if race_time_ms is None:
        return None
    return float(race_time_ms) / float(reference_ms)


@dataclass
class RaceStats:
    """Running race records, per map; `metrics()` summarises the window since last call."""

    reference_ms: dict[str, float] = field(default_factory=dict)
    length_m: dict[str, float] = field(default_factory=dict)
    window: int = 20
    races: int = 0
    transitions: int = 0
    collector_errors: int = 0
    mid_track_races: int = 0
    demo_races: int = 0
    collector_timings: dict[int, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.finishes: dict[str, deque] = defaultdict(lambda: deque(maxlen=self.window))
        self.greedy_finishes: dict[str, deque] = defaultdict(lambda: deque(maxlen=self.window))
        self.progress: dict[str, deque] = defaultdict(lambda: deque(maxlen=self.window))
        self.greedy_progress: dict[str, float] = {}
        self.greedy_accel: dict[str, float] = {}
        self.best_ms: dict[str, float] = {}
        self.best_greedy_ms: dict[str, float] = {}
        self.last_greedy: dict[str, float | None] = {}
        self.weights_versions: set[int] = set()
        self._start = self._t0 = time.monotonic()
        self._transitions_at_t0 = 0
        self.history: list[dict] = []  # frames, map, time, progress, end of every greedy race

    def add_race(self, r: dict, n_transitions: int, frames: int = 0) -> bool:
        """Record a race; True when it is the best greedy race so far on its map."""
        m = r["map"]
        self.races += 1
        self.transitions += int(n_transitions)
        if r.get("mid_track"):  # started from a saved state: no race time, no finish rate
            self.mid_track_races += 1
            return False
        if r.get("demo"):  # the scripted driver's race (collectors/demos.py): not the agent's
            self.demo_races += 1
            return False
        self.finishes[m].append(bool(r["finished"]))
        length = self.length_m.get(m)
        meters = r.get("meters_advanced_along_centerline")
        share = None
        if length and meters is not None and len(meters):
            share = min(1.0, max(0.0, float(max(meters)) / length))
            self.progress[m].append(share)
            if r.get("greedy"):
                self.greedy_progress[m] = share
        if r.get("greedy") and len(r.get("input_w", ())):
            self.greedy_accel[m] = float(np.mean(r["input_w"]))
        if "weights_version" in r:
            self.weights_versions.add(int(r["weights_version"]))
        new_best = False
        if r.get("finished"):
            new_best = float(r["race_time"]) < self.best_greedy_ms.get(m, float("inf"))
            new_best = new_best and bool(r.get("greedy"))
            if new_best:
                self.best_greedy_ms[m] = float(r["race_time"])
            self.best_ms[m] = min(self.best_ms.get(m, float("inf")), float(r["race_time"]))
        if r.get("greedy"):
            t = float(r["race_time"]) if r.get("finished") else None
            self.greedy_finishes[m].append(t is not None)
            self.last_greedy[m] = t
            self.history.append(
                {
                    "frames": frames,
                    "map": m,
                    "time_ms": t,
                    "wall_s": time.monotonic() - self._start,
                    # where and why a race that did not finish ended (the learning benchmark
                    # tells stalls at the start from crashes further on)
                    "progress": share,
                    "end": list(r.get("end") or ()),
                }
            )
        return new_best

    def state_dict(self) -> dict:
        """Plain containers only (checkpoints load with weights_only=True)."""
        return {
            "races": self.races,
            "transitions": self.transitions,
            "collector_errors": self.collector_errors,
            "finishes": {m: list(d) for m, d in self.finishes.items()},
            "greedy_finishes": {m: list(d) for m, d in self.greedy_finishes.items()},
            "progress": {m: list(d) for m, d in self.progress.items()},
            "best_ms": dict(self.best_ms),
            "best_greedy_ms": dict(self.best_greedy_ms),
            "last_greedy": dict(self.last_greedy),
            "weights_versions": sorted(self.weights_versions),
            "history": list(self.history),
            "wall_s": time.monotonic() - self._start,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue a resumed run's records (best times, finish rates, greedy history)."""
        self.races = int(state["races"])
        self.transitions = int(state["transitions"])
        self.collector_errors = int(state.get("collector_errors", 0))
        for m, vals in state["finishes"].items():
            self.finishes[m].extend(vals)
        for m, vals in state["progress"].items():
            self.progress[m].extend(vals)
        for m, vals in state.get("greedy_finishes", {}).items():  # runs from before the key
            self.greedy_finishes[m].extend(vals)
        self.best_ms.update(state["best_ms"])
        self.best_greedy_ms.update(state["best_greedy_ms"])
        self.last_greedy.update(state["last_greedy"])
        self.weights_versions.update(state["weights_versions"])
        self.history = list(state["history"])
        self._start = time.monotonic() - float(state.get("wall_s", 0.0))
        self._t0, self._transitions_at_t0 = time.monotonic(), self.transitions

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {
            "races/total": float(self.races),
            "races/mid_track": float(self.mid_track_races),
            "races/demo": float(self.demo_races),
        }
        for m, fin in self.finishes.items():
            key = metric_map_name(m)
            if fin:
                out[f"race/{key}/finish_rate"] = sum(fin) / len(fin)
            greedy = self.greedy_finishes.get(m)
            if greedy:
                out[f"race/{key}/greedy_finish_rate"] = sum(greedy) / len(greedy)
            if self.progress[m]:
                out[f"race/{key}/progress"] = sum(self.progress[m]) / len(self.progress[m])
            if m in self.greedy_progress:
                out[f"race/{key}/greedy_progress"] = self.greedy_progress[m]
            if m in self.greedy_accel:
                out[f"race/{key}/greedy_accel_share"] = self.greedy_accel[m]
            ref = self.reference_ms.get(m)
            last = self.last_greedy.get(m)
            if last is not None:
                out[f"race/{key}/time"] = last / 1000.0
                if ref:
                    out[f"race/{key}/ratio"] = race_ratio(last, ref)
            if m in self.best_ms:
                out[f"race/{key}/best_time"] = self.best_ms[m] / 1000.0
                if ref:
                    out[f"race/{key}/best_ratio"] = race_ratio(self.best_ms[m], ref)
        now = time.monotonic()
        dt = max(now - self._t0, 1e-9)
        out["throughput/transitions_per_s"] = (self.transitions - self._transitions_at_t0) / dt
        self._t0, self._transitions_at_t0 = now, self.transitions
        for idx, timings in self.collector_timings.items():
            for k, v in timings.items():
                if k.endswith("_ms_per_action"):
                    out[f"collector/{idx}/{k}"] = float(v)
        out["collector/errors"] = float(self.collector_errors)
        return out
