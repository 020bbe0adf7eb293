"""Tiny, randomly initialised diffusers pipelines built from config dicts (no downloads).

They exist so that the whole loop (sampling, rewards, training, export) runs offline on a laptop CPU
and inside the test suite. Both pipelines share one tokenizer design: a character-level CLIP BPE
vocabulary with no merges, so `CLIPTokenizer` needs no files from a hub.

    build_tiny_sd(path)   -> StableDiffusionPipeline  (UNet2DConditionModel + DDIMScheduler)
    build_tiny_sd3(path)  -> StableDiffusion3Pipeline (SD3Transformer2DModel + FlowMatchEulerDiscreteScheduler,
                             two CLIP text encoders, no T5)

Sizes: latents are 4×(res/4)×(res/4) (a two-level VAE), so a 32-pixel image is an 8×8 latent.
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

import torch

TOKENIZER_MAX_LENGTH = 64  # characters + 2 specials; prompts longer than this are truncated
TEXT_HIDDEN = 32  # CLIP hidden size of each tiny text encoder


def _char_vocab() -> dict[str, int]:
    """Character-level BPE vocabulary: every printable char, alone and as a word ending (`x</w>`)."""
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in string.ascii_lowercase + string.digits + string.punctuation:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    return vocab


def build_tokenizer():
    """A `CLIPTokenizer` over the character vocabulary (its files live in a temporary directory)."""
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
    """Build, save to `path` and return a tiny StableDiffusionPipeline with a DDIM scheduler."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel

    path = Path(path)
    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
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
        beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, clip_sample=False,
        set_alpha_to_one=False, steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=_vae(None), text_encoder=CLIPTextModel(_text_config()), tokenizer=build_tokenizer(),
        unet=unet, scheduler=scheduler, safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    pipe.save_pretrained(path)
    return pipe


def build_tiny_sd3(path: str | Path, seed: int = 0, shift: float = 3.0):
    """Build, save to `path` and return a tiny StableDiffusion3Pipeline (two CLIP encoders, no T5)."""
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
