"""A tiny SDXL pipeline: a UNet with SDXL's "text_time" added conditioning (pooled text embedding + the six
``add_time_ids`` — original size, crop corner, target size — each embedded in 8 dimensions), two CLIP text encoders
(the second with a projection, whose pooled output conditions the UNet) and the 4× VAE. It ships SDXL's
``EulerDiscreteScheduler`` configuration, as the real checkpoints do (the policy samples with DDIM / DDPM on its
noise schedule)."""

from __future__ import annotations

from pathlib import Path

import torch

from ddpo_grpo.tiny.common import TEXT_HIDDEN, build_tokenizer, text_config, vae

TIME_EMBED = 8  # addition_time_embed_dim


def build_tiny_sdxl(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny StableDiffusionXLPipeline (Euler scheduler config, as shipped)."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(16, 32),
        layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=2 * TEXT_HIDDEN,  # both encoders' hidden states, concatenated
        norm_num_groups=8,
        attention_head_dim=4,
        addition_embed_type="text_time",
        addition_time_embed_dim=TIME_EMBED,
        projection_class_embeddings_input_dim=6 * TIME_EMBED + TEXT_HIDDEN,  # time ids + pooled text
        transformer_layers_per_block=1,
        use_linear_projection=True,
    )
    scheduler = EulerDiscreteScheduler(
        beta_schedule="scaled_linear",
        beta_start=0.00085,
        beta_end=0.012,
        steps_offset=1,
        timestep_spacing="leading",
    )
    pipe = StableDiffusionXLPipeline(
        vae=vae(None, scaling_factor=0.5),
        text_encoder=CLIPTextModel(text_config()),
        text_encoder_2=CLIPTextModelWithProjection(text_config()),
        tokenizer=build_tokenizer(),
        tokenizer_2=build_tokenizer(),
        unet=unet,
        scheduler=scheduler,
        force_zeros_for_empty_prompt=True,
        add_watermarker=False,
    )
    pipe.save_pretrained(Path(path))
    return pipe
