"""Adapter for ``FluxPipeline`` (FLUX.1 dev / schnell): FluxTransformer2DModel with the flow kernels.

Latents. The rollout stores the VAE latent unpacked, [B, C, h, w] (C = 16 for FLUX.1, h = H / 8); the transformer
sees it packed into 2×2 patches, [B, h·w/4, 4C] tokens (the pipeline's own ``_pack_latents``), with image ids
(0, row, col) per token and zero text ids, and its output is unpacked back. Packing is a permutation, so the
kernels' per-element math and the log-prob mean are the same in either layout.

Conditioning (``encode_prompts``, the pipeline's ``encode_prompt``):
    embeds / neg_embeds   [B, L, D]  T5 hidden states (L = ``sample.max_sequence_length``)
    pooled / neg_pooled   [B, P]     CLIP's pooled output
    guidance              [B]        the guidance-embedding input of a guidance-distilled transformer (FLUX.1-dev,
                                     ``sample.distilled_guidance``; absent for schnell), one pass per step
The two guidances, as the pipeline has them: the distilled one is an input of a single pass; true classifier-free
guidance (``sample.guidance_scale`` > 1, the pipeline's ``true_cfg_scale``) adds the negative prompt's pass,
v = v(∅) + w·(v(c) − v(∅)). FLUX.1 recipes train with the distilled guidance alone (guidance_scale 1).

Schedule: the pipeline's σ grid ``linspace(1, 1/T, T)`` (``flow.linear_sigmas``) under the scheduler's dynamic time
shift, μ linear in the image token count (h/2)·(w/2) (FLUX.1 §: resolution-dependent shift); the transformer
takes t = σ (the rollout's timestep 1000·σ divided by 1000, as the pipeline does).
"""

from __future__ import annotations

import torch

from ddpo_grpo.policies.flow import FlowPolicy, linear_sigmas

#: the FLUX pipelines' default image side in latent pixels (128 latent × 8 = 1024 px)
DEFAULT_SAMPLE_SIZE = 128


class FluxPolicy(FlowPolicy):
    denoiser_attr = "transformer"
    lora_layers_kwarg = "transformer_lora_layers"
    # the attention projections of the double-stream blocks (image and text streams) and of the single-stream ones
    default_lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
    shard_blocks = ("FluxTransformerBlock", "FluxSingleTransformerBlock")

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def resolution_multiple(self) -> int:
        """The VAE factor × the 2×2 packing."""
        return 2 * self.vae_scale_factor

    @classmethod
    def native_resolution(cls, pipeline) -> int:
        return DEFAULT_SAMPLE_SIZE * 2 ** (len(pipeline.vae.config.block_out_channels) - 1)

    def latent_shape(self) -> tuple[int, ...]:
        side = self.resolution // self.vae_scale_factor
        return (self.denoiser.config.in_channels // 4, side, side)

    def image_seq_len(self) -> int:
        _, h, w = self.latent_shape()
        return (h // 2) * (w // 2)

    def pipeline_sigmas(self, num_steps):
        return linear_sigmas(num_steps)

    # ---- conditioning -----------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        embeds, pooled, _ = self.pipeline.encode_prompt(
            prompt=prompts, prompt_2=prompts, device=self.device, max_sequence_length=self.max_sequence_length
        )
        return embeds, pooled  # [B, L, D], [B, P]

    def encode_prompts(self, prompts, negative_prompt=""):
        prompts = list(prompts)
        embeds, pooled = self._encode(prompts)
        neg_embeds, neg_pooled = self._encode([negative_prompt])  # one negative for the batch
        b = len(prompts)
        cond = {
            "embeds": embeds,
            "pooled": pooled,
            "neg_embeds": neg_embeds.expand(b, -1, -1).clone(),
            "neg_pooled": neg_pooled.expand(b, -1).clone(),
        }
        if self.denoiser.config.guidance_embeds:
            cond["guidance"] = torch.full((b,), float(self.settings.distilled_guidance), device=self.device)
        return cond

    # ---- denoiser -------------------------------------------------------------------------------
    def pack(self, latents: torch.Tensor) -> torch.Tensor:
        """[B, C, h, w] -> [B, h·w/4, 4C] tokens (the pipeline's own packing)."""
        b, c, h, w = latents.shape
        return self.pipeline._pack_latents(latents, b, c, h, w)

    def unpack(self, tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """[B, h·w/4, 4C] tokens -> [B, C, h, w]."""
        factor = self.vae_scale_factor
        return self.pipeline._unpack_latents(tokens, h * factor, w * factor, factor)

    def image_ids(self, h: int, w: int, device, dtype) -> torch.Tensor:
        """[h·w/4, 3] position ids (0, row, col) of the packed latent's tokens."""
        return self.pipeline._prepare_latent_image_ids(1, h // 2, w // 2, device, dtype)

    def call_transformer(self, model, tokens, img_ids, timesteps, cond) -> torch.Tensor:
        """The transformer on packed ``tokens`` [B, N, 4C] with their ids [N, 3] -> [B, N, 4C]."""
        embeds = cond["embeds"]
        guidance = cond.get("guidance")
        return model(
            hidden_states=tokens,
            timestep=(timesteps / 1000).to(tokens.dtype),
            guidance=None if guidance is None else guidance.float(),
            pooled_projections=cond["pooled"],
            encoder_hidden_states=embeds,
            txt_ids=torch.zeros(embeds.shape[1], 3, device=embeds.device, dtype=img_ids.dtype),
            img_ids=img_ids,
            return_dict=False,
        )[0]

    def forward(self, model, latents, timesteps, cond):
        _, _, h, w = latents.shape
        tokens = self.pack(latents)
        ids = self.image_ids(h, w, latents.device, tokens.dtype)
        return self.unpack(self.call_transformer(model, tokens, ids, timesteps, cond), h, w)  # [B, C, h, w]

    def decode(self, latents):
        vae = self.pipeline.vae
        x = latents.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        images = vae.decode(x, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)  # [B, 3, H, W]

    # ---- the plain pipeline ---------------------------------------------------------------------
    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        prompts = [r["prompt"] for r in rows]
        kwargs = dict(
            prompt=prompts,
            guidance_scale=float(self.settings.distilled_guidance),
            true_cfg_scale=guidance_scale,
            height=self.resolution,
            width=self.resolution,
            latents=self.pack(latents),
            max_sequence_length=self.max_sequence_length,
        )
        if guidance_scale > 1.0:
            kwargs["negative_prompt"] = [negative_prompt] * len(prompts)
        return kwargs


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)


def real_cut(shipped: dict, encoders) -> dict:
    """1 double- and 1 single-stream block of 2 heads (of the shipped head width, which the RoPE axes sum to); the
    text widths of the cut encoders: T5's hidden states, CLIP's pooled output."""
    return dict(
        num_layers=1,
        num_single_layers=1,
        num_attention_heads=2,
        joint_attention_dim=encoders["text_encoder_2"].d_model,
        pooled_projection_dim=encoders["text_encoder"].hidden_size,
    )


SPEC = FamilySpec(
    name="flux",
    pipeline="FluxPipeline",
    adapter=FluxPolicy,
    tiny="ddpo_grpo.tiny.flux:build_tiny_flux",
    checkpoints=(
        Checkpoint("flux1-dev", recipe="config.flux:pickscore", hub_ids=("black-forest-labs/FLUX.1-dev",)),
        Checkpoint(
            "flux1-schnell", recipe="config.flux:pickscore", hub_ids=("black-forest-labs/FLUX.1-schnell",)
        ),  # (no schnell recipe: the family's)
    ),
    real_cut=real_cut,
    geometry="flux",
)
