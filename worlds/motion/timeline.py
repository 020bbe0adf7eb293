"""MotionWorld generator, part 1: a clip's body and timeline (root plan, footsteps, jumps).

The steps 1 and 3–6 of :mod:`worlds.motion.generator`'s recipe before any joint is placed: the body's
rest offsets (:func:`sample_body`), and a :class:`_Plan` over a timeline padded by :data:`PAD` frames on
both sides holding the root's yaw and planar velocity, the nominal pelvis height, jump trajectories,
lean, running weight and each foot's swings (:func:`_add_locomotion`, :func:`_add_turn`,
:func:`_add_jumps`). :mod:`worlds.motion.limbs` turns the plan into feet, legs and arms.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .features import gaussian_smooth
from .grammar import action_kind
from .skeleton import FPS, L_FOOT, L_HIP, REST_OFFSETS

#: frames of padding on both sides of the timeline (cut off at the end)
PAD = 40
#: how much lower the pelvis is carried when running (m)
RUN_DROP = 0.08
#: extra pelvis height in the flight phases of running (m, before smoothing)
RUN_BOB = 0.08
#: gravity, m/s²
GRAVITY = 9.81


def smoothstep(x):
    """``3x² − 2x³`` on ``x`` clipped to [0, 1]."""
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def smootherstep(x):
    """``6x⁵ − 15x⁴ + 10x³`` on ``x`` clipped to [0, 1]."""
    x = np.clip(x, 0.0, 1.0)
    return x * x * x * (x * (6.0 * x - 15.0) + 10.0)


def _wrap(a):
    return (a + np.pi) % (2.0 * np.pi) - np.pi


# --------------------------------------------------------------------------------------------
# body
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Body:
    """A person's rest offsets ``[22, 3]`` (metres) and the leg measures the generator needs."""

    offsets: np.ndarray

    @property
    def thigh(self) -> float:
        return float(np.linalg.norm(self.offsets[4]))

    @property
    def shin(self) -> float:
        return float(np.linalg.norm(self.offsets[7]))

    @property
    def hip_drop(self) -> float:
        return float(-self.offsets[L_HIP][1])

    @property
    def hip_half(self) -> float:
        return float(self.offsets[L_HIP][0])

    @property
    def foot(self) -> np.ndarray:
        """Ankle -> ball of the foot, in the foot's frame."""
        return self.offsets[L_FOOT]

    @property
    def ankle_height(self) -> float:
        """Ankle height with the foot flat on the floor."""
        return float(-self.offsets[L_FOOT][1])

    @property
    def straight_height(self) -> float:
        """Pelvis height with straight legs and flat feet."""
        return self.ankle_height + self.shin + self.thigh + self.hip_drop


def sample_body(rng: np.random.Generator) -> Body:
    """Rest offsets scaled by ``s ∈ [0.97, 1.03]`` and per segment (legs / torso / arms) by ``[0.98, 1.02]``."""
    s = rng.uniform(0.97, 1.03)
    legs, torso, arms = s * rng.uniform(0.98, 1.02, size=3)
    off = REST_OFFSETS.copy()
    off[[1, 2, 4, 5, 7, 8, 10, 11]] *= legs
    off[[3, 6, 9, 12, 13, 14, 15]] *= torso
    off[16:22] *= arms
    return Body(off)


# --------------------------------------------------------------------------------------------
# timeline
# --------------------------------------------------------------------------------------------


@dataclass
class _Swing:
    t0: float  # lift-off (clip frames)
    t1: float  # landing
    kind: str  # "step" or "flight"
    lift: float = 0.0  # ball lift (m) of a step, tuck of a flight
    ref: float | None = None  # time at which the landing plant is placed (steps)
    lateral: float = 0.1  # plant's lateral offset from the root (steps)
    heel: float = 0.0  # heel-off pitch at lift-off (radians)
    heel_time: float = 0.0  # frames of heel rise before lift-off
    vertical: float = 0.1  # fraction of the swing at each end with vertical motion only (steps)
    ref_frac: float = 0.45  # the plant is placed where the root is this far into the stance


