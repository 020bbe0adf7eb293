"""Adapter for ``QwenImagePipeline`` (Qwen-Image): QwenImageTransformer2DModel with the flow kernels.

Latents. The Qwen-Image VAE is a causal video VAE used with one frame; the rollout stores its latent without the
frame axis, [B, C, h, w] (C = 16, h = H / 8), normalised as the pipeline does ((z − mean) / std per channel, undone by
``decode``); the transformer sees it packed into 2×2 patches (the pipeline's ``_pack_latents``) with
``img_shapes`` = (1, h/2, w/2) for its 3-D RoPE, and its output is unpacked back.

Conditioning (the pipeline's ``encode_prompt``: its Qwen2.5-VL prompt template, the last hidden layer, the template's
first ``prompt_template_encode_start_idx`` tokens dropped and the rest masked to the valid tokens):
    embeds / neg_embeds   [B, L, D]  L = ``sample.max_sequence_length`` (the pipeline truncates there too), zero-padded
    mask / neg_mask       [B, L]     1 = a token, 0 = padding (``policies.conditioning.pad_to``)
The denoiser is called on the batch trimmed to its longest prompt (``conditioning.trim``), the mask passed as
``encoder_hidden_states_mask`` (None when no position is padding, as the pipeline passes it).

Guidance: true classifier-free guidance with Qwen-Image's norm-preserving rescale, as the pipeline computes it:
    ṽ = v(∅) + w·(v(c) − v(∅)),   v = ṽ · ‖v(c)‖ / ‖ṽ‖
the norms taken per image token over its packed channels (C·2·2), w = ``sample.guidance_scale`` (the pipeline's
``true_cfg_scale``; ≤ 1: one pass, no rescale). Schedule: the pipeline's ``linspace(1, 1/T, T)`` under the
scheduler's dynamic (exponential) shift, μ from the token count (h/2)·(w/2); the transformer takes t = σ.
"""

from __future__ import annotations

import torch

from ddpo_grpo.policies.conditioning import pad_to, trim
from ddpo_grpo.policies.flow import FlowPolicy, linear_sigmas

#: the Qwen-Image pipelines' default image side in latent pixels (128 × 8 = 1024 px)
DEFAULT_SAMPLE_SIZE = 128


