"""BatchPrefetcher: batches in order, sampled ahead on a thread, errors on the learner's
thread; real ReplayBuffers sampled by the thread while races arrive on the main one."""

import threading

import numpy as np
import pytest
import torch

import trackmind.replay.prefetch as prefetch
from trackmind.collectors.shared_handles import make_shared
from trackmind.replay.buffers import make_buffers
from trackmind.replay.prefetch import BatchPrefetcher
from trackmind.training.datamodule import ReplayDataModule


class Counter:
    """sample(): batch i holds i; records the thread that made it."""

    def __init__(self) -> None:
        self.calls = 0
        self.threads: set[str] = set()
        self.lock = threading.Lock()

    def __call__(self) -> dict[str, torch.Tensor]:
        with self.lock:
            i = self.calls
            self.calls += 1
        self.threads.add(threading.current_thread().name)
        return {"i": torch.tensor([i])}


def test_batches_come_in_order_and_depth_ahead_on_a_worker_thread():
    sample = Counter()
    with BatchPrefetcher(sample, depth=2) as p:
        got = [int(p.take()["i"]) for _ in range(5)]
        # five taken, two more in flight: seven sampled once the thread is done
        for f in list(p._pending):
            f.result()
        assert sample.calls == 7
    assert got == [0, 1, 2, 3, 4]
    assert sample.threads and all(n.startswith("trackmind-prefetch") for n in sample.threads)


def test_a_sampling_error_is_raised_by_take():
    def broken():
        raise ValueError("no transitions")

    with BatchPrefetcher(broken) as p, pytest.raises(ValueError, match="no transitions"):
        p.take()


def test_close_stops_the_thread_and_take_is_refused():
    p = BatchPrefetcher(Counter(), depth=1)
    p.take()
    p.close()
    assert not any(t.name.startswith("trackmind-prefetch") for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="closed"):
        p.take()
    with pytest.raises(ValueError, match="depth"):
        BatchPrefetcher(Counter(), depth=0)


def test_pin_pins_each_batch_on_the_thread(monkeypatch):
    seen = []

    def fake_pin(batch):
        seen.append(threading.current_thread().name)
        return {k: v + 100 for k, v in batch.items()}

    monkeypatch.setattr(prefetch, "pinned", fake_pin)
    with BatchPrefetcher(Counter(), pin=True) as p:
        assert int(p.take()["i"]) == 100
    assert seen and seen[0].startswith("trackmind-prefetch")


def _race(rng: np.random.Generator, t: int, float_dim: int = 3) -> dict:
    return {
        "frames": (),
        "state_float": rng.standard_normal((t + 1, float_dim), dtype=np.float32),
        "actions": rng.integers(0, 4, t),
        "action_was_greedy": np.ones(t, bool),
        "rewards": rng.standard_normal(t),
        "potentials": {},
        "finished": True,
    }


def test_replay_buffers_sampled_on_the_thread_while_races_arrive():
    """Races added, capacity grown and priorities updated on this thread while the prefetch
    thread samples: every batch is whole (the buffers' lock), none is lost."""
    rng = np.random.default_rng(0)
    cfg = {
        "capacity_schedule": [[0, 600], [1000, 3000]],
        "learning_starts": 1,
        "prioritized": True,
    }
    rb = make_buffers(cfg, None, 3)
    rb.add_rollout(_race(rng, 200), 0.99)
    with BatchPrefetcher(lambda: rb.sample(64), depth=2) as p:
        for step in range(60):
            batch = p.take()
            assert batch["action"].shape == (64,)
            assert torch.isfinite(batch["state_float"]).all()
            rb.update_priorities(batch["indices"], torch.rand(64))
            rb.add_rollout(_race(rng, 50), 0.99)
            rb.update_capacity(step * 40)
    assert len(rb) > 600  # grew to the schedule's second capacity while sampled


