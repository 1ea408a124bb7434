"""ReplayDataModule through a real Lightning Trainer: a learner starved of data stops.

No collector ever delivers a race here, so the buffer never reaches learning_starts; the
DataModule's stream ends at its deadline (it only reports `starved`) and StopWhenStarved
ends fit, where before the DataModule reached into the trainer itself.
"""

import time

import lightning as L
import pytest
import torch

from trackmind.collectors.shared_handles import make_shared
from trackmind.replay.buffers import make_buffers
from trackmind.training.callbacks import StopWhenStarved
from trackmind.training.datamodule import ReplayDataModule, replay_ratio_allows


class _Learner(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.steps = 0

    def training_step(self, batch, batch_idx):
        self.steps += 1
        return (self.w**2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`")
def test_a_starved_learner_stops_at_its_deadline():
    shared = make_shared(torch.nn.Linear(2, 2))
    buffers = make_buffers({"learning_starts": 100}, None, 2)
    dm = ReplayDataModule(buffers, shared, 8, 1.0, gamma=lambda: 1.0, wait_limit_s=1.0)
    module = _Learner()
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=-1,
        callbacks=[StopWhenStarved(dm)],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    t0 = time.monotonic()
    trainer.fit(module, datamodule=dm)
    took = time.monotonic() - t0
    assert dm.starved and trainer.should_stop
    assert module.steps == 0 and trainer.current_epoch <= 1
    assert 1.0 <= took < 15.0, took


def test_batches_are_pinned_only_for_a_gpu_learner():
    shared = make_shared(torch.nn.Linear(2, 2))
    buffers = make_buffers({"learning_starts": 100}, None, 2)
    assert not ReplayDataModule(buffers, shared, 8, 1.0, lambda: 1.0).train_dataloader().pin_memory
    gpu = ReplayDataModule(buffers, shared, 8, 1.0, lambda: 1.0, pin_memory=True)
    assert gpu.train_dataloader().pin_memory


def test_replay_ratio_allows_counts_samples_against_data():
    # ratio 8, 100 new transitions: up to 800 samples; 768 served + 32 fits, + 33 does not
    assert replay_ratio_allows(768, 32, 100, 8.0)
    assert not replay_ratio_allows(768, 33, 100, 8.0)


def test_collector_messages_are_told_apart_by_type(tmp_path, caplog):
    """Typed queue messages (trackmind.queueing): stats and errors are counted, a lost race
    file and an unknown message are logged and bring no race."""
    from trackmind.queueing import CollectorError, CollectorStats, RaceFile

    shared = make_shared(torch.nn.Linear(2, 2))
    buffers = make_buffers({"learning_starts": 100}, None, 2)
    dm = ReplayDataModule(buffers, shared, 8, 1.0, gamma=lambda: 1.0)
    assert dm._handle(CollectorStats(3, {"inference_ms_per_action": 0.5})) == 0
    assert dm.stats.collector_timings[3] == {"inference_ms_per_action": 0.5}
    with caplog.at_level("WARNING"):
        assert dm._handle(CollectorError(1, "Traceback: boom")) == 0
        assert dm._handle(RaceFile(str(tmp_path / "gone.pkl"))) == 0
        assert dm._handle({"type": "race"}) == 0  # a message of the old dict kind
    assert dm.stats.collector_errors == 1
    text = caplog.text
    assert "collector 1 failed" in text and "boom" in text
    assert "lost a race file" in text and "unknown collector message: 'dict'" in text
    assert len(buffers) == 0 and dm.transitions_added == 0
