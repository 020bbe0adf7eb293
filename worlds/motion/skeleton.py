"""MotionWorld skeleton: the 22-joint SMPL / HumanML3D (T2M) body, rotation algebra and kinematics.

Conventions, fixed here once and shared by the generator, the features, the judge and the renderer:

* **Joints** (SMPL order, as in HumanML3D's ``new_joints``): 0 pelvis, 1 L-hip, 2 R-hip, 3 spine1,
  4 L-knee, 5 R-knee, 6 spine2, 7 L-ankle, 8 R-ankle, 9 spine3, 10 L-foot, 11 R-foot, 12 neck,
  13 L-collar, 14 R-collar, 15 head, 16 L-shoulder, 17 R-shoulder, 18 L-elbow, 19 R-elbow,
  20 L-wrist, 21 R-wrist. ``L-foot`` / ``R-foot`` are SMPL's foot joints at the ball of the foot.
* **Tree**: the T2M kinematic chains :data:`KINEMATIC_CHAIN` (right leg, left leg, spine to head,
  right arm, left arm; the arms hang off spine3) and the parents :data:`PARENTS` they imply.
* **Coordinates**: right-handed, metres, ``y`` up, floor at ``y = 0``. A person with yaw 0 faces
  ``+z`` with their left side at ``+x``. **Yaw** ψ is the rotation about ``+y``; positive ψ turns
  the facing from ``+z`` towards ``+x``, i.e. a left turn, counter-clockwise seen from above.
  The facing direction of yaw ψ is ``(sin ψ, 0, cos ψ)``.
* **Rest pose** (:data:`REST_OFFSETS`): an adult about 1.70 m tall standing with straight legs and
  the arms hanging down, facing ``+z``: the offset of each joint from its parent. With the foot
  flat the ball of the foot (joints 10/11) is on the floor and the ankle 7 cm above it; pelvis
  0.965 m, neck 1.475 m, head joint 1.56 m (top of the skull about 1.69 m).

Rotations are numpy float64 arrays: quaternions ``(w, x, y, z)`` with :func:`quat_mul` composing
``a ∘ b`` (apply ``b`` first), 3×3 matrices acting on column vectors, and HumanML3D's continuous 6D
form (:func:`matrix_to_cont6d`): the matrix's first two **columns**, ``[R[:, 0], R[:, 1]]``.

Two forward-kinematics conventions live here:

* :func:`forward_kinematics` — the generator's rig (SMPL style): joint ``j``'s local rotation turns
  the offsets of its children, ``G_j = G_parent(j) · L_j`` and ``p_j = p_parent(j) + G_parent(j) · o_j``;
* :func:`t2m_inverse_kinematics` / :func:`t2m_forward_kinematics` — HumanML3D's: along each chain
  the rotation stored *at* joint ``c`` orients the bone ``parent(c) → c``, whose rest direction is
  the unit vector :data:`RAW_OFFSETS` ``[c]``; the swing is the shortest arc (no twist) and every
  chain restarts from the root rotation. These are the rotations in the 263-dim features.
"""

from __future__ import annotations

import numpy as np

#: frames per second of every MotionWorld clip (HumanML3D's rate)
FPS = 20
#: number of joints
N_JOINTS = 22
JOINT_NAMES: tuple[str, ...] = (
    "pelvis",
    "left_hip",
    "right_hip",
    "spine1",
    "left_knee",
    "right_knee",
    "spine2",
    "left_ankle",
    "right_ankle",
    "spine3",
    "left_foot",
    "right_foot",
    "neck",
    "left_collar",
    "right_collar",
    "head",
    "left_shoulder",
    "right_shoulder",
    "left_elbow",
    "right_elbow",
    "left_wrist",
    "right_wrist",
)
(
    PELVIS,
    L_HIP,
    R_HIP,
    SPINE1,
    L_KNEE,
    R_KNEE,
    SPINE2,
    L_ANKLE,
    R_ANKLE,
    SPINE3,
    L_FOOT,
    R_FOOT,
    NECK,
    L_COLLAR,
    R_COLLAR,
    HEAD,
    L_SHOULDER,
    R_SHOULDER,
    L_ELBOW,
    R_ELBOW,
    L_WRIST,
    R_WRIST,
) = range(N_JOINTS)

