"""Body geometry (worlds/motion/geometry.py): the bone projection of the denoiser and MDM's geometric losses.

* generated clips (constant bones by construction) pass the projection unchanged; a clip with 2 cm joint
  noise (worst bone CV ≈ 0.3) leaves it with CV ≈ 0, the bone directions kept and the mean lengths kept;
* each geometric term is 0 on the data itself and responds to the defect it names: feet sliding while the
  data says contact (foot), a body sunk into the floor (floor), stretched bones (bone), a shifted pose (pos),
  jitter (vel) — and the gradient reaches the prediction;
* MotionDenoiser(bone_projection=True) outputs constant bones, saves and reloads its statistics with its
  weights, and the pretraining config refuses a negative term weight.
"""

from __future__ import annotations

import pytest
import torch

from worlds.motion.features import SLICES, recover_joints
from worlds.motion.generator import generate
from worlds.motion.geometry import GEOMETRIC_TERMS, geometric_losses, project_bones, ric_joints
from worlds.motion.skeleton import PARENTS

pytestmark = pytest.mark.usefixtures("one_thread")


def _clips(*prompts: str) -> torch.Tensor:
    """Denormalised features [B, 96, 263] float64 of generated clips."""
    return torch.stack([torch.from_numpy(generate(p, seed=i, frames=97).features()) for i, p in enumerate(prompts)])


def _bone_cv(features: torch.Tensor) -> torch.Tensor:
    """[B, 21] coefficient of variation over frames of each bone of the recovered joints."""
    j = recover_joints(features)
    lengths = (j[..., 1:, :] - j[..., list(PARENTS[1:]), :]).norm(dim=-1)  # [B, T, 21]
    return lengths.std(1) / lengths.mean(1)


@pytest.fixture(scope="module")
def clips():
    return _clips("a person walks forward", "a person jumps three times then waves the left hand").double()


def test_projection_keeps_real_motion_and_fixes_stretched_bones(clips):
    assert float(_bone_cv(clips).max()) < 1e-6  # the generator's bodies are rigid
    assert torch.allclose(project_bones(clips), clips, atol=1e-6)  # the features are float32: ≈ 1e-7 m

    noisy = clips.clone()
    noisy[..., SLICES["ric"]] += 0.02 * torch.randn(
        noisy[..., SLICES["ric"]].shape, generator=torch.Generator().manual_seed(0)
    )
    assert float(_bone_cv(noisy).max()) > 0.1
    fixed = project_bones(noisy)
    assert float(_bone_cv(fixed).max()) < 1e-9
    # only the ric block changes; each bone keeps its direction and its mean length over the clip
    outside = torch.ones(263, dtype=torch.bool)
    outside[SLICES["ric"]] = False
    assert torch.equal(fixed[..., outside], noisy[..., outside])
    p, q = ric_joints(noisy), ric_joints(fixed)
    d_p = p[..., 1:, :] - p[..., list(PARENTS[1:]), :]
    d_q = q[..., 1:, :] - q[..., list(PARENTS[1:]), :]
    cos = torch.nn.functional.cosine_similarity(d_p, d_q, dim=-1)
    assert float(cos.min()) > 1 - 1e-9
    assert torch.allclose(d_q.norm(dim=-1).mean(1), d_p.norm(dim=-1).mean(1), rtol=1e-9)


