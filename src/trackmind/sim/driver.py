"""A scripted driver: pure pursuit on the reference line at a share of its limit speed.

It drives only through the 12 keyboard actions and the GameInstance car state, like an
agent would, so it checks that every map can be finished with those actions, gives a
baseline race time, and drives `make train` before learning exists.
"""

from __future__ import annotations

import numpy as np

from trackmind.game.contract import CarState
from trackmind.sim.reference import ReferenceLap, reference_lap
from trackmind.sim.track import Track
from trackmind.sim.vehicle import VehicleParams

# action index for (accelerate, brake, steer) with steer -1 right, 0 none, +1 left
_ACTION = {
    (1, 0, 0): 0,
    (1, 0, 1): 1,
    (1, 0, -1): 2,
    (0, 0, 0): 3,
    (0, 0, 1): 4,
    (0, 0, -1): 5,
    (0, 1, 0): 6,
    (0, 1, 1): 7,
    (0, 1, -1): 8,
}


LOOKAHEAD_S = 0.35  # the pursued point is this many seconds ahead at the current speed


class PurePursuitDriver:
    """Follows each car's reference line; one instance drives a batch of cars.

    Args:
        speed_share: target speed as a share of the reference speed profile.
        lookahead_s: lookahead time (s); the lookahead distance grows with speed.
    """

    def __init__(
        self,
        tracks: list[Track],
        vehicle: VehicleParams | None = None,
        speed_share: float = 0.8,
        lookahead_s: float = LOOKAHEAD_S,
        action_ms: int = 50,
    ) -> None:
        self.vehicle = vehicle or VehicleParams()
        self.laps: list[ReferenceLap] = [reference_lap(t, self.vehicle) for t in tracks]
        self.tracks = tracks
        self.speed_share = speed_share
        self.lookahead_s = lookahead_s
        self.dt = action_ms / 1000.0
        self.steer = np.zeros(len(tracks))  # the driver's replica of the rate-limited steering

    def reset(self, car: int | None = None) -> None:
        if car is None:
            self.steer[:] = 0.0
        else:
            self.steer[car] = 0.0

    def act(self, car: CarState) -> np.ndarray:
        actions = np.zeros(len(self.tracks), dtype=np.int64)
        for i, (track, lap) in enumerate(zip(self.tracks, self.laps)):
            actions[i], key = pursuit_action(
                track,
                lap,
                self.vehicle,
                car,
                i,
                self.steer[i],
                self.dt,
                self.speed_share,
                self.lookahead_s,
            )
            self.steer[i] = steer_after(
                self.steer[i], key, car.velocity[i, 0], self.vehicle, self.dt
            )
        return actions


def steer_after(steer: float, key: int, v: float, p: VehicleParams, dt: float) -> float:
    """The rate-limited steering angle after one action of direction `key` (-1 right, 0 none,
    +1 left) at forward speed v: the car's own rule, replicated (the game does not report it)."""
    lock = p.steer_max / (1.0 + abs(float(v)) / p.steer_speed_ref)
    step = p.steer_rate * dt
    return float(steer + np.clip(key * lock - steer, -step, step))


def pursuit_action(
    track: Track,
    lap: ReferenceLap,
    p: VehicleParams,
    car: CarState,
    i: int,
    steer: float,
    dt: float,
    speed_share: float,
    lookahead_s: float,
) -> tuple[int, int]:
    """(action index, steer direction) for car i: pure pursuit of a point `lookahead_s` ahead
    on the reference line, and the speed profile times `speed_share` a little ahead."""
    s_now = track.start_s + car.progress_m[i]
    v = float(car.velocity[i, 0])
    look = max(6.0, abs(v) * lookahead_s)
    target = np.array([np.interp(s_now + look, lap.s, lap.line[:, k]) for k in range(2)])
    rel = target - car.position[i, :2]
    yaw = car.yaw[i]
    fwd = rel[0] * np.cos(yaw) + rel[1] * np.sin(yaw)
    left = -rel[0] * np.sin(yaw) + rel[1] * np.cos(yaw)
    dist2 = max(fwd * fwd + left * left, 1e-6)
    want = np.arctan(2.0 * p.wheelbase * left / dist2)  # pure-pursuit steering angle
    key = min((-1, 0, 1), key=lambda k: abs(steer_after(steer, k, v, p, dt) - want))
    # speed: brake for the profile a little ahead, accelerate below it
    v_target = max(speed_share * np.interp(s_now + 0.5 * look, lap.s, lap.speed), 8.0)
    if v < v_target:
        throttle = (1, 0)
    elif v > v_target + 3.0:
        throttle = (0, 1)
    else:
        throttle = (0, 0)
    return _ACTION[(*throttle, key)], key


def drive_races(game, driver: PurePursuitDriver, max_race_ms: int = 300_000) -> list[dict]:
    """Run one race per car with the driver; returns per-car race time and finish flag."""
    obs = game.reset()
    driver.reset()
    done = np.zeros(game.n_cars, dtype=bool)
    results: list[dict] = [{} for _ in range(game.n_cars)]
    steps = max_race_ms // game.action_ms
    for _ in range(steps):
        obs = game.step(driver.act(obs.car))
        for i in np.nonzero(obs.car.finished & ~done)[0]:
            done[i] = True
            results[i] = {"finished": True, "race_time_ms": int(obs.car.race_time_ms[i])}
        if done.all():
            break
    for i in np.nonzero(~done)[0]:
        results[i] = {"finished": False, "race_time_ms": int(obs.car.race_time_ms[i])}
    return results
