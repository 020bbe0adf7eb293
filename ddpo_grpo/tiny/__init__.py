"""Tiny, randomly initialised pipelines of every supported family, built from config dicts (no downloads).

They exist so that the whole loop (sampling, rewards, training, export) runs offline on a laptop CPU and inside the
test suite; every tokenizer is built locally (``tiny.common``). One module per family:

    sd.py      build_tiny_sd (UNet, DDIM), build_tiny_ip2p (8-channel UNet), build_tiny_sd3 (two CLIP encoders, no T5)
    sdxl.py    build_tiny_sdxl (two CLIP encoders, pooled + add_time_ids, Euler scheduler config as shipped)
    flux.py    build_tiny_flux, build_tiny_kontext (CLIP + T5, packed 2×2 latents, guidance-distilled)
    qwen.py    build_tiny_qwen_image, build_tiny_qwen_image_edit(_plus) (Qwen2.5-VL encoder, Qwen-Image VAE)
    zimage.py  build_tiny_zimage (Qwen3 encoder, single-stream transformer)
    wan.py     build_tiny_wan (text-to-video), build_tiny_wan_i2v (image-to-video, two experts)
    here       build_tiny_denoiser (``TinyDenoiser``, an MLP over [B, frames, features] predicting x₀ as MDM does,
               cosine-β DDPMScheduler, one projected CLIP text encoder, a SampleNormalizer, heatmap previews)

Sizes: image latents are 4×(res/4)×(res/4) (a 4× VAE) except the Qwen-Image and Wan video VAEs (8×); the tiny
denoiser's samples are 16 frames × 8 features (``sample.resolution`` does not apply to it).

A family names its tiny builder in its spec (``FamilySpec.tiny``, ``ddpo_grpo.policies.family``); ``BUILDERS`` (the
names of ``pretrained.tiny`` -> builder) and ``FAMILIES`` (pipeline class -> the builder the adapter test kit,
tests/test_adapter_kit.py, runs it on) are views of the specs. ``from_configs.build_from_configs`` builds a family
from a real checkpoint's configs instead (the kit's real-config mode).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch
from diffusers import ModelMixin
from diffusers.configuration_utils import ConfigMixin, register_to_config

from ddpo_grpo.policies import View
from ddpo_grpo.tiny.common import TEXT_HIDDEN, TOKENIZER_MAX_LENGTH, _char_vocab, build_tokenizer, text_config

# the builders re-exported (``from ddpo_grpo.tiny import build_tiny_sd``); a new family's needs no line here: its spec
# names it
from ddpo_grpo.tiny.flux import build_tiny_flux, build_tiny_kontext  # noqa: F401
from ddpo_grpo.tiny.qwen import build_tiny_qwen_image, build_tiny_qwen_image_edit, build_tiny_qwen_image_edit_plus  # noqa: F401
from ddpo_grpo.tiny.sd import build_tiny_ip2p, build_tiny_sd, build_tiny_sd3  # noqa: F401
from ddpo_grpo.tiny.sdxl import build_tiny_sdxl  # noqa: F401
from ddpo_grpo.tiny.wan import build_tiny_wan, build_tiny_wan_i2v  # noqa: F401
from ddpo_grpo.tiny.zimage import build_tiny_zimage  # noqa: F401


class TinyDenoiser(ModelMixin, ConfigMixin):
    """A per-frame MLP over ``[B, frames, features]`` conditioned on the timestep and a pooled text embedding.

    ``forward(sample [B, F, D], timestep [B], text_embeds [B, P] | None) -> [B, F, D]``; frames interact only
    through their mean (a stand-in for attention). Made of nn.Linear layers, so the default LoRA targets apply.
    """

    @register_to_config
    def __init__(self, feature_dim: int = 8, hidden_dim: int = 32, text_dim: int = TEXT_HIDDEN):
        super().__init__()
        self.proj_in = torch.nn.Linear(feature_dim, hidden_dim)
        self.time_proj = torch.nn.Linear(hidden_dim, hidden_dim)
        self.text_proj = torch.nn.Linear(text_dim, hidden_dim)
        self.mix = torch.nn.Linear(2 * hidden_dim, hidden_dim)
        self.proj_out = torch.nn.Linear(hidden_dim, feature_dim)

    def _time_embedding(self, timestep: torch.Tensor) -> torch.Tensor:
        """Sinusoidal embedding [B, H] of integer timesteps [B]."""
        half = self.config.hidden_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=timestep.device) / half)  # [H/2]
        angles = timestep.float()[:, None] * freqs[None]  # [B, H/2]
        return torch.cat([angles.sin(), angles.cos()], dim=1)  # [B, H]

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, text_embeds: torch.Tensor | None = None):
        h = self.proj_in(sample)  # [B, F, H]
        h = h + self.time_proj(self._time_embedding(timestep).to(h.dtype))[:, None]  # [B, F, H]
        if text_embeds is not None:
            h = h + self.text_proj(text_embeds.to(h.dtype))[:, None]  # [B, F, H]
        context = h.mean(dim=1, keepdim=True).expand_as(h)  # [B, F, H]
        h = self.mix(torch.nn.functional.silu(torch.cat([h, context], dim=-1)))  # [B, F, H]
        return self.proj_out(torch.nn.functional.silu(h))  # [B, F, D]


def build_tiny_denoiser(path: str | Path, seed: int = 0, frames: int = 16, feature_dim: int = 8, scheduler="ddpm"):
    """Build, save to ``path`` and return a tiny text-conditioned DenoiserPipeline (MDM-like conventions).

    x₀ prediction, cosine β (squaredcos_cap_v2) over 1000 training steps, "linspace" respacing (IDDPM's),
    fixed-small variance, zero text embeddings as the unconditional branch; samples ``[frames, feature_dim]``
    decoded by a SampleNormalizer (mean 0.5·d, std 2 for feature d). ``scheduler="ddim"`` ships the same noise
    schedule as a DDIMScheduler (deterministic at η = 0: the adapter test kit's reference sampler).
    """
    from diffusers import DDIMScheduler, DDPMScheduler
    from transformers import CLIPTextModelWithProjection

    from ddpo_grpo.denoiser_pipeline import DenoiserPipeline, SampleNormalizer

    path = Path(path)
    torch.manual_seed(seed)
    ddpm = DDPMScheduler(
        num_train_timesteps=1000,
        beta_schedule="squaredcos_cap_v2",
        prediction_type="sample",
        variance_type="fixed_small",
        clip_sample=False,
        timestep_spacing="linspace",
    )
    pipe = DenoiserPipeline(
        denoiser=TinyDenoiser(feature_dim=feature_dim),
        scheduler=DDIMScheduler.from_config(ddpm.config) if scheduler == "ddim" else ddpm,
        text_encoder=CLIPTextModelWithProjection(text_config()),
        tokenizer=build_tokenizer(),
        normalizer=SampleNormalizer.from_stats(0.5 * torch.arange(feature_dim), torch.full((feature_dim,), 2.0)),
        sample_shape=[frames, feature_dim],
        text_embedding="pooled",
        uncond="zeros",
        preview="heatmap",
    )
    pipe.save_pretrained(path)
    return pipe


#: `pretrained.tiny` name -> builder(path) (a view of the family specs)
BUILDERS = View(lambda specs: {spec.name: spec.tiny_builder() for spec in specs.values()})


def _kit_builder(spec):
    builder = spec.tiny_builder()
    return functools.partial(builder, **spec.kit_tiny_kwargs) if spec.kit_tiny_kwargs else builder


#: pipeline class with an adapter -> the tiny builder the adapter test kit runs it on (a view of the family specs)
FAMILIES = View(lambda specs: {pipeline: _kit_builder(spec) for pipeline, spec in specs.items()})

__all__ = [
    "BUILDERS",
    "FAMILIES",
    "TEXT_HIDDEN",
    "TOKENIZER_MAX_LENGTH",
    "TinyDenoiser",
    "_char_vocab",
    "build_tokenizer",
]
__all__ += sorted(n for n in dir() if n.startswith("build_tiny_"))
