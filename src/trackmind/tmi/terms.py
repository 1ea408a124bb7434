"""The game_lost termination term: cut races the game could not finish.

A real game that hung or closed is restarted by its backend, and the race in progress is
returned flagged `lost` (trackmind.tmi.observation). This term turns the flag into a cut
(truncated: the agent did nothing wrong). Backends without the flag never fire it.
"""

from __future__ import annotations

import numpy as np

from trackmind.env.manager import register_term
from trackmind.env.terminations import TerminationTerm


@register_term("termination", "game_lost")
class GameLostTermination(TerminationTerm):
    """The game lost the race (hung, closed, restarted, or released mid-race)."""

    default_outcome = "truncated"

    def _get_term(self) -> np.ndarray:
        lost = getattr(self.env.raw, "lost", None)
        if lost is None:
            return np.zeros(self.env.n_cars, bool)
        return np.asarray(lost, bool)
