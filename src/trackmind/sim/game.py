"""SimGame: the built-in simulator as a GameInstance for a batch of cars.

Each car races its own map and can be reset, saved or rewound on its own. Maps live in a
pool shared by the batch (line arrays and textures concatenated for the compiled kernels);
a map is rasterised once per game, the first time a car uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from trackmind.defaults import env_defaults
from trackmind.game.actions import ACTIONS, validate_actions
from trackmind.game.contract import TICK_MS, TICKS_PER_ACTION, CarState, GameObservation
from trackmind.sim import physics as ph
from trackmind.sim.mapio import load_map
from trackmind.sim.render import (
    OUTSIDE_TEXEL,
    CameraParams,
    TrackTextures,
    build_textures,
    camera_tables,
    render_kernel,
    render_kernel_parallel,
    shade_tables,
)
from trackmind.sim.track import Track
from trackmind.sim.vehicle import VehicleParams


@dataclass(frozen=True)
class SavedCar:
    """Snapshot of one car: its state row (map slot included)."""

    row: np.ndarray


class _MapPool:
    """Tracks used by a game, concatenated for the kernels."""

    def __init__(self, view_m: float) -> None:
        self.view_m = view_m
        self.tracks: list[Track] = []
        self.textures: list[TrackTextures | None] = []
        self._index: dict[str, int] = {}

    def slot(self, track: Track, with_texture: bool) -> int:
        key = track.fingerprint()
        if key in self._index:
            return self._index[key]
        self.tracks.append(track)
        self.textures.append(build_textures(track, self.view_m) if with_texture else None)
        self._index[key] = len(self.tracks) - 1
        self._pack()
        return len(self.tracks) - 1

    def _pack(self) -> None:
        ts = self.tracks
        n = np.array([len(t.s) for t in ts], dtype=np.int64)
        self.map_off = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
        self.map_n = n
        self.line_pts = np.ascontiguousarray(np.vstack([t.points for t in ts]))
        self.line_s = np.concatenate([t.s for t in ts])
        self.line_wl = np.concatenate([t.width_left for t in ts])
        self.line_wr = np.concatenate([t.width_right for t in ts])
        self.map_start = np.array([t.start_s for t in ts])
        self.map_finish = np.array([t.finish_s for t in ts])
        cp_n = np.array([len(t.checkpoints_s) for t in ts], dtype=np.int64)
        self.cp_n = cp_n
        self.cp_off = np.concatenate([[0], np.cumsum(cp_n)[:-1]]).astype(np.int64)
        self.cps = np.concatenate([t.checkpoints_s for t in ts] + [np.zeros(0)])
        if all(tx is not None for tx in self.textures):
            counts = [len(tx.textures) for tx in self.textures]
            self.tex_base = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            self.windowed = [m for m, n in enumerate(counts) if n > 1]  # maps with bridges
            texs = [x for tx in self.textures for x in tx.textures]
            sizes = np.array([tx.data.size for tx in texs], dtype=np.int64)
            self.tex_off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
            # every texture row-major, then one texel 0 that rays outside a texture read
            self.tex_flat = np.concatenate([tx.data.ravel() for tx in texs] + [OUTSIDE_TEXEL])
            self.tex_nx = np.array([tx.data.shape[1] for tx in texs], dtype=np.int64)
            self.tex_ny = np.array([tx.data.shape[0] for tx in texs], dtype=np.int64)
            self.tex_x0 = np.array([tx.x0 for tx in texs])
            self.tex_y0 = np.array([tx.y0 for tx in texs])
            self.cell = texs[0].cell

    def texture_of(self, slots: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Index of the texture each car sees (its map's, and on its road for a bridge)."""
        out = self.tex_base[slots]
        for m in self.windowed:  # usually none: one texture per map, no per-car work
            cars = slots == m
            if cars.any():
                out[cars] += self.textures[m].index(s[cars])
        return out


