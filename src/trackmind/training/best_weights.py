"""best.pt: the weights that drove the best greedy race, exactly.

Greedy policies scatter from version to version, so the final weights are not the best
ones. A greedy race is driven by the weights version it started with and arrives a race
later; WeightHistory keeps minutes of published versions (about 256 MB at most) so that
BestRaceKeeper can save exactly the version that drove a new best race.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from pathlib import Path
from typing import Any

import torch

from trackmind.collectors.shared_handles import SharedHandles, publish_weights

log = logging.getLogger(__name__)
HISTORY_BYTES = 256e6
GPU_HISTORY_SHARE = 0.05  # a GPU learner keeps versions in GPU memory: 5% of the card


def history_budget(gpu_bytes: int | None) -> float:
    """Bytes of weight versions to keep. A GPU learner publishes several versions a second
    and a greedy race lasts a minute of wall time there, so its history (kept where its
    weights are) takes 5% of the card (4 GB of an 80 GB one: about 150 versions of
    iqn_linesight) instead of 256 MB."""
    if gpu_bytes is None:
        return HISTORY_BYTES
    return max(HISTORY_BYTES, GPU_HISTORY_SHARE * gpu_bytes)


class WeightHistory:
    """The most recent published weight versions, oldest dropped first."""

    def __init__(self, keep: int) -> None:
        self.keep = int(keep)
        self.versions: OrderedDict[int, dict] = OrderedDict()

    @classmethod
    def sized_for(cls, net: torch.nn.Module, budget_bytes: float = HISTORY_BYTES):
        """As many versions of `net` as fit the budget (between 4 and 1024)."""
        nbytes = sum(t.numel() * t.element_size() for t in net.state_dict().values())
        return cls(max(4, min(1024, int(budget_bytes // max(nbytes, 1)))))

    def add(self, version: int, net: torch.nn.Module) -> None:
        self.versions[version] = {k: v.detach().clone() for k, v in net.state_dict().items()}
        while len(self.versions) > self.keep:
            self.versions.popitem(last=False)

    def get(self, version: int) -> dict | None:
        return self.versions.get(version)


class WeightPublisher:
    """The module's `publish`: weights to the collectors, and a copy into the history."""

    def __init__(self, shared: SharedHandles, history: WeightHistory) -> None:
        self.shared, self.history = shared, history

    def __call__(self, online: torch.nn.Module) -> int:
        version = publish_weights(self.shared, online)
        self.history.add(version, online)
        return version


class BestRaceKeeper:
    """The DataModule's `on_best_race`: write best.pt for a new best greedy race, then its media.

    When the race's version is older than the history, the module's current acting weights
    are saved instead (and said so).
    """

    def __init__(
        self,
        path: Path,
        cfg: dict,
        history: WeightHistory,
        module: Any,
        media: Any,
    ) -> None:
        self.path, self.cfg, self.history = Path(path), cfg, history
        self.module, self.media = module, media

    def __call__(self, r: dict) -> None:
        version = int(r.get("weights_version", -1))
        weights = self.history.get(version)
        exact = weights is not None  # the weights that drove the race
        if not exact:  # older than the versions kept: the closest we have
            log.warning(
                "best.pt: weights version %d of the best race is no longer kept; "
                "saving the current weights instead",
                version,
            )
            weights = self.module.acting.state_dict()
        race = {"map": r["map"], "race_time_ms": r["race_time"], "version": version, "exact": exact}
        torch.save({"network": weights, "config": self.cfg, "race": race}, self.path)
        self.media.record(r)
