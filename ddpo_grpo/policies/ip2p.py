"""Adapter for ``StableDiffusionInstructPix2PixPipeline``: a UNet conditioned on a source image and an instruction.

InstructPix2Pix (Brooks et al. 2023) is SD's UNet with the source image's VAE latent concatenated to the
noisy latent on channels (in_channels = 2 × latent channels). Everything else is ``SDPolicy``'s: the DDIM / DDPM
kernels on the checkpoint's noise schedule (``policies.diffusion``), DDPM noising for ``forward_process``, decoding.

Conditioning (``encode_rows``, once per sample; the rollout stores it with the sample):
    embeds / neg_embeds   [B, L, D]  the instruction and the negative prompt, as the pipeline encodes them
    image_latents         [B, 4, h, w]  E(source) = vae.encode(2·source − 1).latent_dist.mode(), UNSCALED,
                                        exactly as the pipeline's ``prepare_image_latents`` (no scaling_factor)
    image_guidance_scale  [B]  s_I the sample was drawn with (re-scoring uses the stored value)
The source image is each row's ``source_image`` field: a path (relative to ``source_root``, default the working
directory), a (3, H, W) array / tensor / nested list (uint8 levels or floats in [0, 1]) or a PIL image, read by
``foundation.images.load_image`` as the ``psnr`` / ``ssim`` rewards read ``ground_truth``; resized (bicubic,
antialiased) to the policy's resolution when its size differs.

Guidance, as the pipeline computes it (three branches in one batch of 3B, in its order: full condition
(c_T, c_I), image only (∅_T, c_I), none (∅_T, ∅_I = zero latent)):
    ε̃ = ε(∅_T, ∅_I) + s_T·(ε(c_T, c_I) − ε(∅_T, c_I)) + s_I·(ε(∅_T, c_I) − ε(∅_T, ∅_I))
with s_T = ``sample.guidance_scale`` and s_I = ``sample.image_guidance_scale`` (≥ 1). Like the pipeline, it runs
the full-condition branch alone when s_T ≤ 1.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ddpo_grpo.policies.conditioning import SOURCE_KEY, load_source, source_images
from ddpo_grpo.policies.sd import SDPolicy
from ddpo_grpo.policies.settings import pipeline_default

#: the diffusers pipeline whose ``__call__`` defaults (``image_guidance_scale``) an unset setting takes
PIPELINE = "StableDiffusionInstructPix2PixPipeline"

__all__ = ["IP2PPolicy", "SOURCE_KEY", "SupervisedBatch", "check_image_guidance"]


class SupervisedBatch(NamedTuple):
    """The inputs of a supervised step on (source, instruction, ground truth) rows.

    cond: the condition of the rows that have a ground truth (``encode_rows``); x0: [N, 4, h, w] their scaled
    ground-truth latents; index: [N] their positions among the rows; skipped: rows without a ground truth.
    """

    cond: dict
    x0: torch.Tensor
    index: torch.Tensor
    skipped: int


def check_image_guidance(value: float) -> float:
    """``value`` as a float, ValueError naming ``sample.image_guidance_scale`` unless it is a number ≥ 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 1.0:
        raise ValueError(
            f"sample.image_guidance_scale={value!r} must be a number ≥ 1 (1 = no image guidance; the "
            f"pipeline's default is {pipeline_default(PIPELINE, 'image_guidance_scale')})"
        )
    return float(value)


