"""HumanML3D's 263-dim motion features: extraction from joints, recovery of joints, normalisation.

Layout of one feature frame (HumanML3D, Guo et al. 2022; :data:`SLICES`):

==========  =====  ==========================================================================
slice       dims   meaning
==========  =====  ==========================================================================
0           1      root angular velocity about ``y``: ``arcsin`` of the ``y`` component of
                   ``r[t+1] ∘ r[t]⁻¹`` (``r`` = the world→facing root quaternion), i.e. **−½ Δψ**
                   per frame (half the yaw step, negative for a left turn), radians
1:3         2      root displacement ``t → t+1`` in the xz plane, in the facing frame of ``t+1``
                   (``x`` = left, ``z`` = forward), metres per frame
3           1      root height ``y`` at ``t``, metres
4:67        21×3   ric: joints 1..21 relative to the root's xz position, rotated into the facing
                   frame of ``t`` (heights stay absolute)
67:193      21×6   6D rotations (first two matrix columns) of joints 1..21 from HumanML3D's IK
                   (:func:`~worlds.motion.skeleton.t2m_inverse_kinematics`)
193:259     22×3   joint displacements ``t → t+1`` in the facing frame of ``t``, metres per frame
259:263     4      foot contacts at ``t`` (L-ankle, L-foot, R-ankle, R-foot): 1 when the joint's squared
                   displacement ``t → t+1`` is below 0.002 m² and its height below 3.0 m (ankles) /
                   2.0 m (feet)
==========  =====  ==========================================================================

**Frames.** T frames of joints give **T − 1** feature frames: feature frame ``t`` holds the pose of
frame ``t`` and the velocities from ``t`` to ``t + 1``; the last joint frame only enters through
velocities. :func:`recover_joints` returns the first T − 1 frames (HumanML3D's ``recover_from_ric``).

**Extraction** (:func:`features_from_joints`, HumanML3D's ``process_file`` minus its retargeting):

1. canonicalise (:func:`canonicalize`): floor = lowest joint of the clip at ``y = 0``; frame 0's root at
   ``x = z = 0``; the clip turned about ``y`` so that frame 0 faces ``+z`` (hips and shoulders);
2. facing ``r [T, 4]`` as HumanML3D's IK computes it: ``across = (L-hip − R-hip) + (R-shoulder −
   L-shoulder)`` (HumanML3D's hip swap, see :func:`~worlds.motion.skeleton.yaw_of`), ``forward = up ×
   across``, Gaussian-smoothed over time (σ = 20 frames, edges repeated — ``scipy``'s
   ``gaussian_filter1d(.., 20, mode="nearest")``), ``r = quat_between(forward, +z)``, ``r[0] = 1``;
   then made sign-continuous (see below);
3. the features of the table.

Differences from HumanML3D's script, all deliberate: (a) no ``uniform_skeleton`` retargeting to its
reference body (MotionWorld bodies vary by a few % per seed; retargeting would change nothing else);
(b) the root quaternions are made sign-continuous before the angular velocity, which HumanML3D omits,
so a frame whose facing crosses ±180° from frame 0 gets its true (small) angular velocity rather than
a flipped one — everywhere else the values are identical. HumanML3D's foot-contact code defines the
height limits (3.0, 2.0) m but comments the height test out; with those limits it never binds below
2 m, so both readings agree.

**Recovery** (:func:`recover_joints`, HumanML3D's ``recover_from_ric``):

1. ``θ_t = Σ_{k<t} f[k, 0]`` (θ_0 = 0): the root quaternion is ``(cos θ, 0, sin θ, 0)``, a yaw of 2θ;
2. root xz: ``p_0 = 0``, ``p_{t} = p_{t−1} + R_y(−2θ_t) · (f[t−1, 1], 0, f[t−1, 2])``;  root y = ``f[t, 3]``;
3. joints 1..21 = ``R_y(−2θ_t) · ric_t`` + root xz.

``recover_joints(features_from_joints(j)) == canonicalize(j)[:-1]`` to float precision (≈1e-9 m).

**Normalisation** (:func:`normalize`, :func:`denormalize`): ``(f − mean) / std`` with the shipped
statistics ``data/motion_mean.npy`` and ``data/motion_std.npy`` (float32 ``[263]``), computed by
:func:`compute_stats` over one generated clip per train prompt. As HumanML3D's ``cal_mean_variance``
does, each dimension's std is replaced by the mean std of its group (the seven rows of the table),
which is how HumanML3D keeps near-constant dimensions from blowing up; the result is then clipped
from below at :data:`STD_FLOOR` = 0.01, which binds for the root angular velocity only (0.00995 rad per
frame: most clips do not turn).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .skeleton import (
    CONTACT_JOINTS,
    FPS,
    N_JOINTS,
    matrix_to_cont6d,
    matvec,
    quat_between,
    quat_fix,
    quat_inv,
    quat_mul,
    quat_rotate,
    quat_to_matrix,
    rot_y,
    t2m_inverse_kinematics,
    yaw_of,
)

#: feature dimension
FEATURE_DIM = 263
#: slices of the feature groups (HumanML3D order)
SLICES: dict[str, slice] = {
    "root_rot_vel": slice(0, 1),
    "root_lin_vel": slice(1, 3),
    "root_y": slice(3, 4),
    "ric": slice(4, 4 + 21 * 3),
    "rot6d": slice(67, 67 + 21 * 6),
    "local_vel": slice(193, 193 + 22 * 3),
    "contacts": slice(259, 263),
}
#: HumanML3D's foot-contact threshold on the squared displacement per frame (m²)
CONTACT_THRESHOLD = 0.002
#: HumanML3D's height limits of the contact rule, (ankle, foot), metres
CONTACT_HEIGHTS = (3.0, 2.0)
#: σ (frames) of HumanML3D's Gaussian smoothing of the facing direction
FACING_SIGMA = 20.0
#: lower bound on the normalisation std
STD_FLOOR = 0.01
#: seed of the shipped normalisation statistics
STATS_SEED = 0
DATA_DIR = Path(__file__).resolve().parent / "data"
MEAN_PATH = DATA_DIR / "motion_mean.npy"
STD_PATH = DATA_DIR / "motion_std.npy"


# --------------------------------------------------------------------------------------------
# array plumbing: numpy or torch in, the same kind out
# --------------------------------------------------------------------------------------------


def _is_torch(x: Any) -> bool:
    return hasattr(x, "detach") and hasattr(x, "device")


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if _is_torch(x):
        x = x.detach().cpu().double().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric numpy array or torch tensor, got {type(x).__name__}") from exc
    return arr


def _like(arr: np.ndarray, ref: Any) -> Any:
    """``arr`` as the kind of ``ref``.

    A tensor of ``ref``'s dtype and device, or a float32 array (float64 when ``ref`` is float64).
    """
    if _is_torch(ref):
        import torch

        dtype = ref.dtype if ref.is_floating_point() else torch.float32
        return torch.as_tensor(arr, dtype=dtype, device=ref.device)
    ref_dtype = getattr(ref, "dtype", None)
    return arr.astype(np.float64 if ref_dtype == np.float64 else np.float32)


def _check_joints(joints: np.ndarray, name: str = "joints") -> None:
    if joints.ndim < 3 or joints.shape[-2:] != (N_JOINTS, 3):
        raise ValueError(
            f"{name} must have shape [frames, 22, 3] or [batch, frames, 22, 3] (T2M joint order, metres), "
            f"got {tuple(joints.shape)}"
        )
    if joints.shape[-3] < 2:
        raise ValueError(f"{name} needs at least 2 frames (features hold velocities), got {joints.shape[-3]}")
    if not np.all(np.isfinite(joints)):
        raise ValueError(f"{name} contains NaN or infinite values; pass finite joint positions")


def _as_features(features: Any, name: str = "features") -> Any:
    """``features`` checked: a torch tensor as is, anything else as a float64 array."""
    if not _is_torch(features):
        features = _to_numpy(features, name)
    _check_features(features, name)
    return features


def _check_features(features: Any, name: str = "features") -> None:
    shape = tuple(features.shape)
    if len(shape) < 2 or shape[-1] != FEATURE_DIM:
        raise ValueError(
            f"{name} must have shape [frames, {FEATURE_DIM}] or [batch, frames, {FEATURE_DIM}] (denormalised "
            f"HumanML3D features), got {shape}"
        )


# --------------------------------------------------------------------------------------------
# extraction
# --------------------------------------------------------------------------------------------


def gaussian_smooth(x: np.ndarray, sigma: float, axis: int = 0) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter1d(x, sigma, axis, mode="nearest")`` in numpy (truncate 4σ)."""
    x = np.moveaxis(np.asarray(x, dtype=np.float64), axis, 0)
    if sigma <= 0:
        return np.moveaxis(x.copy(), 0, axis)
    radius = int(4.0 * sigma + 0.5)
    k = np.arange(-radius, radius + 1, dtype=np.float64)
    w = np.exp(-0.5 * (k / sigma) ** 2)
    w /= w.sum()
    padded = np.concatenate([np.repeat(x[:1], radius, 0), x, np.repeat(x[-1:], radius, 0)], axis=0)
    out = np.zeros_like(x)
    n = len(x)
    for i, wi in enumerate(w):
        out += wi * padded[i : i + n]
    return np.moveaxis(out, 0, axis)


