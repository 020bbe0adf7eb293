"""A tiny Z-Image pipeline: ZImageTransformer2DModel (single-stream, 2 layers + 1 refiner layer each for the
image and caption tokens), a Qwen3 text encoder of 2 layers whose second-to-last hidden states condition it, a
chat template on ``common.build_qwen_tokenizer``, and a 4-channel VAE downsampling 4× (a 32-pixel image is an 8×8
latent, 16 tokens of 2×2 patches). The scheduler has Z-Image's static shift of 3.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ddpo_grpo.tiny.common import TEXT_HIDDEN, build_qwen_tokenizer, qwen_token_id, qwen_vocab_size, vae


def _qwen3_encoder():
    from transformers import Qwen3Config, Qwen3Model

    config = Qwen3Config(
        vocab_size=qwen_vocab_size(),
        hidden_size=TEXT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=1024,
        bos_token_id=qwen_token_id("<|endoftext|>"),
        eos_token_id=qwen_token_id("<|im_end|>"),
        pad_token_id=qwen_token_id("<|endoftext|>"),
    )
    return Qwen3Model(config)


def build_tiny_zimage(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny ZImagePipeline."""
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel

    torch.manual_seed(seed)
    transformer = ZImageTransformer2DModel(
        all_patch_size=(2,),
        all_f_patch_size=(1,),
        in_channels=4,
        dim=32,
        n_layers=2,
        n_refiner_layers=1,
        n_heads=2,
        n_kv_heads=2,
        cap_feat_dim=TEXT_HIDDEN,
        axes_dims=[8, 4, 4],  # sums to the head dim (32 / 2)
        axes_lens=[1024, 64, 64],
    )
    pipe = ZImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=vae(shift_factor=0.1, scaling_factor=0.5),
        text_encoder=_qwen3_encoder(),
        tokenizer=build_qwen_tokenizer(),
        transformer=transformer,
    )
    pipe.save_pretrained(Path(path))
    return pipe