#: HumanML3D's ``t2m_kinematic_chain``: right leg, left leg, spine, right arm, left arm
KINEMATIC_CHAIN: tuple[tuple[int, ...], ...] = (
    (0, 2, 5, 8, 11),
    (0, 1, 4, 7, 10),
    (0, 3, 6, 9, 12, 15),
    (9, 14, 17, 19, 21),
    (9, 13, 16, 18, 20),
)
#: parent of each joint (-1 for the pelvis)
PARENTS: tuple[int, ...] = (-1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 12, 13, 14, 16, 17, 18, 19)
#: HumanML3D's ``t2m_raw_offsets``: the rest direction of the bone ending at each joint
RAW_OFFSETS = np.array(
    [
        [0, 0, 0],
        [1, 0, 0],
        [-1, 0, 0],
        [0, 1, 0],
        [0, -1, 0],
        [0, -1, 0],
        [0, 1, 0],
        [0, -1, 0],
        [0, -1, 0],
        [0, 1, 0],
        [0, 0, 1],
        [0, 0, 1],
        [0, 1, 0],
        [1, 0, 0],
        [-1, 0, 0],
        [0, 0, 1],
        [0, -1, 0],
        [0, -1, 0],
        [0, -1, 0],
        [0, -1, 0],
        [0, -1, 0],
        [0, -1, 0],
    ],
    dtype=np.float64,
)
#: rest offsets of the MotionWorld adult (metres; see the module docstring)
REST_OFFSETS = np.array(
    [
        [0.0, 0.0, 0.0],  # 0 pelvis (root)
        [0.085, -0.075, 0.0],  # 1 L-hip
        [-0.085, -0.075, 0.0],  # 2 R-hip
        [0.0, 0.105, -0.02],  # 3 spine1
        [0.0, -0.40, 0.0],  # 4 L-knee: thigh
        [0.0, -0.40, 0.0],  # 5 R-knee
        [0.0, 0.135, 0.01],  # 6 spine2
        [0.0, -0.42, 0.0],  # 7 L-ankle: shin
        [0.0, -0.42, 0.0],  # 8 R-ankle
        [0.0, 0.055, 0.02],  # 9 spine3
        [0.0, -0.07, 0.12],  # 10 L-foot: ankle -> ball of the foot
        [0.0, -0.07, 0.12],  # 11 R-foot
        [0.0, 0.215, -0.03],  # 12 neck
        [0.075, 0.12, -0.01],  # 13 L-collar
        [-0.075, 0.12, -0.01],  # 14 R-collar
        [0.0, 0.085, 0.05],  # 15 head
        [0.115, 0.035, -0.01],  # 16 L-shoulder
        [-0.115, 0.035, -0.01],  # 17 R-shoulder
        [0.0, -0.27, 0.0],  # 18 L-elbow: upper arm
        [0.0, -0.27, 0.0],  # 19 R-elbow
        [0.0, -0.25, 0.0],  # 20 L-wrist: forearm
        [0.0, -0.25, 0.0],  # 21 R-wrist
    ],
    dtype=np.float64,
)
#: joints of the foot-contact features, in HumanML3D's order: (L-ankle, L-foot, R-ankle, R-foot)
CONTACT_JOINTS: tuple[int, ...] = (L_ANKLE, L_FOOT, R_ANKLE, R_FOOT)
#: the (child, parent) bones, child = 1..21
BONES: tuple[tuple[int, int], ...] = tuple((j, PARENTS[j]) for j in range(1, N_JOINTS))
#: HumanML3D's ``face_joint_indx`` (r_hip, l_hip, sdr_r, sdr_l)
FACE_JOINTS: tuple[int, int, int, int] = (R_HIP, L_HIP, R_SHOULDER, L_SHOULDER)
#: mirror image of each joint (left <-> right)
MIRROR: tuple[int, ...] = (0, 2, 1, 3, 5, 4, 6, 8, 7, 9, 11, 10, 12, 14, 13, 15, 17, 16, 19, 18, 21, 20)


