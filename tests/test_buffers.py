"""Replay buffers: frames stored once and never read stale, growth, split, PER, checkpoints."""

import numpy as np
import pytest
import torch

from trackmind.errors import ConfigError
from trackmind.replay.buffers import make_buffers
from trackmind.replay.config import BufferConfig
from trackmind.replay.experience import Experience
from trackmind.replay.transition_buffer import TransitionBuffer, record_nbytes

FRAME = (1, 4, 5)
F = 4


def race(first_id: int, t_count: int, n: int = 3) -> Experience:
    """States with ids first_id.. : frame value id % 251, floats [0, id, 0, 0], Phi = id / 2;
    transition of state id has action id % 12 and rewards id + [0, 1, 2]."""
    ids = first_id + np.arange(t_count + 1)
    floats = np.zeros((t_count + 1, F), dtype=np.float32)
    floats[:, 1] = ids
    return Experience(
        frames=np.broadcast_to(
            (ids % 251).astype(np.uint8)[:, None, None, None], (t_count + 1, *FRAME)
        ),
        floats=floats,
        potential=(ids / 2).astype(np.float32),
        action=ids[:-1] % 12,
        n_steps=np.minimum(n, t_count - np.arange(t_count)),
        rewards=(ids[:-1, None] + np.arange(n)).astype(np.float32),
        gammas=np.ones((t_count, n), dtype=np.float32),
        terminal_actions=np.full(t_count, np.inf, dtype=np.float32),
    )


class Feeder:
    """Adds races to one buffer, numbering states as the buffer's own state ids."""

    def __init__(self, buffer: TransitionBuffer):
        self.buffer, self.next_id = buffer, 0

    def add(self, t_count: int) -> None:
        self.buffer.add(race(self.next_id, t_count))
        self.next_id += t_count + 1


def check_live(buffer: TransitionBuffer) -> None:
    """Every live record reads the state rows it was written with."""
    rec = buffer.live_records()
    gid, n = rec["state_gid"], rec["n_steps"].long()
    assert int(gid.min()) >= buffer.states.lo
    frames, floats, potential = buffer.states.gather(gid)
    next_frames, next_floats, _ = buffer.states.gather(gid + n)
    np.testing.assert_array_equal(floats[:, 1], gid)
    np.testing.assert_array_equal(next_floats[:, 1], gid + n)
    assert (frames == (gid % 251).to(torch.uint8).view(-1, 1, 1, 1)).all()
    assert (next_frames == ((gid + n) % 251).to(torch.uint8).view(-1, 1, 1, 1)).all()
    np.testing.assert_array_equal(rec["action"], gid % 12)
    np.testing.assert_array_equal(potential, gid / 2)


def check_batch(buffer: TransitionBuffer, batch_size: int = 256) -> None:
    """A sampled batch reads the frames written for its records."""
    batch = buffer.sample(batch_size)
    sid, nid = batch["state_float"][:, 1].long(), batch["next_state_float"][:, 1].long()
    rec = buffer.rb.storage.get(batch["indices"])
    np.testing.assert_array_equal(rec["state_gid"], sid)
    np.testing.assert_array_equal(nid - sid, rec["n_steps"])
    assert (batch["state_img"] == (sid % 251).to(torch.uint8).view(-1, 1, 1, 1)).all()
    assert (batch["next_state_img"] == (nid % 251).to(torch.uint8).view(-1, 1, 1, 1)).all()
    np.testing.assert_array_equal(batch["action"], sid % 12)
    assert int(sid.min()) >= buffer.states.lo