def canonicalize(joints: Any) -> np.ndarray:
    """Joints ``[T, 22, 3]`` on the floor, frame 0's root at the origin, frame 0 facing ``+z``.

    1. ``y -= min y`` over every joint and frame                 # floor at 0
    2. ``xz -= root xz of frame 0``
    3. rotate about ``y`` by ``−ψ_0`` (``ψ_0`` = frame 0's yaw, :func:`~worlds.motion.skeleton.yaw_of`).
    """
    j = _to_numpy(joints, "joints")
    _check_joints(j)
    if j.ndim != 3:
        raise ValueError(f"canonicalize takes one clip [frames, 22, 3], got shape {j.shape}")
    j = j.copy()
    j[..., 1] -= j[..., 1].min()
    j[..., 0] -= j[0, 0, 0]
    j[..., 2] -= j[0, 0, 2]
    return matvec(rot_y(-yaw_of(j[0])), j)


def facing_quaternions(joints: np.ndarray, smooth: float = FACING_SIGMA) -> np.ndarray:
    """HumanML3D's root quaternions ``[T, 4]`` (world → facing frame), sign-continuous.

    1. ``across = (L-hip − R-hip) + (R-shoulder − L-shoulder)``, normalised      # [T, 3]
    2. ``forward = up × across``, smoothed over time (σ = ``smooth`` frames), normalised
    3. ``r = quat_between(forward, +z)``; ``r[0] = (1, 0, 0, 0)``; :func:`~worlds.motion.skeleton.quat_fix`.
    """
    yaw = yaw_of(joints, hips_swapped=True)  # [T]
    forward = np.stack([np.sin(yaw), np.zeros_like(yaw), np.cos(yaw)], axis=-1)  # [T, 3] unit
    forward = gaussian_smooth(forward, smooth, axis=0)
    forward /= np.linalg.norm(forward, axis=-1, keepdims=True)
    r = quat_between(forward, np.array([0.0, 0.0, 1.0]))  # [T, 4]
    r[0] = (1.0, 0.0, 0.0, 0.0)
    return quat_fix(r)


