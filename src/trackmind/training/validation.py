"""Validation races: keep the weights that drive maps the run never trains on.

best.pt keeps the weights of the best greedy race on a training map, which is speed on a
map already learned. That is not what carries to a map never seen: raced zero-shot on real
circuits, best.pt finished fewer than the final weights, and checkpoints five minutes
apart differed by several circuits (docs/benchmarks.md). A generalist is chosen the way a
supervised model is: on held-out data. With `validation.maps`, the learner races its acting
weights greedily on those maps every `validation.every_s` seconds, in one batched sim race
with one car per map, and writes validated.pt when they score better than any before.

The held-out score jumps between validations, and so do the unseen maps a snapshot finishes:
on real circuits one run's last four snapshots finished 3, 6, 10 and 5 of 25, the mean
weights of its last five 15. With `validation.average` N > 1 the callback also keeps the
mean of the last N validations' weights as averaged.pt, raced on the same maps.
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import numpy as np
import torch

from trackmind.errors import ConfigError, require

if TYPE_CHECKING:
    from trackmind.env.map_cycle import CycleEntry
    from trackmind.env.mirror import FloatMirror

log = logging.getLogger(__name__)


@dataclass
class ValidationConfig:
    """train.yaml `validation`: held-out maps raced greedily to choose validated.pt."""

    maps: list[str] = field(default_factory=list)  # empty: no validation races
    every_s: float = 300.0
    snapshots: bool = False  # also keep every validation's weights (validation/step_N.pt)
    average: int = 1  # N > 1: also keep the mean of the last N validations' weights

    def __post_init__(self) -> None:
        require(
            self.every_s > 0, "validation.every_s", f"must be > 0 seconds, got {self.every_s!r}"
        )
        require(
            self.average >= 1,
            "validation.average",
            f"must be a number of validations >= 1 (1: off), got {self.average!r}",
        )
        dup = sorted({m for m in self.maps if self.maps.count(m) > 1})
        require(not dup, "validation.maps", f"lists {', '.join(dup)} more than once")


def check_validation_maps(
    validation: ValidationConfig, training: Sequence[str], backend: str
) -> tuple[CycleEntry, ...]:
    """The maps are held out, load, and race in the sim; ConfigError naming the key if not.

    Returns their loaded entries (none when validation is off), so the races reuse them."""
    if not validation.maps:
        return ()
    require(
        backend == "sim",
        "validation.maps",
        f"validation races run in the built-in sim, not env.backend={backend}; set "
        "validation.maps=[]",
    )
    from trackmind.env.map_cycle import loadable_cycle

    cycle, failed = loadable_cycle(list(validation.maps))
    if failed:
        name, problem = failed[0]
        raise ConfigError(f"validation.maps[{validation.maps.index(name)}]", f"{name}: {problem}")
    seen = sorted({e.name for e in cycle.entries} & set(training))
    require(not seen, "validation.maps", f"{', '.join(seen)} is also a training map (map.cycle)")
    return tuple(cycle.entries)


@dataclass(frozen=True)
class ValidationResult:
    """One validation: each map's furthest share of the track and ratio (None: no finish)."""

    progress: tuple[float, ...]
    ratios: tuple[float | None, ...]

    @property
    def finished(self) -> int:
        return sum(r is not None for r in self.ratios)

    def metrics(self) -> dict[str, float]:
        done = [r for r in self.ratios if r is not None]
        return {
            "validation/finished": float(self.finished),
            "validation/progress": float(np.mean(self.progress)),
            "validation/ratio_median": statistics.median(done) if done else math.nan,
        }


def validation_score(result: ValidationResult) -> tuple[int, float, float]:
    """Higher is better: maps finished first, then the mean share of the track covered, then
    the mean ratio of the finished maps (lower is faster). Finishing one more unseen map
    outweighs any speed, as the zero-shot target counts finishes."""
    done = [r for r in result.ratios if r is not None]
    mean_ratio = sum(done) / len(done) if done else math.inf
    return result.finished, float(np.mean(result.progress)), -mean_ratio


class ValidationRaces:
    """One car per held-out map in a VecRace, raced greedily with a CPU copy of the weights."""

    def __init__(
        self, entries: Sequence[CycleEntry], env: Any, reward: Any, new_network: Any
    ) -> None:
        from trackmind.env.build import make_race
        from trackmind.env.map_cycle import MapCycle
        from trackmind.env.rollout import GameInstanceManager
        from trackmind.sim.reference import reference_time_ms

        self.entries = list(entries)  # loaded once, by check_validation_maps in plan_run
        self.names = [e.name for e in self.entries]
        self.lengths = [e.track.length_m for e in self.entries]
        self.references = [reference_time_ms(e.track) for e in self.entries]
        race = make_race(env, reward, n_cars=len(self.entries), maps=self.entries[0].track)
        self.gim = GameInstanceManager(race, MapCycle(self.entries))
        self.net = new_network().eval()

    def run(self, weights: dict, k: int, cvar: float, mirror: bool = False) -> ValidationResult:
        """Every map's first greedy race with these weights (the quantile midpoints as taus,
        so the result depends on the weights alone); with `mirror`, on the mean Q of each
        observation and its mirror image (agent/inference.py's observation_q)."""
        from trackmind.agent.inference import observation_q
        from trackmind.env.map_cycle import MapCycle

        self.net.load_state_dict(weights)
        gim, n = self.gim, len(self.names)
        twin = self.float_mirror if mirror else None
        gim.cycle = MapCycle(self.entries)  # from its start: car i races map i
        gim.begin()
        first: list[dict | None] = [None] * n
        while any(r is None for r in first):
            q = observation_q(self.net, gim.obs, k, midpoint=True, cvar=cvar, mirror=twin)
            for c, r in gim.advance(q.argmax(axis=1), q, np.ones(n, bool)):
                if first[c] is None:
                    first[c] = r
        progress, ratios = [], []
        for r, length, ref in zip(first, self.lengths, self.references):
            progress.append(min(1.0, max(r["meters_advanced_along_centerline"]) / length))
            ratios.append(r["race_time"] / ref if r["finished"] else None)
        return ValidationResult(tuple(progress), tuple(ratios))

    @functools.cached_property
    def float_mirror(self) -> FloatMirror:
        """The floats' mirror, made once for every candidate raced with the mirror (and only
        then: a race of terms that cannot mirror races plainly)."""
        from trackmind.env.observations import FLOATS

        return self.gim.race.observation.float_mirror(FLOATS)

    def close(self) -> None:
        self.gim.race.close()


