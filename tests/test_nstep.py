"""The n-step rule on hand-built races, value by value (hand computations in comments)."""

import numpy as np
import pytest

from trackmind.replay.experience import Experience
from trackmind.replay.nstep import (
    combine_potentials,
    experience_from_rollout,
    fill_buffer_from_rollout_with_n_steps_rule,
    is_lost,
    lost_race_rate,
    lost_race_rewards,
    n_step_lengths,
    n_step_returns,
)
from trackmind.replay.split import chunk_test_mask, runs


def make_rollout(rewards, greedy=None, finished=True, potentials=None, frame_shape=(1, 2, 3)):
    """A race of T = len(rewards) actions; state s has frame value s and floats [0, s]."""
    t_count = len(rewards)
    return {
        "frames": [np.full(frame_shape, s, dtype=np.uint8) for s in range(t_count + 1)],
        "state_float": [np.array([0.0, s], dtype=np.float32) for s in range(t_count + 1)],
        "actions": [t % 12 for t in range(t_count)],
        "action_was_greedy": [True] * t_count if greedy is None else list(greedy),
        "q_values": [np.zeros(12, dtype=np.float32)] * t_count,
        "rewards": list(rewards),
        "potentials": potentials or {},
        "finished": finished,
        "race_time": 1000 if finished else None,
        "map": "test",
    }


class Recorder:
    """A buffer stand-in that keeps the Experiences it is given."""

    def __init__(self):
        self.added: list[Experience] = []

    def add(self, experience: Experience) -> int:
        self.added.append(experience)
        return experience.n_transitions


def test_finish_inside_the_n_steps():
    # T = 4 finished, n = 3, gamma = 0.5, r = [1, 2, 3, 4], all greedy.
    # n_t = min(3, 4 - t) = [3, 3, 2, 1]; terminal_actions = 4 - t = [4, 3, 2, 1].
    # t=0: 1 | 1 + .5*2 = 2 | 2 + .25*3 = 2.75
    # t=1: 2 | 2 + .5*3 = 3.5 | 3.5 + .25*4 = 4.5
    # t=2 (n_t=2): 3 | 3 + .5*4 = 5 | frozen 5
    # t=3 (n_t=1): 4 | 4 | 4
    exp = experience_from_rollout(make_rollout([1, 2, 3, 4]), n_steps=3, gamma=0.5)
    np.testing.assert_array_equal(exp.n_steps, [3, 3, 2, 1])
    np.testing.assert_array_equal(exp.terminal_actions, [4, 3, 2, 1])
    np.testing.assert_array_equal(exp.rewards, [[1, 2, 2.75], [2, 3.5, 4.5], [3, 5, 5], [4, 4, 4]])
    # gammas[i] = 0.5^(i+1) for every transition
    np.testing.assert_array_equal(exp.gammas, [[0.5, 0.25, 0.125]] * 4)
    # transition t's next state is state t + n_t: the last two reach the finish state 4
    np.testing.assert_array_equal(np.arange(4) + exp.n_steps, [3, 4, 4, 4])
    assert exp.frames.shape == (5, 1, 2, 3) and exp.frames[4, 0, 0, 0] == 4


def test_cut_race_has_infinite_terminal_actions():
    # T = 3 not finished: n_t = min(3, 3 - t) = [3, 2, 1], terminal_actions all inf.
    exp = experience_from_rollout(make_rollout([1, 1, 1], finished=False), 3, 1.0)
    np.testing.assert_array_equal(exp.n_steps, [3, 2, 1])
    assert np.isinf(exp.terminal_actions).all()
    # gamma 1: rewards are plain partial sums, frozen after n_t: [1,2,3], [1,2,2], [1,1,1]
    np.testing.assert_array_equal(exp.rewards, [[1, 2, 3], [1, 2, 2], [1, 1, 1]])