@dataclass
class _Plan:
    """The timeline of one clip (arrays over ``N = T + 2·PAD`` frames, clip time ``t = index − PAD``)."""

    T: int
    body: Body
    rng: np.random.Generator
    yaw: np.ndarray  # [N] root yaw
    vel: np.ndarray  # [N, 2] local planar velocity (x = left, z = forward), m/frame
    y_nom: np.ndarray  # [N] nominal pelvis height
    y_jump: np.ndarray  # [N] jump trajectory (NaN outside jumps)
    lean: np.ndarray  # [N] forward lean (radians)
    run_w: np.ndarray  # [N] running posture weight
    jump_arm: np.ndarray  # [N] arm swing of jumps (radians of flexion)
    stand_lateral: float  # lateral offset of the feet from the root when standing (m)
    swings: dict = field(default_factory=lambda: {"L": [], "R": []})
    arms: list = field(default_factory=list)  # (action, t0, t1, open_start, open_end)

    @property
    def N(self) -> int:
        return self.T + 2 * PAD

    @property
    def t(self) -> np.ndarray:
        """Clip time (frames) of every timeline index."""
        return np.arange(self.N, dtype=np.float64) - PAD

    def ramp(self, t0: float, t1: float, fn=smoothstep) -> np.ndarray:
        """0 before ``t0``, 1 after ``t1``, ``fn`` in between (over the timeline)."""
        if t1 <= t0:
            return (self.t >= t0).astype(np.float64)
        return fn((self.t - t0) / (t1 - t0))


def _make_plan(T: int, body: Body, rng: np.random.Generator) -> _Plan:
    n = T + 2 * PAD
    y_nom = np.full(n, body.straight_height - rng.uniform(0.012, 0.02))
    stand_lateral = rng.uniform(0.09, 0.11)
    zeros = np.zeros(n)
    return _Plan(
        T,
        body,
        rng,
        yaw=zeros.copy(),
        vel=np.zeros((n, 2)),
        y_nom=y_nom,
        y_jump=np.full(n, np.nan),
        lean=zeros.copy(),
        run_w=zeros.copy(),
        jump_arm=zeros.copy(),
        stand_lateral=stand_lateral,
    )


def _window_bounds(p: _Plan, a: float, b: float, open_start: bool, open_end: bool) -> tuple[float, float]:
    return (-PAD + 1.0 if open_start else a), (p.T - 1 + PAD - 1.0 if open_end else b)


def _schedule(
    p: _Plan,
    start: float,
    end: float,
    closed_end: bool,
    first: str,
    period: float,
    swing: float,
    offset: float,
    **swing_kw,
) -> None:
    """Add alternating swings: foot ``first`` lifts at ``start + k·period``, the other at ``+ offset``.

    With ``closed_end`` the pattern (period, offset, swing) is scaled by one factor so that the other
    foot's last landing is at ``end``, and each foot's last plant is placed at ``end`` (at rest).
    """
    other = "R" if first == "L" else "L"
    if closed_end:  # scale the whole pattern so that the other foot's last landing is at `end`
        k = max(1, int(round((end - start - offset - swing) / period)) + 1)
        r = (end - start) / ((k - 1) * period + offset + swing)
        period, offset, swing = r * period, r * offset, r * swing
        if "heel_time" in swing_kw:
            swing_kw["heel_time"] *= r
    else:
        k = int(np.ceil((end - start) / period)) + 1
    for foot, off in ((first, 0.0), (other, offset)):
        lifts = [start + off + i * period for i in range(k)]
        for i, t0 in enumerate(lifts):
            last = i == len(lifts) - 1
            t1 = t0 + swing
            ref = end if (closed_end and last) else None
            p.swings[foot].append(_Swing(t0, t1, "step", ref=ref, **swing_kw))
    for foot in ("L", "R"):
        p.swings[foot].sort(key=lambda s: s.t0)


