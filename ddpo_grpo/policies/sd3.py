"""Adapter for ``StableDiffusion3Pipeline`` (SD3 / SD3.5): SD3Transformer2DModel with the flow kernels."""

from __future__ import annotations

from ddpo_grpo.policies.flow import FlowPolicy


class SD3Policy(FlowPolicy):
    denoiser_attr = "transformer"
    lora_layers_kwarg = "transformer_lora_layers"
    default_lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
    shard_blocks = ("JointTransformerBlock",)

    @property
    def resolution_multiple(self) -> int:
        """The VAE factor × the transformer's patch size (a latent side must split into whole patches)."""
        return self.vae_scale_factor * int(self.denoiser.config.patch_size)

    def encode_prompts(self, prompts, negative_prompt=""):
        prompts = list(prompts)
        negative = [negative_prompt] * len(prompts)
        embeds, neg_embeds, pooled, neg_pooled = self.pipeline.encode_prompt(
            prompt=prompts,
            prompt_2=prompts,
            prompt_3=prompts,
            device=self.device,
            num_images_per_prompt=1,
            do_classifier_free_guidance=True,
            negative_prompt=negative,
            negative_prompt_2=negative,
            negative_prompt_3=negative,
            max_sequence_length=self.max_sequence_length,
        )
        # embeds: [B, L, D]; pooled: [B, P]
        return {"embeds": embeds, "neg_embeds": neg_embeds, "pooled": pooled, "neg_pooled": neg_pooled}

    def forward(self, model, latents, timesteps, cond):
        return model(
            hidden_states=latents,
            timestep=timesteps,
            encoder_hidden_states=cond["embeds"],
            pooled_projections=cond["pooled"],
            return_dict=False,
        )[0]

    def decode(self, latents):
        vae = self.pipeline.vae
        shift = vae.config.shift_factor or 0.0
        images = vae.decode((latents.to(vae.dtype) / vae.config.scaling_factor) + shift, return_dict=False)[0]
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
            max_sequence_length=self.max_sequence_length,
        )


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)


def real_cut(shipped: dict, encoders) -> dict:
    """1 joint block of 2 heads (of the shipped head width); the text widths of the cut encoders: T5's for the joint
    sequence, the two CLIPs' projections together for the pooled vector."""
    heads = 2
    pooled = encoders["text_encoder"].projection_dim + encoders["text_encoder_2"].projection_dim
    return dict(
        num_layers=1,
        num_attention_heads=heads,
        caption_projection_dim=heads * shipped["attention_head_dim"],  # the joint blocks' width
        joint_attention_dim=encoders["text_encoder_3"].d_model,
        pooled_projection_dim=pooled,
    )


SPEC = FamilySpec(
    name="sd3",
    pipeline="StableDiffusion3Pipeline",
    adapter=SD3Policy,
    tiny="ddpo_grpo.tiny.sd:build_tiny_sd3",
    checkpoints=(
        Checkpoint("sd3.5-medium", recipe="config.sd3:pickscore", hub_ids=("stabilityai/stable-diffusion-3.5-medium",)),
    ),
    real_cut=real_cut,
    geometry="sd3",
)