def _features_one(j: np.ndarray, canonical: bool) -> np.ndarray:
    pos = canonicalize(j) if canonical else j
    n = len(pos)
    r = facing_quaternions(pos)  # [T, 4]
    # foot contacts
    fid_l, fid_r = [CONTACT_JOINTS[0], CONTACT_JOINTS[1]], [CONTACT_JOINTS[2], CONTACT_JOINTS[3]]
    heights = np.array(CONTACT_HEIGHTS)
    contacts = []
    for fid in (fid_l, fid_r):
        d2 = ((pos[1:, fid] - pos[:-1, fid]) ** 2).sum(-1)  # [T-1, 2]
        contacts.append(((d2 < CONTACT_THRESHOLD) & (pos[:-1, fid, 1] < heights)).astype(np.float64))
    # rotation-invariant positions (ric)
    ric = pos.copy()
    ric[..., 0] -= pos[:, :1, 0]
    ric[..., 2] -= pos[:, :1, 2]
    ric = quat_rotate(r[:, None, :], ric)  # [T, 22, 3]
    # root linear and angular velocity
    vel = quat_rotate(r[1:], pos[1:, 0] - pos[:-1, 0])  # [T-1, 3]
    r_vel = quat_mul(r[1:], quat_inv(r[:-1]))  # [T-1, 4]
    rot_vel = np.arcsin(np.clip(r_vel[:, 2], -1.0, 1.0))  # [T-1]
    # joint rotations and velocities
    quats = t2m_inverse_kinematics(pos, r)  # [T, 22, 4]
    cont6d = matrix_to_cont6d(quat_to_matrix(quats))  # [T, 22, 6]
    local_vel = quat_rotate(r[:-1, None, :], pos[1:] - pos[:-1])  # [T-1, 22, 3]
    return np.concatenate(
        [
            rot_vel[:, None],
            vel[:, [0, 2]],
            ric[:-1, 0, 1:2],
            ric[:-1, 1:].reshape(n - 1, -1),
            cont6d[:-1, 1:].reshape(n - 1, -1),
            local_vel.reshape(n - 1, -1),
            contacts[0],
            contacts[1],
        ],
        axis=-1,
    )


