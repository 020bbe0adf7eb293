"""MotionWorld generator, part 2: feet, legs and arms over a clip's timeline.

From a :class:`~worlds.motion.timeline._Plan`: each foot's ball position, yaw, pitch and planted flag
(:func:`_feet`: plants fixed while in stance, swings between them), the legs' global rotations by analytic
two-bone IK (:func:`_leg_ik`) and the per-frame arm angles of gait swing, waves and raises
(:func:`_arm_angles`). :func:`worlds.motion.generator.generate` assembles them into a rig pose.
"""

from __future__ import annotations

import numpy as np

from .grammar import action_kind
from .skeleton import FPS
from .timeline import PAD, _Plan, _wrap, smootherstep, smoothstep

_SIDE = {"L": 1.0, "R": -1.0}


# --------------------------------------------------------------------------------------------
# feet
# --------------------------------------------------------------------------------------------


def _interp(p: _Plan, arr: np.ndarray, time: float):
    idx = np.arange(p.N, dtype=np.float64)
    x = float(np.clip(time + PAD, 0, p.N - 1))
    if arr.ndim == 1:
        return float(np.interp(x, idx, arr))
    return np.array([np.interp(x, idx, arr[:, k]) for k in range(arr.shape[1])])


def _feet(p: _Plan, root_xz: np.ndarray):
    """Per foot: ball ``[N, 3]``, yaw ``[N]``, pitch ``[N]`` and planted flag ``[N]``."""
    body = p.body
    t = p.t
    out = {}
    fz = body.foot[2]
    for foot in ("L", "R"):
        side = _SIDE[foot]
        swings = p.swings[foot]
        ball = np.zeros((p.N, 3))
        yaw = np.zeros(p.N)
        pitch = np.zeros(p.N)
        planted = np.ones(p.N, dtype=bool)

        def place(time: float, lateral: float, side: float = side) -> tuple[np.ndarray, float]:
            r = _interp(p, root_xz, time)
            psi = _interp(p, p.yaw, time)
            toe_out = side * np.radians(4.0)
            off = np.array([side * lateral, fz])
            c, s = np.cos(psi), np.sin(psi)
            pos = r + np.array([c * off[0] + s * off[1], -s * off[0] + c * off[1]])
            return np.array([pos[0], 0.0, pos[1]]), psi + toe_out

        cur_pos, cur_yaw = place(t[0], p.stand_lateral)
        prev_end = t[0]
        for i, sw in enumerate(swings):
            # stance before this swing
            stance = (t >= prev_end) & (t < sw.t0)
            ball[stance] = cur_pos
            yaw[stance] = cur_yaw
            if sw.heel > 0 and sw.heel_time > 0:
                h0 = sw.t0 - sw.heel_time
                sel = stance & (t >= h0)
                pitch[sel] = sw.heel * smoothstep((t[sel] - h0) / sw.heel_time)
            # the landing plant
            if sw.kind == "step":
                nxt = swings[i + 1] if i + 1 < len(swings) else None
                if sw.ref is not None:
                    ref = sw.ref
                elif nxt is not None and nxt.kind == "step":
                    ref = sw.t1 + sw.ref_frac * (nxt.t0 - sw.t1)
                else:
                    ref = sw.t1
                new_pos, new_yaw = place(ref, sw.lateral)
            else:
                d = _interp(p, root_xz, sw.t1) - _interp(p, root_xz, sw.t0)
                new_pos, new_yaw = cur_pos + np.array([d[0], 0.0, d[1]]), cur_yaw
            sel = (t >= sw.t0) & (t < sw.t1)
            s = (t[sel] - sw.t0) / (sw.t1 - sw.t0)
            planted[sel] = False
            if sw.kind == "step":
                hor = smootherstep((s - sw.vertical) / (1.0 - 2.0 * sw.vertical))[:, None]  # vertical lift/set-down
                ball[sel] = cur_pos + (new_pos - cur_pos) * hor
                ball[sel, 1] = sw.lift * (1.0 - (1.0 - np.sin(np.pi * s)) ** 2)
                pitch[sel] = sw.heel * (1.0 - smoothstep(s / 0.6))
            else:
                r0 = _interp(p, root_xz, sw.t0)
                y_to = _interp(p, np.nan_to_num(p.y_jump, nan=0.0), sw.t0)
                ball[sel, 0] = cur_pos[0] + root_xz[sel, 0] - r0[0]
                ball[sel, 2] = cur_pos[2] + root_xz[sel, 1] - r0[1]
                ball[sel, 1] = np.maximum(p.y_jump[sel] - y_to, 0.0) + sw.lift * np.sin(np.pi * s)
                pitch[sel] = sw.heel * (1.0 - smoothstep(s))
            yaw[sel] = cur_yaw + _wrap(new_yaw - cur_yaw) * smoothstep(s)
            cur_pos, cur_yaw = new_pos, cur_yaw + _wrap(new_yaw - cur_yaw)
            prev_end = sw.t1
        rest = t >= prev_end
        ball[rest] = cur_pos
        yaw[rest] = cur_yaw
        out[foot] = (ball, yaw, pitch, planted)
    return out


