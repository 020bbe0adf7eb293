"""Adapter for ``StableDiffusionXLPipeline`` (SDXL): UNet2DConditionModel with the DDIM / DDPM kernels.

SDXL is an ε-prediction model; the checkpoints ship an ``EulerDiscreteScheduler``, whose Euler ODE has no Gaussian
transition density. Whatever the shipped scheduler, the policy is the DDIM-η or DDPM kernel of ``policies.diffusion``
on the checkpoint's own noise schedule (a ``DDIMScheduler`` built from its configuration), as DDPO samples SD; the
plain pipeline it is compared with runs that DDIM scheduler too (``reference_scheduler``).

Conditioning (the pipeline's ``encode_prompt`` and ``_get_add_time_ids``):
    embeds / neg_embeds       [B, 77, D1 + D2]  both CLIP encoders' penultimate hidden states, concatenated
    pooled / neg_pooled       [B, P]            the second encoder's projected pooled output ("text_embeds")
    time_ids / neg_time_ids   [B, 6]            original size, crop corner (0, 0), target size = the resolution
An empty negative prompt gives zero embeddings when the pipeline's ``force_zeros_for_empty_prompt`` is set, as there.
CFG is the standard ε̃ = ε(∅) + w·(ε(c) − ε(∅)) (no guidance rescale).

VAE: the SDXL-base VAE overflows in float16 (black / NaN images at 1024 px); its config says ``force_upcast`` and the
pipeline then decodes in float32. ``upcasts_vae`` makes ``sample.vae_dtype = "auto"`` follow that rule: under
``mixed_precision = "fp16"`` the VAE is kept in float32 (a VAE fine-tuned for float16 says ``force_upcast: false``
and stays in float16); ``decode`` casts the latents to the VAE's dtype.
"""

from __future__ import annotations

import torch

from ddpo_grpo.policies.sd import SDPolicy


class SDXLPolicy(SDPolicy):
    """SD's UNet kernels and blocks (``shard_blocks``), with SDXL's conditioning and decoding."""

    upcasts_vae = True  # StableDiffusionXLPipeline decodes a force_upcast VAE in float32 under float16 weights

    def encode_prompts(self, prompts, negative_prompt=""):
        prompts = list(prompts)
        embeds, neg_embeds, pooled, neg_pooled = self.pipeline.encode_prompt(
            prompt=prompts,
            device=self.device,
            num_images_per_prompt=1,
            do_classifier_free_guidance=True,
            negative_prompt=[negative_prompt] * len(prompts) if negative_prompt else None,
        )
        size = (self.resolution, self.resolution)
        encoder_2 = self.pipeline.text_encoder_2
        projection = int(pooled.shape[-1]) if encoder_2 is None else encoder_2.config.projection_dim
        time_ids = self.pipeline._get_add_time_ids(
            size, (0, 0), size, dtype=embeds.dtype, text_encoder_projection_dim=projection
        ).to(self.device)  # [1, 6]
        time_ids = time_ids.expand(len(prompts), -1).clone()  # [B, 6]
        return {
            "embeds": embeds,
            "neg_embeds": neg_embeds,
            "pooled": pooled,
            "neg_pooled": neg_pooled,
            "time_ids": time_ids,
            "neg_time_ids": time_ids.clone(),
        }

    def forward(self, model, latents, timesteps, cond):
        added = {"text_embeds": cond["pooled"], "time_ids": cond["time_ids"]}
        return model(
            latents, timesteps, encoder_hidden_states=cond["embeds"], added_cond_kwargs=added, return_dict=False
        )[0]

    def decode(self, latents):
        """The pipeline's decoding: ``latents · std / scaling + mean`` when the VAE config has latent statistics,
        else ``latents / scaling``."""
        vae = self.pipeline.vae
        z = latents.to(vae.dtype)
        mean, std = vae.config.get("latents_mean"), vae.config.get("latents_std")
        if mean is not None and std is not None:
            mean = torch.tensor(mean).view(1, -1, 1, 1).to(z.device, z.dtype)
            std = torch.tensor(std).view(1, -1, 1, 1).to(z.device, z.dtype)
            z = z * std / vae.config.scaling_factor + mean
        else:
            z = z / vae.config.scaling_factor
        images = vae.decode(z, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)  # [B, 3, H, W]

    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        kwargs = super().pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        if not negative_prompt:  # None: the pipeline's zero embeddings (force_zeros_for_empty_prompt)
            kwargs["negative_prompt"] = None
        return kwargs


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)
from ddpo_grpo.policies.sd import unet_cut  # noqa: E402


def real_cut(shipped: dict, encoders) -> dict:
    """SD's UNet cut; cross-attention over both CLIPs' hidden states, the added condition over the shipped time
    embeddings of the 6 size / crop numbers and the second CLIP's projection."""
    clip_l, clip_g = encoders["text_encoder"], encoders["text_encoder_2"]
    cut = unet_cut(shipped, clip_l.hidden_size + clip_g.hidden_size)
    cut["projection_class_embeddings_input_dim"] = 6 * shipped["addition_time_embed_dim"] + clip_g.projection_dim
    return cut


SPEC = FamilySpec(
    name="sdxl",
    pipeline="StableDiffusionXLPipeline",
    adapter=SDXLPolicy,
    tiny="ddpo_grpo.tiny.sdxl:build_tiny_sdxl",
    checkpoints=(
        Checkpoint(
            "sdxl-base-1.0", recipe="config.sdxl:aesthetic", hub_ids=("stabilityai/stable-diffusion-xl-base-1.0",)
        ),
    ),
    real_cut=real_cut,
)