def features_from_joints(joints: Any, canonical: bool = True) -> Any:
    """HumanML3D features ``[T−1, 263]`` of joints ``[T, 22, 3]`` (or ``[B, T−1, 263]`` of ``[B, T, 22, 3]``).

    ``joints``: numpy array or torch tensor, T2M joint order, metres, ``y`` up. ``canonical=True``
    first applies :func:`canonicalize` (HumanML3D's floor / origin / facing step); pass ``False`` only
    for joints that are canonical already. Returns the input's kind (a torch tensor of the same dtype and
    device, not differentiable; or a float32 array, float64 for float64 input).
    """
    j = _to_numpy(joints, "joints")
    _check_joints(j)
    if j.ndim == 3:
        out = _features_one(j, canonical)
    elif j.ndim == 4:
        out = np.stack([_features_one(x, canonical) for x in j])
    else:
        raise ValueError(f"joints must have shape [frames, 22, 3] or [batch, frames, 22, 3], got {j.shape}")
    return _like(out, joints)


# --------------------------------------------------------------------------------------------
# recovery
# --------------------------------------------------------------------------------------------


def _rotate_y(x, z, angle, lib):
    """``R_y(angle) · (x, ·, z)`` on the xz components (numpy or torch, elementwise)."""
    c, s = lib.cos(angle), lib.sin(angle)
    return x * c + z * s, -x * s + z * c


def recover_root(features: Any) -> tuple[Any, Any]:
    """``(yaw [..., T], root [..., T, 3])`` of features ``[..., T, 263]`` (HumanML3D's ``recover_root_rot_pos``).

    ``yaw`` is the recovered facing relative to frame 0 (radians, positive = left, = −2θ); ``root`` the
    root position. numpy or torch, same kind out (torch keeps the autograd graph).
    """
    f = _as_features(features)
    lib = _lib(f)
    rot_vel = f[..., 0]  # [..., T]
    theta = lib.cumsum(_shift_right(rot_vel, lib), -1)  # [..., T] half-angles, θ_0 = 0
    alpha = -2.0 * theta  # [..., T] facing yaw ψ; R_y(ψ) turns the facing frame into the world
    vx, vz = _rotate_y(_shift_right(f[..., 1], lib), _shift_right(f[..., 2], lib), alpha, lib)
    root = _stack([lib.cumsum(vx, -1), f[..., 3], lib.cumsum(vz, -1)], lib)  # [..., T, 3]
    return alpha, root


