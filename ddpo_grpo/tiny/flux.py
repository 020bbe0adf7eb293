"""Tiny FLUX.1 and FLUX.1 Kontext pipelines (FluxTransformer2DModel, CLIP + T5 text encoders, a 4-channel VAE).

The VAE downsamples 4× with 4 latent channels, and FLUX packs 2×2 latent patches into tokens of 16 channels,
so a 32-pixel image is an 8×8 latent, 16 image tokens. The transformer is guidance-distilled (``guidance_embeds``,
FLUX.1-dev's kind) with one double-stream and one single-stream block. The scheduler has FLUX.1's dynamic shift.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ddpo_grpo.tiny.common import (
    TEXT_HIDDEN,
    build_t5_tokenizer,
    build_tokenizer,
    t5_vocab_size,
    text_config,
    vae,
)


def _t5_encoder():
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=t5_vocab_size(),
        d_model=TEXT_HIDDEN,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return T5EncoderModel(config)


def _components(seed: int) -> dict:
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextModel

    torch.manual_seed(seed)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=16,  # 4 latent channels × a 2×2 patch
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=TEXT_HIDDEN,  # T5's hidden states
        pooled_projection_dim=TEXT_HIDDEN,  # CLIP's pooled output
        guidance_embeds=True,
        axes_dims_rope=(2, 2, 4),  # sums to the head dim
    )
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
    )
    return dict(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae(shift_factor=0.1, scaling_factor=0.5),
        text_encoder=CLIPTextModel(text_config()),
        tokenizer=build_tokenizer(),
        text_encoder_2=_t5_encoder(),
        tokenizer_2=build_t5_tokenizer(),
    )


def build_tiny_flux(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny FluxPipeline (guidance-distilled, dynamic shift)."""
    from diffusers import FluxPipeline

    pipe = FluxPipeline(**_components(seed), image_encoder=None, feature_extractor=None)
    pipe.save_pretrained(Path(path))
    return pipe


def build_tiny_kontext(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny FluxKontextPipeline (the source image's tokens join the sequence)."""
    from diffusers import FluxKontextPipeline

    pipe = FluxKontextPipeline(**_components(seed), image_encoder=None, feature_extractor=None)
    pipe.save_pretrained(Path(path))
    return pipe