@pytest.mark.parametrize("prioritized", [False, True])
def test_no_transition_reads_an_overwritten_frame(prioritized):
    # capacity 50, state ring 50 + ceil(50 * 0.05) + 4 = 57 rows. Long races: records leave
    # first. One-action races need 2 states per transition: the state ring runs out first
    # and the window must shrink to the records whose states survive (57 rows // 2 = 28).
    buf = TransitionBuffer(50, FRAME, F, 3, 140, prioritized=prioritized, seed=1)
    assert buf.states.rows == 57
    feed = Feeder(buf)
    rng = np.random.default_rng(0)
    shrunk = False
    for _ in range(60):  # about 12 wraps of the ring
        feed.add(int(rng.choice([1, 1, 2, 5, 17, 40, 120])))
        check_live(buf)
        check_batch(buf)
        shrunk |= len(buf) < 50 and buf.states.written > 57
    assert shrunk  # the state-overwrite path was exercised
    for _ in range(30):  # only one-action races: 28 live transitions of 2 states each
        feed.add(1)
    check_live(buf)
    check_batch(buf)
    assert len(buf) == 28


@pytest.mark.parametrize("prioritized", [False, True])
def test_capacity_growth_keeps_all_data(prioritized):
    buf = TransitionBuffer(50, FRAME, F, 3, 140, prioritized=prioritized, seed=2)
    feed = Feeder(buf)
    for _ in range(10):  # 350 transitions: wrapped 7 times
        feed.add(35)
    if prioritized:
        batch = buf.sample(32)
        buf.update_priorities(batch["indices"], torch.arange(32, dtype=torch.float32))
    before = buf.live_records()
    q_before = buf.sampler.q[buf._live_positions().numpy()].copy() if prioritized else None
    assert len(buf) == 50
    buf.set_capacity(120)
    assert buf.capacity == 120 and len(buf) == 50 and buf.states.rows == 130
    after = buf.live_records()
    for key in before.keys():
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=0)
    if prioritized:
        np.testing.assert_array_equal(buf.sampler.q[:50], q_before)
    check_live(buf)
    # 70 more transitions fit without evicting anything: the oldest record is still there
    for _ in range(2):
        feed.add(35)
    assert len(buf) == 120
    assert int(buf.live_records()["state_gid"][0]) == int(before["state_gid"][0])
    check_live(buf)
    check_batch(buf)
    with pytest.raises(ValueError, match="only grows"):
        buf.set_capacity(100)


def rollout(t_count: int, frame_shape=(1, 2, 2), float_dim=2) -> dict:
    """A cut race whose state s has floats [0, s]."""
    return {
        "frames": [np.full(frame_shape, s % 256, dtype=np.uint8) for s in range(t_count + 1)],
        "state_float": [
            np.concatenate(([0.0, s], np.zeros(float_dim - 2))).astype(np.float32)
            for s in range(t_count + 1)
        ],
        "actions": [s % 12 for s in range(t_count)],
        "action_was_greedy": [True] * t_count,
        "rewards": [1.0] * t_count,
        "potentials": {},
        "finished": False,
    }


def small_config(**over):
    cfg = {"capacity_schedule": [[0, 30000]], "learning_starts": 100, "chunk_length": 64}
    return {**cfg, **over}


