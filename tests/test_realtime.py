"""rtgym-style elastic real-time steps (trackmind.tmi.realtime), over the sim and the stand-in.

The timestamp rule is checked value by value; the wrapper's logic runs on a fake clock
(deterministic); wall-clock timing is checked on this machine with short steps and
tolerances meant for a noisy shared host.
"""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from trackmind.env.build import default_env_config, make_race
from trackmind.env.map_cycle import MapCycle
from trackmind.env.rollout import GameInstanceManager
from trackmind.errors import ConfigError
from trackmind.sim.driver import PurePursuitDriver
from trackmind.sim.game import SimGame
from trackmind.tmi.config import realtime_config
from trackmind.tmi.realtime import RealTimeGame, RealTimeWarning, TimeStep, next_time_step
from trackmind.tmi.standin import start_standin, stop_all_standins

ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    """Seconds that pass only when someone sleeps (thread-safe)."""

    def __init__(self) -> None:
        self.t = 100.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.t

    def sleep(self, dt: float) -> None:
        with self._lock:
            self.t += max(dt, 0.0)


def sim(frames=None):
    return SimGame(1, "starter", frame_shape=frames)


def fake_rt(game=None, **kw):
    clock = FakeClock()
    kw = {"time_step_duration": 0.05, "start_obs_capture": 0.04, **kw}
    rt = RealTimeGame(game or sim(), threaded=False, clock=clock, sleep=clock.sleep, **kw)
    return rt, clock


# --- the timestamp rule, by hand -------------------------------------------------------------
@pytest.mark.parametrize(
    "now, prev_end, expected",
    [
        (0.0, None, TimeStep(0.0, 0.04, 0.05, False)),  # fresh clock
        (1.02, 1.00, TimeStep(1.00, 1.04, 1.05, False)),  # late within elasticity: on grid
        (0.97, 1.00, TimeStep(1.00, 1.04, 1.05, False)),  # early: waits for the grid
        (1.0499, 1.00, TimeStep(1.00, 1.04, 1.05, False)),  # just inside the 0.05 s margin
        (1.05, 1.00, TimeStep(1.05, 1.09, 1.10, True)),  # at the margin: the clock restarts
        (2.50, 1.00, TimeStep(2.50, 2.54, 2.55, True)),
    ],
)
def test_next_time_step_by_hand(now, prev_end, expected):
    got = next_time_step(now, prev_end, duration=0.05, start_obs_capture=0.04, timeout=0.05)
    assert got.late == expected.late
    np.testing.assert_allclose([got.start, got.capture, got.end], [*vars(expected).values()][:3])


# --- the wrapper on a fake clock ------------------------------------------------------------------
def test_steps_stay_on_the_grid_while_the_caller_is_within_the_margin():
    rt, clock = fake_rt()
    rt.reset()
    t0 = rt.time_steps[0].start
    with warnings.catch_warnings():
        warnings.simplefilter("error", RealTimeWarning)
        for think in (0.0, 0.01, 0.03, 0.049):  # each below the 0.05 s elasticity
            clock.sleep(think)
            rt.step(0)
    starts = [ts.start for ts in rt.time_steps]
    np.testing.assert_allclose(starts, t0 + 0.05 * np.arange(5))  # the nominal grid
    assert rt.late_steps == 0


def test_a_late_caller_gets_a_warning_and_the_clock_restarts():
    rt, clock = fake_rt()
    rt.reset()
    rt.step(0)
    end = rt.time_steps[-1].end
    clock.sleep(0.12)  # the policy thought for longer than one step + the margin
    with pytest.warns(RealTimeWarning, match=r"came \d+ ms after .* the clock restarts now"):
        rt.step(0)
    assert rt.late_steps == 1
    assert rt.time_steps[-1].start == pytest.approx(end + 0.12)  # restarted at "now"
    clock.sleep(0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RealTimeWarning)
        rt.step(0)  # back on the new grid
    assert rt.time_steps[-1].start == pytest.approx(end + 0.17)


def test_pauses_restart_the_clock_without_a_warning():
    rt, clock = fake_rt()
    rt.reset()
    rt.step(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RealTimeWarning)
        rt.wait()  # the car holds still meanwhile
        clock.sleep(5.0)
        rt.step(0)
        clock.sleep(5.0)
        rt.reset()
        rt.step(0)
    assert rt.late_steps == 1  # the wait, counted but not warned about


def test_observations_lag_one_step_and_carry_the_action_buffer():
    rt, _ = fake_rt(act_buf_len=3, default_action=3)
    obs = rt.reset()
    assert obs.car.race_time_ms[0] == 0
    np.testing.assert_array_equal(obs.action_buffer, [[3, 3, 3]])
    # step k returns what was captured during step k-1 (rtgym): the default action ran
    # first, so race time is 50 ms per step already taken; the buffer ends with the action
    # being sent now
    for k, a in enumerate([0, 1, 2, 5], start=1):
        obs = rt.step(a)
        assert obs.car.race_time_ms[0] == 50 * k
    np.testing.assert_array_equal(obs.action_buffer, [[1, 2, 5]])
    assert rt.game.car_state().race_time_ms[0] == 50 * 5  # the last action already runs


