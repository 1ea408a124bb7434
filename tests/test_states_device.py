"""StateStore with its frames on a device: the tensor path (append by copy_, gather by
index_select) a GPU store takes, run on the CPU against the numpy path."""

from __future__ import annotations

import numpy as np
import torch

from trackmind.replay.states import StateStore


def _stores(rows: int = 7) -> tuple[StateStore, StateStore]:
    host, device = StateStore(rows, (1, 3, 4), 2), StateStore(rows, (1, 3, 4), 2)
    device._frames = None  # the branch a cuda store takes, on CPU tensors
    return host, device


def test_device_path_appends_and_gathers_what_the_host_path_does():
    host, dev = _stores()
    rng = np.random.default_rng(0)
    for k in (3, 5, 9):  # wraps the ring, and a write larger than the ring
        frames = rng.integers(0, 256, (k, 1, 3, 4), dtype=np.uint8)
        floats = rng.standard_normal((k, 2), dtype=np.float32)
        pot = rng.standard_normal(k).astype(np.float32)
        assert host.append(frames, floats, pot) == dev.append(frames, floats, pot)
    gids = torch.arange(host.lo, host.written).flip(0)
    for a, b in zip(host.gather(gids), dev.gather(gids)):
        assert torch.equal(a, b)
    exported = dev.export(dev.lo)
    assert exported["frames"].device.type == "cpu"
    assert torch.equal(exported["frames"], host.export(host.lo)["frames"])


def test_a_store_remembers_its_device():
    store = StateStore(4, (1, 2, 2), 3, device="cpu")
    assert store.device == torch.device("cpu") and store.frames.device.type == "cpu"
    copy = StateStore.from_export(store.export(0), 8, (1, 2, 2), 3, device="cpu")
    assert copy.device == store.device


def test_frames_device_value_by_value():
    import pytest

    from trackmind.errors import ConfigError
    from trackmind.replay.config import frames_device

    gib = 2**30
    assert frames_device("auto", "cuda", 4 * gib, 80 * gib) == "cuda"
    assert frames_device("auto", "cuda", 40 * gib, 80 * gib) == "cuda"  # exactly half
    assert frames_device("auto", "cuda", 41 * gib, 80 * gib) == "cpu"
    assert frames_device("auto", "cpu", 1, None) == "cpu"
    assert frames_device("device", "cuda", 100 * gib, 80 * gib) == "cuda"  # asked for
    assert frames_device("device", "cpu", 1, None) == "cpu"  # a CPU learner's device
    assert frames_device("host", "cuda", 1, 80 * gib) == "cpu"
    with pytest.raises(ConfigError, match="buffer.frames_on"):
        frames_device("gpu", "cuda", 1, 80 * gib)


def test_max_frame_bytes_counts_both_buffers_and_the_margin():
    from trackmind.replay.config import BufferConfig

    cfg = BufferConfig.from_dict(
        {
            "capacity_schedule": [[0, 1000], [10, 2000]],
            "learning_starts": 10,
            "test_fraction": 0.05,
            "state_margin": 0.1,
        }
    )
    assert cfg.max_frame_bytes(100) == int(2000 * 1.05 * 1.1 * 100)
