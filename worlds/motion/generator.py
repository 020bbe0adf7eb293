"""MotionWorld generator: seeded procedural motions of every prompt, built by forward kinematics.

``generate(prompt, seed)`` returns a :class:`Motion`: canonical joints ``[T, 22, 3]`` (T = 60–120 frames at
20 fps, on the floor, frame 0 at the origin facing ``+z``), the local joint rotations that produced them
(:func:`~worlds.motion.skeleton.forward_kinematics` of the rig, so bone lengths are exactly constant and
the 6D features come from a real rotation rig), the body's rest offsets and the ground-truth foot
contacts. The same ``(prompt, seed)`` gives the identical arrays; ``numpy.random.default_rng(seed)`` draws
every random choice.

How a clip is built (all in frames, on a timeline padded by :data:`PAD` frames on both sides so that a
clip can start and end mid-stride; the padding is cut off at the end):

1. **Body**: rest offsets scaled by ``s ∈ [0.97, 1.03]`` and per segment (legs, torso, arms) by a
   further ``[0.98, 1.02]``.
2. **Windows**: a single action or a "while" pair spans the whole clip; in "A then B" action A owns
   ``[0, h − 2]`` and B ``[h + 2, n]`` (``n = T − 1`` feature frames, ``h = n // 2``: the judge's halves).
   Walking and running that touch a clip end continue through it at full speed; at an inner boundary
   they start from / stop at rest (smoothstep speed ramps).
3. **Root plan**: yaw ψ(t) (turns: smootherstep ramps of ±90° or ±180°, ±8°), planar root velocity
   ``R_y(ψ) · v_local`` integrated to the root's xz path.
4. **Footsteps**: each foot alternates stance and swing on a schedule (walk: step period 0.46–0.56 s,
   swing 45 % of the foot's cycle; run: 0.32–0.36 s, swing 70 %, so flight phases of about 0.1 s; side
   steps: lead foot then trailing foot, 0.8–0.9 s per cycle; turns: stepping in place). A foot's plant
   (the ball of the foot, on the floor) is placed beside the root as it will be 45 % into the stance
   (for the last step of a stop: at rest), facing the root's yaw then; it does not move while planted —
   no foot skating by construction. In late stance of forward walking and running the heel rises about
   the planted ball (pitch up to 18–24° walking, 12° running). Swings move the ball with a
   smootherstep in the floor plane (vertical only in the first and last 10 % of a walking swing, 5 %
   running) and a lift ``h · (1 − (1 − sin πs)²)`` (h = 7–14 cm walking, 15–22 cm running).
5. **Jumps**: crouch (10–16 cm), push (Hermite to take-off speed ``v0 = √(2 g h)``, h = 15–30 cm),
   ballistic flight (g = 9.81 m/s², feet tucked 4–6 cm), landing absorption, recovery; heels rise (12°)
   during the push.
6. **Root height** = a nominal height (standing 1.2–2 cm below straight legs; running 8 cm lower, plus
   up to 8 cm in flight phases), capped per frame 1 cm below the height at which an ankle would be at
   98.5 % of the leg's reach (the cap is what makes the pelvis dip at double support), smoothed (Gaussian
   σ = 1.5 frames) and capped again 1 cm above that height; jumps replace the nominal height by their
   trajectory.
7. **Legs** by analytic two-bone IK (hip from the pelvis, ankle from the foot, knee in the plane of the
   leg and the facing) turned into hip, knee and ankle rotations; **pelvis** yaw/roll oscillation and
   **spine** counter-rotation with the gait, forward lean when running; **arms** swing against the legs,
   or blend (smoothstep, 0.35–0.5 s) into a wave (upper arm raised 130–145° sideways, forearm swinging
   ±28–40° at 1.4–2.0 Hz) or a raise (arm 160–172° up, held).
8. Forward kinematics, crop, :func:`~worlds.motion.features.canonicalize`.

:func:`generate_dataset` builds a pretraining set: rows × clips with per-clip seeds :func:`dataset_seed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .features import canonicalize, features_from_joints, gaussian_smooth
from .grammar import MotionSpec, action_kind, format_prompt, spec_of
from .skeleton import (
    FPS,
    L_ANKLE,
    L_FOOT,
    L_HIP,
    N_JOINTS,
    R_ANKLE,
    R_FOOT,
    R_HIP,
    REST_OFFSETS,
    forward_kinematics,
    matmul,
    matvec,
    rot_x,
    rot_y,
    rot_z,
    yaw_of,
)

#: frames of padding on both sides of the timeline (cut off at the end)
PAD = 40
#: how much lower the pelvis is carried when running (m)
RUN_DROP = 0.08
#: extra pelvis height in the flight phases of running (m, before smoothing)
RUN_BOB = 0.08
#: gravity, m/s²
GRAVITY = 9.81
#: the gap (frames) between action A's window and the midpoint, and the midpoint and B's, in "then"
THEN_GAP = 2
#: clip length ranges (joint frames, inclusive) per action kind; "while" takes the leg action's range
#: (at least 70), "then" clips are 114-121 frames
LENGTHS: dict[str, tuple[int, int]] = {
    "walk": (80, 120),
    "run": (60, 100),
    "turn": (60, 90),
    "turn_around": (80, 110),
    "jump_1": (60, 80),
    "jump_2": (70, 100),
    "jump_3": (90, 120),
    "arms": (60, 100),
    "then": (114, 121),
}

_LEG_JOINTS = {"L": (L_HIP, 4, L_ANKLE, L_FOOT), "R": (R_HIP, 5, R_ANKLE, R_FOOT)}
_SIDE = {"L": 1.0, "R": -1.0}


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
# the motion record
# --------------------------------------------------------------------------------------------


@dataclass
class Motion:
    """One generated clip of ``spec`` drawn with ``seed``.

    Canonical ``joints [T, 22, 3]`` (metres), local ``rotations [T, 22, 3, 3]`` of the rig
    (:func:`~worlds.motion.skeleton.forward_kinematics` with ``offsets`` and ``info["root"]`` reproduces
    ``joints``), the body's ``offsets [22, 3]`` and ground-truth ``contacts [T, 2]`` (left / right ball
    planted).
    """

    spec: MotionSpec
    seed: int
    joints: np.ndarray
    rotations: np.ndarray
    offsets: np.ndarray
    contacts: np.ndarray
    info: dict = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        return format_prompt(self.spec)

    @property
    def frames(self) -> int:
        return len(self.joints)

    def features(self) -> np.ndarray:
        """HumanML3D features ``[T − 1, 263]`` (float32) of the joints."""
        return features_from_joints(self.joints.astype(np.float64), canonical=False).astype(np.float32)


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


# --------------------------------------------------------------------------------------------
# generation
# --------------------------------------------------------------------------------------------


def clip_frames(spec: MotionSpec, rng: np.random.Generator) -> int:
    """The clip length (joint frames) of ``spec``, drawn from :data:`LENGTHS`."""
    if spec.compose == "then":
        lo, hi = LENGTHS["then"]
    else:
        a = spec.actions[0]
        kind, arg = action_kind(a)
        key = {"walk": "walk", "run": "run", "jump": f"jump_{arg}"}.get(kind)
        if kind == "turn":
            key = "turn_around" if arg == "around" else "turn"
        lo, hi = LENGTHS[key] if key else LENGTHS["arms"]
        if spec.compose == "while":
            lo = max(lo, 70)
            hi = max(hi, lo)
    return int(rng.integers(lo, hi + 1))


def _windows(spec: MotionSpec, T: int) -> list[tuple[str, float, float, bool, bool]]:
    n = T - 1
    if spec.compose in ("single", "while"):
        return [(a, 0.0, float(n), True, True) for a in spec.actions]
    h = n // 2
    a, b = spec.actions
    return [(a, 0.0, float(h - THEN_GAP), True, False), (b, float(h + THEN_GAP), float(n), False, True)]


def generate(prompt, seed: int, frames: int | None = None) -> Motion:
    """A motion for ``prompt`` (prompt string, split row or :class:`~worlds.motion.grammar.MotionSpec`).

    ``seed`` (int >= 0) fixes every random choice: the same ``(prompt, seed)`` gives identical arrays.
    ``frames`` overrides the clip length (60–200 joint frames; default: drawn from :data:`LENGTHS`).
    """
    spec = spec_of(prompt)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(int(seed))
    body = sample_body(rng)
    T = clip_frames(spec, rng)
    if frames is not None:
        if not isinstance(frames, (int, np.integer)) or not 60 <= frames <= 200:
            raise ValueError(f"frames must be an integer in [60, 200] (joint frames at 20 fps), got {frames!r}")
        T = int(frames)
    p = _make_plan(T, body, rng)
    # 1. leg actions and arm windows
    for action, a, b, o_start, o_end in _windows(spec, T):
        kind, arg = action_kind(action)
        if kind in ("walk", "run"):
            _add_locomotion(p, action, a, b, o_start, o_end)
        elif kind == "turn":
            _add_turn(p, action, a, b)
        elif kind == "jump":
            _add_jumps(p, int(arg), a, b)
        else:
            p.arms.append((action, a, b, o_start, o_end))
    # 2. root path
    c, s = np.cos(p.yaw), np.sin(p.yaw)
    world_v = np.stack([c * p.vel[:, 0] + s * p.vel[:, 1], -s * p.vel[:, 0] + c * p.vel[:, 1]], axis=-1)
    root_xz = np.cumsum(world_v, axis=0) - world_v[0]  # [N, 2]
    # idle sway while standing
    moving = np.clip(np.linalg.norm(p.vel, axis=-1) * FPS / 0.3, 0, 1)
    sway = (1 - moving) * 0.01 * np.sin(2 * np.pi * rng.uniform(0.2, 0.35) / FPS * p.t + rng.uniform(0, 6.3))
    # 3. feet
    feet = _feet(p, root_xz)
    # 4. pelvis orientation (needs the gait signal)
    fwd = np.stack([np.sin(p.yaw), np.cos(p.yaw)], axis=-1)
    d_lr = ((feet["L"][0][:, [0, 2]] - feet["R"][0][:, [0, 2]]) * fwd).sum(-1)
    gait = gaussian_smooth(np.tanh(d_lr / (0.3 + 0.5 * p.run_w)), 1.5)  # [-1, 1]: +1 = left foot ahead
    support = gaussian_smooth(feet["L"][3].astype(float) - feet["R"][3].astype(float), 1.5)
    walking = np.clip(np.linalg.norm(p.vel, axis=-1) * FPS / 0.5, 0, 1)
    yaw_osc = -np.radians(rng.uniform(3, 5)) * gait
    roll = np.radians(rng.uniform(1.5, 3.0)) * support * walking
    left = np.stack([np.cos(p.yaw), -np.sin(p.yaw)], axis=-1)  # the person's left in the xz plane
    root_xz = root_xz + left * (0.02 * support * walking + sway)[:, None]
    lean = gaussian_smooth(p.lean, 2.0)
    g_pelvis = matmul(rot_y(p.yaw + yaw_osc), matmul(rot_x(0.4 * lean), rot_z(-roll)))  # [N, 3, 3]
    # 5. root height: nominal, jumps, reach cap
    flight = 1.0 - gaussian_smooth(feet["L"][3].astype(float) + feet["R"][3].astype(float), 1.5)
    y = p.y_nom - RUN_DROP * p.run_w + RUN_BOB * p.run_w * np.clip(flight, 0.0, 1.0)
    y = np.where(np.isnan(p.y_jump), y, p.y_jump)
    reach = 0.985 * (body.thigh + body.shin)
    ankles, foot_rot = {}, {}
    for foot in ("L", "R"):
        ball, f_yaw, f_pitch, _ = feet[foot]
        g_foot = matmul(rot_y(f_yaw), rot_x(f_pitch))
        ankles[foot] = ball - matvec(g_foot, np.broadcast_to(body.foot, ball.shape))
        foot_rot[foot] = g_foot
    bound = np.full(p.N, np.inf)
    for foot in ("L", "R"):
        hip_off = matvec(g_pelvis, np.broadcast_to(body.offsets[_LEG_JOINTS[foot][0]], (p.N, 3)))  # [N, 3]
        hip_xz = root_xz + hip_off[:, [0, 2]]
        horiz = np.linalg.norm(ankles[foot][:, [0, 2]] - hip_xz, axis=-1)
        bound = np.minimum(bound, ankles[foot][:, 1] - hip_off[:, 1] + np.sqrt(np.maximum(reach**2 - horiz**2, 0.0)))
    y = np.minimum(gaussian_smooth(np.minimum(y, bound - 0.01), 1.5), bound + 0.01)
    root = np.stack([root_xz[:, 0], y, root_xz[:, 1]], axis=-1)  # [N, 3]
    # 6. local rotations
    n = p.N
    local = np.broadcast_to(np.eye(3), (n, N_JOINTS, 3, 3)).copy()
    local[:, 0] = g_pelvis
    for foot in ("L", "R"):
        hip_j, knee_j, ankle_j, _ = _LEG_JOINTS[foot]
        hip = root + matvec(g_pelvis, np.broadcast_to(body.offsets[hip_j], root.shape))
        f_fwd = foot_rot[foot][:, :, 2]
        p_fwd = g_pelvis[:, :, 2] * np.array([1.0, 0.0, 1.0])
        hint = _normalize(_normalize(p_fwd) + _normalize(f_fwd * np.array([1.0, 0.0, 1.0])))
        g_thigh, g_shin = _leg_ik(hip, ankles[foot], hint, body.thigh, body.shin)
        local[:, hip_j] = matmul(np.swapaxes(g_pelvis, -1, -2), g_thigh)
        local[:, knee_j] = matmul(np.swapaxes(g_thigh, -1, -2), g_shin)
        local[:, ankle_j] = matmul(np.swapaxes(g_shin, -1, -2), foot_rot[foot])
    # spine: counter-rotation, lean, breathing; neck/head keep the gaze level
    twist = np.radians(rng.uniform(4, 7)) * gait
    breath = np.radians(1.0) * np.sin(2 * np.pi * rng.uniform(0.2, 0.3) / FPS * p.t + rng.uniform(0, 6.3))
    for j in (3, 6, 9):
        local[:, j] = matmul(rot_y(twist / 3.0), rot_x(0.2 * lean + breath / 3.0))
    local[:, 12] = matmul(rot_y(-0.5 * twist), rot_x(-0.5 * lean))
    local[:, 15] = rot_x(-0.3 * lean)
    # arms
    for hand, side, sh, el in (("L", 1.0, 16, 18), ("R", -1.0, 17, 19)):
        ang = _arm_angles(p, hand, -side * gait)
        local[:, sh] = matmul(rot_z(side * ang["abd"]), rot_x(-ang["flex"]))
        local[:, el] = matmul(rot_z(side * ang["e_side"]), rot_x(-ang["e_flex"]))
    # 7. forward kinematics, crop, canonical frame
    sl = slice(PAD, PAD + T)
    local, root = local[sl], root[sl]
    joints = forward_kinematics(local, root, body.offsets)
    canon = canonicalize(joints)
    # the same rigid motion applied to the rig: root position and pelvis rotation
    psi0 = yaw_of(joints[0])
    turn = rot_y(-psi0)
    shift = np.array([joints[0, 0, 0], joints[:, :, 1].min(), joints[0, 0, 2]])
    local[:, 0] = matmul(turn, local[:, 0])
    root = matvec(turn, root - shift)
    contacts = np.stack([feet["L"][3][sl], feet["R"][3][sl]], axis=-1)
    return Motion(spec, int(seed), canon, local, body.offsets.copy(), contacts, info={"root": root, "frames": T})


def dataset_seed(seed: int, index: int, k: int = 0) -> int:
    """The generator seed of clip ``k`` of row ``index`` in a dataset of master seed ``seed``."""
    return int(np.random.SeedSequence([int(seed), int(index), int(k)]).generate_state(1, np.uint32)[0])


def generate_dataset(
    rows, clips_per_prompt: int = 1, seed: int = 0, with_joints: bool = True, frames: int | None = None
) -> list[dict]:
    """A pretraining set: for every row (prompt string or split row) ``clips_per_prompt`` clips.

    Each item: ``{"prompt", "task", "compose", "actions", "seed", "features": float32 [T − 1, 263]
    (denormalised), "joints": float32 [T, 22, 3]}`` (``joints`` only with ``with_joints``). Clip ``k`` of
    row ``i`` uses :func:`dataset_seed` ``(seed, i, k)``. ``frames`` fixes every clip's length (joint frames,
    see :func:`generate`; a model with a fixed sample shape trains on ``frames − 1`` feature frames).
    """
    if not isinstance(clips_per_prompt, (int, np.integer)) or clips_per_prompt < 1:
        raise ValueError(f"clips_per_prompt must be a positive integer, got {clips_per_prompt!r}")
    items = []
    for i, row in enumerate(rows):
        spec = spec_of(row)
        for k in range(int(clips_per_prompt)):
            s = dataset_seed(seed, i, k)
            m = generate(spec, s, frames=frames)
            item = {"prompt": format_prompt(spec), **spec.to_row(), "seed": s, "features": m.features()}
            if with_joints:
                item["joints"] = m.joints.astype(np.float32)
            items.append(item)
    return items


__all__ = [
    "GRAVITY",
    "LENGTHS",
    "PAD",
    "THEN_GAP",
    "Body",
    "Motion",
    "clip_frames",
    "dataset_seed",
    "generate",
    "generate_dataset",
    "sample_body",
    "smoothstep",
    "smootherstep",
]