def test_the_datamodule_takes_prefetched_batches_and_closes_the_thread():
    rng = np.random.default_rng(1)
    shared = make_shared(torch.nn.Linear(2, 2))
    rb = make_buffers({"learning_starts": 10}, None, 3)
    rb.add_rollout(_race(rng, 100), 0.99)
    dm = ReplayDataModule(rb, shared, 16, 1000.0, gamma=lambda: 1.0, prefetch_batches=1)
    loader = dm.train_dataloader()
    assert not loader.pin_memory and dm._prefetcher is not None
    assert dm.next_batch()["action"].shape == (16,)  # the start's one batch of credit
    rb.add_rollout(_race(rng, 100), 0.99)  # new data (counted as _add_race counts a race):
    dm.transitions_added += 100  # the replay ratio allows more
    for _ in range(2):
        assert dm.next_batch()["action"].shape == (16,)
    assert dm.samples_served == 48
    dm.teardown("fit")
    assert dm._prefetcher is None
    assert not any(t.name.startswith("trackmind-prefetch") for t in threading.enumerate())
    # no prefetch: sampled on the learner's thread
    plain = ReplayDataModule(rb, shared, 16, 1000.0, gamma=lambda: 1.0)
    plain.train_dataloader()
    assert plain._prefetcher is None and plain.next_batch()["action"].shape == (16,)


def test_a_cpu_device_needs_no_stream():
    p = BatchPrefetcher(Counter(), depth=1, device="cpu")
    assert p.stream is None and int(p.take()["i"]) == 0
    p.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_batches_are_sampled_on_the_thread_stream_and_ready_on_the_learner():
    seen: list[int] = []

    def on_gpu() -> dict[str, torch.Tensor]:
        seen.append(torch.cuda.current_stream().stream_id)
        big = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        return {"x": big * 2.0, "i": torch.tensor([len(seen)])}

    with BatchPrefetcher(on_gpu, depth=2, pin=True, device="cuda") as p:
        for _ in range(4):
            batch = p.take()
            # the learner's stream waits for the gather: the values are complete here
            assert float(batch["x"][-1]) == 2.0 * ((1 << 20) - 1)
            assert batch["i"].is_pinned()
    assert seen and set(seen) == {p.stream.stream_id}
    assert torch.cuda.current_stream().stream_id not in seen


def test_sampling_times_count_the_threads_wall_cpu_and_lock_wait():
    """The prefetch thread's ms a batch (wall, its CPU) and sample()'s wait for the buffers'
    lock, per batch since the last flush, as RaceMetricsCallback logs them."""
    from trackmind.training.callbacks import RaceMetricsCallback

    rng = np.random.default_rng(2)
    shared = make_shared(torch.nn.Linear(2, 2))
    rb = make_buffers({"learning_starts": 10}, None, 3)
    rb.add_rollout(_race(rng, 100), 0.99)
    dm = ReplayDataModule(rb, shared, 16, 1000.0, gamma=lambda: 1.0, prefetch_batches=1)
    dm.train_dataloader()
    cb = RaceMetricsCallback(dm)
    dm.next_batch()  # batch 0 taken, batch 1 in the making
    dm.transitions_added += 100  # as _add_race counts a race: the replay ratio allows more
    dm._prefetcher._pending[0].result()
    with rb.lock:  # batch 2 waits for the lock the learner's thread holds
        dm.next_batch()
        threading.Event().wait(0.1)
    dm._prefetcher._pending[0].result()
    times = dm.prefetch_times
    assert times.batches == 3
    assert times.wall_s >= 0.1 > times.cpu_s >= 0.0  # waiting costs no CPU
    m = cb._sampling_times(dm)
    assert m["throughput/replay_lock_wait_ms"] >= 100.0 / 3 * 0.9
    assert m["throughput/prefetch_sample_ms"] >= m["throughput/replay_lock_wait_ms"]
    assert m["throughput/prefetch_sample_cpu_ms"] < m["throughput/prefetch_sample_ms"]
    assert cb._sampling_times(dm) == {}  # no new batch since
    dm.teardown("fit")
    assert dm.prefetch_times is None