def test_test_split_is_five_percent_in_chunks():
    # Races of 20000 actions: 313 chunks of 64 (the last has 32 transitions); each chunk
    # goes to buffer_test with probability 0.05.
    rb = make_buffers(small_config(capacity_schedule=[[0, 120_000]]), (1, 2, 2), 2, seed=5)
    n_train, n_test = rb.add_rollout(rollout(20_000), gamma=1.0)
    assert n_train + n_test == 20_000
    assert len(rb.buffer) == n_train and len(rb.buffer_test) == n_test > 0
    # buffer_test holds whole chunks: runs of race steps starting at multiples of 64
    gids = rb.buffer_test.live_records()["state_gid"]
    test_t = torch.sort(rb.buffer_test.states.gather(gids)[1][:, 1].long()).values
    chunks = torch.unique(test_t // 64)
    expected = torch.cat([torch.arange(c * 64, min(c * 64 + 64, 20_000)) for c in chunks.tolist()])
    torch.testing.assert_close(test_t, expected)
    # over 5 races (1565 chunks) the share is 5% +- 0.55% (one sd): allow 3.6 sd
    race = rollout(20_000)
    for _ in range(4):
        n_tr, n_te = rb.add_rollout(race, gamma=1.0)
        n_train, n_test = n_train + n_tr, n_test + n_te
    assert n_train + n_test == 100_000
    assert 0.03 < n_test / 100_000 < 0.07
    assert rb.ready and not make_buffers(small_config(), (1, 2, 2), 2).ready


def test_capacity_follows_the_frame_schedule():
    cfg = small_config(
        capacity_schedule=[[0, 100], [1000, 300]], test_fraction=0.1, learning_starts=50
    )
    rb = make_buffers(cfg, (1, 2, 2), 2)
    assert (rb.buffer.capacity, rb.buffer_test.capacity) == (100, 10)
    rb.add_rollout(rollout(150), gamma=1.0)
    assert not rb.update_capacity(999)
    assert rb.update_capacity(1000)
    assert (rb.buffer.capacity, rb.buffer_test.capacity) == (300, 30)


def test_bytes_per_transition():
    # 1x120x160: state row 19200 + 184*4 + 4 = 19940 bytes, rows = ceil(2000*1.05) + 4 = 2104,
    # records 42 bytes: (2104*19940 + 2000*42) / 2000 = 21018.9 bytes = 1.0947x the frame.
    rb = make_buffers(small_config(capacity_schedule=[[0, 2000]]), (1, 120, 160), 184)
    rb.add_rollout(rollout(300, (1, 120, 160), 184), gamma=1.0)  # allocates the record ring
    per = rb.buffer.bytes_per_transition()
    assert record_nbytes(3) == 42
    assert per == pytest.approx((2104 * 19940 + 2000 * 42) / 2000)
    assert per <= 1.2 * 19200
    assert rb.bytes_per_transition() <= 1.2 * 19200  # buffer and buffer_test together
    # 1x48x64: the 184 float32 features alone are 736 bytes, 24% of a 3072-byte frame, so
    # 1.2x cannot be met with exact floats: (2104*3812 + 2000*42) / 2000 = 1.319x the frame.
    small = make_buffers(small_config(capacity_schedule=[[0, 2000]]), (1, 48, 64), 184)
    small.add_rollout(rollout(300, (1, 48, 64), 184), gamma=1.0)
    assert small.buffer.bytes_per_transition() == pytest.approx((2104 * 3812 + 2000 * 42) / 2000)


def test_prioritized_sampling_and_updates():
    # alpha = beta = 1: P(i) = p_i / sum p and weights (p_i / min p)^-1.
    buf = TransitionBuffer(8, FRAME, F, 3, 140, prioritized=True, alpha=1.0, beta=1.0, seed=3)
    feed = Feeder(buf)
    feed.add(4)  # slots 0..3, all at the initial max priority 1
    assert buf.sampler.q[:4].tolist() == pytest.approx([1.0] * 4)
    buf.update_priorities(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    idx, w = [], []
    for _ in range(80):
        b = buf.sample(500)
        idx.append(b["indices"])
        w.append(b["weights"])
    idx, w = torch.cat(idx), torch.cat(w)
    freq = torch.bincount(idx, minlength=8).double() / len(idx)
    np.testing.assert_allclose(freq[:4], [0.1, 0.2, 0.3, 0.4], atol=0.01)  # 40k draws
    assert freq[4:].sum() == 0
    np.testing.assert_allclose(w, 1.0 / (idx + 1).float(), rtol=1e-5)  # (i+1)^-1
    # a new transition gets the largest priority seen (4): P = 4 / 14
    feed.add(1)
    assert buf.sampler.q[4] == pytest.approx(4.0)
    freq = torch.bincount(buf.sample(40_000)["indices"], minlength=8).double() / 40_000
    assert freq[4] == pytest.approx(4 / 14, abs=0.01)
    # uniform buffers accept the call and keep weights at 1
    plain = TransitionBuffer(8, FRAME, F, 3, 140)
    Feeder(plain).add(4)
    plain.update_priorities(torch.arange(4), torch.ones(4))
    assert (plain.sample(16)["weights"] == 1).all()


@pytest.mark.parametrize("prioritized", [False, True])
def test_save_load_round_trip(tmp_path, prioritized):
    cfg = small_config(
        capacity_schedule=[[0, 300]], prioritized=prioritized, test_fraction=0.2, chunk_length=8
    )
    rb = make_buffers(cfg, (1, 2, 2), 2, seed=7)
    for t in (90, 130, 170, 60):  # 450 transitions: buffer wrapped
        rb.add_rollout(rollout(t), gamma=1.0)
    if prioritized:
        b = rb.sample(64)
        rb.update_priorities(b["indices"], torch.rand(64) * 5)
    rb.update_capacity(10)
    path = tmp_path / "replay.pt"
    rb.save(path)
    other = make_buffers(cfg, (1, 2, 2), 2, seed=99)
    other.load(path)
    assert other.frames == 10
    for a, b in ((rb.buffer, other.buffer), (rb.buffer_test, other.buffer_test)):
        assert len(a) == len(b) > 0
        ra, rb_ = a.live_records(), b.live_records()
        for key in ra.keys():
            torch.testing.assert_close(ra[key], rb_[key], rtol=0, atol=0)
        for x, y in zip(a.states.gather(ra["state_gid"]), b.states.gather(rb_["state_gid"])):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        if prioritized:
            np.testing.assert_array_equal(
                a.sampler.q[a._live_positions().numpy()], b.sampler.q[: len(b)]
            )
            assert a.sampler.max_priority == b.sampler.max_priority
        else:
            # same generator state, same records in the same order: identical batches
            sa, sb = a.sample(128), b.sample(128)
            for key in sa:
                if key != "indices":
                    torch.testing.assert_close(sa[key], sb[key], rtol=0, atol=0)
    # the split generator was restored too: the next race splits the same way
    assert rb.add_rollout(rollout(400), 1.0) == other.add_rollout(rollout(400), 1.0)
    # a checkpoint of other frames does not load; nor does a file that is not one
    with pytest.raises(ValueError, match="frames"):
        make_buffers(cfg, (1, 3, 3), 2).load(path)
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable replay checkpoint"):
        other.load(tmp_path / "bad.pt")


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"^buffer.test_fraction: must be in \[0, 0.5\]"):
        make_buffers({"test_fraction": 0.7}, FRAME, F)
    with pytest.raises(ConfigError, match=r"^buffer.capacity_schedule: capacity only grows"):
        make_buffers({"capacity_schedule": [[0, 100], [10, 50]], "learning_starts": 10}, FRAME, F)
    with pytest.raises(ConfigError, match=r"^buffer.learning_starts: 20000 exceeds"):
        make_buffers({"capacity_schedule": [[0, 100]]}, FRAME, F)
    with pytest.raises(ConfigError, match=r"^buffer.mini_race_duration_ms: 7010 ms is not"):
        make_buffers({"mini_race_duration_ms": 7010}, FRAME, F)
    with pytest.raises(ConfigError, match=r"^buffer.n_step: unknown key"):
        make_buffers({"n_step": 3}, FRAME, F)


def test_float_only_buffers_store_no_frames():
    # network without an image: rollouts carry no frames, batches carry no images
    rb = make_buffers(small_config(capacity_schedule=[[0, 500]]), None, 2)
    race_ = rollout(50)
    race_["frames"] = []
    n_train, n_test = rb.add_rollout(race_, 1.0)
    assert n_train + n_test == 50 and len(rb) == n_train
    batch = rb.sample(32)
    assert "state_img" not in batch and "next_state_img" not in batch
    assert batch["state_float"].shape == (32, 2)
    assert rb.buffer.states.frames.nbytes == 0


def test_lost_races_are_stored_with_their_end_and_rate():
    # buffer.lost_ends names the cuts that lose a race: its transitions keep T - t and the
    # race's last reward rate; Linesight's rule ([]) bootstraps every cut race (inf, rate 0)
    race = dict(rollout(50), end=["no_progress"], rewards=[1.0] * 40 + [-0.5] * 10)
    lost = make_buffers(small_config(lost_ends=["no_progress"], test_fraction=0.0), (1, 2, 2), 2)
    lost.add_rollout(race, gamma=1.0)
    rec = lost.buffer.live_records()
    np.testing.assert_array_equal(rec["terminal_actions"].numpy(), np.arange(50, 0, -1))
    np.testing.assert_allclose(rec["end_rate"].numpy(), -0.5)
    plain = make_buffers(small_config(lost_ends=[], test_fraction=0.0), (1, 2, 2), 2)
    plain.add_rollout(race, gamma=1.0)
    rec = plain.buffer.live_records()
    assert torch.isinf(rec["terminal_actions"]).all() and (rec["end_rate"] == 0).all()
    # a saved buffer from before end_rate existed loads with rate 0
    state = plain.state_dict()
    del state["buffer"]["records"]["end_rate"]
    again = make_buffers(small_config(lost_ends=[], test_fraction=0.0), (1, 2, 2), 2)
    again.load_state_dict(state)
    assert (again.buffer.live_records()["end_rate"] == 0).all()
    with pytest.raises(ConfigError):
        make_buffers(small_config(lost_ends="stuck"), (1, 2, 2), 2)
    # the default closes the races cut for making no progress (measured: docs/learning.md)
    default = make_buffers(small_config(test_fraction=0.0), (1, 2, 2), 2)
    default.add_rollout(race, gamma=1.0)
    rec = default.buffer.live_records()
    np.testing.assert_array_equal(rec["terminal_actions"].numpy(), np.arange(50, 0, -1))


def test_lost_penalty_reaches_the_stored_returns_through_the_config():
    # buffer.lost_penalty 4: the last stored return of a lost race is -0.5 - 4 (n_steps 1 at
    # the last action); the same race with the key at its default (0) stores -0.5
    race = dict(rollout(50), end=["no_progress"], rewards=[1.0] * 40 + [-0.5] * 10)
    paid = make_buffers(
        small_config(lost_ends=["no_progress"], lost_penalty=4.0, test_fraction=0.0), (1, 2, 2), 2
    )
    paid.add_rollout(race, gamma=1.0)
    plain = make_buffers(small_config(lost_ends=["no_progress"], test_fraction=0.0), (1, 2, 2), 2)
    plain.add_rollout(race, gamma=1.0)
    last_paid = paid.buffer.live_records()["rewards"][-1].numpy()
    last_plain = plain.buffer.live_records()["rewards"][-1].numpy()
    np.testing.assert_allclose(last_plain, -0.5)
    np.testing.assert_allclose(last_paid, -4.5)
    # a penalty is subtracted: a negative one (a bonus for crashing) is refused, by key
    with pytest.raises(ConfigError, match="buffer.lost_penalty"):
        make_buffers(small_config(lost_penalty=-1.0), (1, 2, 2), 2)


def test_value_bound_reaches_the_batches_through_the_config():
    # rate 0.5, once 1: every batch carries target_max = (H - t') * 0.5 + 1 - Phi(s'), with
    # H = 7000 ms / 50 ms = 140 actions and Phi = 0 (the rollout records no potential)
    race = rollout(300)
    bounded = make_buffers(small_config(value_bound_rate=0.5, value_bound_once=1), (1, 2, 2), 2)
    bounded.add_rollout(race, gamma=1.0)
    batch = bounded.sample(32)
    t_next = batch["next_state_float"][:, 0].numpy()
    np.testing.assert_allclose(batch["target_max"].numpy(), (140 - t_next) * 0.5 + 1.0)
    plain = make_buffers(small_config(), (1, 2, 2), 2)
    plain.add_rollout(race, gamma=1.0)
    assert "target_max" not in plain.sample(32)
    for bad in ({"value_bound_rate": "fast"}, {"value_bound_once": -1.0}):
        with pytest.raises(ConfigError, match=f"buffer.{next(iter(bad))}"):
            make_buffers(small_config(**bad), (1, 2, 2), 2)


@pytest.mark.parametrize("prioritized", [False, True])
def test_adding_and_sampling_never_synchronise_a_device(monkeypatch, prioritized):
    """A race's records are made on the storage's device, so tensordict never moves them
    (its move ends in a CUDA event sync: on a GPU machine the intake thread waited there for
    the learner's step while it held the buffers' lock). Counted here on tensordict's sync."""
    from tensordict.base import TensorDictBase

    syncs = []
    real = TensorDictBase._sync_all
    monkeypatch.setattr(TensorDictBase, "_sync_all", lambda td: syncs.append(1) or real(td))
    buf = TransitionBuffer(50, FRAME, F, 3, 140, prioritized=prioritized, seed=1)
    feed = Feeder(buf)
    for t_count in (5, 17, 40):
        feed.add(t_count)
        check_batch(buf, 16)
    assert syncs == []


def test_n_steps_schedule_by_hand():
    # [[0, 3], [1000, 6]]: 3 + 3 * frames / 1000, rounded half up; held after the last point
    cfg = BufferConfig.from_dict(small_config(n_steps=6, n_steps_schedule=[[0, 3], [1000, 6]]))
    reads = [cfg.n_steps_at(f) for f in (0, 166, 167, 500, 999, 1000, 10**7)]
    assert reads == [3, 3, 4, 5, 6, 6, 6]
    assert BufferConfig.from_dict(small_config()).n_steps_at(10**7) == 3  # no schedule: n_steps
    assert cfg.to_dict()["n_steps_schedule"] == [[0.0, 3], [1000.0, 6]]
    for bad, why in (
        ([[0, 3], [1000, 7]], r"point 1: n must be an integer in \[1, buffer.n_steps = 6\]"),
        ([[0, 2.5]], r"point 0: n must be an integer"),
        ([[0, 3], [0, 4]], "frames must increase strictly"),
    ):
        with pytest.raises(ConfigError, match=rf"^buffer.n_steps_schedule: {why}"):
            make_buffers(small_config(n_steps=6, n_steps_schedule=bad), (1, 2, 2), 2)


@pytest.mark.parametrize("prioritized", [False, True])
@pytest.mark.parametrize("end", ["finish", "lost"])
def test_stored_n_read_with_fewer_steps_is_the_smaller_n(end, prioritized):
    # A race with exploratory actions that finishes, or is lost (with a penalty and an end
    # rate), stored with n = 6 and read with 3 (the schedule's first point), gives the batch
    # that storing it with n = 3 gives, value by value, value bound included: a transition
    # keeps its partial returns. At the schedule's end it reads up to 6 steps.
    race = dict(rollout(200), finished=end == "finish", race_time=20_000)
    if end == "lost":
        race["end"] = ["stuck"]
    race["rewards"] = [0.1 * (s % 7) - 0.2 for s in range(200)]
    race["action_was_greedy"] = [s % 11 != 5 for s in range(200)]
    kw = dict(
        test_fraction=0.0,
        lost_ends=["stuck"],
        lost_penalty=4.0,
        value_bound_rate=0.0,
        prioritized=prioritized,
    )
    stored6 = make_buffers(
        small_config(n_steps=6, n_steps_schedule=[[0, 3], [1000, 6]], **kw), (1, 2, 2), 2, seed=3
    )
    stored3 = make_buffers(small_config(n_steps=3, **kw), (1, 2, 2), 2, seed=3)
    for rb in (stored6, stored3):
        rb.add_rollout(race, gamma=0.9)
    assert stored6.n_steps_now == 3
    a, b = stored6.sample(128), stored3.sample(128)
    assert a.keys() == b.keys() and "target_max" in a
    for key in a:
        torch.testing.assert_close(a[key], b[key], msg=key)
    stored6.update_capacity(1000)
    assert stored6.n_steps_now == 6
    batch = stored6.sample(256)
    steps = (batch["next_state_float"][:, 1] - batch["state_float"][:, 1]).long()
    stored_n = stored6.buffer.rb.storage.get(batch["indices"])["n_steps"].long()
    np.testing.assert_array_equal(steps, stored_n)
    assert int(steps.max()) == 6
