"""trainer.precision on the CPU: bf16 autocast warns where the CPU would emulate bf16."""

import logging

import pytest

from trackmind.training import run
from trackmind.training.schema import TrainerConfig


def _tcfg(precision: str) -> TrainerConfig:
    return TrainerConfig(
        accelerator="cpu",
        precision=precision,
        max_steps=1,
        max_time_s=None,
        val_check_interval=1,
        limit_val_batches=1,
        log_every_n_steps=1,
        progress_bar=False,
    )


@pytest.mark.parametrize(
    ("precision", "native", "warns"),
    [("bf16-mixed", False, True), ("bf16-mixed", True, False), ("32-true", False, False)],
)
def test_bf16_on_a_cpu_without_bf16_warns(monkeypatch, caplog, tmp_path, precision, native, warns):
    monkeypatch.setattr(run, "cpu_has_native_bf16", lambda: native)
    with caplog.at_level(logging.WARNING, logger=run.__name__):
        trainer = run.make_trainer(_tcfg(precision), None, [], tmp_path)
    assert trainer.precision == precision
    warned = [r.getMessage() for r in caplog.records if "bf16 instructions" in r.getMessage()]
    assert bool(warned) == warns
    if warns:
        assert warned[0].startswith("trainer.precision=bf16-mixed")


def test_cpu_has_native_bf16_answers_a_bool():
    assert isinstance(run.cpu_has_native_bf16(), bool)
