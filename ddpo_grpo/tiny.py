"""Tiny, randomly initialised diffusers pipelines built from config dicts (no downloads).

They exist so that the whole loop (sampling, rewards, training, export) runs offline on a laptop CPU
and inside the test suite. Both pipelines share one tokenizer design: a character-level CLIP BPE
vocabulary with no merges, so ``CLIPTokenizer`` needs no files from a hub.

    build_tiny_sd(path)   -> StableDiffusionPipeline  (UNet2DConditionModel + DDIMScheduler)
    build_tiny_ip2p(path) -> StableDiffusionInstructPix2PixPipeline (the SD UNet with 8 input channels: noisy
                             latent + source-image latent)
    build_tiny_sd3(path)  -> StableDiffusion3Pipeline (SD3Transformer2DModel + FlowMatchEulerDiscreteScheduler,
                             two CLIP text encoders, no T5)
    build_tiny_denoiser(path) -> ddpo_grpo.pipelines.DenoiserPipeline (``TinyDenoiser``, an MLP over
                             [B, frames, features] predicting x₀ as MDM does, cosine-β DDPMScheduler, one
                             projected CLIP text encoder, a SampleNormalizer, heatmap previews)

Sizes: latents are 4×(res/4)×(res/4) (a two-level VAE), so a 32-pixel image is an 8×8 latent; the tiny
denoiser's samples are 16 frames × 8 features (``sample.resolution`` does not apply to it).
``BUILDERS`` maps the names of ``pretrained.tiny`` to these builders.
"""

from __future__ import annotations

import json
import math
import string
import tempfile
from pathlib import Path

import torch
from diffusers import ModelMixin
from diffusers.configuration_utils import ConfigMixin, register_to_config

TOKENIZER_MAX_LENGTH = 64  # characters + 2 specials; prompts longer than this are truncated
TEXT_HIDDEN = 32  # CLIP hidden size of each tiny text encoder


def _char_vocab() -> dict[str, int]:
    """Character-level BPE vocabulary: every printable char, alone and as a word ending (``x</w>``)."""
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in string.ascii_lowercase + string.digits + string.punctuation:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    return vocab


def build_tokenizer():
    """A ``CLIPTokenizer`` over the character vocabulary (its files live in a temporary directory)."""
    from transformers import CLIPTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        vocab, merges = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vocab.write_text(json.dumps(_char_vocab()))
        merges.write_text("#version: 0.2\n")
        return CLIPTokenizer(str(vocab), str(merges), model_max_length=TOKENIZER_MAX_LENGTH)


def _text_config():
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=len(_char_vocab()),
        hidden_size=TEXT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=TOKENIZER_MAX_LENGTH,
        projection_dim=TEXT_HIDDEN,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )


def _vae(shift_factor: float | None):
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 3,
        up_block_types=["UpDecoderBlock2D"] * 3,
        block_out_channels=[8, 16, 16],
        latent_channels=4,
        norm_num_groups=8,
        layers_per_block=1,
        sample_size=32,
        scaling_factor=1.0,
        shift_factor=shift_factor,
    )


def build_tiny_sd(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny StableDiffusionPipeline with a DDIM scheduler."""
    from diffusers import StableDiffusionPipeline

    return _build_tiny_unet_pipeline(StableDiffusionPipeline, path, seed, in_channels=4)


def build_tiny_ip2p(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny StableDiffusionInstructPix2PixPipeline (8-channel UNet, DDIM)."""
    from diffusers import StableDiffusionInstructPix2PixPipeline

    # 8 input channels: the noisy latent and the source image's latent, concatenated on channels
    return _build_tiny_unet_pipeline(StableDiffusionInstructPix2PixPipeline, path, seed, in_channels=8)


def _build_tiny_unet_pipeline(pipeline_class, path: str | Path, seed: int, in_channels: int):
    """The SD-family tiny pipeline (UNet, DDIM, the tiny VAE and CLIP text encoder) of ``pipeline_class``."""
    from diffusers import DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextModel

    path = Path(path)
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=in_channels,
        out_channels=4,
        block_out_channels=(16, 32),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=TEXT_HIDDEN,
        norm_num_groups=8,
        attention_head_dim=4,
    )
    scheduler = DDIMScheduler(
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = pipeline_class(
        vae=_vae(None),
        text_encoder=CLIPTextModel(_text_config()),
        tokenizer=build_tokenizer(),
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.save_pretrained(path)
    return pipe


def build_tiny_sd3(path: str | Path, seed: int = 0, shift: float = 3.0):
    """Build, save to ``path`` and return a tiny StableDiffusion3Pipeline (two CLIP encoders, no T5)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection

    path = Path(path)
    torch.manual_seed(seed)
    transformer = SD3Transformer2DModel(
        sample_size=8,
        patch_size=2,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=2 * TEXT_HIDDEN,  # the two CLIP encoders' hidden states, concatenated
        caption_projection_dim=16,
        pooled_projection_dim=2 * TEXT_HIDDEN,
    )
    tokenizer = build_tokenizer()
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=shift),
        vae=_vae(0.0),
        text_encoder=CLIPTextModelWithProjection(_text_config()),
        tokenizer=tokenizer,
        text_encoder_2=CLIPTextModelWithProjection(_text_config()),
        tokenizer_2=tokenizer,
        text_encoder_3=None,
        tokenizer_3=None,
    )
    pipe.save_pretrained(path)
    return pipe


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


def build_tiny_denoiser(path: str | Path, seed: int = 0, frames: int = 16, feature_dim: int = 8):
    """Build, save to ``path`` and return a tiny text-conditioned DenoiserPipeline (MDM-like conventions).

    x₀ prediction, cosine β (squaredcos_cap_v2) over 1000 training steps, "linspace" respacing (IDDPM's),
    fixed-small variance, zero text embeddings as the unconditional branch; samples ``[frames, feature_dim]``
    decoded by a SampleNormalizer (mean 0.5·d, std 2 for feature d).
    """
    from diffusers import DDPMScheduler
    from transformers import CLIPTextModelWithProjection

    from ddpo_grpo.pipelines import DenoiserPipeline, SampleNormalizer

    path = Path(path)
    torch.manual_seed(seed)
    scheduler = DDPMScheduler(
        num_train_timesteps=1000,
        beta_schedule="squaredcos_cap_v2",
        prediction_type="sample",
        variance_type="fixed_small",
        clip_sample=False,
        timestep_spacing="linspace",
    )
    pipe = DenoiserPipeline(
        denoiser=TinyDenoiser(feature_dim=feature_dim),
        scheduler=scheduler,
        text_encoder=CLIPTextModelWithProjection(_text_config()),
        tokenizer=build_tokenizer(),
        normalizer=SampleNormalizer.from_stats(0.5 * torch.arange(feature_dim), torch.full((feature_dim,), 2.0)),
        sample_shape=[frames, feature_dim],
        text_embedding="pooled",
        uncond="zeros",
        preview="heatmap",
    )
    pipe.save_pretrained(path)
    return pipe


#: `pretrained.tiny` name -> builder(path)
BUILDERS = {"sd3": build_tiny_sd3, "sd": build_tiny_sd, "denoiser": build_tiny_denoiser, "ip2p": build_tiny_ip2p}