class IP2PPolicy(SDPolicy):
    image_conditioned = True

    def __init__(self, pipeline, settings=None, **kwargs):
        super().__init__(pipeline, settings, **kwargs)
        self.image_guidance_scale = check_image_guidance(self.settings.image_guidance_scale)
        self.source_root = self.settings.source_root
        latent, given = pipeline.vae.config.latent_channels, self.denoiser.config.in_channels
        if given != 2 * latent:
            raise ValueError(
                f"{type(pipeline).__name__}: its UNet takes {given} input channels; InstructPix2Pix needs "
                f"2 × {latent} (the noisy latent and the source image's latent)"
            )

    def latent_shape(self) -> tuple[int, ...]:
        """(C, h, w) of the generated latent: the VAE's channels (the UNet's input also holds the source's)."""
        side = self.resolution // self.vae_scale_factor
        return (self.pipeline.vae.config.latent_channels, side, side)

    # ---- conditioning -----------------------------------------------------------------------------
    def encode_prompts(self, prompts, negative_prompt=""):
        """Instruction and negative-prompt embeddings [B, L, D] each, by the pipeline's own ``_encode_prompt``."""
        prompts = list(prompts)
        negative = [negative_prompt] * len(prompts)
        both = self.pipeline._encode_prompt(prompts, self.device, 1, True, negative_prompt=negative)
        embeds, neg_embeds, _ = both.chunk(3)  # the pipeline's order: [prompt, negative, negative]
        return {"embeds": embeds, "neg_embeds": neg_embeds}

    def source_images(self, rows: list[dict]) -> torch.Tensor:
        """The rows' ``source_image`` fields as float [B, 3, H, W] in [0, 1] at the policy's resolution."""
        side = (self.resolution, self.resolution)
        return source_images(rows, side, self.source_root, "an InstructPix2Pix model")

    @torch.no_grad()
    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Source images [B, 3, H, W] in [0, 1] -> the pipeline's image latents: E(2x − 1).mode(), unscaled."""
        vae = self.pipeline.vae
        x = (2.0 * images - 1.0).to(device=self.device, dtype=vae.dtype)
        return vae.encode(x).latent_dist.mode()  # [B, 4, h, w]

    def encode_rows(self, rows: list[dict], negative_prompt: str = "") -> dict[str, torch.Tensor]:
        """The condition of dataset rows: their instructions, their source images' latents, s_I (module docstring)."""
        cond = self.encode_prompts([r["prompt"] for r in rows], negative_prompt)
        cond["image_latents"] = self.encode_images(self.source_images(rows)).to(cond["embeds"].dtype)
        cond["image_guidance_scale"] = torch.full((len(rows),), self.image_guidance_scale, device=self.device)
        return cond

    # ---- denoiser -------------------------------------------------------------------------------
    def forward(self, model, latents, timesteps, cond):
        x = torch.cat([latents, cond["image_latents"].to(latents.dtype)], dim=1)  # [B, 2C, h, w]
        return model(x, timesteps, encoder_hidden_states=cond["embeds"], return_dict=False)[0]

    def predict(self, model, latents, timesteps, cond, guidance_scale: float, detach_uncond: bool = False):
        """The pipeline's dual guidance (module docstring).

        ``detach_uncond`` stops the gradient through the image-only and unconditional branches (the value is
        unchanged). latents: [B, C, h, w]; timesteps: [B]; cond: from ``encode_rows`` -> [B, C, h, w]
        """
        if "image_latents" not in cond:
            raise ValueError(
                f"{type(self).__name__}: the condition has no 'image_latents'; build it from dataset "
                "rows with encode_rows(rows) (rows with a 'source_image'), not encode_prompts(prompts)"
            )
        image = cond["image_latents"]
        if guidance_scale <= 1.0:
            return self.forward(model, latents, timesteps, {"embeds": cond["embeds"], "image_latents": image})
        three = {
            "embeds": torch.cat([cond["embeds"], cond["neg_embeds"], cond["neg_embeds"]]),  # [3B, L, D]
            "image_latents": torch.cat([image, image, torch.zeros_like(image)]),  # [3B, C, h, w]
        }
        out = self.forward(model, torch.cat([latents] * 3), torch.cat([timesteps] * 3), three)
        full, image_only, uncond = out.chunk(3)  # [B, C, h, w] each
        if detach_uncond:
            image_only, uncond = image_only.detach(), uncond.detach()
        scale = cond.get("image_guidance_scale")
        s_img = self.image_guidance_scale if scale is None else scale.to(full.dtype).view(-1, *[1] * (full.ndim - 1))
        return uncond + guidance_scale * (full - image_only) + s_img * (image_only - uncond)

    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        kwargs = super().pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        for key in ("height", "width"):  # the pipeline's output has the source image's size
            del kwargs[key]
        return dict(kwargs, image=self.source_images(rows), image_guidance_scale=self.image_guidance_scale)

    # ---- supervised steps ---------------------------------------------------------------------------
    @torch.no_grad()
    def target_latents(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Clean images [N, 3, H, W] in [0, 1] -> x0 = scaling_factor · (posterior sample of E(2x − 1)) [N, 4, h, w]."""
        vae = self.pipeline.vae
        x = (2.0 * images - 1.0).to(device=self.device, dtype=vae.dtype)
        return vae.encode(x).latent_dist.sample(generator=generator) * vae.config.scaling_factor

    def supervised_batch(
        self,
        rows: list[dict],
        *,
        key: str = "ground_truth",
        negative_prompt: str = "",
        generator: torch.Generator | None = None,
    ) -> SupervisedBatch:
        """(cond, x0, index, skipped) of the rows with a ``key`` image (rows without one are skipped and counted).

        With ``forward_process``: ``t, noised = policy.forward_process(b.x0, u, noise)``, then
        ``pred = policy.predict(model, noised.x_t, t, b.cond, 1.0)`` regresses ``noised.target``.
        """
        kept = [i for i, r in enumerate(rows) if r.get(key) is not None]
        index = torch.as_tensor(kept, dtype=torch.long)
        if not kept:
            side = self.latent_shape()
            return SupervisedBatch({}, torch.zeros((0, *side), device=self.device), index, len(rows))
        side = (self.resolution, self.resolution)
        truths = [load_source(rows[i][key], side, self.source_root, i, key) for i in kept]
        with torch.no_grad():
            cond = self.encode_rows([rows[i] for i in kept], negative_prompt)
        x0 = self.target_latents(torch.stack(truths), generator)
        return SupervisedBatch(cond, x0, index, len(rows) - len(kept))


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import FamilySpec  # noqa: E402 (the spec block closes the adapter file)

SPEC = FamilySpec(
    name="ip2p",
    pipeline="StableDiffusionInstructPix2PixPipeline",
    adapter=IP2PPolicy,
    tiny="ddpo_grpo.tiny.sd:build_tiny_ip2p",
)