def _add_locomotion(p: _Plan, action: str, a: float, b: float, open_start: bool, open_end: bool) -> None:
    rng = p.rng
    kind, arg = action_kind(action)
    start, end = _window_bounds(p, a, b, open_start, open_end)
    run = kind == "run"
    if run:
        speed, step, swing_frac = rng.uniform(2.6, 3.4), rng.uniform(0.32, 0.36) * FPS, 1.4
        lift, heel, lateral, ramp = rng.uniform(0.15, 0.22), np.radians(12.0), rng.uniform(0.06, 0.08), 0.8 * FPS
    elif arg == "forward":
        speed, step, swing_frac = rng.uniform(1.1, 1.45), rng.uniform(0.46, 0.54) * FPS, 0.9
        lift, heel, lateral, ramp = rng.uniform(0.1, 0.14), np.radians(rng.uniform(18, 24)), p.stand_lateral, 0.5 * FPS
    elif arg == "backward":
        speed, step, swing_frac = rng.uniform(0.75, 0.95), rng.uniform(0.48, 0.56) * FPS, 0.9
        lift, heel, lateral, ramp = rng.uniform(0.09, 0.12), 0.0, p.stand_lateral, 0.5 * FPS
    else:
        speed = rng.uniform(0.5, 0.62)
        lift, heel, ramp = rng.uniform(0.08, 0.11), 0.0, 0.5 * FPS
    direction = {"forward": (0.0, 1.0), "backward": (0.0, -1.0), "left": (1.0, 0.0), "right": (-1.0, 0.0)}[arg]
    # root speed profile: ramps at closed ends
    prof = np.ones(p.N)
    t = p.t
    inside = (t >= start) & (t <= end)
    if not open_start:
        prof *= p.ramp(start, start + ramp)
    if not open_end:
        prof *= 1.0 - p.ramp(end - ramp, end)
    prof *= inside
    v = speed / FPS
    p.vel[:, 0] += prof * v * direction[0]
    p.vel[:, 1] += prof * v * direction[1]
    if run:
        p.run_w = np.maximum(p.run_w, prof)
        p.lean += prof * rng.uniform(0.14, 0.2)
    elif arg == "forward":
        p.lean += prof * rng.uniform(0.02, 0.05)
    elif arg == "backward":
        p.lean -= prof * rng.uniform(0.0, 0.03)
    first = "R" if arg == "right" else "L"
    if not open_start:
        start += 0.1 * FPS
    if arg in ("left", "right"):
        cycle, swing = rng.uniform(0.8, 0.9) * FPS, rng.uniform(0.28, 0.32) * FPS
        delta = swing + 0.06 * FPS
        lateral = 0.11 + (speed / FPS) * delta / 2.0
        _schedule(p, start, end, not open_end, first, cycle, swing, delta, lift=lift, lateral=lateral)
    else:
        swing = swing_frac * step
        stance = 2.0 * step - swing
        _schedule(
            p,
            start,
            end,
            not open_end,
            first,
            2.0 * step,
            swing,
            step,
            lift=lift,
            lateral=lateral,
            heel=heel,
            heel_time=0.3 * stance,
            vertical=0.05 if run else 0.1,
            ref_frac=0.45,
        )


def _add_turn(p: _Plan, action: str, a: float, b: float) -> None:
    rng = p.rng
    _, arg = action_kind(action)
    if arg == "around":
        angle = np.radians(180.0 + rng.uniform(-8, 8)) * rng.choice([-1.0, 1.0])
        dur = rng.uniform(1.9, 2.4) * FPS
    else:
        angle = np.radians(90.0 + rng.uniform(-8, 8)) * (1.0 if arg == "left" else -1.0)
        dur = rng.uniform(1.1, 1.5) * FPS
    slack = (b - a) - dur - 0.5 * FPS
    if slack < 0:
        dur += slack
        slack = 0.0
    t0 = a + 0.1 * FPS + rng.uniform(0.0, min(slack, 0.4 * FPS))
    t1 = t0 + dur
    p.yaw += angle * p.ramp(t0, t1, smootherstep)
    step = rng.uniform(0.36, 0.42) * FPS
    first = "L" if angle > 0 else "R"
    g_start, g_end = t0 - 0.1 * FPS, min(t1 + 0.2 * FPS, b)
    _schedule(
        p,
        g_start,
        g_end,
        True,
        first,
        2.0 * step,
        0.8 * step,
        step,
        lift=rng.uniform(0.07, 0.1),
        lateral=p.stand_lateral,
    )


