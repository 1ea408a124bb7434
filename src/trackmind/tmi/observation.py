"""The observation backends add to GameObservation: a lost-race flag and the action buffer.

`lost` marks a race the game could not finish (it hung or closed and was restarted); the
`game_lost` termination term cuts such races. `action_buffer` holds the last actions sent
by the real-time wrapper (oldest first, the one being applied now last), as rtgym appends
them to observations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trackmind.game.contract import GameObservation


@dataclass
class BackendObservation(GameObservation):
    """GameObservation with the optional per-car extras of the real-game backends."""

    lost: np.ndarray | None = None  # (B,) bool
    action_buffer: np.ndarray | None = None  # (B, act_buf_len) int64
