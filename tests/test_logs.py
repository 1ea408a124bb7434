"""The terminal shows trackmind's lines once: library chatter is quieted on its own logger."""

import logging
import warnings

from trackmind.logs import LIGHTNING_INFO, tidy_library_output


def test_library_chatter_is_quieted_where_it_is_raised(caplog):
    lightning = logging.getLogger("lightning.pytorch")
    lightning.addHandler(logging.StreamHandler())  # as Lightning does before logging is set up
    lightning.propagate = False
    torchrl = logging.getLogger("torchrl")
    torchrl.addHandler(logging.StreamHandler())  # as torchrl 0.14.0 does when imported
    torchrl.propagate = False
    tidy_library_output()
    tidy_library_output()  # twice is harmless (one filter)
    assert not [h for h in lightning.handlers if type(h) is logging.StreamHandler]
    assert lightning.propagate
    assert not [h for h in torchrl.handlers if type(h) is logging.StreamHandler]
    assert torchrl.propagate
    rank_zero = logging.getLogger(LIGHTNING_INFO)
    assert len(rank_zero.filters) == 1
    with caplog.at_level(logging.INFO):
        rank_zero.info("GPU available: False, used: False")
        rank_zero.info("\N{ELECTRIC LIGHT BULB} Tip: For seamless cloud logging ...")
        rank_zero.info("Time limit reached. Elapsed time is 0:10:00.")
        logging.getLogger("torchrl").info("Initialized LazyTensorStorage")
        logging.getLogger("torchrl").warning("a torchrl warning still shows")
        logging.getLogger("trackmind.x").info("trackmind's own line")
    shown = [r.getMessage() for r in caplog.records]
    assert shown == [
        "Time limit reached. Elapsed time is 0:10:00.",
        "a torchrl warning still shows",
        "trackmind's own line",
    ]
    # the pytree deprecation is silenced for Lightning's module only
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        tidy_library_output()
        msg = "`isinstance(treespec, LeafSpec)` is deprecated, use ..."
        warnings.warn_explicit(
            msg, FutureWarning, "_pytree.py", 21, "lightning.pytorch.utilities._pytree"
        )
        warnings.warn_explicit(msg, FutureWarning, "mine.py", 1, "mine")
    assert [str(w.message) for w in seen] == [msg]