# --------------------------------------------------------------------------------------------
# legs: two-bone IK as rotations
# --------------------------------------------------------------------------------------------


def _normalize(v):
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def _frame(y_axis, z_hint):
    """Rotation matrices with columns ``(x, y, z)``: ``y = y_axis``, ``z`` = ``z_hint`` made orthogonal."""
    y = _normalize(y_axis)
    z = _normalize(z_hint - (z_hint * y).sum(-1, keepdims=True) * y)
    x = np.cross(y, z)
    return np.stack([x, y, z], axis=-1)


def _leg_ik(hip, ankle, knee_hint, thigh, shin):
    """Global thigh and shin rotations ``[N, 3, 3]`` placing the ankle at ``ankle`` (clamped to the reach)."""
    u = ankle - hip
    d = np.linalg.norm(u, axis=-1)
    d_c = np.clip(d, abs(thigh - shin) + 1e-3, 0.9999 * (thigh + shin))
    uh = u / d[:, None]
    w = _normalize(knee_hint - (knee_hint * uh).sum(-1, keepdims=True) * uh)
    ca = np.clip((thigh**2 + d_c**2 - shin**2) / (2 * thigh * d_c), -1.0, 1.0)
    sa = np.sqrt(1.0 - ca**2)
    t_dir = ca[:, None] * uh + sa[:, None] * w
    knee = hip + thigh * t_dir
    s_dir = _normalize(hip + uh * d_c[:, None] - knee)
    g_thigh = _frame(-t_dir, -sa[:, None] * uh + ca[:, None] * w)
    g_shin = _frame(-s_dir, w - (w * s_dir).sum(-1, keepdims=True) * s_dir)
    return g_thigh, g_shin


# --------------------------------------------------------------------------------------------
# arms
# --------------------------------------------------------------------------------------------


def _arm_angles(p: _Plan, hand: str, swing_sig: np.ndarray) -> dict[str, np.ndarray]:
    """Per-frame arm angles (radians) of one arm: ``abd``, ``flex``, ``e_side``, ``e_flex``."""
    rng = p.rng
    n = p.N
    amp = rng.uniform(0.25, 0.4) * (1.0 - p.run_w) + rng.uniform(0.6, 0.75) * p.run_w
    base = {
        "abd": np.full(n, np.radians(rng.uniform(6, 10))) + 0.1 * p.run_w,
        "flex": amp * swing_sig + p.jump_arm,
        "e_side": np.zeros(n),
        "e_flex": np.radians(rng.uniform(10, 20)) * (1.0 - p.run_w)
        + np.radians(rng.uniform(80, 95)) * p.run_w
        + 0.3 * np.clip(p.jump_arm, 0, None),
    }
    out = {k: v.copy() for k, v in base.items()}
    for action, a, b, open_start, open_end in p.arms:
        kind, which = action_kind(action)
        if which not in ({"L": "left", "R": "right"}[hand], "both"):
            continue
        up = rng.uniform(0.35, 0.5) * FPS
        t0 = a + (rng.uniform(0.0, 0.2) * FPS if open_start else 0.0)
        w = p.ramp(t0, t0 + up)
        if not open_end:
            w = w * (1.0 - p.ramp(b - up, b))
        if kind == "wave":
            abd = np.radians(rng.uniform(130, 145))
            freq = rng.uniform(1.4, 2.0) / FPS
            amp_w = np.radians(rng.uniform(28, 40))
            phase = rng.uniform(0, 2 * np.pi) + (np.pi if hand == "R" else 0.0)
            osc = np.pi - abd + np.radians(rng.uniform(-5, 5)) + amp_w * np.sin(2 * np.pi * freq * p.t + phase) * w**2
            target = {
                "abd": np.full(n, abd),
                "flex": np.full(n, np.radians(rng.uniform(0, 15))),
                "e_side": osc,
                "e_flex": np.full(n, np.radians(rng.uniform(0, 10))),
            }
        else:
            target = {
                "abd": np.full(n, np.radians(rng.uniform(160, 172))),
                "flex": np.full(n, np.radians(rng.uniform(0, 15))),
                "e_side": np.full(n, np.radians(rng.uniform(0, 5))),
                "e_flex": np.full(n, np.radians(rng.uniform(0, 10))),
            }
        for k in out:
            out[k] = out[k] + w * (target[k] - base[k])
    return out
