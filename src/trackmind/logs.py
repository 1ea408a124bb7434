"""A terminal that shows trackmind's lines once: library chatter silenced where it is raised.

Each rule names the library logger (or the warning's message and module) it quiets, so a
library's warnings about a user's own code still show, and nothing is silenced globally.
"""

from __future__ import annotations

import logging
import warnings

# Lightning's advertisement and device lines (its other lines, such as "Time limit reached",
# stay); trackmind logs its own outputs
LIGHTNING_INFO = "lightning.pytorch.utilities.rank_zero"
LIGHTNING_CHATTER = ("GPU available", "TPU available", "HPU available", "\N{ELECTRIC LIGHT BULB}")


def _not_chatter(record: logging.LogRecord) -> bool:
    return not str(record.msg).lstrip().startswith(LIGHTNING_CHATTER)


# INFO lines a run prints once, of no use to its user (storage set-up, monitor start)
QUIET_INFO = (
    "torchrl",  # "Initialized LazyTensorStorage ..." in ANSI colours, twice per run
    "mlflow.store.db.utils",  # "Creating initial MLflow database tables..."
    "mlflow.system_metrics.system_metrics_monitor",  # "Started monitoring system metrics."
)


def tidy_library_output() -> None:
    """Quiet the libraries' own lines; call once logging is configured (Hydra's job logging).

    Lightning adds console handlers of its own to `lightning` (its "INFO: ..." lines),
    `lightning.pytorch` and `lightning.fabric` when it is imported before logging is
    configured: with Hydra's root handler as well, each of its lines printed twice. Its
    handlers go, and its records reach the root once. torchrl's logger has a stdout handler
    of its own and, in some releases (0.14.0), does not propagate: the same treatment, so
    its warnings show once, in the run's log file too.
    """
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "torchrl"):
        lg = logging.getLogger(name)
        for handler in list(lg.handlers):
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                lg.removeHandler(handler)
        lg.propagate = True
    lightning_info = logging.getLogger(LIGHTNING_INFO)
    if _not_chatter not in lightning_info.filters:
        lightning_info.addFilter(_not_chatter)
    for name in QUIET_INFO:
        logging.getLogger(name).setLevel(logging.WARNING)
    # torch deprecates LeafSpec() inside Lightning's own pytree helper: Lightning's to fix
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
