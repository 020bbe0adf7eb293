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
Steps 1 and 3–6 (body, root plan, footsteps, jumps) live in :mod:`worlds.motion.timeline`, the feet, leg IK
and arm angles in :mod:`worlds.motion.limbs`; this module assembles them into a clip.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .features import canonicalize, features_from_joints, gaussian_smooth
from .grammar import MotionSpec, action_kind, format_prompt, spec_of
from .limbs import _arm_angles, _feet, _leg_ik, _normalize
from .skeleton import (
    FPS,
    L_ANKLE,
    L_FOOT,
    L_HIP,
    N_JOINTS,
    R_ANKLE,
    R_FOOT,
    R_HIP,
    forward_kinematics,
    matmul,
    matvec,
    rot_x,
    rot_y,
    rot_z,
    yaw_of,
)
from .timeline import (
    GRAVITY,
    PAD,
    RUN_BOB,
    RUN_DROP,
    Body,
    _add_jumps,
    _add_locomotion,
    _add_turn,
    _make_plan,
    sample_body,
    smootherstep,
    smoothstep,
)

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