class SimGame:
    """Vectorized racing simulator implementing the GameInstance contract.

    Args:
        n_cars: cars stepped together.
        maps: map for every car (Track or spec such as "starter", "procedural:3", a file),
            or a list with one per car.
        frame_shape: (H, W) of the grayscale frames; None renders no frames (floats only).
        tick_ms: physics tick; ticks_per_action: ticks one action is held (the game's own
            step, 50 ms, by default; the training env chooses its own in conf/env/sim.yaml).
        zone_spacing_m: spacing of the zone centers that zone_idx counts (None:
            conf/env/sim.yaml's).
        render_threads: threads that render the batch's frames (numba's; 1: this thread).
    """

    def __init__(
        self,
        n_cars: int = 1,
        maps: Track | str | list = "starter",
        frame_shape: tuple[int, int] | None = (120, 160),
        vehicle: VehicleParams | None = None,
        camera: CameraParams | None = None,
        tick_ms: int = TICK_MS,
        ticks_per_action: int = TICKS_PER_ACTION,
        zone_spacing_m: float | None = None,
        zones_before_start: int = 1,
        render_threads: int = 1,
    ) -> None:
        if n_cars < 1:
            raise ValueError(f"n_cars must be >= 1, got {n_cars}")
        if not 1 <= render_threads <= nb.config.NUMBA_NUM_THREADS:
            raise ValueError(
                f"render_threads must be in 1..{nb.config.NUMBA_NUM_THREADS} "
                f"(NUMBA_NUM_THREADS), got {render_threads}"
            )
        self.render_threads = int(render_threads)
        if zone_spacing_m is None:
            zone_spacing_m = env_defaults()["zone_spacing_m"]
        if tick_ms <= 0 or ticks_per_action <= 0:
            raise ValueError("tick_ms and ticks_per_action must be > 0")
        self.n_cars = int(n_cars)
        self.vehicle = vehicle or VehicleParams()
        self.camera = camera or CameraParams()
        self.tick_ms = int(tick_ms)
        self.ticks_per_action = int(ticks_per_action)
        self.action_ms = self.tick_ms * self.ticks_per_action
        self.zone_spacing_m = float(zone_spacing_m)
        self.zones_before_start = int(zones_before_start)
        self.render = frame_shape is not None
        self.frame_shape = tuple(frame_shape) if frame_shape is not None else (0, 0)
        self._params, self._gears = ph.pack_params(self.vehicle)
        self._pool = _MapPool(self.camera.view_distance)
        self.state = np.zeros((self.n_cars, ph.N_STATE), dtype=np.float64)
        if self.render:
            h, w = self.frame_shape
            cam = camera_tables(h, w, self.camera)
            ground_lut, wall_lut = shade_tables(cam)
            self._cam_args = (cam.forward, cam.lateral, cam.wall_top, ground_lut, wall_lut)
            self._cam_args += (cam.horizon_row,)
            self._frames = np.zeros((self.n_cars, 1, h, w), dtype=np.uint8)
        else:
            self._frames = np.zeros((self.n_cars, 1, 0, 0), dtype=np.uint8)
        self.reset(maps=maps)

    # --- GameInstance ------------------------------------------------------------------
    def reset(self, cars=None, maps=None) -> GameObservation:
        cars = self._cars(cars)
        if maps is not None:
            specs = maps if isinstance(maps, (list, tuple)) else [maps] * len(cars)
            if len(specs) != len(cars):
                raise ValueError(f"reset: {len(specs)} maps given for {len(cars)} cars")
            slots = [self._pool.slot(self._track(m), self.render) for m in specs]
        else:
            slots = [int(self.state[c, ph.MAP]) for c in cars]
        for c, slot in zip(cars, slots):
            self._place_at_start(c, slot)
        if self.render:
            self._render(cars)
        return self.observe()

    def step(self, actions) -> GameObservation:
        a = validate_actions(actions, self.n_cars)
        self.advance(a)
        return self.observe()

    def advance(self, actions: np.ndarray) -> None:
        """Step without building a CarState (for callers that read arrays directly)."""
        pool = self._pool
        ph.step_kernel(
            self.state,
            actions,
            self.ticks_per_action,
            self.tick_ms / 1000.0,
            self._params,
            self._gears,
            ACTIONS,
            pool.line_pts,
            pool.line_s,
            pool.line_wl,
            pool.line_wr,
            pool.map_off,
            pool.map_n,
            pool.map_start,
            pool.map_finish,
            pool.cp_off,
            pool.cp_n,
            pool.cps,
        )
        if self.render:
            self._render(None)

    def observe(self) -> GameObservation:
        return GameObservation(frames=self._frames.copy(), car=self.car_state())

    def save_state(self, car: int) -> SavedCar:
        return SavedCar(row=self.state[self._car(car)].copy())

    def restore_state(self, car: int, state: SavedCar) -> None:
        if not isinstance(state, SavedCar) or state.row.shape != (ph.N_STATE,):
            raise ValueError("restore_state: expected a snapshot taken with save_state")
        c = self._car(car)
        self.state[c] = state.row
        if self.render:
            self._render([c])

    def track(self, car: int) -> Track:
        return self._pool.tracks[int(self.state[self._car(car), ph.MAP])]

    def close(self) -> None:
        pass

    # --- views ------------------------------------------------------------------------
    @property
    def frames(self) -> np.ndarray:
        """The current frames (B, 1, H, W) uint8 (a view; copied by observe())."""
        return self._frames

    def car_state(self) -> CarState:
        st = self.state
        b = self.n_cars
        yaw = st[:, ph.YAW].copy()
        c, s = np.cos(yaw), np.sin(yaw)
        rot = np.zeros((b, 3, 3))
        rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1] = c, -s, s, c
        rot[:, 2, 2] = 1.0
        vel = np.zeros((b, 3))
        vel[:, 0], vel[:, 1] = st[:, ph.VX], st[:, ph.VY]
        ang = np.zeros((b, 3))
        ang[:, 2] = st[:, ph.R]
        sliding = np.zeros((b, 4), dtype=bool)
        sliding[:, :2] = st[:, ph.SLIDE_F, None] > 0
        sliding[:, 2:] = st[:, ph.SLIDE_R, None] > 0
        start = self._pool.map_start[st[:, ph.MAP].astype(np.int64)]
        progress = st[:, ph.S] - start
        zone = np.floor(progress / self.zone_spacing_m).astype(np.int64) + self.zones_before_start
        pos = np.zeros((b, 3))
        pos[:, 0], pos[:, 1] = st[:, ph.X], st[:, ph.Y]
        return CarState(
            position=pos,
            yaw=yaw,
            rotation=rot,
            velocity=vel,
            angular_velocity=ang,
            gear=st[:, ph.GEAR].astype(np.int64),
            rpm=st[:, ph.RPM].copy(),
            wheel_contact=np.ones((b, 4), dtype=bool),
            wheel_sliding=sliding,
            wall_contact=st[:, ph.WALL] > 0,
            race_time_ms=np.rint(st[:, ph.TIME_MS]).astype(np.int64),
            finished=st[:, ph.FINISHED] > 0,
            progress_m=progress,
            lateral_m=st[:, ph.D].copy(),
            zone_idx=np.maximum(zone, 0),
            checkpoints_passed=st[:, ph.NEXT_CP].astype(np.int64),
        )

    # --- internals --------------------------------------------------------------------
    def _track(self, spec) -> Track:
        return spec if isinstance(spec, Track) else load_map(spec)

    def _car(self, car: int) -> int:
        c = int(car)
        if not 0 <= c < self.n_cars:
            raise IndexError(f"car index {car} out of range 0..{self.n_cars - 1}")
        return c

    def _cars(self, cars) -> list[int]:
        if cars is None:
            return list(range(self.n_cars))
        return [self._car(c) for c in np.atleast_1d(cars)]

    def _place_at_start(self, c: int, slot: int) -> None:
        t = self._pool.tracks[slot]
        row = np.zeros(ph.N_STATE)
        p = t.point_at(t.start_s)
        row[ph.X], row[ph.Y] = p[0], p[1]
        row[ph.YAW] = t.heading_at(t.start_s)
        row[ph.GEAR] = 1
        row[ph.RPM] = self.vehicle.rpm_idle
        row[ph.SEG] = t.segment_at(t.start_s)
        row[ph.S] = t.start_s
        row[ph.MAP] = slot
        self.state[c] = row

    def _render(self, cars) -> None:
        pool, st = self._pool, self.state
        # the whole batch renders from strided views of the state; a subset from copies
        idx = slice(None) if cars is None else np.asarray(cars, dtype=np.int64)
        out = (
            self._frames
            if cars is None
            else np.empty((len(idx), *self._frames.shape[1:]), np.uint8)
        )
        if self.render_threads > 1:
            nb.set_num_threads(self.render_threads)
        kernel = render_kernel_parallel if self.render_threads > 1 else render_kernel
        tex = (pool.tex_flat, pool.tex_off, pool.tex_nx, pool.tex_ny, pool.tex_x0, pool.tex_y0)
        kernel(
            st[idx, ph.X],
            st[idx, ph.Y],
            st[idx, ph.YAW],
            pool.texture_of(st[idx, ph.MAP].astype(np.int64), st[idx, ph.S]),
            (*tex, pool.cell),
            self._cam_args,
            out,
        )
        if cars is not None:
            self._frames[idx] = out
