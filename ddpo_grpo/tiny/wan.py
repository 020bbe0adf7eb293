"""Tiny Wan video pipelines: text-to-video (Wan 2.1's layout, one transformer) and image-to-video (Wan 2.2 A14B's
layout: two experts, ``transformer`` for high noise and ``transformer_2`` for low noise, switched at
``boundary_ratio``, and no CLIP image encoder).

WanTransformer3DModel of 2 blocks, a UMT5 text encoder of 2 layers over ``common.build_t5_tokenizer``, and the
Wan VAE (``AutoencoderKLWan``: 8× spatial, 4× temporal downsampling, 4 latent channels), so a 5-frame 32-pixel
video is a (4, 2, 4, 4) latent. The scheduler is the released Wan 2.1 checkpoints' own, as shipped (UniPC multistep with
flow sigmas, flow_shift 3: ``config/model_configs/wan2.1-t2v-1.3b/scheduler``); ``scheduler="euler"`` ships
FlowMatchEulerDiscreteScheduler with the same shift instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ddpo_grpo.tiny.common import TEXT_HIDDEN, build_t5_tokenizer, t5_vocab_size, video_vae_kwargs

LATENT_CHANNELS = 4
#: the scheduler configuration Wan-AI/Wan2.1-T2V-1.3B-Diffusers ships
SHIPPED_SCHEDULER = (
    Path(__file__).resolve().parents[2]
    / "config"
    / "model_configs"
    / "wan2.1-t2v-1.3b"
    / "scheduler"
    / "scheduler_config.json"
)


def _umt5_encoder():
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(
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
    return UMT5EncoderModel(config)


def _transformer(in_channels: int):
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=in_channels,
        out_channels=LATENT_CHANNELS,
        text_dim=TEXT_HIDDEN,
        freq_dim=16,
        ffn_dim=32,
        num_layers=2,
        rope_max_seq_len=32,
    )


def _scheduler(kind: str):
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    shipped = json.loads(SHIPPED_SCHEDULER.read_text())
    if kind == "unipc":
        return UniPCMultistepScheduler.from_config(shipped)
    return FlowMatchEulerDiscreteScheduler(shift=shipped["flow_shift"])


def build_tiny_wan(path: str | Path, seed: int = 0, scheduler: str = "unipc"):
    """Build, save to ``path`` and return a tiny WanPipeline (text-to-video, one transformer)."""
    from diffusers import AutoencoderKLWan, WanPipeline

    torch.manual_seed(seed)
    pipe = WanPipeline(
        tokenizer=build_t5_tokenizer(),
        text_encoder=_umt5_encoder(),
        vae=AutoencoderKLWan(**video_vae_kwargs(LATENT_CHANNELS)),
        scheduler=_scheduler(scheduler),
        transformer=_transformer(LATENT_CHANNELS),
    )
    pipe.save_pretrained(Path(path))
    return pipe


def build_tiny_wan_i2v(path: str | Path, seed: int = 0, scheduler: str = "unipc", boundary_ratio: float = 0.9):
    """Build, save to ``path`` and return a tiny WanImageToVideoPipeline with two experts (Wan 2.2 A14B's layout).

    The transformers take the noisy latent, a 4-channel first-frame mask and the conditioning video's latent
    (source image, then zeros), concatenated on channels: 2 × 4 + 4 = 12 input channels.
    """
    from diffusers import AutoencoderKLWan, WanImageToVideoPipeline

    torch.manual_seed(seed)
    in_channels = 2 * LATENT_CHANNELS + 4
    pipe = WanImageToVideoPipeline(
        tokenizer=build_t5_tokenizer(),
        text_encoder=_umt5_encoder(),
        vae=AutoencoderKLWan(**video_vae_kwargs(LATENT_CHANNELS)),
        scheduler=_scheduler(scheduler),
        image_processor=None,
        image_encoder=None,
        transformer=_transformer(in_channels),
        transformer_2=_transformer(in_channels),
        boundary_ratio=boundary_ratio,
    )
    pipe.save_pretrained(Path(path))
    return pipe