# --------------------------------------------------------------------------------------------
# rotation algebra (numpy, float64, any leading shape)
# --------------------------------------------------------------------------------------------


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a ∘ b`` of ``(w, x, y, z)`` quaternions (rotation ``b`` first, then ``a``)."""
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        axis=-1,
    )


def quat_inv(q: np.ndarray) -> np.ndarray:
    """Inverse (conjugate) of unit quaternions."""
    return q * np.array([1.0, -1.0, -1.0, -1.0])


def quat_rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate vectors ``v [..., 3]`` by unit quaternions ``q [..., 4]`` (broadcasting)."""
    w = q[..., :1]
    u = q[..., 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def quat_between(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The shortest-arc unit quaternion turning direction ``u`` into direction ``v`` (``w >= 0``).

    1. ``u, v`` normalised; ``q = (1 + u·v, u × v)`` normalised (HumanML3D's ``qbetween``);
    2. for (near-)opposite directions (``1 + u·v < 1e-9``), where that is 0/0, a half turn about
       an axis perpendicular to ``u`` is returned instead.
    """
    u = u / np.linalg.norm(u, axis=-1, keepdims=True)
    v = v / np.linalg.norm(v, axis=-1, keepdims=True)
    u, v = np.broadcast_arrays(u, v)
    w = 1.0 + (u * v).sum(-1, keepdims=True)  # [..., 1]
    q = np.concatenate([w, np.cross(u, v)], axis=-1)  # [..., 4]
    bad = w[..., 0] < 1e-9
    if np.any(bad):
        ub = u[bad]
        axis = np.cross(ub, np.array([1.0, 0.0, 0.0]))
        small = np.linalg.norm(axis, axis=-1) < 1e-6
        axis[small] = np.cross(ub[small], np.array([0.0, 0.0, 1.0]))
        q[bad] = np.concatenate([np.zeros((len(ub), 1)), axis], axis=-1)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices ``[..., 3, 3]`` of unit quaternions ``[..., 4]``."""
    w, x, y, z = np.moveaxis(q, -1, 0)
    m = np.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        axis=-1,
    )
    return m.reshape(q.shape[:-1] + (3, 3))


def quat_fix(q: np.ndarray) -> np.ndarray:
    """Sign-continuous quaternions along axis 0 (each ``q[t]`` flipped to have ``q[t]·q[t-1] >= 0``).

    1. ``d_t = sign(q_t · q_{t−1})`` of the input (``+1`` for ``t = 0`` and for a zero product)
    2. ``q_t · Π_{k<=t} d_k``.
    """
    q = np.asarray(q, dtype=np.float64)
    d = np.ones(q.shape[:-1])
    d[1:] = np.where((q[1:] * q[:-1]).sum(-1) < 0, -1.0, 1.0)
    return q * np.cumprod(d, axis=0)[..., None]


def matrix_to_cont6d(m: np.ndarray) -> np.ndarray:
    """HumanML3D's continuous 6D form ``[..., 6]``: the first two columns ``[R[:, 0], R[:, 1]]``."""
    return np.concatenate([m[..., :, 0], m[..., :, 1]], axis=-1)


def cont6d_to_matrix(d6: np.ndarray) -> np.ndarray:
    """Rotation matrices ``[..., 3, 3]`` from 6D ``[a, b]`` (HumanML3D's Gram–Schmidt).

    ``x = a/|a|``, ``z = x × b/|x × b|``, ``y = z × x``; columns ``[x, y, z]``.
    """
    a, b = d6[..., :3], d6[..., 3:6]
    x = a / np.linalg.norm(a, axis=-1, keepdims=True)
    z = np.cross(x, b)
    z = z / np.linalg.norm(z, axis=-1, keepdims=True)
    y = np.cross(z, x)
    return np.stack([x, y, z], axis=-1)


def rot_x(angle) -> np.ndarray:
    """Rotations about ``+x`` by ``angle`` (radians, any shape) -> ``[..., 3, 3]``."""
    a = np.asarray(angle, dtype=np.float64)
    c, s, o, z = np.cos(a), np.sin(a), np.ones_like(a), np.zeros_like(a)
    return np.stack([o, z, z, z, c, -s, z, s, c], axis=-1).reshape(a.shape + (3, 3))


def rot_y(angle) -> np.ndarray:
    """Rotations about ``+y`` (yaw; positive = towards the left) -> ``[..., 3, 3]``."""
    a = np.asarray(angle, dtype=np.float64)
    c, s, o, z = np.cos(a), np.sin(a), np.ones_like(a), np.zeros_like(a)
    return np.stack([c, z, s, z, o, z, -s, z, c], axis=-1).reshape(a.shape + (3, 3))


def rot_z(angle) -> np.ndarray:
    """Rotations about ``+z`` -> ``[..., 3, 3]``."""
    a = np.asarray(angle, dtype=np.float64)
    c, s, o, z = np.cos(a), np.sin(a), np.ones_like(a), np.zeros_like(a)
    return np.stack([c, -s, z, s, c, z, z, z, o], axis=-1).reshape(a.shape + (3, 3))


def matvec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``m @ v`` for stacks of matrices ``[..., 3, 3]`` and vectors ``[..., 3]`` (einsum, no BLAS)."""
    return np.einsum("...ij,...j->...i", m, v)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for stacks of 3×3 matrices (einsum, no BLAS: the same bits on every platform)."""
    return np.einsum("...ij,...jk->...ik", a, b)


def yaw_of(joints: np.ndarray, hips_swapped: bool = False) -> np.ndarray:
    """Facing yaw ``[...]`` (radians in (-π, π]) of poses ``[..., 22, 3]`` from hips and shoulders.

    1. ``across = (R-hip − L-hip) + (R-shoulder − L-shoulder)``: points to the person's right;
    2. ``forward = up × across``, horizontal: ``(across_z, 0, −across_x)``;
    3. ``ψ = atan2(forward_x, forward_z)``.

    ``hips_swapped=True`` uses HumanML3D's IK version, ``across = (L-hip − R-hip) + (R-shoulder −
    L-shoulder)`` (its ``inverse_kinematics_np`` unpacks ``face_joint_indx`` with the hips swapped), which
    still points right because the shoulders are wider than the hips.
    """
    hips = joints[..., R_HIP, :] - joints[..., L_HIP, :]
    across = (-hips if hips_swapped else hips) + joints[..., R_SHOULDER, :] - joints[..., L_SHOULDER, :]
    return np.arctan2(across[..., 2], -across[..., 0])


# --------------------------------------------------------------------------------------------
# forward kinematics of the generator's rig
# --------------------------------------------------------------------------------------------


def forward_kinematics(local_rot: np.ndarray, root_pos: np.ndarray, offsets: np.ndarray = REST_OFFSETS) -> np.ndarray:
    """Joint positions ``[T, 22, 3]`` from SMPL-style local rotations ``[T, 22, 3, 3]``.

    1. ``G_0 = L_0``, ``p_0 = root_pos``                         # [T, 3, 3], [T, 3]
    2. for j = 1..21 (parents first): ``G_j = G_p · L_j``, ``p_j = p_p + G_p · o_j`` with ``p = PARENTS[j]``.
    """
    local_rot = np.asarray(local_rot, dtype=np.float64)
    glob = np.empty_like(local_rot)  # [T, 22, 3, 3]
    pos = np.empty(local_rot.shape[:-3] + (N_JOINTS, 3))
    glob[..., 0, :, :] = local_rot[..., 0, :, :]
    pos[..., 0, :] = root_pos
    for j in range(1, N_JOINTS):
        p = PARENTS[j]
        glob[..., j, :, :] = matmul(glob[..., p, :, :], local_rot[..., j, :, :])
        pos[..., j, :] = pos[..., p, :] + matvec(glob[..., p, :, :], np.broadcast_to(offsets[j], pos[..., p, :].shape))
    return pos


# --------------------------------------------------------------------------------------------
# HumanML3D's kinematics (the rotations of the 263-dim features)
# --------------------------------------------------------------------------------------------


def t2m_inverse_kinematics(joints: np.ndarray, root_quat: np.ndarray) -> np.ndarray:
    """HumanML3D's local joint quaternions ``[T, 22, 4]`` of positions ``[T, 22, 3]``.

    ``root_quat [T, 4]`` is stored at joint 0. For every chain, starting from ``R = root_quat``:
    for each bone ``a → c`` of the chain,

    1. ``s = quat_between(RAW_OFFSETS[c], p_c − p_a)``   # global shortest-arc swing of the bone
    2. ``q_c = R⁻¹ ∘ s``                                   # stored at joint c
    3. ``R = R ∘ q_c`` (= ``s``), so ``R`` before a bone is the chain's previous swing (or the root).

    Vectorised over all 21 bones at once: ``q_c = prev_c⁻¹ ∘ s_c``.
    """
    joints = np.asarray(joints, dtype=np.float64)
    child = np.array([c for chain in KINEMATIC_CHAIN for c in chain[1:]])  # the 21 bones' end joints
    start = np.array([a for chain in KINEMATIC_CHAIN for a in chain[:-1]])
    first = np.array([i == 0 for chain in KINEMATIC_CHAIN for i in range(len(chain) - 1)])
    swing = quat_between(
        np.broadcast_to(RAW_OFFSETS[child], joints[:, child].shape), joints[:, child] - joints[:, start]
    )  # [T, 21, 4] global swings s_c
    index = {c: k for k, c in enumerate(child)}
    prev = np.where(
        first[None, :, None], np.asarray(root_quat)[:, None, :], swing[:, [index.get(a, 0) for a in start]]
    )  # [T, 21, 4]: R before each bone
    quats = np.zeros(joints.shape[:-1] + (4,))
    quats[:, 0] = root_quat
    quats[:, child] = quat_mul(quat_inv(prev), swing)
    return quats


def t2m_forward_kinematics(rotations: np.ndarray, root_pos: np.ndarray, bone_lengths: np.ndarray) -> np.ndarray:
    """HumanML3D's forward kinematics: positions ``[T, 22, 3]`` from per-joint rotations.

    ``rotations``: ``[T, 22, 3, 3]`` matrices or ``[T, 22, 6]`` 6D (joint 0 = the root rotation);
    ``bone_lengths [22]`` (entry 0 unused). Along each chain ``R = R_0``; per bone ``a → c``:
    ``R = R · R_c``, ``p_c = p_a + R · (RAW_OFFSETS[c] · length_c)``.
    """
    rot = np.asarray(rotations, dtype=np.float64)
    if rot.shape[-1] == 6:
        rot = cont6d_to_matrix(rot)
    pos = np.zeros(rot.shape[:-3] + (N_JOINTS, 3))
    pos[..., 0, :] = root_pos
    for chain in KINEMATIC_CHAIN:
        r = rot[..., 0, :, :]
        for a, c in zip(chain[:-1], chain[1:]):
            r = matmul(r, rot[..., c, :, :])
            off = np.broadcast_to(RAW_OFFSETS[c] * bone_lengths[c], pos[..., a, :].shape)
            pos[..., c, :] = pos[..., a, :] + matvec(r, off)
    return pos


def bone_lengths(joints: np.ndarray) -> np.ndarray:
    """Bone lengths ``[..., 22]`` of poses ``[..., 22, 3]`` (entry 0, the root, is 0)."""
    joints = np.asarray(joints, dtype=np.float64)
    parents = np.array(PARENTS[1:])
    out = np.zeros(joints.shape[:-1])
    out[..., 1:] = np.linalg.norm(joints[..., 1:, :] - joints[..., parents, :], axis=-1)
    return out


__all__ = [
    "BONES",
    "CONTACT_JOINTS",
    "FACE_JOINTS",
    "FPS",
    "JOINT_NAMES",
    "KINEMATIC_CHAIN",
    "MIRROR",
    "N_JOINTS",
    "PARENTS",
    "RAW_OFFSETS",
    "REST_OFFSETS",
    "bone_lengths",
    "cont6d_to_matrix",
    "forward_kinematics",
    "matrix_to_cont6d",
    "matmul",
    "matvec",
    "quat_between",
    "quat_fix",
    "quat_inv",
    "quat_mul",
    "quat_rotate",
    "quat_to_matrix",
    "rot_x",
    "rot_y",
    "rot_z",
    "t2m_forward_kinematics",
    "t2m_inverse_kinematics",
    "yaw_of",
]
