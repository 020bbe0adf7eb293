"""Adapter for ``ZImagePipeline`` (Z-Image, Z-Image-Turbo): ZImageTransformer2DModel with the flow kernels.

Z-Image's conventions, translated to ours (as its pipeline's own loop does):
* time: the transformer takes t_Z = 1 − σ (``(1000 − t) / 1000`` of the rollout's t = 1000·σ);
* output: it predicts x0 − ε, the negative of our velocity v = ε − x0 (``forward`` returns −output);
* guidance: the pipeline's ``pred = pos + g·(pos − neg)`` is standard CFG with w = 1 + g, so ``sample.guidance_scale``
  is w (uncond + w·(cond − uncond), ≤ 1 = one pass) and the pipeline's ``guidance_scale`` g = w − 1;
  its optional ``cfg_normalization`` / ``cfg_truncation`` are off (the pipeline's defaults).
The transformer takes lists (one latent [C, 1, h, w] and one caption [n_i, D] per sample, patchified inside it).

Conditioning (the pipeline's ``_encode_prompt``: the tokenizer's chat template, the text encoder's second-to-last
hidden layer, masked to the valid tokens):
    embeds / neg_embeds   [B, L, D]  L = ``sample.max_sequence_length`` (the pipeline's tokenizer max length), padded
    mask / neg_mask       [B, L]     1 = a token (``policies.conditioning.pad_to``); each caption is cut to its valid
                                     tokens again before the call, so the transformer sees what the pipeline gives it
Schedule: the pipeline's σ grid ``linspace(1, 1/T, T)`` under the scheduler's shift (static, 3 for Z-Image).
"""

from __future__ import annotations

import torch

from ddpo_grpo.policies.conditioning import pad_to
from ddpo_grpo.policies.flow import FlowPolicy, linear_sigmas

#: the pipeline's default image side in pixels
DEFAULT_RESOLUTION = 1024


class ZImagePolicy(FlowPolicy):
    denoiser_attr = "transformer"
    lora_layers_kwarg = "transformer_lora_layers"
    default_lora_targets = ("to_q", "to_k", "to_v", "to_out.0")
    shard_blocks = ("ZImageTransformerBlock",)

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def resolution_multiple(self) -> int:
        """The VAE factor × the transformer's 2×2 patch."""
        return 2 * self.vae_scale_factor

    @classmethod
    def native_resolution(cls, pipeline) -> int:
        return DEFAULT_RESOLUTION

    def latent_shape(self) -> tuple[int, ...]:
        side = self.resolution // self.vae_scale_factor
        return (self.denoiser.config.in_channels, side, side)

    def image_seq_len(self) -> int:
        _, h, w = self.latent_shape()
        return (h // 2) * (w // 2)

    def pipeline_sigmas(self, num_steps):
        return linear_sigmas(num_steps)

    # ---- conditioning -----------------------------------------------------------------------------
    def _encode(self, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeds [B, L, D], mask [B, L]) of the pipeline's ``_encode_prompt`` (a list of [n_i, D]), padded."""
        captions = self.pipeline._encode_prompt(
            prompt=list(prompts), device=self.device, max_sequence_length=self.max_sequence_length
        )
        length = self.max_sequence_length
        padded = [pad_to(c[None], None, length) for c in captions]
        return torch.cat([e for e, _ in padded]), torch.cat([m for _, m in padded])

    def encode_prompts(self, prompts, negative_prompt=""):
        prompts = list(prompts)
        embeds, mask = self._encode(prompts)
        neg_embeds, neg_mask = self._encode([negative_prompt])
        b = len(prompts)
        return {
            "embeds": embeds,
            "mask": mask,
            "neg_embeds": neg_embeds.expand(b, -1, -1).clone(),
            "neg_mask": neg_mask.expand(b, -1).clone(),
        }

    # ---- denoiser -------------------------------------------------------------------------------
    def forward(self, model, latents, timesteps, cond):
        x = list(latents.unsqueeze(2).unbind(0))  # B × [C, 1, h, w]
        captions = [e[m.bool()] for e, m in zip(cond["embeds"], cond["mask"])]  # B × [n_i, D]
        t = (1000.0 - timesteps.float()) / 1000.0  # Z-Image's time: 1 − σ
        out = model(x, t.to(latents.dtype), captions, return_dict=False)[0]  # B × [C, 1, h, w]
        return -torch.stack(out).squeeze(2)  # [B, C, h, w]: v = ε − x0

    def decode(self, latents):
        vae = self.pipeline.vae
        x = latents.to(vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
        images = vae.decode(x, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)  # [B, 3, H, W]

    # ---- the plain pipeline ---------------------------------------------------------------------
    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        prompts = [r["prompt"] for r in rows]
        return dict(
            prompt=prompts,
            negative_prompt=[negative_prompt] * len(prompts),
            guidance_scale=max(guidance_scale - 1.0, 0.0),  # the pipeline's g = w − 1
            height=self.resolution,
            width=self.resolution,
            latents=latents,
            max_sequence_length=self.max_sequence_length,
        )


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)


def real_cut(shipped: dict, encoders) -> dict:
    """1 main and 1 refiner block of 2 heads (of the shipped head width, which the RoPE axes sum to); the cut text
    encoder's width."""
    heads = 2
    head_dim = shipped["dim"] // shipped["n_heads"]
    return dict(
        n_layers=1,
        n_refiner_layers=1,
        n_heads=heads,
        n_kv_heads=heads,
        dim=heads * head_dim,
        cap_feat_dim=encoders["text_encoder"].hidden_size,
    )


SPEC = FamilySpec(
    name="zimage",
    pipeline="ZImagePipeline",
    adapter=ZImagePolicy,
    tiny="ddpo_grpo.tiny.zimage:build_tiny_zimage",
    checkpoints=(Checkpoint("z-image-turbo", recipe="config.zimage:pickscore", hub_ids=("Tongyi-MAI/Z-Image-Turbo",)),),
    real_cut=real_cut,
)
