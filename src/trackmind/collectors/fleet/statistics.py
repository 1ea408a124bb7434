"""EpisodeStatistics: race times and finish rates per map, as the rollout fleet saw them.

Every wrapper reports each race it finished, whether it shipped it or dropped it as stale,
so these figures count what the workers produced (races from mid-track starts and
demonstrations count as episodes, not towards finish rates and times); the learner's
RaceStats count what it learned from. The summary is a pure function of the recent races,
turned into MLflow metrics `episodes/<map>/finish_rate`, `episodes/<map>/mean_time` (s,
finished races), `episodes/<map>/best_time` (s, ever), and fleet totals.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping

import ray

from trackmind.tracking.metric_names import metric_map_name


def summarise_episodes(
    recent: Mapping[str, Iterable[Mapping]], best_ms: Mapping[str, float]
) -> dict[str, float]:
    """Per-map metrics from the recent races of each map and the best time ever (ms)."""
    out: dict[str, float] = {}
    for m, rows in recent.items():
        rows = list(rows)
        if not rows:
            continue
        times = [float(r["race_time_ms"]) for r in rows if r["finished"]]
        out[f"episodes/{metric_map_name(m)}/finish_rate"] = len(times) / len(rows)
        if times:
            out[f"episodes/{metric_map_name(m)}/mean_time"] = sum(times) / len(times) / 1000.0
    for m, best in best_ms.items():
        out[f"episodes/{metric_map_name(m)}/best_time"] = float(best) / 1000.0
    return out


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class EpisodeStatistics:
    """Race records from every wrapper; `summary()` gives the metrics."""

    def __init__(self, window: int = 50) -> None:
        self.recent: dict[str, deque] = defaultdict(lambda: deque(maxlen=window))
        self.best_ms: dict[str, float] = {}
        self.episodes = 0
        self.steps = 0
        self.dropped = 0

    def record(self, rows: list[dict]) -> None:
        for r in rows:
            m = str(r["map"])
            self.episodes += 1
            self.steps += int(r["n_steps"])
            self.dropped += bool(r["dropped"])
            if not r.get("own", True):  # mid-track starts, demonstrations: no race time
                continue
            self.recent[m].append(r)
            if r["finished"] and r["race_time_ms"] is not None:
                self.best_ms[m] = min(self.best_ms.get(m, float("inf")), float(r["race_time_ms"]))

    def summary(self) -> dict[str, float]:
        out = summarise_episodes(self.recent, self.best_ms)
        out["episodes/total"] = float(self.episodes)
        out["episodes/steps"] = float(self.steps)
        out["collector/stale_dropped_at_workers"] = float(self.dropped)
        return out
