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
from ddpo_grpo.policies.family import FamilySpec  # noqa: E402 (the spec block closes the adapter file)

SPEC = FamilySpec(
    name="sd", pipeline="StableDiffusionPipeline", adapter=SDPolicy, tiny="ddpo_grpo.tiny.sd:build_tiny_sd"
)