class QwenImagePolicy(FlowPolicy):
    denoiser_attr = "transformer"
    lora_layers_kwarg = "transformer_lora_layers"
    # the attention projections of both streams and the image stream's MLP (DiffusionNFT's and Flow-GRPO's choice)
    default_lora_targets = (
        "to_q",
        "to_k",
        "to_v",
        "to_out.0",
        "add_q_proj",
        "add_k_proj",
        "add_v_proj",
        "to_add_out",
        "img_mlp.net.0.proj",
        "img_mlp.net.2",
    )
    shard_blocks = ("QwenImageTransformerBlock",)

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def vae_scale_factor(self) -> int:
        """The video VAE's spatial factor: 2 per temporal-downsampling stage entry (the pipeline's rule)."""
        return 2 ** len(self.pipeline.vae.temperal_downsample)

    @property
    def resolution_multiple(self) -> int:
        return 2 * self.vae_scale_factor

    @classmethod
    def native_resolution(cls, pipeline) -> int:
        return DEFAULT_SAMPLE_SIZE * 2 ** len(pipeline.vae.temperal_downsample)

    def latent_shape(self) -> tuple[int, ...]:
        side = self.resolution // self.vae_scale_factor
        return (self.pipeline.vae.config.z_dim, side, side)

    def image_seq_len(self) -> int:
        _, h, w = self.latent_shape()
        return (h // 2) * (w // 2)

    def pipeline_sigmas(self, num_steps):
        return linear_sigmas(num_steps)

    # ---- conditioning -----------------------------------------------------------------------------
    def text_length(self) -> int:
        """The stored embeddings' length L: ``sample.max_sequence_length`` (where the pipeline truncates)."""
        return self.max_sequence_length

    def encode_text(self, prompts: list[str], **extra) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeds [B, L, D], mask [B, L]) of the pipeline's ``encode_prompt``, padded to ``text_length``."""
        embeds, mask = self.pipeline.encode_prompt(
            prompt=prompts, device=self.device, max_sequence_length=self.max_sequence_length, **extra
        )
        return pad_to(embeds, mask, self.text_length())

    def encode_prompts(self, prompts, negative_prompt=""):
        prompts = list(prompts)
        embeds, mask = self.encode_text(prompts)
        neg_embeds, neg_mask = self.encode_text([negative_prompt])
        b = len(prompts)
        cond = {
            "embeds": embeds,
            "mask": mask,
            "neg_embeds": neg_embeds.expand(b, -1, -1).clone(),
            "neg_mask": neg_mask.expand(b, -1).clone(),
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
        """[B, h·w/4, 4C] tokens -> [B, C, h, w] (the pipeline's unpacking, without its frame axis)."""
        factor = self.vae_scale_factor
        return self.pipeline._unpack_latents(tokens, h * factor, w * factor, factor)[:, :, 0]

    def img_shapes(self, b: int, h: int, w: int) -> list:
        """Per sample, the (frames, rows, cols) token grids on the sequence (the generated image only here)."""
        return [[(1, h // 2, w // 2)]] * b

    def call_transformer(self, model, tokens, img_shapes, timesteps, cond) -> torch.Tensor:
        """The transformer on packed ``tokens`` [B, N, 4C] -> [B, N, 4C]."""
        embeds, mask = trim(cond["embeds"], cond["mask"])
        guidance = cond.get("guidance")
        return model(
            hidden_states=tokens,
            timestep=(timesteps / 1000).to(tokens.dtype),
            guidance=None if guidance is None else guidance.float(),
            encoder_hidden_states_mask=mask,
            encoder_hidden_states=embeds,
            img_shapes=img_shapes,
            return_dict=False,
        )[0]

    def forward(self, model, latents, timesteps, cond):
        b, _, h, w = latents.shape
        out = self.call_transformer(model, self.pack(latents), self.img_shapes(b, h, w), timesteps, cond)
        return self.unpack(out, h, w)  # [B, C, h, w]

    def guide(self, uncond, text, guidance_scale):
        """Standard CFG, then rescaled per packed token to the conditional prediction's norm (module docstring)."""
        _, _, h, w = text.shape
        combined, cond_tokens = self.pack(uncond + guidance_scale * (text - uncond)), self.pack(text)
        scale = torch.norm(cond_tokens, dim=-1, keepdim=True) / torch.norm(combined, dim=-1, keepdim=True)
        return self.unpack(combined * scale, h, w)

    def decode(self, latents):
        """[B, C, h, w] normalised latents -> images [B, 3, H, W] in [0, 1] (the pipeline's de-normalisation)."""
        vae = self.pipeline.vae
        z = latents.to(vae.dtype)[:, :, None]  # [B, C, 1, h, w]
        mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1).to(z.device, z.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1).to(z.device, z.dtype)
        images = vae.decode(z / inv_std + mean, return_dict=False)[0][:, :, 0]
        return (images.float() / 2 + 0.5).clamp(0, 1)  # [B, 3, H, W]

    # ---- the plain pipeline ---------------------------------------------------------------------
    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        prompts = [r["prompt"] for r in rows]
        kwargs = dict(
            prompt=prompts,
            true_cfg_scale=guidance_scale,
            height=self.resolution,
            width=self.resolution,
            latents=self.pack(latents),
            max_sequence_length=self.max_sequence_length,
        )
        if guidance_scale > 1.0:
            kwargs["negative_prompt"] = [negative_prompt] * len(prompts)
        if self.denoiser.config.guidance_embeds:
            kwargs["guidance_scale"] = float(self.settings.distilled_guidance)
        return kwargs


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)


def real_cut(shipped: dict, encoders) -> dict:
    """1 block of 2 heads (of the shipped head width, which the RoPE axes sum to); the cut text encoder's width."""
    return dict(
        num_layers=1, num_attention_heads=2, joint_attention_dim=encoders["text_encoder"].text_config.hidden_size
    )


SPEC = FamilySpec(
    name="qwen_image",
    pipeline="QwenImagePipeline",
    adapter=QwenImagePolicy,
    tiny="ddpo_grpo.tiny.qwen:build_tiny_qwen_image",
    checkpoints=(Checkpoint("qwen-image", recipe="config.qwen_image:pickscore", hub_ids=("Qwen/Qwen-Image",)),),
    real_cut=real_cut,
    geometry="qwen",
)