def test_geometric_terms_are_zero_on_data_and_see_their_defect(clips):
    zero = geometric_losses(clips, clips)
    assert set(zero) == set(GEOMETRIC_TERMS) and all(float(v) < 1e-12 for k, v in zero.items() if k != "foot")
    base_foot = float(zero["foot"])  # the data's own contact joints move a little (contact = below 0.002 m² per frame)

    shifted = clips.clone()
    shifted[..., SLICES["ric"]] += torch.tensor([0.05, 0.0, 0.0], dtype=clips.dtype).repeat(21)
    assert abs(float(geometric_losses(shifted, clips)["pos"]) - 21 / 22 * 0.05**2) < 1e-9
    assert float(geometric_losses(shifted, clips)["bone"]) > 1e-4  # the hips' bones change length

    sunk = clips.clone()
    sunk[..., SLICES["root_y"]] -= 0.3
    sunk[..., 5:67:3] -= 0.3  # y of joints 1..21 (ric heights are absolute)
    terms = geometric_losses(sunk, clips)
    assert float(terms["floor"]) > 1e-3 and float(terms["bone"]) < 1e-12  # the same body, lower

    sliding = clips.clone()  # the root slides forward 5 cm a frame on top of the data's motion
    sliding[..., 2] += 0.05
    terms = geometric_losses(sliding, clips)
    assert float(terms["foot"]) > 10 * max(base_foot, 1e-6) and float(terms["vel"]) > 1e-4

    jitter = clips.clone().requires_grad_(True)
    noise = torch.zeros_like(clips)  # independent per frame on the ric block: vel ≈ 2 × pos (x 21/22)
    noise[..., SLICES["ric"]] = 0.01 * torch.randn(
        noise[..., SLICES["ric"]].shape, generator=torch.Generator().manual_seed(1), dtype=clips.dtype
    )
    terms = geometric_losses(jitter + noise, clips)
    pos, vel = float(terms["pos"].detach()), float(terms["vel"].detach())
    assert abs(pos - 21 / 22 * 3e-4) < 3e-5 and 1.8 < vel / pos < 2.2
    sum(terms.values()).backward()
    assert jitter.grad is not None and float(jitter.grad.abs().sum()) > 0


def test_denoiser_with_bone_projection_saves_its_statistics(tmp_path):
    from worlds.motion.model import MotionDenoiser
    from worlds.motion.pretrain import MotionConfig

    torch.manual_seed(0)
    model = MotionDenoiser(frames=16, width=16, layers=1, heads=2, ff=32, text_dim=8, bone_projection=True)
    with torch.no_grad():
        model.feature_mean += 0.01  # statistics that differ from the shipped ones must survive a reload
    x, text = torch.randn(2, 16, 263), torch.randn(2, 8)
    t = torch.tensor([10, 900])
    out = model(x, t, text_embeds=text)
    feats = out.detach().double() * model.feature_std.double() + model.feature_mean.double()
    assert float(_bone_cv(feats).max()) < 1e-4  # float32 rounding
    model.save_pretrained(tmp_path / "d")
    again = MotionDenoiser.from_pretrained(tmp_path / "d")
    assert torch.equal(again.feature_mean, model.feature_mean)
    assert torch.equal(again(x, t, text_embeds=text), out)

    with pytest.raises(ValueError, match="geo_floor"):
        MotionConfig.tiny(geo_floor=-1.0).validate()


def test_guided_samples_keep_their_bones_through_the_normalizer_hook():
    """CFG extrapolates two projected outputs into one whose bones drift; the normalizer's constrain hook
    (DenoiserPipeline.guide, used by the pipeline's own call and by the policy) projects the guided x̂₀."""
    from ddpo_grpo.policies import build_policy
    from ddpo_grpo.rollout import sample_rollout
    from worlds.motion.grammar import test_rows
    from worlds.motion.tiny import build_tiny_mdm

    pipe = build_tiny_mdm()
    assert pipe.denoiser.config.bone_projection and pipe.normalizer.config.bone_projection
    prompts = [r["prompt"] for r in test_rows()[:3]]
    cv = {}
    for hook in (True, False):
        pipe.normalizer.register_to_config(bone_projection=hook)
        out = pipe(prompts, num_inference_steps=4, guidance_scale=2.5, generator=torch.Generator().manual_seed(0))
        cv[hook] = float(_bone_cv(out.samples.double()).max())
    assert cv[True] < 1e-4 < 0.01 < cv[False]
    pipe.normalizer.register_to_config(bone_projection=True)
    policy = build_policy(pipe, resolution=0, kernel="ddim")
    rollout = sample_rollout(
        policy, policy.denoiser, test_rows()[:3], seeds=[0, 1, 2], num_steps=4, guidance_scale=2.5, noise_level=0.0
    )
    assert float(_bone_cv(rollout.samples.double()).max()) < 1e-4