def recover_joints(features: Any) -> Any:
    """Joint positions ``[..., T, 22, 3]`` from denormalised features ``[..., T, 263]``.

    HumanML3D's ``recover_from_ric`` (see the module docstring). numpy in: float64 out; torch in: the
    same dtype and device, differentiable.
    """
    f = _as_features(features)
    lib = _lib(f)
    yaw, root = recover_root(f)
    ric = f[..., 4:67].reshape(tuple(f.shape[:-1]) + (21, 3))  # [..., T, 21, 3]
    x, z = _rotate_y(ric[..., 0], ric[..., 2], yaw[..., None], lib)
    x = x + root[..., None, 0]
    z = z + root[..., None, 2]
    joints = _stack([x, ric[..., 1], z], lib)  # [..., T, 21, 3]
    return _cat([root[..., None, :], joints], -2, lib)


def _lib(x: Any):
    if _is_torch(x):
        import torch

        return torch
    return np


def _shift_right(x, lib):
    """``[0, x_0, ..., x_{T-2}]`` along the last axis."""
    zero = x[..., :1] * 0
    return _cat([zero, x[..., :-1]], -1, lib)


def _stack(xs, lib):
    return lib.stack(xs, -1) if lib is not np else np.stack(xs, axis=-1)


def _cat(xs, axis, lib):
    return lib.cat(xs, axis) if lib is not np else np.concatenate(xs, axis=axis)


# --------------------------------------------------------------------------------------------
# normalisation
# --------------------------------------------------------------------------------------------


def load_stats() -> tuple[np.ndarray, np.ndarray]:
    """The shipped ``(mean, std)``, float32 ``[263]`` each."""
    for p in (MEAN_PATH, STD_PATH):
        if not p.is_file():
            raise FileNotFoundError(f"{p} is missing; regenerate it with worlds.motion.stats.write_stats()")
    return np.load(MEAN_PATH), np.load(STD_PATH)


def _stats_like(x: Any, mean: Any, std: Any):
    if mean is None or std is None:
        m0, s0 = load_stats()
        mean = m0 if mean is None else mean
        std = s0 if std is None else std
    if _is_torch(x):
        import torch

        return (
            torch.as_tensor(np.asarray(mean), dtype=x.dtype, device=x.device),
            torch.as_tensor(np.asarray(std), dtype=x.dtype, device=x.device),
        )
    return np.asarray(mean), np.asarray(std)


def normalize(features: Any, mean: Any = None, std: Any = None) -> Any:
    """``(features − mean) / std`` (default: the shipped statistics); numpy or torch."""
    features = features if _is_torch(features) else np.asarray(features)
    _check_features(features)
    m, s = _stats_like(features, mean, std)
    return (features - m) / s


def denormalize(features: Any, mean: Any = None, std: Any = None) -> Any:
    """``features · std + mean`` (default: the shipped statistics); numpy or torch."""
    features = features if _is_torch(features) else np.asarray(features)
    _check_features(features)
    m, s = _stats_like(features, mean, std)
    return features * s + m


def group_std(std: np.ndarray) -> np.ndarray:
    """HumanML3D's std post-processing: every dimension gets its group's mean std, then ``>= STD_FLOOR``."""
    out = np.array(std, dtype=np.float64, copy=True)
    for sl in SLICES.values():
        out[sl] = out[sl].mean()
    return np.maximum(out, STD_FLOOR)


__all__ = [
    "CONTACT_HEIGHTS",
    "CONTACT_THRESHOLD",
    "FACING_SIGMA",
    "FEATURE_DIM",
    "FPS",
    "SLICES",
    "STATS_SEED",
    "STD_FLOOR",
    "canonicalize",
    "denormalize",
    "facing_quaternions",
    "features_from_joints",
    "gaussian_smooth",
    "group_std",
    "load_stats",
    "normalize",
    "recover_joints",
    "recover_root",
]
