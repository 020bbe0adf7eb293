"""What the adapter test kit does not cover because only one family has it: Wan 2.2's expert routing and per-expert
LoRA, a FlowMatchEuler-shipping Wan, Qwen-Image-Edit-Plus with several source images, FLUX's distilled guidance, the source-row
check with file and line, and the refusal of an unsupported pipeline class."""

import json

import numpy as np
import pytest
import torch

from ddpo_grpo.policies import build_policy, load_pipeline
from ddpo_grpo.rollout import sample_rollout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Lazily built tiny pipelines, one directory per (builder name, variant)."""
    from ddpo_grpo import tiny

    root, done = tmp_path_factory.mktemp("specifics"), {}

    def get(name, **kw):
        key = (name, tuple(sorted(kw.items())))
        if key not in done:
            path = root / f"{name}_{len(done)}"
            tiny.BUILDERS[name](path, **kw)
            done[key] = str(path)
        return done[key]

    return get


def _rows(n, sources=1):
    rng = np.random.default_rng(0)
    one = lambda: rng.random((3, 32, 32))  # noqa: E731
    return [
        {"prompt": f"edit {i}", "source_image": one() if sources == 1 else [one() for _ in range(sources)]}
        for i in range(n)
    ]


def test_wan_experts_route_each_sample_by_its_timestep(built, one_thread):
    policy = build_policy(load_pipeline(built("wan_i2v")), resolution=32, num_frames=5, max_sequence_length=16)
    experts = policy.denoiser
    assert type(experts).__name__ == "WanExperts" and experts.boundary == 900.0
    cond = policy.encode_rows(_rows(2))
    x = torch.randn(2, *policy.latent_shape(), generator=torch.Generator().manual_seed(0))
    t = torch.tensor([950.0, 400.0])  # one sample per expert
    with torch.no_grad():
        mixed = policy.forward(experts, x, t, cond)
        high = policy.forward(experts.transformer, x[:1], t[:1], {k: v[:1] for k, v in cond.items()})
        low = policy.forward(experts.transformer_2, x[1:], t[1:], {k: v[1:] for k, v in cond.items()})
    torch.testing.assert_close(mixed, torch.cat([high, low]), atol=1e-6, rtol=1e-6)
    assert (
        high - policy.forward(experts.transformer_2, x[:1], t[:1], {k: v[:1] for k, v in cond.items()})
    ).abs().max() > 1e-4


def test_wan_lora_on_one_expert_exports_and_loads_it(built, tmp_path, one_thread):
    from ddpo_grpo.policies.wan import EXPERT_2_WEIGHTS

    path = built("wan_i2v")
    policy = build_policy(
        load_pipeline(path), resolution=32, num_frames=5, max_sequence_length=16, experts="transformer_2"
    )
    policy.add_lora(rank=2, alpha=2.0, target_modules=())
    trained = {n.split(".")[0] for n, p in policy.denoiser.named_parameters() if p.requires_grad}
    assert trained == {"transformer_2"} and not getattr(policy.pipeline.transformer, "peft_config", None)
    with torch.no_grad():
        for n, p in policy.denoiser.named_parameters():
            if "lora_B" in n:
                p.fill_(0.05)
    policy.save_lora(tmp_path, policy.denoiser)
    assert sorted(p.name for p in tmp_path.iterdir()) == [EXPERT_2_WEIGHTS]
    fresh = load_pipeline(path)
    type(policy).load_lora(fresh, str(tmp_path))
    assert getattr(fresh.transformer_2, "peft_config", None) and not getattr(fresh.transformer, "peft_config", None)
    with pytest.raises(ValueError, match=r"sample.experts='transformer_3': .* has the experts"):
        build_policy(load_pipeline(path), resolution=32, num_frames=5, experts="transformer_3")


def test_wan_shipping_flow_match_euler_samples_its_own_shift(built, one_thread):
    """(A Wan shipping UniPC samples UniPC's own σ grid: tests/test_wan.py.)"""
    from diffusers import FlowMatchEulerDiscreteScheduler

    policy = build_policy(load_pipeline(built("wan", scheduler="euler")), resolution=32, num_frames=5)
    assert type(policy.pipeline.scheduler).__name__ == "FlowMatchEulerDiscreteScheduler"
    reference = FlowMatchEulerDiscreteScheduler(shift=3.0)
    reference.set_timesteps(6)
    np.testing.assert_allclose(
        policy.schedule(6).kernel_args["sigma"].numpy(), reference.sigmas[:-1].numpy(), atol=1e-6
    )
    rollout = sample_rollout(
        policy, policy.denoiser, [{"prompt": "a cat"}], seeds=[0], num_steps=3, guidance_scale=1.0, noise_level=0.7
    )
    assert rollout.samples.shape == (1, 5, 3, 32, 32) and torch.isfinite(rollout.log_probs).all()


def test_qwen_edit_plus_takes_several_source_images(built, one_thread):
    policy = build_policy(
        load_pipeline(built("qwen_image_edit_plus")), resolution=32, max_sequence_length=64, source_pixels=32 * 32
    )
    two = policy.encode_rows(_rows(2, sources=2))
    one = policy.encode_rows(_rows(2, sources=1))
    assert two["image_latents"].shape[:2] == (2, 2) and one["image_latents"].shape[:2] == (2, 1)
    x = torch.randn(2, *policy.latent_shape(), generator=torch.Generator().manual_seed(0))
    t = policy.schedule(3).timesteps[:1].expand(2)
    with torch.no_grad():
        out_two, out_one = (
            policy.predict(policy.denoiser, x, t, two, 3.0),
            policy.predict(policy.denoiser, x, t, one, 3.0),
        )
    assert out_two.shape == x.shape and (out_two - out_one).abs().max() > 1e-4
    with pytest.raises(ValueError, match="rows give different numbers of source images"):
        policy.encode_rows(_rows(1, sources=2) + _rows(1, sources=1))


def test_flux_distilled_guidance_is_stored_and_used(built, one_thread):
    pipe = load_pipeline(built("flux"))
    a = build_policy(pipe, resolution=32, max_sequence_length=16, distilled_guidance=3.5)
    b = build_policy(pipe, resolution=32, max_sequence_length=16, distilled_guidance=1.0)
    ca, cb = a.encode_prompts(["a cat"]), b.encode_prompts(["a cat"])
    assert ca["guidance"].tolist() == [3.5] and cb["guidance"].tolist() == [1.0]
    x = torch.randn(1, *a.latent_shape(), generator=torch.Generator().manual_seed(0))
    t = a.schedule(3).timesteps[:1]
    with torch.no_grad():
        assert (a.predict(a.denoiser, x, t, ca, 1.0) - a.predict(a.denoiser, x, t, cb, 1.0)).abs().max() > 1e-5


def test_source_rows_are_checked_with_file_and_line(tmp_path):
    from ddpo_grpo.policies.conditioning import check_source_rows
    from ddpo_grpo.prompts import load_prompts

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "a", "source_image": "a.png"}) + "\n\n" + json.dumps({"prompt": "b"}) + "\n")
    with pytest.raises(ValueError, match=rf"{path} line 3: the row \(prompt 'b'\) has no 'source_image'.*FLUX"):
        check_source_rows(str(path), load_prompts(str(path)), "FLUX.1 Kontext")
    check_source_rows(str(path), load_prompts(str(path))[:1], "FLUX.1 Kontext")  # a good source passes


def test_unsupported_pipeline_class_is_one_line(tmp_path):
    from foundation.errors import ConfigError

    (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "CogVideoXPipeline"}))
    with pytest.raises(ConfigError, match=r"is a 'CogVideoXPipeline'; supported pipeline classes: .*docs/adapters.md"):
        load_pipeline(str(tmp_path))


def test_attention_backend_is_selected_or_refused(built):
    pipe = load_pipeline(built("flux"))
    backends = lambda: {
        str(m.processor._attention_backend) for m in pipe.transformer.modules() if hasattr(m, "processor")
    }  # noqa: E731
    assert backends() == {"None"}
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    default = _AttentionBackendRegistry.get_active_backend()[0]
    build_policy(pipe, resolution=32, attention_backend="_native_math")
    assert backends() == {"AttentionBackendName._NATIVE_MATH"}
    assert _AttentionBackendRegistry.get_active_backend()[0] == default  # the process default is left alone
    with pytest.raises(ValueError, match=r"sample.attention_backend='no_such_backend'"):
        build_policy(pipe, resolution=32, attention_backend="no_such_backend")