def test_lost_race_ends_where_it_was_cut_with_its_last_reward_rate():
    # T = 4 cut for no progress: terminal_actions 4 - t = [4, 3, 2, 1] as for a finish, and
    # end_rate = mean of the last 2 rewards (-0.2 + -0.4) / 2 = -0.3 on every transition
    race = dict(make_rollout([1.0, 0.5, -0.2, -0.4], finished=False), end=["no_progress"])
    exp = experience_from_rollout(race, 3, 1.0, lost_ends=("no_progress",), lost_rate_actions=2)
    np.testing.assert_array_equal(exp.terminal_actions, [4, 3, 2, 1])
    np.testing.assert_allclose(exp.end_rate, [-0.3] * 4)
    # without lost_ends the same race bootstraps from its cut state (inf), rate 0
    plain = experience_from_rollout(race, 3, 1.0)
    assert np.isinf(plain.terminal_actions).all() and (plain.end_rate == 0).all()
    # a timeout is not lost; a finish never is, whatever fired with it
    assert not is_lost(dict(race, end=["timeout"]), ("no_progress", "stuck"))
    assert not is_lost(dict(race, finished=True), ("no_progress",))
    assert is_lost(dict(race, end=["stuck", "timeout"]), ("no_progress", "stuck"))
    assert not is_lost({"finished": False}, ("stuck",))  # a race without its end recorded
    # the rate window: the whole race when it is shorter
    assert lost_race_rate(np.array([1.0, 2.0, 4.0]), 2) == 3.0
    assert lost_race_rate(np.array([1.0, 2.0]), 10) == 1.5
    # finished races carry rate 0
    assert (experience_from_rollout(make_rollout([1, 2]), 3, 1.0).end_rate == 0).all()


def test_lost_penalty_is_paid_on_the_last_action_of_a_lost_race_only():
    # T = 4 cut for no progress, n = 3, gamma 1, penalty 5: the last reward -0.4 becomes
    # -5.4; partial sums frozen after n_t = [3, 3, 2, 1]:
    # t=0: 1, 1.5, 1.3   t=1: 0.5, 0.3, -5.1   t=2: -0.2, -5.6, -5.6   t=3: -5.4 (x3)
    race = dict(make_rollout([1.0, 0.5, -0.2, -0.4], finished=False), end=["no_progress"])
    exp = experience_from_rollout(
        race, 3, 1.0, lost_ends=("no_progress",), lost_rate_actions=2, lost_penalty=5.0
    )
    np.testing.assert_allclose(
        exp.rewards,
        [[1, 1.5, 1.3], [0.5, 0.3, -5.1], [-0.2, -5.6, -5.6], [-5.4, -5.4, -5.4]],
        rtol=0,
        atol=1e-6,
    )
    # the end rate is the car's own, read before the penalty: (-0.2 + -0.4) / 2
    np.testing.assert_allclose(exp.end_rate, [-0.3] * 4)
    # gamma 0.5 discounts it as any reward: t=2 pays -0.2 + 0.5 * -5.4 = -2.9 by step 2
    half = experience_from_rollout(
        race, 3, 0.5, lost_ends=("no_progress",), lost_rate_actions=2, lost_penalty=5.0
    )
    np.testing.assert_allclose(half.rewards[2], [-0.2, -2.9, -2.9], atol=1e-6)
    # a race that is not lost pays nothing: a timeout, a finish, or no lost_ends at all
    for other in (
        dict(race, end=["timeout"]),
        dict(make_rollout([1.0, 0.5, -0.2, -0.4]), end=["no_progress"]),
    ):
        paid = experience_from_rollout(other, 3, 1.0, lost_ends=("no_progress",), lost_penalty=5.0)
        plain = experience_from_rollout(other, 3, 1.0, lost_ends=("no_progress",))
        np.testing.assert_array_equal(paid.rewards, plain.rewards)
    assert (experience_from_rollout(race, 3, 1.0, lost_penalty=5.0).rewards.min()) > -1
    np.testing.assert_array_equal(lost_race_rewards(np.array([1.0, 2.0]), True, 3.0), [1, -1])
    np.testing.assert_array_equal(lost_race_rewards(np.array([1.0, 2.0]), False, 3.0), [1, 2])
    assert len(lost_race_rewards(np.array([]), True, 3.0)) == 0


def test_non_greedy_cut():
    # greedy [G, X, G, G, X, G], T = 6, n = 3; non-greedy actions at 1 and 4.
    # t=0: first non-greedy after 0 is 1 -> n = 1 (the next state is state 1)
    # t=1: its own action 1 may be random; next non-greedy is 4 -> min(3, 5, 3) = 3
    # t=2: next non-greedy 4 -> 2;  t=3: 4 - 3 = 1;  t=4: none after -> min(3, 2) = 2;  t=5: 1
    greedy = [True, False, True, True, False, True]
    np.testing.assert_array_equal(n_step_lengths(np.array(greedy), 3, True), [1, 3, 2, 1, 2, 1])
    np.testing.assert_array_equal(n_step_lengths(np.array(greedy), 3, False), [3, 3, 3, 3, 2, 1])
    # gamma 1, r = 10^t: rewards stop growing at n_t
    r = [1, 10, 100, 1000, 10000, 100000]
    exp = experience_from_rollout(make_rollout(r, greedy, finished=False), 3, 1.0)
    np.testing.assert_array_equal(
        exp.rewards,
        [
            [1, 1, 1],  # n=1
            [10, 110, 1110],  # n=3
            [100, 1100, 1100],  # n=2
            [1000, 1000, 1000],  # n=1
            [10000, 110000, 110000],  # n=2
            [100000, 100000, 100000],  # n=1
        ],
    )


