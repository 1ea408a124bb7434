"""The buffer / buffer_test split, made in chunks of consecutive transitions.

Neighbouring transitions of a race look almost alike; splitting transition by transition
would put near-copies of every test transition in the training buffer and hide
overfitting. Whole chunks go to one side, so test transitions mostly have test neighbours.
"""

from __future__ import annotations

import numpy as np


def chunk_test_mask(
    n_transitions: int, chunk_length: int, test_fraction: float, rng: np.random.Generator
) -> np.ndarray:
    """(n_transitions,) bool: True where the transition goes to buffer_test.

    Chunk k holds transitions [k * chunk_length, (k + 1) * chunk_length) of the race; each
    chunk is drawn independently, test with probability ``test_fraction``.
    """
    if chunk_length < 1:
        raise ValueError(f"chunk_length must be >= 1, got {chunk_length}")
    n_chunks = -(-n_transitions // chunk_length)
    chunk_is_test = rng.random(n_chunks) < test_fraction
    return np.repeat(chunk_is_test, chunk_length)[:n_transitions]


def runs(mask: np.ndarray) -> list[tuple[int, int, bool]]:
    """Maximal runs of equal values as (start, stop, value), in order."""
    if len(mask) == 0:
        return []
    change = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    starts = np.concatenate(([0], change))
    stops = np.concatenate((change, [len(mask)]))
    return [(int(a), int(b), bool(mask[a])) for a, b in zip(starts, stops)]
