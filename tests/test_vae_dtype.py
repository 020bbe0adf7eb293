"""The VAE's dtype (``sample.vae_dtype``): "auto" follows the checkpoint's rule (SDXL's pipeline decodes a VAE whose
config says ``force_upcast`` in float32 when the weights are float16, because that VAE overflows in float16), the
explicit values are honoured, decoding casts the latents to the VAE's dtype and runs outside the run's autocast.

The overflow is built on CPU: a tiny SDXL VAE whose ``post_quant_conv`` is scaled by 1e5 produces activations beyond
float16's range (65504) that its GroupNorms normalise away in float32 — in float16 they become inf and the decoded
image NaN, as the SDXL-base VAE does at real size.
"""

from types import SimpleNamespace

import pytest
import torch

from config.base import get_config as base_config
from ddpo_grpo import wiring
from ddpo_grpo.config_checks import ConfigError, validate
from ddpo_grpo.policies import build_policy, policy_settings
from ddpo_grpo.rollout import sample_rollout

OVERFLOW = 1e5  # post_quant_conv's scale: its outputs exceed float16's range, the decoder's GroupNorms undo it


@pytest.fixture(scope="module")
def sdxl(tmp_path_factory):
    """A tiny SDXL pipeline builder (fresh weights per call) whose VAE overflows in float16."""
    from ddpo_grpo.tiny import build_tiny_sdxl

    root = tmp_path_factory.mktemp("sdxl_vae")

    def make(overflow: bool = True, force_upcast: bool = True):
        pipe = build_tiny_sdxl(root / f"sdxl_{len(list(root.iterdir()))}")
        pipe.set_progress_bar_config(disable=True)
        if overflow:
            with torch.no_grad():
                pipe.vae.post_quant_conv.weight.mul_(OVERFLOW)
                pipe.vae.post_quant_conv.bias.mul_(OVERFLOW)
        pipe.vae.register_to_config(force_upcast=force_upcast)
        return pipe

    return make


def _config(mixed_precision: str, vae_dtype: str = "auto"):
    config = base_config()
    config.mixed_precision = mixed_precision
    config.sample.resolution = 32
    config.sample.vae_dtype = vae_dtype
    config.train.use_lora, config.train.lora_rank, config.train.lora_alpha = True, 4, 4.0
    return config


def _built(pipe, config):
    """The policy of ``pipe`` after ``wiring.build_weights`` put its frozen modules in their run dtypes."""
    policy = build_policy(pipe, policy_settings(pipe, config.sample))
    wiring.build_weights(config, policy, SimpleNamespace(device=torch.device("cpu"), num_processes=1))
    return policy


def test_sdxl_fp16_keeps_a_force_upcast_vae_in_fp32_and_decodes_finite(sdxl):
    pipe = sdxl()
    policy = _built(pipe, _config("fp16"))
    assert pipe.vae.dtype == torch.float32  # the checkpoint's rule: force_upcast under fp16 weights
    assert pipe.text_encoder.dtype == pipe.text_encoder_2.dtype == torch.float16  # the other frozen modules: fp16
    latents = torch.randn(2, *policy.latent_shape(), generator=torch.Generator().manual_seed(0)).half()  # a fp16 run's
    images = policy.decode(latents)
    assert torch.isfinite(images).all() and images.shape == (2, 3, 32, 32)


def test_the_same_vae_in_fp16_overflows(sdxl):
    """What the run did before the rule: the VAE cast to the weight dtype decodes NaN."""
    pipe = sdxl()
    policy = _built(pipe, _config("fp16", vae_dtype="fp16"))
    assert pipe.vae.dtype == torch.float16
    images = policy.decode(torch.randn(2, *policy.latent_shape(), generator=torch.Generator().manual_seed(0)))
    assert torch.isnan(images).any()