def test_returns_with_gamma_below_one():
    # r = [2, -1, 4, 8], n = 2, gamma = 0.9, lengths [2, 2, 2, 1]:
    # t=0: 2 | 2 - 0.9 = 1.1;  t=1: -1 | -1 + 3.6 = 2.6;  t=2: 4 | 4 + 7.2 = 11.2;  t=3: 8 | 8
    rewards, gammas = n_step_returns(np.array([2.0, -1, 4, 8]), np.array([2, 2, 2, 1]), 2, 0.9)
    np.testing.assert_allclose(rewards, [[2, 1.1], [-1, 2.6], [4, 11.2], [8, 8]], rtol=1e-6)
    assert rewards.dtype == np.float32
    np.testing.assert_allclose(gammas, [[0.9, 0.81]] * 4, rtol=1e-7)


def test_potentials_weighted_sum():
    # Phi = 2 * a + 1 * b (b has no weight: 1x) = [2+10, 4+20, 6+30]
    phi = combine_potentials({"a": [1, 2, 3], "b": [10, 20, 30]}, {"a": 2.0}, 3)
    np.testing.assert_array_equal(phi, [12, 24, 36])
    np.testing.assert_array_equal(combine_potentials({}, None, 2), [0, 0])
    with pytest.raises(ValueError, match="unknown potentials"):
        combine_potentials({"a": [1, 2]}, {"zone": 1.0}, 2)
    with pytest.raises(ValueError, match="shape"):
        combine_potentials({"a": [1, 2]}, None, 3)
    # through the rollout: one potential value per state (T + 1)
    exp = experience_from_rollout(
        make_rollout([0, 0], potentials={"zone_distance": [-1, -2, -3], "x": [1, 1, 1]}),
        3,
        1.0,
        potential_weights={"zone_distance": 0.5},
    )
    np.testing.assert_array_equal(exp.potential, [0.5, 0.0, -0.5])  # 0.5*(-1,-2,-3) + 1


def test_bad_rollout_lengths():
    ro = make_rollout([1, 2, 3])
    ro["frames"] = ro["frames"][:-1]  # T frames instead of T + 1
    with pytest.raises(ValueError, match=r"\['frames'\] has 3 entries, expected 4"):
        experience_from_rollout(ro, 3, 1.0)


def test_fill_splits_runs_and_shares_states():
    # T = 10, chunk 2, test_fraction 0.5 with a fixed seed; each run of same-side chunks is
    # one Experience whose transition j reads its states j and j + n_steps[j].
    ro = make_rollout(list(range(10)))
    train, test = Recorder(), Recorder()
    n_train, n_test = fill_buffer_from_rollout_with_n_steps_rule(
        train, test, ro, 3, 1.0, test_fraction=0.5, chunk_length=2, rng=np.random.default_rng(3)
    )
    mask = chunk_test_mask(10, 2, 0.5, np.random.default_rng(3))
    assert (n_train, n_test) == (int((~mask).sum()), int(mask.sum()))
    assert 0 < n_test < 10  # this seed puts chunks on both sides
    for start, stop, is_test in runs(mask):
        exp = (test if is_test else train).added.pop(0)
        assert exp.n_transitions == stop - start
        # state j of the run is race state start + j (frame value = state index)
        np.testing.assert_array_equal(
            exp.frames[:, 0, 0, 0], np.arange(start, len(exp.frames) + start)
        )
        # its last state is the next state of its last transition (stop - 1 + n)
        assert len(exp.frames) - 1 == stop - 1 + exp.n_steps[-1] - start
    assert not train.added and not test.added
    # no buffer_test: everything to buffer, as one Experience of all T + 1 states
    only = Recorder()
    assert fill_buffer_from_rollout_with_n_steps_rule(only, None, ro, 3, 1.0) == (10, 0)
    assert len(only.added) == 1 and only.added[0].n_states == 11


def test_runs_and_chunks():
    assert runs(np.array([0, 0, 1, 1, 1, 0], dtype=bool)) == [
        (0, 2, False),
        (2, 5, True),
        (5, 6, False),
    ]
    assert runs(np.array([], dtype=bool)) == []
    # chunk length 3 over 7 transitions: chunks [0,3), [3,6), [6,7) each all-or-nothing
    mask = chunk_test_mask(7, 3, 0.5, np.random.default_rng(0))
    assert len(mask) == 7
    assert len(set(mask[0:3])) == 1 and len(set(mask[3:6])) == 1
