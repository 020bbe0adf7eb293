"""The InstructPix2Pix adapter (ddpo_grpo/policies/ip2p.py) on a tiny random pipeline built from config."""

import numpy as np
import pytest
import torch
from PIL import Image

from ddpo_grpo.policies import build_policy, load_pipeline, policy_class
from ddpo_grpo.rollout import sample_rollout, transition_inputs


@pytest.fixture(scope="module")
def ip2p_dir(tmp_path_factory):
    from ddpo_grpo.tiny import BUILDERS

    path = tmp_path_factory.mktemp("tiny") / "ip2p"
    BUILDERS["ip2p"](path)
    return str(path)


def _rows(tmp_path=None):
    rng = np.random.default_rng(0)
    uint8 = (rng.random((3, 32, 32)) * 255).astype(np.uint8)
    rows = [
        {"prompt": "make the red circle blue", "source_image": uint8},  # array (uint8 levels)
        {"prompt": "add a green square", "source_image": rng.random((3, 32, 32)).tolist()},  # nested list (floats)
        {"prompt": "restore the image", "source_image": (uint8 // 2).tolist()},  # nested list (integer levels)
    ]
    if tmp_path is not None:
        Image.fromarray(uint8.transpose(1, 2, 0)).resize((48, 48)).save(tmp_path / "src.png")
        rows.append({"prompt": "remove the triangle", "source_image": str(tmp_path / "src.png")})  # path, resized
    return rows


def _policy(ip2p_dir, **kw):
    return build_policy(load_pipeline(ip2p_dir), resolution=32, **kw)


def test_registered_and_shapes(ip2p_dir):
    policy = _policy(ip2p_dir)
    assert type(policy).__name__ == "IP2PPolicy" and policy_class(policy.pipeline).image_conditioned
    assert policy.latent_shape() == (4, 8, 8) and policy.denoiser.config.in_channels == 8
    assert policy.image_guidance_scale == 1.5


def test_matches_diffusers_pipeline(ip2p_dir):
    """η = 0 sampling through the adapter = StableDiffusionInstructPix2PixPipeline, both guidance scales on."""
    policy = _policy(ip2p_dir, image_guidance_scale=1.7)
    rows = _rows()[:2]
    rollout = sample_rollout(
        policy, policy.denoiser, rows, seeds=[0, 1], num_steps=4, guidance_scale=3.0, noise_level=0.0
    )
    plain = policy.pipeline(
        prompt=[r["prompt"] for r in rows],
        image=policy.source_images(rows),
        num_inference_steps=4,
        guidance_scale=3.0,
        image_guidance_scale=1.7,
        latents=rollout.latents[:, 0].clone(),
        output_type="latent",
    ).images
    torch.testing.assert_close(rollout.latents[:, -1], plain, atol=1e-5, rtol=0)


@pytest.mark.parametrize("text, image", [(4.5, 1.5), (3.0, 2.5), (1.0, 1.5)])
def test_on_policy_with_both_guidance_scales(ip2p_dir, tmp_path, text, image):
    """Re-scoring stored transitions (another minibatch, shuffled) reproduces the stored log-probs to ≤ 1e-5."""
    policy = _policy(ip2p_dir, image_guidance_scale=image)
    rows = _rows(tmp_path)
    rollout = sample_rollout(
        policy,
        policy.denoiser,
        rows,
        seeds=[0, 1, 2, 3],
        num_steps=5,
        guidance_scale=text,
        noise_level=1.0,
        generator=torch.Generator().manual_seed(1),
    )
    assert rollout.cond["image_latents"].shape == (4, 4, 8, 8)
    torch.testing.assert_close(rollout.cond["image_guidance_scale"], torch.full((4,), image))
    policy.image_guidance_scale = 9.0  # the stored per-sample s_I, not the policy's current one, re-scores
    mini = rollout.select([3, 0, 2])
    for k in range(mini.train_steps.shape[1]):
        x, t, x_next, args, levels, j, valid = transition_inputs(mini, k)
        out = policy.predict(policy.denoiser, x, t, mini.cond, text)
        step = policy.step(out, x, args, levels, prev_sample=x_next)
        assert valid.all() and (step.log_prob - mini.log_probs[torch.arange(3), j]).abs().max() <= 1e-5


def test_guidance_formula_and_detach(ip2p_dir):
    """ε̃ = ε(∅,∅) + s_T (ε(c,c_I) − ε(∅,c_I)) + s_I (ε(∅,c_I) − ε(∅,∅)).

    With detach_uncond the gradient flows only through ε(c,c_I).
    """
    policy = _policy(ip2p_dir, image_guidance_scale=2.0)
    cond = policy.encode_rows(_rows()[:2])
    x, t = torch.randn(2, 4, 8, 8), torch.tensor([500, 100])
    full = policy.forward(policy.denoiser, x, t, cond)
    img_only = policy.forward(
        policy.denoiser, x, t, {"embeds": cond["neg_embeds"], "image_latents": cond["image_latents"]}
    )
    none = policy.forward(
        policy.denoiser, x, t, {"embeds": cond["neg_embeds"], "image_latents": torch.zeros_like(cond["image_latents"])}
    )
    expected = none + 3.0 * (full - img_only) + 2.0 * (img_only - none)
    torch.testing.assert_close(policy.predict(policy.denoiser, x, t, cond, 3.0), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(policy.predict(policy.denoiser, x, t, cond, 1.0), full, atol=1e-6, rtol=0)
    w = policy.denoiser.conv_out.weight
    g_all = torch.autograd.grad(policy.predict(policy.denoiser, x, t, cond, 3.0).sum(), w)[0]
    g_det = torch.autograd.grad(policy.predict(policy.denoiser, x, t, cond, 3.0, detach_uncond=True).sum(), w)[0]
    g_full = torch.autograd.grad(3.0 * policy.forward(policy.denoiser, x, t, cond).sum(), w)[0]
    torch.testing.assert_close(g_det, g_full, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(g_all, g_det)


def test_bad_rows_and_settings(ip2p_dir):
    policy = _policy(ip2p_dir)
    with pytest.raises(ValueError, match=r"row 1 \(prompt 'b'\) has no 'source_image'"):
        policy.encode_rows([{"prompt": "a", "source_image": np.zeros((3, 32, 32))}, {"prompt": "b"}])
    with pytest.raises(ValueError, match=r"row 0, 'source_image': .*does not exist"):
        policy.encode_rows([{"prompt": "a", "source_image": "no/such/file.png"}])
    with pytest.raises(ValueError, match=r"row 0, 'source_image': source image array must have shape \(3, H, W\)"):
        policy.encode_rows([{"prompt": "a", "source_image": np.zeros((32, 32, 3))}])
    with pytest.raises(ValueError, match="sample.image_guidance_scale=0.5 must be a number ≥ 1"):
        _policy(ip2p_dir, image_guidance_scale=0.5)
    with pytest.raises(ValueError, match="encode_rows"):
        policy.predict(policy.denoiser, torch.zeros(1, 4, 8, 8), torch.tensor([1]), policy.encode_prompts(["a"]), 2.0)


def test_supervised_batch_forward_process_and_x0(ip2p_dir):
    """Rows without ground truth are skipped and counted; forward_process is DDPM noising; predicted_x0 inverts it."""
    policy = _policy(ip2p_dir)
    rows = _rows()
    rows[0]["ground_truth"] = np.full((3, 32, 32), 200, np.uint8)
    rows[2]["ground_truth"] = rows[2]["source_image"]
    batch = policy.supervised_batch(rows, generator=torch.Generator().manual_seed(0))
    assert batch.skipped == 1 and batch.index.tolist() == [0, 2] and batch.x0.shape == (2, 4, 8, 8)
    assert batch.cond["image_latents"].shape == (2, 4, 8, 8)
    noise = torch.randn(batch.x0.shape, generator=torch.Generator().manual_seed(1))
    t, noised = policy.forward_process(batch.x0, torch.tensor([0.3, 0.8]), noise)
    a = policy.scheduler.alphas_cumprod[t].view(-1, 1, 1, 1)
    torch.testing.assert_close(noised.x_t, a.sqrt() * batch.x0 + (1 - a).sqrt() * noise)
    torch.testing.assert_close(policy.predicted_x0(noised.target, noised.x_t, t), batch.x0, atol=1e-4, rtol=1e-4)
    pred = policy.predict(policy.denoiser, noised.x_t, t, batch.cond, 1.0)
    assert pred.shape == batch.x0.shape
    empty = policy.supervised_batch([{"prompt": "a", "source_image": rows[0]["source_image"]}])
    assert empty.skipped == 1 and empty.x0.shape[0] == 0