def test_auto_keeps_the_weight_dtype_without_force_upcast_or_outside_fp16(sdxl):
    fixed_vae = sdxl(overflow=False, force_upcast=False)  # a VAE fine-tuned for fp16 says force_upcast: false
    _built(fixed_vae, _config("fp16"))
    assert fixed_vae.vae.dtype == torch.float16
    bf16 = sdxl(overflow=False)
    _built(bf16, _config("bf16"))
    assert bf16.vae.dtype == torch.bfloat16  # bf16's range needs no upcast; the flow recipes set "fp32" themselves


def test_sd_family_does_not_upcast_under_auto(tiny_dirs):
    """StableDiffusionPipeline decodes in the weight dtype whatever force_upcast says (DDPO's fp16 VAE)."""
    from ddpo_grpo.policies import load_pipeline

    pipe = load_pipeline(tiny_dirs["sd"])
    assert pipe.vae.config.force_upcast
    _built(pipe, _config("fp16"))
    assert pipe.vae.dtype == torch.float16


@pytest.mark.parametrize(
    "mixed_precision,vae_dtype,expected", [("no", "bf16", torch.bfloat16), ("bf16", "fp32", torch.float32)]
)
def test_explicit_vae_dtype_is_honoured(sdxl, mixed_precision, vae_dtype, expected):
    pipe = sdxl(overflow=False)
    _built(pipe, _config(mixed_precision, vae_dtype))
    assert pipe.vae.dtype == expected
    weights = {"no": torch.float32, "bf16": torch.bfloat16}[mixed_precision]
    assert pipe.text_encoder.dtype == weights


def test_decode_runs_outside_the_rollouts_autocast(sdxl):
    """A float32 VAE decodes in float32 even when the rollout samples under float16 autocast (autocast would run its
    convolutions in float16 and overflow)."""
    pipe = sdxl()
    policy = build_policy(pipe, resolution=32, kernel="ddim", noise_level=1.0)
    rows = [{"prompt": "a red square"}, {"prompt": "a blue circle"}]
    out = sample_rollout(
        policy,
        policy.denoiser,
        rows,
        seeds=[0, 1],
        num_steps=2,
        guidance_scale=1.0,
        noise_level=1.0,
        generator=torch.Generator().manual_seed(0),
        autocast=lambda: torch.autocast("cpu", dtype=torch.float16),
    )
    assert torch.isfinite(out.samples).all()


def test_bad_vae_dtype_is_refused_in_one_line(sdxl):
    config = _config("fp16", vae_dtype="float32")
    with pytest.raises(ConfigError, match=r"sample\.vae_dtype='float32' is not one of"):
        validate(config)
    with pytest.raises(ValueError, match=r"sample\.vae_dtype='float32'"):
        build_policy(sdxl(overflow=False), resolution=32, vae_dtype="float32")


@pytest.mark.parametrize("mixed_precision,vae_dtype", [("bf16", "fp32"), ("fp16", "auto")])
def test_a_float32_vae_holds_the_checkpoints_weights(sdxl, tmp_path, mixed_precision, vae_dtype):
    """A run whose VAE runs in float32 reads it in float32: its weights are the checkpoint's, bit for bit, not their
    rounding to the run's 16-bit weight dtype (before, every component was read in the weight dtype and the VAE cast
    up afterwards)."""
    from safetensors.torch import load_file

    sdxl(overflow=False).save_pretrained(tmp_path / "pipe")
    config = _config(mixed_precision, vae_dtype)
    config.pretrained.model = str(tmp_path / "pipe")
    acc = SimpleNamespace(device=torch.device("cpu"), num_processes=1, is_main_process=True)
    policy, _ = wiring.build_policy_for(config, acc)
    wiring.build_weights(config, policy, acc)
    stored = load_file(str(tmp_path / "pipe" / "vae" / "diffusion_pytorch_model.safetensors"))
    state = policy.pipeline.vae.state_dict()
    assert policy.pipeline.vae.dtype == torch.float32 and stored.keys() <= state.keys()
    assert all(torch.equal(state[k], stored[k]) for k in stored if stored[k].is_floating_point())
