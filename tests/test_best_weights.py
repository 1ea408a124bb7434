"""best.pt: the exact weights of the best greedy race, chosen from the published versions.

WeightHistory keeps the newest versions within its byte budget; BestRaceKeeper saves the
version a new best race was driven by, or says it saves the current weights when that version
is gone; the run logs best.pt with its other files when one was written.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from trackmind.training.best_weights import BestRaceKeeper, WeightHistory, history_budget
from trackmind.training.run import run_files


def _net(value: float) -> torch.nn.Module:
    net = torch.nn.Linear(2, 1)
    with torch.no_grad():
        net.weight.fill_(value)
        net.bias.fill_(value)
    return net


class _Module:
    def __init__(self, value: float) -> None:
        self.acting = _net(value)


class _Media:
    def __init__(self) -> None:
        self.recorded: list[dict] = []

    def record(self, r: dict) -> None:
        self.recorded.append(r)


def test_history_keeps_the_newest_versions_within_its_budget():
    net = _net(0.0)  # 3 float32 = 12 bytes
    assert WeightHistory.sized_for(net, budget_bytes=12 * 6).keep == 6
    assert WeightHistory.sized_for(net, budget_bytes=1).keep == 4  # at least 4
    assert WeightHistory.sized_for(net, budget_bytes=1e9).keep == 1024  # at most 1024
    history = WeightHistory(3)
    for v in range(1, 6):
        history.add(v, _net(float(v)))
    assert list(history.versions) == [3, 4, 5]
    assert history.get(2) is None
    assert float(history.get(4)["weight"][0, 0]) == 4.0


def test_history_copies_so_later_training_leaves_a_version_alone():
    net, history = _net(1.0), WeightHistory(4)
    history.add(7, net)
    with torch.no_grad():
        net.weight.fill_(9.0)
    assert float(history.get(7)["weight"][0, 0]) == 1.0


def _race(version: int) -> dict:
    return {"map": "starter", "race_time": 10_500, "weights_version": version}


def test_best_race_saves_the_version_that_drove_it(tmp_path: Path):
    history, media = WeightHistory(4), _Media()
    history.add(3, _net(3.0))
    history.add(4, _net(4.0))
    keeper = BestRaceKeeper(tmp_path / "best.pt", {"seed": 0}, history, _Module(9.0), media)
    keeper(_race(3))
    saved = torch.load(tmp_path / "best.pt", weights_only=True)
    assert float(saved["network"]["weight"][0, 0]) == 3.0  # not the newest, not the current
    assert saved["race"] == {"map": "starter", "race_time_ms": 10_500, "version": 3, "exact": True}
    assert saved["config"] == {"seed": 0} and media.recorded == [_race(3)]


def test_best_race_of_a_forgotten_version_saves_the_current_weights_and_says_so(
    tmp_path: Path, caplog
):
    history = WeightHistory(4)
    history.add(10, _net(10.0))
    keeper = BestRaceKeeper(tmp_path / "best.pt", {}, history, _Module(9.0), _Media())
    with caplog.at_level(logging.WARNING):
        keeper(_race(2))
    saved = torch.load(tmp_path / "best.pt", weights_only=True)
    assert float(saved["network"]["weight"][0, 0]) == 9.0
    assert saved["race"]["exact"] is False and saved["race"]["version"] == 2
    assert "version 2 of the best race is no longer kept" in caplog.text


def test_a_run_logs_best_pt_when_a_greedy_race_finished(tmp_path: Path):
    summary, agent = tmp_path / "summary.json", tmp_path / "agent.pt"
    assert run_files(summary, agent) == [summary, agent]
    (tmp_path / "best.pt").write_bytes(b"weights")
    assert run_files(summary, agent) == [summary, agent, tmp_path / "best.pt"]


def test_a_gpu_learner_keeps_five_percent_of_its_card_of_versions():
    assert history_budget(None) == 256e6  # a CPU learner: host memory
    assert history_budget(80 * 10**9) == 4e9  # 5% of an 80 GB card
    assert history_budget(2 * 10**9) == 256e6  # never less than on the CPU
    linesight = 26_313_332  # bytes of iqn_linesight's state dict
    keep = WeightHistory.sized_for(torch.nn.Linear(linesight // 4, 1, bias=False), 4e9).keep
    assert keep == 152