def _hermite(p0, v0, p1, v1, dur, tau):
    """Cubic Hermite from ``(p0, v0)`` to ``(p1, v1)`` over ``dur`` frames at times ``tau`` (velocities per frame)."""
    s = tau / dur
    h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
    return h00 * p0 + h10 * dur * v0 + h01 * p1 + h11 * dur * v1


def _add_jumps(p: _Plan, count: int, a: float, b: float) -> None:
    rng = p.rng
    height = rng.uniform(0.2, 0.3) if count == 1 else rng.uniform(0.15, 0.2)
    crouch = rng.uniform(0.1, 0.16)
    c_dur, push, absorb, recover = (
        rng.uniform(0.25, 0.3) * FPS,
        rng.uniform(0.16, 0.2) * FPS,
        rng.uniform(0.16, 0.2) * FPS,
        0.3 * FPS,
    )
    g = GRAVITY / FPS**2  # m/frame²
    v0 = np.sqrt(2.0 * GRAVITY * height) / FPS  # m/frame
    flight = 2.0 * v0 / g
    need = c_dur + count * (push + flight + absorb) + recover
    slack = (b - a) - need
    if slack < 0:  # compress the recovery and crouch first
        recover = max(0.15 * FPS, recover + slack / 2)
        c_dur = max(0.18 * FPS, c_dur + slack / 2)
        slack = 0.0
    start = a + rng.uniform(0.05, 0.15) * FPS + rng.uniform(0.0, min(slack, 0.3 * FPS))
    y_s = p.y_nom[0]
    y_low = y_s - crouch
    y_to = y_s - 0.005
    t = p.t
    y = np.full(p.N, np.nan)
    seg = (t >= start) & (t < start + c_dur)
    y[seg] = y_s - crouch * smoothstep((t[seg] - start) / c_dur)
    cur = start + c_dur
    drift = rng.uniform(0.0, 0.08)
    arm = np.zeros(p.N)
    for _ in range(count):
        seg = (t >= cur) & (t < cur + push)
        y[seg] = _hermite(y_low, 0.0, y_to, v0, push, t[seg] - cur)
        arm[seg] = -0.5 + 1.6 * smoothstep((t[seg] - cur) / push)
        to = cur + push
        seg = (t >= to) & (t < to + flight)
        tau = t[seg] - to
        y[seg] = y_to + v0 * tau - 0.5 * g * tau**2
        arm[seg] = 1.1 - 1.1 * smoothstep(tau / flight)
        # planar drift during the flight
        p.vel[seg, 1] += drift / flight
        land = to + flight
        for foot in ("L", "R"):
            p.swings[foot].append(
                _Swing(to, land, "flight", lift=rng.uniform(0.04, 0.06), heel=np.radians(12.0), heel_time=push)
            )
        seg = (t >= land) & (t < land + absorb)
        y[seg] = _hermite(y_to, -v0, y_low, 0.0, absorb, t[seg] - land)
        arm[seg] = -0.5 * smoothstep((t[seg] - land) / absorb)
        cur = land + absorb
    seg = (t >= cur) & (t < cur + recover)
    y[seg] = y_low + crouch * smoothstep((t[seg] - cur) / recover)
    arm[seg] = -0.5 * (1.0 - smoothstep((t[seg] - cur) / recover))
    p.y_jump = np.where(np.isnan(y), p.y_jump, y)
    p.jump_arm += gaussian_smooth(0.7 * arm, 2.0)
    p.lean += np.where(np.isnan(y), 0.0, np.clip((y_s - y) / crouch, 0.0, 1.0)) * 0.35
    for foot in ("L", "R"):
        p.swings[foot].sort(key=lambda s: s.t0)
