"""Tiny Stable Diffusion family pipelines: SD (UNet, DDIM), InstructPix2Pix (8-channel UNet) and SD3 (two CLIP
encoders, no T5), each built from config dicts, saved to ``path`` and returned."""

from __future__ import annotations

from pathlib import Path

import torch

from ddpo_grpo.tiny.common import TEXT_HIDDEN, build_tokenizer, text_config, vae


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
        vae=vae(None),
        text_encoder=CLIPTextModel(text_config()),
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
        vae=vae(0.0),
        text_encoder=CLIPTextModelWithProjection(text_config()),
        tokenizer=tokenizer,
        text_encoder_2=CLIPTextModelWithProjection(text_config()),
        tokenizer_2=tokenizer,
        text_encoder_3=None,
        tokenizer_3=None,
    )
    pipe.save_pretrained(path)
    return pipe
