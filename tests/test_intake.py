"""RaceIntake: races stored on a thread of their own, recorded on the learner's, and a rate
limiter that keeps the replay ratio (training/intake.py, ReplayDataModule(intake_thread))."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np
import pytest
import torch

from trackmind.collectors.shared_handles import make_shared
from trackmind.queueing import CollectorStats, RaceInMemory
from trackmind.replay.buffers import make_buffers
from trackmind.training.datamodule import ReplayDataModule
from trackmind.training.intake import RaceIntake, intake_allows, rotation, wait_for_any


def _until(cond, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_intake_allows_new_data_up_to_the_learner_s_credit():
    # ratio 32, 4096 samples ahead: 128 new transitions are 4096 samples, allowed; 129 not
    assert intake_allows(0, 128, 32.0, 4096)
    assert not intake_allows(0, 129, 32.0, 4096)
    # the learner used 3200 samples (100 transitions' worth): 228 allowed, 229 not
    assert intake_allows(3200, 228, 32.0, 4096)
    assert not intake_allows(3200, 229, 32.0, 4096)


def test_messages_come_round_robin_and_are_handled_on_the_calling_thread():
    a, b = queue.Queue(), queue.Queue()
    for m in ("a1", "a2", "a3"):
        a.put(m)
    b.put("b1")
    took_on: set[str] = set()

    def take(msg):
        took_on.add(threading.current_thread().name)
        return msg.upper()

    intake = RaceIntake(lambda: [a, None, b], take, lambda: True).start()
    assert _until(lambda: a.empty() and b.empty())
    handled: list[str] = []
    assert _until(lambda: intake.absorb(handled.append) + len(handled) >= 4)
    intake.close()
    assert handled == ["A1", "B1", "A2", "A3"]  # one message per queue a round
    assert took_on == {"race-intake"}


def test_rotation_by_hand():
    assert rotation(3, 0) == [0, 1, 2]
    assert rotation(3, 2) == [2, 0, 1]
    assert rotation(3, 4) == [1, 2, 0]  # a start past the end (a queue list that shrank)
    assert rotation(0, 5) == []


def test_a_limiter_that_admits_one_race_at_a_time_still_serves_every_collector():
    queues = [queue.Queue() for _ in range(4)]
    for i, q in enumerate(queues):
        for r in range(3):
            q.put((i, r))
    credit = threading.Semaphore(0)  # the learner admits one race per made_room

    def take(msg):
        credit.acquire()  # spends the credit this race was admitted on
        return msg

    def is_open() -> bool:
        if credit.acquire(blocking=False):
            credit.release()
            return True
        return False

    intake = RaceIntake(lambda: queues, take, is_open).start()
    handled: list[tuple[int, int]] = []

    def one_more() -> bool:  # the admitted race reached the learner's thread
        return intake.absorb(handled.append) > 0

    for _ in range(8):
        credit.release()
        intake.made_room()
        assert _until(one_more)
    intake.close()
    # each admitted race comes from the next collector in turn, not from the first ones
    assert [i for i, _ in handled] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [r for _, r in handled] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_closed_limiter_leaves_races_in_their_queue_until_the_learner_makes_room():
    q: queue.Queue = queue.Queue()
    q.put("race")
    is_open = threading.Event()
    intake = RaceIntake(lambda: [q], lambda m: m, is_open.is_set).start()
    time.sleep(0.2)
    assert intake.absorb(lambda x: None) == 0 and q.qsize() == 1  # held back
    is_open.set()
    intake.made_room()
    got: list[str] = []
    assert _until(lambda: intake.absorb(got.append) + len(got) >= 1)
    assert got == ["race"]
    intake.close()


def test_a_failed_intake_is_raised_on_the_learner_s_thread():
    q: queue.Queue = queue.Queue()
    q.put("bad race")

    def take(msg):
        raise ValueError("cannot read " + msg)

    intake = RaceIntake(lambda: [q], take, lambda: True).start()
    assert _until(lambda: intake.error is not None)
    with pytest.raises(RuntimeError, match="race intake thread failed.*cannot read bad race"):
        intake.absorb(lambda x: None)
    intake.close()


def _race(rng: np.random.Generator, t: int) -> dict:
    return {
        "map": "m",
        "frames": (),
        "state_float": rng.standard_normal((t + 1, 3), dtype=np.float32),
        "actions": rng.integers(0, 4, t),
        "action_was_greedy": np.ones(t, bool),
        "rewards": rng.standard_normal(t),
        "potentials": {},
        "finished": True,
        "race_time": 1000.0,
    }


def test_the_datamodule_stores_races_on_the_thread_and_keeps_the_replay_ratio():
    """With intake_thread, races reach the buffers while the learner samples; records and
    collector reports are kept on the learner's thread; once learning has started, the
    intake stops intake_ahead_batches ahead of the replay ratio, leaving races in the queue."""
    rng = np.random.default_rng(0)
    shared = make_shared(torch.nn.Linear(2, 2))
    q: queue.Queue = queue.Queue()
    shared.queues = [q]
    batch, ratio, t = 16, 2.0, 100
    q.put(CollectorStats(0, {"inference_ms_per_action": 0.5}))
    for _ in range(60):
        q.put(RaceInMemory(_race(rng, t)))
    buffers = make_buffers({"learning_starts": 50}, None, 3)
    dm = ReplayDataModule(
        buffers, shared, batch, ratio, lambda: 1.0, intake_thread=True, intake_ahead_batches=64
    )
    dm.transitions_at_start = 0  # as if learning had started with an empty buffer
    dm.train_dataloader()
    ahead = 64 * batch  # 1024 samples: 512 transitions at ratio 2

    def settled() -> bool:
        before = dm.transitions_added
        time.sleep(0.1)
        return dm.transitions_added == before > 0

    assert _until(settled)
    stored = dm.transitions_added
    assert ratio * (stored - t) <= ahead < ratio * stored  # stopped after one race too many
    assert q.qsize() > 50  # the rest wait in the queue, as a collector's would
    assert dm.stats.races == 0 and not dm.stats.collector_timings  # none off its thread
    for _ in range(80):  # 1280 samples learned: room for 640 more transitions
        assert dm.next_batch()["action"].shape == (batch,)
    assert _until(lambda: dm.transitions_added > stored)
    dm.teardown("fit")
    assert dm._intake is None
    assert not any(th.name == "race-intake" for th in threading.enumerate())
    new = dm.transitions_added
    # within the limiter's credit, yet always ahead of the learner (it never had to wait)
    assert dm.samples_served < ratio * new and ratio * (new - t) <= dm.samples_served + ahead
    assert dm.stats.races == new // t == 60 - q.qsize()  # every stored race recorded
    assert dm.stats.collector_timings[0] == {"inference_ms_per_action": 0.5}


def test_an_idle_intake_sleeps_on_a_process_queue_s_pipe_until_a_message_comes():
    import multiprocessing

    q = multiprocessing.get_context("spawn").Queue()
    start = time.monotonic()
    wait_for_any([q, None], 0.3)  # nothing comes: the whole timeout, not a 2-ms poll
    assert time.monotonic() - start >= 0.25
    timer = threading.Timer(0.1, q.put, ("race",))
    timer.start()
    start = time.monotonic()
    wait_for_any([None, q, q], 5.0)  # woken by the message, long before the timeout
    assert 0.05 <= time.monotonic() - start < 2.0
    assert q.get(timeout=1.0) == "race"
    timer.join()
    q.close()
    q.join_thread()


def test_thread_queues_are_polled_and_no_queue_at_all_is_a_plain_wait():
    start = time.monotonic()
    wait_for_any([queue.Queue()], 1.0)  # nothing to wait on: one poll step
    assert time.monotonic() - start < 0.5
    start = time.monotonic()
    wait_for_any([None], 0.2)
    assert time.monotonic() - start >= 0.15


def test_an_empty_round_waits_with_the_idle_wait_and_never_spins():
    waits: list[tuple[float, int]] = []

    def idle_wait(queues, timeout_s):  # returns at once, as a pipe that stays readable would
        waits.append((time.monotonic(), len(queues)))

    intake = RaceIntake(lambda: [queue.Queue(), None], lambda m: m, lambda: True, idle_wait)
    intake.start()
    time.sleep(0.3)
    intake.close()
    # without the intake's own POLL_S pause after an early wake-up this would spin (thousands
    # of waits in 0.3 s): the waits come about 2 ms apart, handed the queue list. Not every
    # gap: a wait the scheduler stretches past POLL_S is no early wake-up, so the next one
    # follows at once, and its gap may be shorter
    assert 10 <= len(waits) <= 0.3 / 0.002 + 10
    gaps = sorted(b[0] - a[0] for a, b in zip(waits, waits[1:]))
    assert gaps[len(gaps) // 2] >= 0.0019
    assert {n for _, n in waits} == {2}


def test_bench_intake_times_reading_and_storing_races(capsys):
    import bench_intake

    args = ["--actions", "6", "--races", "3", "--repeats", "2", "--frame", "1", "8", "8"]
    assert bench_intake.main([*args, "--rate", "1000"]) == 0
    out = capsys.readouterr().out
    assert "races of 6 actions, 1x8x8 frames on cpu" in out
    read = float(out.split("unpickle): ")[1].split(" us")[0])
    store = float(out.split("buffers): ")[1].split(" us")[0])
    share = float(out.split("transitions/s: ")[1].split("%")[0])
    assert read > 0 and store > 0
    assert share == pytest.approx(1000 * (read + store) / 1e4, abs=0.06)  # rate x cost, in %


def test_bench_intake_refuses_cuda_without_a_gpu_in_one_line(capsys):
    import bench_intake

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit) as exit_:
        bench_intake.main(["--device", "cuda"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--device: cuda, but torch sees no CUDA device here") and "\n" not in err
