"""The learner logs its step statistics only on the steps Lightning writes."""

from pathlib import Path
from types import SimpleNamespace

from omegaconf import OmegaConf

from trackmind.agent.network_config import build_network
from trackmind.training.module import IQNLightningModule

ROOT = Path(__file__).resolve().parents[1]


def _module() -> IQNLightningModule:
    raw = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "network" / "iqn_floats.yaml"))
    learner = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "learner" / "iqn.yaml"))
    return IQNLightningModule(build_network(raw, 184, None), learner)


def test_statistics_follow_lightnings_logging_steps():
    module = _module()
    assert module._logs_this_step()  # no trainer: always (tests, scripts)
    for writes in (False, True):
        module._trainer = SimpleNamespace(
            _logger_connector=SimpleNamespace(should_update_logs=writes)
        )
        assert module._logs_this_step() is writes
