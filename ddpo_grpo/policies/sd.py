"""Adapter for ``StableDiffusionPipeline`` (SD 1.x / 2.x): UNet2DConditionModel with the DDIM / DDPM kernels."""

from __future__ import annotations

from ddpo_grpo.policies.diffusion import DiffusionPolicy


class SDPolicy(DiffusionPolicy):
    denoiser_attr = "unet"
    lora_layers_kwarg = "unet_lora_layers"
    default_lora_targets = ("to_q", "to_k", "to_v", "to_out.0")
    #: the UNet's resolution levels (each holds its resnets and attention transformers)
    shard_blocks = (
        "CrossAttnDownBlock2D",
        "DownBlock2D",
        "UNetMidBlock2DCrossAttn",
        "CrossAttnUpBlock2D",
        "UpBlock2D",
    )

    def encode_prompts(self, prompts, negative_prompt=""):
        embeds, neg_embeds = self.pipeline.encode_prompt(
            list(prompts), self.device, 1, True, negative_prompt=[negative_prompt] * len(prompts)
        )
        return {"embeds": embeds, "neg_embeds": neg_embeds}  # [B, L, D] each

    def forward(self, model, latents, timesteps, cond):
        return model(latents, timesteps, encoder_hidden_states=cond["embeds"], return_dict=False)[0]

    def decode(self, latents):
        vae = self.pipeline.vae
        images = vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)  # [B, 3, H, W]

    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        prompts = [r["prompt"] for r in rows]
        return dict(
            prompt=prompts,
            negative_prompt=[negative_prompt] * len(prompts),
            guidance_scale=guidance_scale,
            height=self.resolution,
            width=self.resolution,
            latents=latents,
            eta=0.0,
        )


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)


def unet_cut(shipped: dict, cross_attention_dim: int) -> dict:
    """A UNet at the shipped number of levels (the latent's factor) with 32 / 64 channels and heads of 32 channels,
    1 resnet and 1 transformer layer per level; the cut text encoders' width for cross-attention."""
    levels = len(shipped["block_out_channels"])
    channels = [32 * min(2**i, 2) for i in range(levels)]
    cut = dict(
        block_out_channels=channels,
        layers_per_block=1,
        attention_head_dim=[c // 32 for c in channels],  # (diffusers' legacy name for the head count)
        cross_attention_dim=cross_attention_dim,
    )
    if isinstance(shipped.get("transformer_layers_per_block"), list):
        cut["transformer_layers_per_block"] = [1] * levels
    return cut


def real_cut(shipped: dict, encoders) -> dict:
    """``unet_cut`` over the cut CLIP's hidden states."""
    return unet_cut(shipped, encoders["text_encoder"].hidden_size)


SPEC = FamilySpec(
    name="sd",
    pipeline="StableDiffusionPipeline",
    adapter=SDPolicy,
    tiny="ddpo_grpo.tiny.sd:build_tiny_sd",
    checkpoints=(
        Checkpoint(
            "sd1.5",
            recipe="config.sd:compressibility",
            hub_ids=("stable-diffusion-v1-5/stable-diffusion-v1-5", "runwayml/stable-diffusion-v1-5"),
        ),
    ),
    real_cut=real_cut,
)
