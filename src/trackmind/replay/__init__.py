"""Experience, the n-step rule, mini-race collate and torchrl replay buffers.

Entry points: ``make_buffers`` (buffers.py) builds buffer / buffer_test from the ``buffer``
config; ``ReplayBuffers.add_rollout`` runs one race through
``fill_buffer_from_rollout_with_n_steps_rule`` (nstep.py); ``sample`` returns the mini-race
batch of ``buffer_collate_function`` (collate.py, minirace.py).
"""

from trackmind.replay.buffers import ReplayBuffers, make_buffers
from trackmind.replay.collate import buffer_collate_function
from trackmind.replay.config import BufferConfig
from trackmind.replay.experience import Experience
from trackmind.replay.minirace import mini_race_reread, sample_mini_race_clock
from trackmind.replay.nstep import fill_buffer_from_rollout_with_n_steps_rule
from trackmind.replay.transition_buffer import TransitionBuffer

__all__ = [
    "BufferConfig",
    "Experience",
    "ReplayBuffers",
    "TransitionBuffer",
    "buffer_collate_function",
    "fill_buffer_from_rollout_with_n_steps_rule",
    "make_buffers",
    "mini_race_reread",
    "sample_mini_race_clock",
]