class ValidationCallback(L.Callback):
    """Races the acting weights on the validation maps every `every_s` seconds and at the
    end of fit; logs validation/* metrics and keeps the best weights as validated.pt."""

    def __init__(
        self,
        races: ValidationRaces,
        every_s: float,
        path: Path,
        cfg: dict,
        network: Any,
        snapshots: Path | None = None,
        average: int = 1,
    ) -> None:
        self.races, self.every_s, self.path, self.cfg = races, float(every_s), Path(path), cfg
        self.snapshots = None if snapshots is None else Path(snapshots)
        self.k, self.cvar = network.n_quantiles_inference, network.greedy_cvar
        self.best: tuple | None = None
        self.history: list[dict] = []  # one row per validation (summary.json)
        # the last `average` validations' (step, weights), for averaged.pt
        self.window: deque[tuple[int, dict]] = deque(maxlen=average)
        self._start = self._last = time.monotonic()

    def on_train_start(self, trainer, pl_module) -> None:
        self._start = self._last = time.monotonic()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if time.monotonic() - self._last >= self.every_s:
            self.validate(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        self.validate(trainer, pl_module)

    def teardown(self, trainer, pl_module, stage) -> None:
        self.races.close()

    @property
    def averaged_path(self) -> Path:
        return self.path.with_name("averaged.pt")

    @property
    def ensemble_path(self) -> Path:
        return self.path.with_name("ensemble.pt")

    def state_dict(self) -> dict:
        """The best score so far and the averaging window travel in checkpoints: a resumed
        run replaces validated.pt only with better weights, and averages the same snapshots
        as the run that was stopped."""
        best = None if self.best is None else list(self.best)
        return {"best": best, "window": [[s, w] for s, w in self.window]}

    def load_state_dict(self, state_dict: dict) -> None:
        best = state_dict.get("best")
        self.best = None if best is None else tuple(best)
        self.window.clear()
        self.window.extend((int(s), w) for s, w in state_dict.get("window", []))

    def validate(self, trainer, pl_module) -> ValidationResult:
        t0 = time.monotonic()
        weights = {k: v.detach().cpu().clone() for k, v in pl_module.acting.state_dict().items()}
        result = self.races.run(weights, self.k, self.cvar)
        score = validation_score(result)
        kept = self.best is None or score > self.best
        minute = (t0 - self._start) / 60
        step = int(trainer.global_step)
        record = {"minute": minute, "step": step, "maps": self.rows(result)}
        saved = {"network": weights, "config": self.cfg, "validation": record}
        if kept:
            self.best = score
            torch.save(saved, self.path)
        if self.snapshots is not None:
            self.snapshots.mkdir(parents=True, exist_ok=True)
            torch.save(saved, self.snapshots / f"step_{step:08d}.pt")
        m = result.metrics()
        if self.window.maxlen > 1:
            if self.window and self.window[-1][0] == step:  # the same step again (at the end)
                self.window.pop()
            self.window.append((step, weights))
            if len(self.window) == self.window.maxlen:
                m.update(self.keep_average(minute, step))
        m["validation/seconds"] = time.monotonic() - t0
        if trainer.logger is not None:
            trainer.logger.log_metrics(m, step=trainer.global_step)
        self.history.append({"minute": round(minute, 2), "step": step, "kept": kept, **m})
        log.info(
            "validation at %.1f min: %d of %d maps finished%s",
            minute,
            result.finished,
            len(self.races.names),
            " (validated.pt)" if kept else "",
        )
        self._last = time.monotonic()
        return result

    def keep_average(self, minute: float, step: int) -> dict[str, float]:
        """Race the mean weights of the window and write them as averaged.pt (every time the
        window is full, so a stopped run keeps the latest); their metrics. The window's
        weights themselves are written as ensemble.pt, one agent that acts on the mean of
        their Q values (evaluation.load_ensemble), not raced here: it costs a forward pass
        per snapshot."""
        from trackmind.agent.weight_average import average_state_dicts

        weights = average_state_dicts([w for _, w in self.window])
        result = self.races.run(weights, self.k, self.cvar)
        record = {"minute": minute, "step": step, "maps": self.rows(result)}
        steps = [s for s, _ in self.window]
        torch.save(
            {"network": weights, "config": self.cfg, "validation": record, "averaged": steps},
            self.averaged_path,
        )
        members = [w for _, w in self.window]
        torch.save(
            {"network": members[-1], "members": members, "config": self.cfg, "ensemble": steps},
            self.ensemble_path,
        )
        log.info(
            "averaged weights of steps %d-%d: %d of %d maps finished",
            steps[0],
            steps[-1],
            result.finished,
            len(self.races.names),
        )
        return {f"validation/averaged_{k.split('/')[1]}": v for k, v in result.metrics().items()}

    def rows(self, result: ValidationResult) -> list[dict]:
        return [
            {"map": name, "progress": round(p, 4), "ratio": r}
            for name, p, r in zip(self.races.names, result.progress, result.ratios)
        ]
