"""Grayscale perspective frames from a chase camera, ray-cast column by column.

Each map is rasterised once into a top-down texture (road shade, lines, start/finish,
checkpoints; 0 outside the walls). A frame casts the ground ray of every pixel below the
horizon into that texture; where a ray crosses a road edge, a wall of `wall_height` is drawn
at that distance, so walls stand up and occlude what lies behind them. A camera higher than
the walls sees the coming curve over them. Same state, same frame: no randomness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from trackmind.errors import require
from trackmind.sim.track import Track

CELL_M = 0.5  # texture resolution
SKY, GRASS, WALL_SHADE, FOG = 215, 45, 150, 175
OUTSIDE_TEXEL = np.zeros(1, np.uint8)  # ends the packed textures: what rays off them read
OUTSIDE_TEXEL.flags.writeable = False


@dataclass(frozen=True)
class CameraParams:
    """Chase camera behind the car (metres, degrees)."""

    height: float = 3.0
    behind: float = 6.0
    pitch_deg: float = 12.0
    hfov_deg: float = 90.0
    wall_height: float = 1.2
    view_distance: float = 250.0

    def __post_init__(self) -> None:
        h = self.hfov_deg
        require(0 < h < 170, "hfov_deg", f"must be in (0, 170), got {h}")
        require(self.height > 0, "height", f"must be > 0, got {self.height}")
        d = self.view_distance
        require(d > 0, "view_distance", f"must be > 0, got {d}")


@dataclass(frozen=True)
class CameraTables:
    """Per-row / per-pixel constants of the pinhole camera for one frame size."""

    horizon_row: int  # rows <= horizon_row are sky
    forward: np.ndarray  # (H,) ground distance ahead of the camera of each row
    lateral: np.ndarray  # (H, W) ground offset to the left of each pixel
    wall_top: np.ndarray  # (H,) row of the top of a wall whose foot is on this row
    fog: np.ndarray  # (H,) 0..1 blend towards the fog shade


def camera_tables(height: int, width: int, cam: CameraParams) -> CameraTables:
    """Precompute the ground-plane geometry of every pixel (camera pitched down, no roll)."""
    if height < 8 or width < 8:
        raise ValueError(f"frame size must be at least 8x8, got {height}x{width}")
    th = np.deg2rad(cam.pitch_deg)
    f = (width / 2.0) / np.tan(np.deg2rad(cam.hfov_deg) / 2.0)
    cy, cx = (height - 1) / 2.0, (width - 1) / 2.0
    yc = (np.arange(height) - cy) / f
    xc = (np.arange(width) - cx) / f
    denom = np.sin(th) + yc * np.cos(th)
    below = denom > 1e-6
    t = np.where(below, cam.height / np.where(below, denom, 1.0), np.inf)
    fwd = t * (np.cos(th) - yc * np.sin(th))
    visible = below & (fwd < cam.view_distance)
    horizon = int(np.max(np.nonzero(~visible)[0])) if np.any(~visible) else -1
    fwd = np.where(visible, fwd, cam.view_distance)
    t = np.where(visible, t, 0.0)
    lat = -t[:, None] * xc[None, :]
    dz = cam.wall_height - cam.height
    zc = fwd * np.cos(th) - dz * np.sin(th)
    ydown = -fwd * np.sin(th) - dz * np.cos(th)
    top = np.floor(cy + f * ydown / np.maximum(zc, 1e-6)).astype(np.int64)
    fog = np.clip((fwd - 0.3 * cam.view_distance) / (0.7 * cam.view_distance), 0.0, 1.0)
    return CameraTables(
        horizon_row=horizon,
        forward=(fwd - cam.behind).astype(np.float64),  # relative to the car's centre
        lateral=lat.astype(np.float64),
        wall_top=np.minimum(top, np.arange(height) - 1),
        fog=fog.astype(np.float64),
    )


@dataclass(frozen=True)
class Texture:
    """Top-down shade texture of one map (uint8, 0 = outside the walls)."""

    data: np.ndarray  # (ny, nx) uint8
    x0: float
    y0: float
    cell: float


TEXTURE_WINDOW_M = 50.0  # a road over itself: one texture per this much of the line
TEXTURE_BEHIND_M = 30.0  # ... holding the road from this far behind the window


@dataclass(frozen=True)
class TrackTextures:
    """The textures of one map and which one a car at arclength s sees.

    A flat map has one texture. A map whose road passes over itself has one per window of
    TEXTURE_WINDOW_M along the line, each rasterised from the road the car can see from that
    window (behind it, then ahead up to the view distance), the road nearest ahead winning
    where two roads overlap, so walls and frames follow the road the car is on.
    """

    textures: list[Texture]
    window_m: float  # inf: one texture
    lap_start_s: float  # circuits: windows repeat every lap from here
    lap_m: float  # inf for an open line

    def index(self, s: np.ndarray) -> np.ndarray:
        """Texture of each arclength (B,) -> (B,) int64 indices into `textures`."""
        if len(self.textures) == 1:
            return np.zeros(np.shape(s), np.int64)
        s = np.asarray(s, dtype=np.float64)
        if np.isfinite(self.lap_m):
            lapped = self.lap_start_s + np.mod(s - self.lap_start_s, self.lap_m)
            s = np.where(s > self.lap_start_s, lapped, s)
        k = np.floor(s / self.window_m).astype(np.int64)
        return np.clip(k, 0, len(self.textures) - 1)


def build_textures(track: Track, view_m: float, cell: float = CELL_M) -> TrackTextures:
    """Every texture of a map (see TrackTextures); `view_m`: how far ahead the camera sees."""
    lap_m = track.lap_length_m if track.closed else np.inf
    if not track.crossings:
        return TrackTextures([build_texture(track, cell)], np.inf, track.start_s, lap_m)
    ends = track.start_s + track.lap_length_m if track.closed else track.s[-1]
    textures = []
    for k in range(int(np.ceil(ends / TEXTURE_WINDOW_M))):
        ws = k * TEXTURE_WINDOW_M
        j0 = track.segment_at(ws - TEXTURE_BEHIND_M)
        jc = track.segment_at(ws)
        j1 = track.segment_at(ws + TEXTURE_WINDOW_M + view_m)
        order = np.concatenate([np.arange(jc, j1 + 1), np.arange(jc - 1, j0 - 1, -1)])
        textures.append(build_texture(track, cell, order, exclusive=True))
    return TrackTextures(textures, TEXTURE_WINDOW_M, track.start_s, lap_m)


def build_texture(
    track: Track,
    cell: float = CELL_M,
    segments: np.ndarray | None = None,
    exclusive: bool = False,
) -> Texture:
    """Rasterise the road: each cell takes the nearest line segment's (s, d) and is shaded.

    `segments`: the segments to draw, in order of precedence (default: all; a circuit draws
    its run-up and first lap, which every lap repeats). `exclusive`: a cell near a road
    drawn earlier stays that road's, however near a later part of the line passes.
    """
    if segments is None:
        last = len(track.s) - 2
        if track.closed:
            last = min(last, track.segment_at(track.start_s + track.lap_length_m) + 1)
        segments = np.arange(last + 1)
    segments = np.asarray(segments, dtype=np.int64)
    used = np.unique(np.concatenate([segments, segments + 1]))
    margin = float(max(track.width_left.max(), track.width_right.max())) + 4.0
    lo = track.points[used].min(axis=0) - margin
    hi = track.points[used].max(axis=0) + margin
    nx = int(np.ceil((hi[0] - lo[0]) / cell)) + 1
    ny = int(np.ceil((hi[1] - lo[1]) / cell)) + 1
    # a circuit's finish line lies where each lap ends (drawn once, at the end of lap one)
    finish_s = track.start_s + track.lap_length_m if track.closed else track.finish_s
    data = _rasterise(
        track.points,
        track.s,
        track.width_left,
        track.width_right,
        float(lo[0]),
        float(lo[1]),
        cell,
        nx,
        ny,
        track.start_s,
        finish_s,
        np.asarray(track.checkpoints_s, dtype=np.float64),
        segments,
        exclusive,
    )
    return Texture(data=data, x0=float(lo[0]), y0=float(lo[1]), cell=cell)


@nb.njit(cache=True)
def _rasterise(pts, ss, wl, wr, x0, y0, cell, nx, ny, start_s, finish_s, cps, order, exclusive):
    best = np.full((ny, nx), 1e30)
    owner = np.full((ny, nx), -1, dtype=np.int64)
    cell_s = np.zeros((ny, nx))
    cell_d = np.zeros((ny, nx))
    cell_wl = np.zeros((ny, nx))
    cell_wr = np.zeros((ny, nx))
    n = pts.shape[0]
    for jj in range(order.shape[0]):
        j = order[jj]
        ax, ay = pts[j, 0], pts[j, 1]
        ex, ey = pts[j + 1, 0] - ax, pts[j + 1, 1] - ay
        ll = ex * ex + ey * ey
        ln = np.sqrt(ll)
        r = max(wl[j], wr[j], wl[j + 1], wr[j + 1]) + 3.0
        i0 = max(0, int((min(ax, ax + ex) - r - x0) / cell))
        i1 = min(nx - 1, int((max(ax, ax + ex) + r - x0) / cell) + 1)
        k0 = max(0, int((min(ay, ay + ey) - r - y0) / cell))
        k1 = min(ny - 1, int((max(ay, ay + ey) + r - y0) / cell) + 1)
        for k in range(k0, k1 + 1):
            py = y0 + k * cell
            for i in range(i0, i1 + 1):
                px = x0 + i * cell
                t = ((px - ax) * ex + (py - ay) * ey) / ll
                tc = min(1.0, max(0.0, t))
                qx, qy = ax + tc * ex - px, ay + tc * ey - py
                dd = qx * qx + qy * qy
                if dd < best[k, i]:
                    o = owner[k, i]
                    if exclusive and o >= 0:
                        wo = max(wl[o], wr[o]) + 3.0
                        same_road = abs(ss[j] - ss[o]) <= 0.5 * np.pi * (wo + r) + 2.0
                        if not same_road and best[k, i] <= wo * wo:
                            continue  # near a road drawn earlier: it stays that road's
                    owner[k, i] = j
                    best[k, i] = dd
                    # outside the ends of the line the cell lies behind an end wall
                    if (j == 0 and t < 0.0) or (j == n - 2 and t > 1.0):
                        cell_s[k, i] = -1.0
                    else:
                        cell_s[k, i] = ss[j] + tc * ln
                    cell_d[k, i] = ((px - ax) * (-ey) + (py - ay) * ex) / ln
                    cell_wl[k, i] = wl[j] + tc * (wl[j + 1] - wl[j])
                    cell_wr[k, i] = wr[j] + tc * (wr[j + 1] - wr[j])
    out = np.zeros((ny, nx), dtype=np.uint8)
    for k in range(ny):
        for i in range(nx):
            s, d = cell_s[k, i], cell_d[k, i]
            if best[k, i] > 1e29 or s < 0.0 or d > cell_wl[k, i] or d < -cell_wr[k, i]:
                continue
            edge = min(cell_wl[k, i] - d, cell_wr[k, i] + d)
            shade = 92 if int(s // 5.0) % 2 == 0 else 108  # bands every 5 m show speed
            if edge < 0.6:
                shade = 225
            elif abs(d) < 0.25 and (s % 8.0) < 4.0:
                shade = 180
            if abs(s - start_s) < 1.0:
                shade = 240
            if abs(s - finish_s) < 1.5:
                shade = 250 if (int((d + 100.0) // 1.5) + int(s // 1.0)) % 2 == 0 else 20
            for c in range(cps.shape[0]):
                if abs(s - cps[c]) < 0.75:
                    shade = 200
            out[k, i] = shade
    return out


def shade_tables(cam_tables: CameraTables) -> tuple[np.ndarray, np.ndarray]:
    """Per-row lookup tables with the distance fog applied: ground (H, 256) and wall (H,)."""
    fog = cam_tables.fog[:, None]
    vals = np.arange(256, dtype=np.float64)[None, :]
    vals = np.where(vals == 0, GRASS, vals)  # texture 0 = outside the walls
    ground = np.rint(vals * (1.0 - fog) + FOG * fog).astype(np.uint8)
    wall = np.rint(WALL_SHADE * (1.0 - cam_tables.fog) + FOG * cam_tables.fog).astype(np.uint8)
    return ground, wall


@nb.njit(cache=True, inline="always")
def _row_texels(idx, gx0, gy0, dgx, dgy, off, nx, ny, outside):
    """Flat texel index of each pixel of a row (the ground point of column col is
    (gx0 + col dgx, gy0 + col dgy) in cells), `outside` where it falls off the texture.
    Branch-free, so the compiler vectorises it; the gather that follows is then a plain load.
    """
    for col in range(idx.shape[0]):
        i = np.int64(gx0 + col * dgx)
        k = np.int64(gy0 + col * dgy)
        ok = (i >= 0) & (i < nx) & (k >= 0) & (k < ny)
        idx[col] = off + k * nx + i if ok else outside


@nb.njit(cache=True, inline="always")
def _render_car(b, px, py, yaw, m, tex, cam, out, idx):
    """Car b's frame from (px, py, yaw) in texture m. Rows are swept from the bottom (near)
    to the horizon (far); per column the kernel keeps the highest row still to draw (walls
    occlude rows above them) and whether the previous ground sample was on the road: a
    change road <-> outside is a wall foot, drawn as a span up to the wall's top.
    Per row, the texel indices come first (`_row_texels`), then the lookups and walls; the
    nearest row only starts the columns (it cannot hold a wall foot), and the sky is filled
    row by row, so the per-pixel loop carries no test it does not need."""
    tex_flat, tex_off, tex_nx, tex_ny, tex_x0, tex_y0, cell = tex
    forward, lateral, wall_top, ground_lut, wall_lut, horizon_row = cam
    h, w = out.shape[2], out.shape[3]
    inv = 1.0 / cell
    outside = tex_flat.shape[0] - 1  # OUTSIDE_TEXEL, after every texture
    draw = np.empty(w, dtype=np.int64)
    prev = np.empty(w, dtype=np.bool_)
    off, nx, ny = tex_off[m], tex_nx[m], tex_ny[m]
    x0, y0 = tex_x0[m], tex_y0[m]
    c, s = np.cos(yaw), np.sin(yaw)
    frame = out[b, 0]
    draw[:] = h - 1
    for row in range(h - 1, horizon_row, -1):
        fw = forward[row]
        lt0 = lateral[row, 0]
        dlt = lateral[row, 1] - lt0
        gx0 = (px + fw * c - lt0 * s - x0) * inv
        gy0 = (py + fw * s + lt0 * c - y0) * inv
        _row_texels(idx, gx0, gy0, -dlt * s * inv, dlt * c * inv, off, nx, ny, outside)
        lut = ground_lut[row]
        if row == h - 1:  # the nearest row: ground everywhere, each column starts here
            for col in range(w):
                val = tex_flat[idx[col]]
                prev[col] = val > 0
                frame[row, col] = lut[val]
                draw[col] = row - 1
            continue
        for col in range(w):
            if row <= draw[col]:
                val = tex_flat[idx[col]]
                inside = val > 0
                if inside != prev[col]:
                    top = max(wall_top[row], horizon_row + 1, 0)
                    shade = wall_lut[row]
                    for rr in range(top, row + 1):
                        frame[rr, col] = shade
                    draw[col] = top - 1
                    prev[col] = inside
                else:
                    frame[row, col] = lut[val]
                    draw[col] = row - 1
    for rr in range(0, draw.max() + 1):
        line = frame[rr]
        for col in range(w):
            if rr <= draw[col]:
                line[col] = SKY


@nb.njit(cache=True)
def render_kernel(state_x, state_y, state_yaw, car_tex, tex, cam, out):
    """Render frames (B, 1, H, W) uint8 for all cars into `out`, on this thread.

    `tex`: (flat, off, nx, ny, x0, y0, cell), every texture row-major in `flat`, texture m
    from `off[m]`; `cam`: (forward, lateral, wall_top, ground_lut, wall_lut, horizon_row),
    the CameraTables and shade_tables of the frame size; `flat` ends with OUTSIDE_TEXEL.
    """
    idx = np.empty(out.shape[3], dtype=np.int64)
    assert tex[0][-1] == 0  # OUTSIDE_TEXEL: rays off every texture read it
    for b in range(out.shape[0]):
        _render_car(b, state_x[b], state_y[b], state_yaw[b], car_tex[b], tex, cam, out, idx)


@nb.njit(cache=True, parallel=True)
def render_kernel_parallel(state_x, state_y, state_yaw, car_tex, tex, cam, out):
    """`render_kernel` with the cars shared among numba's threads (numba.set_num_threads)."""
    assert tex[0][-1] == 0  # OUTSIDE_TEXEL: rays off every texture read it
    for b in nb.prange(out.shape[0]):
        idx = np.empty(out.shape[3], dtype=np.int64)  # one per car: threads share none
        _render_car(b, state_x[b], state_y[b], state_yaw[b], car_tex[b], tex, cam, out, idx)