@pytest.mark.filterwarnings("ignore::trackmind.tmi.realtime.RealTimeWarning")
def test_the_action_buffer_matches_the_previous_actions_the_network_sees():
    env = default_env_config()
    env["frame_shape"] = None
    env["realtime"] = {"enabled": True, "time_step_duration": 0.02, "start_obs_capture": 0.01}
    env["realtime"]["act_buf_len"] = 5
    race = make_race(env, n_cars=1, maps="starter")
    assert isinstance(race.game, RealTimeGame)
    race.reset()
    for a in [0, 1, 0, 2, 0, 0, 1]:
        race.step(np.array([a]))
    buf = race.raw.action_buffer[0]
    np.testing.assert_array_equal(buf[::-1], race.action_history[0, :5])  # newest first there
    race.close()


# --- wall clock ------------------------------------------------------------------------------
class TimedObserve:
    """The game, noting when the wrapper takes each observation."""

    def __init__(self, game) -> None:
        self.game, self.captures = game, []
        self.n_cars, self.frame_shape, self.action_ms = 1, game.frame_shape, game.action_ms

    def observe(self):
        self.captures.append(time.perf_counter())
        return self.game.observe()

    def __getattr__(self, name):
        return getattr(self.game, name)


def test_step_timing_holds_on_this_machine():
    game = TimedObserve(sim())
    rt = RealTimeGame(game, time_step_duration=0.03, start_obs_capture=0.02)
    rt.reset()
    returns = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RealTimeWarning)  # a hiccup of the host may happen
        for _ in range(30):
            rt.step(0)
            returns.append(time.perf_counter())
            time.sleep(0.005)  # a policy that thinks 5 ms
    rt.close()
    gaps = np.diff(returns)
    assert abs(np.median(gaps) - 0.03) < 0.004 and abs(gaps.mean() - 0.03) < 0.006
    offsets = [c - ts.start for c, ts in zip(game.captures[-30:], rt.time_steps[-30:])]
    assert abs(np.median(offsets) - 0.02) < 0.004  # observations taken 20 ms into the step
    assert rt.late_steps <= 2


def test_a_real_time_race_runs_through_the_manager():
    env = default_env_config()
    env["frame_shape"] = None
    env["realtime"] = {"enabled": True, "time_step_duration": 0.002, "start_obs_capture": 0.001}
    env["realtime"]["time_step_timeout_factor"] = 50.0  # a loaded host: stay elastic
    cycle = MapCycle.from_config([{"map": "starter", "exploration": 0, "greedy": 1}])
    race = make_race(env, n_cars=1, maps=cycle.entries[0].track)
    driver = PurePursuitDriver([cycle.entries[0].track])
    # the policy sees observations one step old and its action runs one step late; the
    # scripted driver still gets round
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RealTimeWarning)  # a hiccup of the host may happen
        r = GameInstanceManager(race, cycle).rollout(
            lambda obs, g: (driver.act(race.car), np.zeros((1, 12), np.float32), np.ones(1, bool))
        )
    race.close()
    assert r["finished"] and r["end"] == ["finish"]


@pytest.mark.filterwarnings("ignore::trackmind.tmi.realtime.RealTimeWarning")
def test_real_time_over_the_standin_game():
    """The real game's real-time mode: the stand-in runs at game speed 1 on its own."""
    g = start_standin("TMInterface0", frame_shape=None, countdown_ms=200, paced=True)
    env = yaml.safe_load((ROOT / "conf" / "env" / "tminterface.yaml").read_text())
    env["frame_shape"] = None
    env["tminterface"].update(connection="standin", mode="realtime", step_timeout_s=1.0)
    env["tminterface"]["capture"]["method"] = "none"
    env["realtime"]["enabled"] = True
    try:
        race = make_race(env, None, 1, "starter")
        race.reset()
        times = []
        for _ in range(20):
            race.step(np.array([0]))
            times.append(int(race.car.race_time_ms[0]))
        race.close()
    finally:
        stop_all_standins()
    steps = np.diff(times)
    assert g.ticks > 0 and abs(np.median(steps) - 50) <= 10  # ~50 ms of game time per step
    assert race.car.speed[0] > 5.0  # accelerating all along


def test_realtime_settings_name_the_key():
    assert realtime_config({}) is None and realtime_config({"realtime": {}}) is None
    rt = realtime_config({"realtime": {"enabled": True}})
    assert rt.enabled and rt.time_step_duration == 0.05  # the rest from conf/env/tminterface.yaml
    for bad, key in [
        ({"start_obs_capture": 0.08}, "env.realtime.start_obs_capture"),
        ({"act_buf_len": 0}, "env.realtime.act_buf_len"),
        ({"default_action": 12}, "env.realtime.default_action"),
        ({"time_step_timout": 1}, "env.realtime.time_step_timout"),
    ]:
        with pytest.raises(ConfigError) as e:
            realtime_config({"realtime": {"enabled": True, **bad}})
        assert str(e.value).startswith(key + ": ")
