"""Batched car physics: dynamic bicycle model with saturating tyres, walls and race logic.

Each car is one row of a float64 state array (columns below), so saving or rewinding a car
is a row copy. The kernel is compiled with numba: one call advances every car by a whole
action (several physics ticks), without Python in the loop.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from trackmind.sim.vehicle import G, VehicleParams

# --- state columns -----------------------------------------------------------------------
X, Y, YAW, VX, VY, R, STEER, GEAR, RPM = range(9)
SEG, S, D, TIME_MS, FINISHED, NEXT_CP, WALL, SLIDE_F, SLIDE_R, MAP = range(9, 19)
N_STATE = 19

# --- parameter vector layout ---------------------------------------------------------------
_P_NAMES = [
    "mu",
    "tyre_stiffness",
    "rear_grip",
    "rear_stiffness",
    "wheelbase_front",
    "wheelbase_rear",
    "yaw_inertia",
    "power",
    "traction_accel",
    "drag",
    "rolling",
    "engine_brake",
    "brake_decel",
    "reverse_accel",
    "reverse_max_speed",
    "steer_max",
    "steer_speed_ref",
    "steer_rate",
    "drift_rear_grip",
    "kinematic_below",
    "dynamic_above",
    "half_width",
    "wall_restitution",
    "wall_friction",
    "max_speed",
    "rpm_idle",
    "rpm_max",
]
(
    P_MU,
    P_B,
    P_RGRIP,
    P_RSTIFF,
    P_LF,
    P_LR,
    P_K2,
    P_POWER,
    P_TRAC,
    P_DRAG,
    P_ROLL,
    P_EBRAKE,
    P_BRAKE,
    P_REV,
    P_VREV,
    P_STEER,
    P_STEER_REF,
    P_STEER_RATE,
    P_DRIFT,
    P_VKIN,
    P_VDYN,
    P_HW,
    P_REST,
    P_WFRIC,
    P_VMAX,
    P_RPM0,
    P_RPM1,
) = range(len(_P_NAMES))


def pack_params(p: VehicleParams) -> tuple[np.ndarray, np.ndarray]:
    """Vehicle parameters as (float64 vector, gear top speeds) for the compiled kernel."""
    vec = np.array([float(getattr(p, n)) for n in _P_NAMES], dtype=np.float64)
    return vec, np.asarray(p.gear_top_speeds, dtype=np.float64)


@nb.njit(cache=True, fastmath=False)
def _project(px, py, seg0, n, pts, wl, wr, ss, half_window):
    """Nearest point of the polyline near segment seg0: (seg, s, signed d, wl, wr, nx, ny)."""
    best = 1e30
    bseg = seg0
    bt = 0.0
    lo = max(0, seg0 - half_window)
    hi = min(n - 2, seg0 + half_window)
    for j in range(lo, hi + 1):
        ax, ay = pts[j, 0], pts[j, 1]
        ex, ey = pts[j + 1, 0] - ax, pts[j + 1, 1] - ay
        ll = ex * ex + ey * ey
        t = ((px - ax) * ex + (py - ay) * ey) / ll
        t = min(1.0, max(0.0, t))
        qx, qy = ax + t * ex - px, ay + t * ey - py
        dd = qx * qx + qy * qy
        if dd < best:
            best = dd
            bseg = j
            bt = t
    ax, ay = pts[bseg, 0], pts[bseg, 1]
    ex, ey = pts[bseg + 1, 0] - ax, pts[bseg + 1, 1] - ay
    ln = np.sqrt(ex * ex + ey * ey)
    nx, ny = -ey / ln, ex / ln  # left normal
    # unclamped along-segment coordinate gives s beyond the ends (back and end walls)
    t_raw = ((px - ax) * ex + (py - ay) * ey) / (ln * ln)
    if (bseg > 0 and t_raw < 0.0) or (bseg < n - 2 and t_raw > 1.0):
        t_raw = bt
    s = ss[bseg] + t_raw * ln
    d = (px - ax) * nx + (py - ay) * ny
    wlv = wl[bseg] + bt * (wl[bseg + 1] - wl[bseg])
    wrv = wr[bseg] + bt * (wr[bseg + 1] - wr[bseg])
    return bseg, s, d, wlv, wrv, nx, ny, ex / ln, ey / ln


@nb.njit(cache=True)
def _tyre(alpha, fmax, b):
    return -fmax * np.tanh(b * alpha)


@nb.njit(cache=True)
def step_kernel(
    state,
    actions,
    n_ticks,
    dt,
    p,
    gears,
    action_table,
    line_pts,
    line_s,
    line_wl,
    line_wr,
    map_off,
    map_n,
    map_start,
    map_finish,
    cp_off,
    cp_n,
    cps,
):
    """Advance every car by n_ticks physics ticks of dt seconds holding its action."""
    n_cars = state.shape[0]
    tick_ms = dt * 1000.0
    lf, lr = p[P_LF], p[P_LR]
    wb = lf + lr
    fz_f, fz_r = G * lr / wb, G * lf / wb
    n_gears = gears.shape[0]
    for i in range(n_cars):
        a = action_table[actions[i]]
        acc, brk, left, right = a[0], a[1], a[2], a[3]
        m = int(state[i, MAP])
        off, n = map_off[m], map_n[m]
        pts = line_pts[off : off + n]
        ss = line_s[off : off + n]
        wl = line_wl[off : off + n]
        wr = line_wr[off : off + n]
        s_end = ss[n - 1]
        state[i, WALL] = 0.0
        for _ in range(n_ticks):
            x, y, yaw = state[i, X], state[i, Y], state[i, YAW]
            vx, vy, r = state[i, VX], state[i, VY], state[i, R]
            steer = state[i, STEER]
            s_prev = state[i, S]
            speed = np.sqrt(vx * vx + vy * vy)
            # steering: rate-limited towards a speed-dependent full lock
            lock = p[P_STEER] / (1.0 + abs(vx) / p[P_STEER_REF])
            target = (left - right) * lock
            ds = target - steer
            lim = p[P_STEER_RATE] * dt
            steer += min(lim, max(-lim, ds))
            # longitudinal command (per unit mass, along the car)
            rear_grip = 1.0
            if acc == 1 and brk == 1:
                ax_cmd = 0.5 * min(p[P_TRAC], p[P_POWER] / max(abs(vx), 1e-3))
                rear_grip = p[P_DRIFT]
                if vx < -0.5:
                    ax_cmd = p[P_BRAKE]
            elif acc == 1:
                if vx < -0.5:
                    ax_cmd = p[P_BRAKE]
                else:
                    ax_cmd = min(p[P_TRAC], p[P_POWER] / max(vx, 1e-3))
            elif brk == 1:
                if vx > 0.5:
                    ax_cmd = -p[P_BRAKE]
                elif vx > -p[P_VREV]:
                    ax_cmd = -p[P_REV]
                else:
                    ax_cmd = 0.0
            else:
                ax_cmd = -p[P_EBRAKE] * np.tanh(vx)
            resist = p[P_DRAG] * vx * abs(vx) + p[P_ROLL] * np.tanh(4.0 * vx)
            # friction circle: longitudinal force eats into lateral grip (split over axles)
            fx_f = 0.5 * ax_cmd
            fx_r = 0.5 * ax_cmd
            gmax_f = p[P_MU] * fz_f
            gmax_r = p[P_MU] * p[P_RGRIP] * fz_r * rear_grip
            fx_f = min(gmax_f, max(-gmax_f, fx_f))
            fx_r = min(gmax_r, max(-gmax_r, fx_r))
            fy_max_f = np.sqrt(max(gmax_f * gmax_f - fx_f * fx_f, 0.01 * gmax_f * gmax_f))
            fy_max_r = np.sqrt(max(gmax_r * gmax_r - fx_r * fx_r, 0.01 * gmax_r * gmax_r))
            # dynamic bicycle
            avx = max(abs(vx), 0.5)
            sgn = 1.0 if vx >= 0 else -1.0
            alpha_f = np.arctan2(vy + lf * r, avx) - steer * sgn
            alpha_r = np.arctan2(vy - lr * r, avx)
            fy_f = _tyre(alpha_f, fy_max_f, p[P_B])
            fy_r = _tyre(alpha_r, fy_max_r, p[P_B] * p[P_RSTIFF])
            cs, sn = np.cos(steer), np.sin(steer)
            dvx = fx_f * cs - fy_f * sn + fx_r - resist + vy * r
            dvy = fy_f * cs + fx_f * sn + fy_r - vx * r
            dr = (lf * (fy_f * cs + fx_f * sn) - lr * fy_r) / p[P_K2]
            vx_n = vx + dvx * dt
            if acc == 0 and brk == 0 and abs(vx_n) < 0.05:
                vx_n = 0.0
            if brk == 1 and acc == 0 and vx > 0.5 and vx_n < 0.0:
                vx_n = 0.0  # brakes stop the car; reversing starts on the next tick
            vy_dyn = vy + dvy * dt
            r_dyn = r + dr * dt
            # kinematic bicycle at low speed (no slip), blended in below dynamic_above
            tan_s = np.tan(steer)
            r_kin = vx_n * tan_s / wb
            vy_kin = r_kin * lr
            lam = (abs(vx_n) - p[P_VKIN]) / (p[P_VDYN] - p[P_VKIN])
            lam = min(1.0, max(0.0, lam))
            vy_n = lam * vy_dyn + (1.0 - lam) * vy_kin
            r_n = lam * r_dyn + (1.0 - lam) * r_kin
            # safety caps: finite values for any action sequence
            vmax = p[P_VMAX]
            vx_n = min(vmax, max(-vmax, vx_n))
            vy_n = min(vmax, max(-vmax, vy_n))
            r_n = min(20.0, max(-20.0, r_n))
            yaw_n = yaw + r_n * dt
            if yaw_n > np.pi:
                yaw_n -= 2.0 * np.pi
            elif yaw_n < -np.pi:
                yaw_n += 2.0 * np.pi
            c, sy = np.cos(yaw_n), np.sin(yaw_n)
            wx = vx_n * c - vy_n * sy
            wy = vx_n * sy + vy_n * c
            x_n = x + wx * dt
            y_n = y + wy * dt
            # walls: project on the line and keep the car between the walls
            disp = speed * dt + 1.0
            hw_win = 6 + int(disp * 10.0)
            if hw_win > 400:
                hw_win = 400
            seg, s, d, wlv, wrv, nx, ny, tx, ty = _project(
                x_n, y_n, int(state[i, SEG]), n, pts, wl, wr, ss, hw_win
            )
            hw = p[P_HW]
            wall = 0.0
            hi_d = wlv - hw
            lo_d = -(wrv - hw)
            push_n = 0.0
            if d > hi_d:
                push_n = hi_d - d
            elif d < lo_d:
                push_n = lo_d - d
            if push_n != 0.0:
                wall = 1.0
                x_n += push_n * nx
                y_n += push_n * ny
                vn = wx * nx + wy * ny
                if vn * push_n < 0.0:  # moving into the wall
                    wx, wy = _wall_response(wx, wy, nx, ny, vn, p[P_REST], p[P_WFRIC])
                    r_n *= 0.5
                d += push_n
            # back wall behind the run-up, end wall after the run-off
            push_t = 0.0
            if s < hw:
                push_t = hw - s
            elif s > s_end - hw:
                push_t = (s_end - hw) - s
            if push_t != 0.0:
                wall = 1.0
                x_n += push_t * tx
                y_n += push_t * ty
                vt = wx * tx + wy * ty
                if vt * push_t < 0.0:
                    wx, wy = _wall_response(wx, wy, tx, ty, vt, p[P_REST], p[P_WFRIC])
                    r_n *= 0.5
                s += push_t
            if wall == 1.0:
                vx_n = wx * c + wy * sy
                vy_n = -wx * sy + wy * c
            state[i, X], state[i, Y], state[i, YAW] = x_n, y_n, yaw_n
            state[i, VX], state[i, VY], state[i, R] = vx_n, vy_n, r_n
            state[i, STEER] = steer
            state[i, SEG], state[i, S], state[i, D] = seg, s, d
            if wall == 1.0:
                state[i, WALL] = 1.0  # contact at any tick of this action step
            state[i, SLIDE_F] = 1.0 if abs(np.tanh(p[P_B] * alpha_f)) > 0.9 and lam > 0 else 0.0
            state[i, SLIDE_R] = (
                1.0 if abs(np.tanh(p[P_B] * p[P_RSTIFF] * alpha_r)) > 0.9 and lam > 0 else 0.0
            )
            # gearbox (automatic) and rpm
            g = int(state[i, GEAR])
            av = abs(vx_n)
            if vx_n < -0.5:
                g = 0
            elif g == 0:
                g = 1
            if g >= 1:
                while g < n_gears and av > 0.95 * gears[g - 1]:
                    g += 1
                while g > 1 and av < 0.6 * gears[g - 2]:
                    g -= 1
            top = gears[max(g, 1) - 1]
            rpm = p[P_RPM0] + (p[P_RPM1] - p[P_RPM0]) * min(1.0, av / top)
            state[i, GEAR] = g
            state[i, RPM] = rpm
            # race clock, checkpoints in order, finish
            if state[i, FINISHED] == 0.0:
                state[i, TIME_MS] += tick_ms
                k = int(state[i, NEXT_CP])
                # a checkpoint counts when the car drives across it (not when placed past it)
                while k < cp_n[m] and s_prev < cps[cp_off[m] + k] <= s:
                    k += 1
                state[i, NEXT_CP] = k
                if k == cp_n[m] and s >= map_finish[m]:
                    state[i, FINISHED] = 1.0


@nb.njit(cache=True)
def _wall_response(wx, wy, nx, ny, vn, restitution, friction):
    """Remove (and slightly bounce) the speed into the wall; scrape some tangential speed."""
    tx_, ty_ = wx - vn * nx, wy - vn * ny
    vt = np.sqrt(tx_ * tx_ + ty_ * ty_)
    keep = 1.0 - friction * min(1.0, abs(vn) / max(vt, 1e-6))
    keep = max(0.0, keep)
    return tx_ * keep - restitution * vn * nx, ty_ * keep - restitution * vn * ny
