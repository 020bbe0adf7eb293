"""Body geometry in torch: constant bone lengths by projection, and MDM's geometric losses on recovered joints.

Both read joint positions recovered from (denormalised) HumanML3D features, differentiably
(:func:`~worlds.motion.features.recover_joints` on torch tensors).

**Bone projection** (:func:`project_bones`, used by :class:`~worlds.motion.model.MotionDenoiser` with
``bone_projection=True``). The recovered joints are the ric block rotated about ``y`` and shifted by the root
(features.py, "Recovery") — an isometry per frame — so a bone's length in the ric frame *is* its length in
the recovered motion. In the ric frame of one frame the root is ``(0, root_y, 0)`` and joints 1..21 are the
ric entries. The projection gives every bone the clip's mean length of that bone and keeps each bone's
direction::

    ℓ_b   = mean_t ‖p_b(t) − p_parent(b)(t)‖                      # per clip and bone (b = child joint)
    q_0   = p_0 ;   q_b = q_parent(b) + ℓ_b · (p_b − p_parent(b)) / ‖p_b − p_parent(b)‖   (parents first)

so the output's bone lengths are constant over the clip (coefficient of variation 0 up to float rounding),
the lengths themselves (the body) remain the model's to choose, and a motion whose bones are already
constant is returned unchanged. The other feature blocks (6D rotations, local velocities, contacts) are
left as predicted: the joints recovered from a sample read only the root and ric blocks.

**Geometric losses** (:func:`geometric_losses`; MDM, Tevet et al. 2023, §3, eqs. 3–5, plus two terms of
this world). With ``J = recover_joints`` of the prediction ``x̂₀`` and ``J* =`` of the data ``x₀``, both
``[B, F, 22, 3]`` in metres, and ``c ∈ {0, 1}`` the data's foot contacts ``[B, F, 4]``::

    pos   = mean ‖J − J*‖²                                          # MDM L_pos
    vel   = mean ‖ΔJ − ΔJ*‖²,  Δ = frame difference                 # MDM L_vel
    foot  = mean ‖ΔJ_feet · c‖²   (the contact joints of the data)   # MDM L_foot: no sliding in contact
    floor = mean relu(−y(J))²      (every joint)                     # nothing under the floor (y = 0)
    bone  = mean (‖J_b − J_parent(b)‖ − ‖J*_b − J*_parent(b)‖)²      # the data's bone lengths, every frame

All are in m² (per frame for the velocity terms); the pretraining recipe weighs them
(:class:`~worlds.motion.pretrain.MotionConfig`).
"""

from __future__ import annotations

import torch

from .features import SLICES, recover_joints
from .skeleton import CONTACT_JOINTS, N_JOINTS, PARENTS

#: names of :func:`geometric_losses`' terms
GEOMETRIC_TERMS = ("pos", "vel", "foot", "floor", "bone")
_EPS = 1e-6


def ric_joints(features: torch.Tensor) -> torch.Tensor:
    """Joints in each frame's ric frame ``[..., T, 22, 3]``: root ``(0, root_y, 0)``, then the ric entries."""
    lead = features.shape[:-1]
    ric = features[..., SLICES["ric"]].reshape(*lead, N_JOINTS - 1, 3)  # [..., T, 21, 3]
    y = features[..., SLICES["root_y"]]  # [..., T, 1]
    root = torch.cat([torch.zeros_like(y), y, torch.zeros_like(y)], -1)[..., None, :]  # [..., T, 1, 3]
    return torch.cat([root, ric], -2)


def project_bones(features: torch.Tensor) -> torch.Tensor:
    """Denormalised features ``[..., T, 263]`` with every bone at its mean length over the clip (docstring)."""
    p = ric_joints(features)  # [..., T, 22, 3]
    q = [p[..., 0, :]]
    for j in range(1, N_JOINTS):
        d = p[..., j, :] - p[..., PARENTS[j], :]  # [..., T, 3]
        length = d.norm(dim=-1, keepdim=True)  # [..., T, 1]
        mean = length.mean(-2, keepdim=True)  # [..., 1, 1] over the clip's frames
        q.append(q[PARENTS[j]] + mean * d / length.clamp_min(_EPS))
    ric = torch.stack(q[1:], -2).flatten(-2)  # [..., T, 63]
    s = SLICES["ric"]
    return torch.cat([features[..., : s.start], ric, features[..., s.stop :]], -1)


def project_bones_normalized(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """:func:`project_bones` of normalised features ``x [..., T, 263]`` (``x · std + mean`` in, the same space and
    dtype out; computed in float32)."""
    mean, std = mean.float(), std.float()
    return ((project_bones(x.float() * std + mean) - mean) / std).to(x.dtype)


def _bone_lengths(joints: torch.Tensor) -> torch.Tensor:
    """``[..., 21]`` lengths of bones 1..21 of joints ``[..., 22, 3]``."""
    return (joints[..., 1:, :] - joints[..., list(PARENTS[1:]), :]).norm(dim=-1)


def geometric_losses(pred: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """The five terms of the module docstring for denormalised features ``pred``, ``target`` ``[B, F, 263]``."""
    j, js = recover_joints(pred), recover_joints(target)  # [B, F, 22, 3]
    dj, djs = j[:, 1:] - j[:, :-1], js[:, 1:] - js[:, :-1]  # [B, F-1, 22, 3]
    contact = (target[:, :-1, SLICES["contacts"]] > 0.5).to(pred.dtype)  # [B, F-1, 4]
    feet = dj[:, :, list(CONTACT_JOINTS)]  # [B, F-1, 4, 3]
    return {
        "pos": (j - js).square().sum(-1).mean(),
        "vel": (dj - djs).square().sum(-1).mean(),
        "foot": (feet * contact[..., None]).square().sum(-1).mean(),
        "floor": torch.relu(-j[..., 1]).square().mean(),
        "bone": (_bone_lengths(j) - _bone_lengths(js)).square().mean(),
    }


__all__ = ["GEOMETRIC_TERMS", "geometric_losses", "project_bones", "project_bones_normalized", "ric_joints"]
