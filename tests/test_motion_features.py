"""MotionWorld skeleton and HumanML3D features: round trip, conventions, genuine rotations, normalisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from worlds.motion import features as F
from worlds.motion.generator import generate
from worlds.motion.skeleton import (
    L_FOOT,
    L_HIP,
    R_HIP,
    bone_lengths,
    forward_kinematics,
    quat_between,
    quat_rotate,
    rot_y,
    t2m_forward_kinematics,
    yaw_of,
)
from worlds.motion.stats import compute_stats

PROMPTS = [
    "a person walks forward",
    "a person turns around",  # the facing crosses 180 degrees from frame 0
    "a person jumps twice then walks to the left",
    "a person runs forward while waving both hands",
]


@pytest.fixture(scope="module")
def motions():
    return [generate(p, 7) for p in PROMPTS]


def test_layout():
    assert F.FEATURE_DIM == 263 and F.FPS == 20
    ends = [(s.start, s.stop) for s in F.SLICES.values()]
    assert ends[0][0] == 0 and ends[-1][1] == 263
    assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))
    assert [e[1] - e[0] for e in ends] == [1, 2, 1, 63, 126, 66, 4]


def test_round_trip(motions):
    for m in motions:
        j = m.joints
        f64 = F.features_from_joints(j)  # float64 in -> float64 out
        assert f64.dtype == np.float64 and f64.shape == (len(j) - 1, 263)
        assert np.abs(F.recover_joints(f64) - j[:-1]).max() < 1e-9
        f32 = m.features()  # float32, as shipped to a model
        assert np.abs(F.recover_joints(f32) - j[:-1]).max() < 1e-5


def test_round_trip_any_pose():
    """Features canonicalise any clip (offset, turned, lifted): recovery gives the canonical clip."""
    j = generate("a person walks backward", 3).joints
    moved = np.einsum("ij,tkj->tki", rot_y(1.2), j) + np.array([3.0, 0.4, -2.0])
    rec = F.recover_joints(F.features_from_joints(moved.astype(np.float64)))
    assert np.abs(rec - F.canonicalize(moved)[:-1]).max() < 1e-9
    assert np.abs(F.canonicalize(moved) - j).max() < 1e-9


def test_torch_and_batches(motions):
    j = motions[0].joints[:60]
    batch = torch.tensor(np.stack([j, j]), dtype=torch.float32)
    feats = F.features_from_joints(batch)
    assert isinstance(feats, torch.Tensor) and feats.shape == (2, 59, 263) and feats.dtype == torch.float32
    feats = feats.clone().requires_grad_(True)
    rec = F.recover_joints(feats)
    assert isinstance(rec, torch.Tensor) and rec.shape == (2, 59, 22, 3)
    assert np.abs(rec[1].detach().numpy() - j[:-1]).max() < 1e-4
    rec.sum().backward()  # differentiable
    assert feats.grad is not None and torch.isfinite(feats.grad).all()
    yaw, root = F.recover_root(feats.detach())
    assert yaw.shape == (2, 59) and root.shape == (2, 59, 3)


def test_facing_convention(motions):
    walk = motions[0].joints
    first = walk[0]
    assert abs(first[0, 0]) < 1e-12 and abs(first[0, 2]) < 1e-12  # root at the origin
    assert abs(yaw_of(first)) < 1e-9  # facing +z
    assert first[L_HIP, 0] > first[R_HIP, 0]  # the person's left at +x
    assert first[L_FOOT, 2] > first[0, 2] - 0.3  # feet point forward
    assert abs(walk[..., 1].min()) < 1e-12  # floor at y = 0
    assert walk[-1, 0, 2] - walk[0, 0, 2] > 2.0  # walking forward = +z
    # a left turn is a positive yaw (counter-clockwise seen from above) and a negative feature 0
    left = generate("a person turns left", 1)
    f = left.features()
    assert np.degrees(yaw_of(left.joints[-1])) > 45 and f[:, 0].sum() < 0
    yaw, _ = F.recover_root(f)
    assert np.isclose(yaw[-1], -2 * f[:-1, 0].sum())


def test_rotations_are_genuine(motions):
    """HumanML3D's FK of the 6D features (root rotation from feature 0) reproduces the joints."""
    for m in motions:
        f = m.features().astype(np.float64)
        yaw, root = F.recover_root(f)
        n = len(f)
        rot6d = np.zeros((n, 22, 6))
        root_rot = rot_y(-yaw)  # world -> facing: the root quaternion of the IK
        rot6d[:, 0] = np.concatenate([root_rot[:, :, 0], root_rot[:, :, 1]], axis=-1)
        rot6d[:, 1:] = f[:, F.SLICES["rot6d"]].reshape(n, 21, 6)
        lengths = bone_lengths(m.joints[0])
        joints = t2m_forward_kinematics(rot6d, root, lengths)
        assert np.abs(joints - m.joints[:-1]).max() < 1e-5


def test_generator_rig_reproduces_joints(motions):
    m = motions[2]
    j = forward_kinematics(m.rotations, m.info["root"], m.offsets)
    assert np.abs(j - m.joints).max() < 1e-9


def test_foot_contacts_follow_planted_feet(motions):
    m = motions[0]
    f = m.features()
    contact_ball_l = f[:, 260]  # (L-ankle, L-foot, R-ankle, R-foot): L-foot
    planted = m.contacts[:-1, 0] & m.contacts[1:, 0]
    assert contact_ball_l[planted].min() == 1.0
    assert set(np.unique(f[:, 259:263])) <= {0.0, 1.0}


def test_quat_between_opposite():
    q = quat_between(np.array([[0.0, -1.0, 0.0]]), np.array([[0.0, 1.0, 0.0]]))
    assert np.allclose(quat_rotate(q, np.array([[0.0, -1.0, 0.0]])), [[0.0, 1.0, 0.0]])


def test_normalisation():
    mean, std = F.load_stats()
    assert mean.shape == std.shape == (263,) and mean.dtype == std.dtype == np.float32
    assert (std >= F.STD_FLOOR).all()
    for sl in F.SLICES.values():  # HumanML3D: one std per feature group
        assert np.unique(std[sl]).size == 1
    x = generate("a person waves both hands", 2).features()
    assert np.allclose(F.denormalize(F.normalize(x)), x, atol=1e-5)
    xt = torch.tensor(x)
    assert torch.allclose(F.denormalize(F.normalize(xt)), xt, atol=1e-5)


def test_stats_regenerate_exactly():
    mean, std = compute_stats(F.STATS_SEED)
    shipped_mean, shipped_std = F.load_stats()
    assert np.array_equal(mean, shipped_mean) and np.array_equal(std, shipped_std)


def test_bad_input():
    with pytest.raises(ValueError, match="joints"):
        F.features_from_joints(np.zeros((10, 21, 3)))
    with pytest.raises(ValueError, match="at least 2 frames"):
        F.features_from_joints(np.zeros((1, 22, 3)))
    with pytest.raises(ValueError, match="NaN"):
        F.features_from_joints(np.full((5, 22, 3), np.nan))
    with pytest.raises(ValueError, match="263"):
        F.recover_joints(np.zeros((10, 262)))
    with pytest.raises(ValueError, match="263"):
        F.normalize(np.zeros((10, 100)))
