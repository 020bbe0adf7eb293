"""Tiny Qwen-Image, Qwen-Image-Edit and Qwen-Image-Edit-Plus pipelines.

A QwenImageTransformer2DModel (2 blocks), the Qwen-Image VAE (``AutoencoderKLQwenImage``, a causal video VAE used
with one frame; 8× spatial downsampling, 4 latent channels) and a Qwen2.5-VL text encoder of 2 layers with a
1-block vision tower, over ``common.build_qwen_tokenizer``'s byte-level characters. The editing pipelines also
carry a Qwen2-VL processor whose image processor keeps source images at ≤ 56×56 pixels (4 vision tokens), so the
vision tower stays cheap. A 32-pixel image is a 4×4 latent, 4 image tokens (packed 2×2 patches).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ddpo_grpo.tiny.common import TEXT_HIDDEN, build_qwen_tokenizer, qwen_token_id, qwen_vocab_size, video_vae_kwargs

LATENT_CHANNELS = 4
#: the tiny processor's pixel budget for source images (the real one's is 28·28·1280)
MAX_PIXELS = 56 * 56


def qwen_vl_text_encoder():
    """A tiny ``Qwen2_5_VLForConditionalGeneration`` (text: 2 layers of width 32; vision: 1 block of width 16)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=qwen_vocab_size(),
            hidden_size=TEXT_HIDDEN,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
            bos_token_id=qwen_token_id("<|endoftext|>"),
            eos_token_id=qwen_token_id("<|im_end|>"),
        ),
        vision_config=dict(
            depth=1,
            hidden_size=16,
            intermediate_size=32,
            num_heads=2,
            out_hidden_size=TEXT_HIDDEN,
            fullatt_block_indexes=[0],
        ),
        image_token_id=qwen_token_id("<|image_pad|>"),
        video_token_id=qwen_token_id("<|video_pad|>"),
        vision_start_token_id=qwen_token_id("<|vision_start|>"),
        vision_end_token_id=qwen_token_id("<|vision_end|>"),
    )
    return Qwen2_5_VLForConditionalGeneration(config)


def qwen_vl_processor(tokenizer):
    """A ``Qwen2VLProcessor`` whose image processor resizes sources to at most ``MAX_PIXELS`` pixels."""
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor

    image_processor = Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=MAX_PIXELS)
    video_processor = Qwen2VLVideoProcessor(min_pixels=28 * 28, max_pixels=MAX_PIXELS)  # required, never used
    return Qwen2VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor)


def _components(seed: int) -> dict:
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel

    torch.manual_seed(seed)
    transformer = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=4 * LATENT_CHANNELS,
        out_channels=LATENT_CHANNELS,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=TEXT_HIDDEN,
        axes_dims_rope=(2, 2, 4),
    )
    # Qwen-Image's scheduler: exponential dynamic shift between (256 tokens, 0.5) and (8192, 0.9)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=1.0,
        use_dynamic_shifting=True,
        base_shift=0.5,
        max_shift=0.9,
        base_image_seq_len=256,
        max_image_seq_len=8192,
        shift_terminal=0.02,
        time_shift_type="exponential",
    )
    return dict(
        transformer=transformer,
        scheduler=scheduler,
        vae=AutoencoderKLQwenImage(**video_vae_kwargs(LATENT_CHANNELS)),
        text_encoder=qwen_vl_text_encoder(),
        tokenizer=build_qwen_tokenizer(),
    )


def build_tiny_qwen_image(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny QwenImagePipeline."""
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline(**_components(seed))
    pipe.save_pretrained(Path(path))
    return pipe


def build_tiny_qwen_image_edit(path: str | Path, seed: int = 0, plus: bool = False):
    """Build, save to ``path`` and return a tiny QwenImageEditPipeline (``plus``: QwenImageEditPlusPipeline)."""
    from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline

    components = _components(seed)
    pipeline_class = QwenImageEditPlusPipeline if plus else QwenImageEditPipeline
    pipe = pipeline_class(**components, processor=qwen_vl_processor(components["tokenizer"]))
    pipe.save_pretrained(Path(path))
    return pipe


def build_tiny_qwen_image_edit_plus(path: str | Path, seed: int = 0):
    """Build, save to ``path`` and return a tiny QwenImageEditPlusPipeline (one or several source images)."""
    return build_tiny_qwen_image_edit(path, seed, plus=True)
