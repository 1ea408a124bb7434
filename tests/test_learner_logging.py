"""The learner logs its step statistics only on the steps Lightning writes."""

from types import SimpleNamespace

from specs import float_learner


def test_statistics_follow_lightnings_logging_steps():
    module = float_learner()
    assert module._logs_this_step()  # no trainer: always (tests, scripts)
    for writes in (False, True):
        module._trainer = SimpleNamespace(
            _logger_connector=SimpleNamespace(should_update_logs=writes)
        )
        assert module._logs_this_step() is writes
