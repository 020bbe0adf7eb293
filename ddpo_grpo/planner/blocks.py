"""The inputs of one denoiser block, as tensors on the meta device: what the planner runs a block's forward on to
count the activations it keeps (``activations.py``).

One builder per block class (the adapters' ``shard_blocks``), from the block's width d (heads × head dim of the
denoiser's config) and the sample's tokens (``geometry.py``): the image (or video) stream [B, N_img, d], the text
stream [B, N_txt, d] (already projected to d by the denoiser's context embedder), the time embedding and the
rotary embedding in the layout each block takes. A block class without a builder is not modelled (the planner
says so rather than guess).
"""

from __future__ import annotations

import torch


def _width(config) -> tuple[int, int, int]:
    heads, head_dim = int(config["num_attention_heads"]), int(config["attention_head_dim"])
    return heads, head_dim, heads * head_dim


def _flux(config, b, n_img, n_txt, dtype, meta):
    _, head_dim, d = _width(config)
    rope = (torch.empty(n_img + n_txt, head_dim, **meta), torch.empty(n_img + n_txt, head_dim, **meta))
    return dict(
        hidden_states=torch.empty(b, n_img, d, dtype=dtype, **meta),
        encoder_hidden_states=torch.empty(b, n_txt, d, dtype=dtype, **meta),
        temb=torch.empty(b, d, dtype=dtype, **meta),
        image_rotary_emb=rope,
    )


def _sd3(config, b, n_img, n_txt, dtype, meta):
    _, _, d = _width(config)
    return dict(
        hidden_states=torch.empty(b, n_img, d, dtype=dtype, **meta),
        encoder_hidden_states=torch.empty(
            b, n_txt, int(config.get("caption_projection_dim") or d), dtype=dtype, **meta
        ),
        temb=torch.empty(b, d, dtype=dtype, **meta),
    )


def _qwen(config, b, n_img, n_txt, dtype, meta):
    _, head_dim, d = _width(config)
    freqs = (
        torch.empty(n_img, head_dim // 2, dtype=torch.complex64, **meta),
        torch.empty(n_txt, head_dim // 2, dtype=torch.complex64, **meta),
    )
    return dict(
        hidden_states=torch.empty(b, n_img, d, dtype=dtype, **meta),
        encoder_hidden_states=torch.empty(b, n_txt, d, dtype=dtype, **meta),
        encoder_hidden_states_mask=None,
        temb=torch.empty(b, d, dtype=dtype, **meta),
        image_rotary_emb=freqs,
    )


#: Wan 2.1 I2V's image context: the CLIP ViT-H/14 image encoder's 16 × 16 + 1 tokens, placed before the text in the
#: cross-attention's stream (its blocks have ``added_kv_proj_dim``; the FLF2V variant, ``pos_embed_seq_len``, two images)
WAN_IMAGE_TOKENS = 257


def _wan(config, b, n_img, n_txt, dtype, meta):
    _, head_dim, d = _width(config)
    if config.get("added_kv_proj_dim"):
        n_txt += WAN_IMAGE_TOKENS * (2 if config.get("pos_embed_seq_len") else 1)
    rope = (torch.empty(1, n_img, 1, head_dim, **meta), torch.empty(1, n_img, 1, head_dim, **meta))
    return dict(
        hidden_states=torch.empty(b, n_img, d, dtype=dtype, **meta),
        encoder_hidden_states=torch.empty(b, n_txt, d, dtype=dtype, **meta),
        temb=torch.empty(b, 6, d, dtype=dtype, **meta),
        rotary_emb=rope,
    )


#: block class name -> builder(denoiser config, batch, image tokens, text tokens, dtype, meta kwargs) -> kwargs
BUILDERS = {
    "FluxTransformerBlock": _flux,
    "FluxSingleTransformerBlock": _flux,
    "JointTransformerBlock": _sd3,
    "QwenImageTransformerBlock": _qwen,
    "WanTransformerBlock": _wan,
}


def block_inputs(block, config, batch: int, image_tokens: int, text_tokens: int, dtype) -> dict | None:
    """Keyword inputs of ``block`` on the meta device (streams requiring grad, as inside a trained denoiser), or None
    when its class has no builder."""
    builder = BUILDERS.get(type(block).__name__)
    if builder is None:
        return None
    kwargs = builder(dict(config), batch, image_tokens, text_tokens, dtype, {"device": "meta"})
    for name in ("hidden_states", "encoder_hidden_states"):
        kwargs[name].requires_grad_(True)
    return kwargs


#: the UNets' text length (CLIP's 77 positions)
UNET_TEXT_TOKENS = 77


def unet_inputs(denoiser, batch: int, latent_side: int, dtype) -> dict | None:
    """Keyword inputs of a whole ``UNet2DConditionModel`` on the meta device (its blocks have no builder: the UNet's
    forward is counted whole, ``activations.count_whole``): the noisy latent [B, C, h, w] (not requiring grad, as in
    training), the timesteps, the text [B, 77, cross_attention_dim], and SDXL's added conditions (pooled text and the
    six size ids); None for another class."""
    if type(denoiser).__name__ != "UNet2DConditionModel":
        return None
    c, meta = denoiser.config, {"device": "meta"}
    kwargs = dict(
        sample=torch.empty(batch, c.in_channels, latent_side, latent_side, dtype=dtype, **meta),
        timestep=torch.empty(batch, **meta),
        encoder_hidden_states=torch.empty(batch, UNET_TEXT_TOKENS, c.cross_attention_dim, dtype=dtype, **meta),
    )
    if c.addition_embed_type == "text_time":  # SDXL: pooled text + (original size, crop, target size)
        pooled = c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim
        kwargs["added_cond_kwargs"] = {
            "text_embeds": torch.empty(batch, pooled, dtype=dtype, **meta),
            "time_ids": torch.empty(batch, 6, dtype=dtype, **meta),
        }
    return kwargs
