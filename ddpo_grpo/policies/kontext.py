"""Adapter for ``FluxKontextPipeline`` (FLUX.1 Kontext): FLUX.1 conditioned on a source image joined on the sequence.

Everything of ``policies.flux`` (packing, ids, CLIP + T5 conditioning, the distilled guidance, true CFG, the shifted
schedule); in addition each row's ``source_image`` (``policies.conditioning``, as InstructPix2Pix rows carry it) is
resized to the output resolution and encoded as the pipeline's ``_encode_vae_image`` does, (E(2x − 1).mode() − shift)
· scale, stored in the condition:
    image_latents   [B, C, h, w]   the source's latent, unpacked (shared by the CFG branches)
At every call its packed tokens follow the noisy latent's on the sequence, with ids (1, row, col), and only the
noisy latent's positions of the output are kept: the pipeline's own ``torch.cat([latents, image_latents], dim=1)``
and ``noise_pred[:, : latents.size(1)]``. μ of the time shift counts the generated image's tokens only, as there.

Departure: the pipeline resizes a source to one of Kontext's preferred resolutions (``_auto_resize``) and the output
to ``max_area``; here both are ``sample.resolution`` square (the reference call passes ``_auto_resize=False`` and
``max_area`` = resolution², so the comparison is exact).
"""

from __future__ import annotations

import torch

from ddpo_grpo.policies.conditioning import source_images
from ddpo_grpo.policies.flux import FluxPolicy


class KontextPolicy(FluxPolicy):
    image_conditioned = True

    def source_images(self, rows: list[dict]) -> torch.Tensor:
        """The rows' ``source_image`` fields as float [B, 3, H, W] in [0, 1] at the policy's resolution."""
        side = (self.resolution, self.resolution)
        return source_images(rows, side, self.settings.source_root, "FLUX.1 Kontext")

    @torch.no_grad()
    def encode_images(self, images: torch.Tensor) -> torch.Tensor:
        """Source images [B, 3, H, W] in [0, 1] -> their latents [B, C, h, w] (the pipeline's ``_encode_vae_image``)."""
        vae = self.pipeline.vae
        x = (2.0 * images - 1.0).to(device=self.device, dtype=vae.dtype)
        return self.pipeline._encode_vae_image(image=x, generator=None)

    def encode_rows(self, rows, negative_prompt=""):
        cond = self.encode_prompts([r["prompt"] for r in rows], negative_prompt)
        cond["image_latents"] = self.encode_images(self.source_images(rows)).to(cond["embeds"].dtype)
        return cond

    def forward(self, model, latents, timesteps, cond):
        if "image_latents" not in cond:
            raise ValueError(
                "KontextPolicy: the condition has no 'image_latents'; build it from dataset rows with "
                "encode_rows(rows) (rows with a 'source_image'), not encode_prompts(prompts)"
            )
        _, _, h, w = latents.shape
        source = cond["image_latents"].to(latents.dtype)  # [B, C, h', w']
        tokens = self.pack(latents)  # [B, N, 4C]
        n = tokens.shape[1]
        ids = self.image_ids(h, w, latents.device, tokens.dtype)  # [N, 3]
        source_ids = self.image_ids(*source.shape[-2:], latents.device, tokens.dtype)
        source_ids[:, 0] = 1  # the source's tokens are told apart by the first id
        both = torch.cat([tokens, self.pack(source)], dim=1)  # [B, N + N', 4C]
        out = self.call_transformer(model, both, torch.cat([ids, source_ids]), timesteps, cond)
        return self.unpack(out[:, :n], h, w)  # [B, C, h, w]

    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        kwargs = super().pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        return dict(kwargs, image=self.source_images(rows), max_area=self.resolution**2, _auto_resize=False)


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)
from ddpo_grpo.policies.flux import real_cut  # noqa: E402

SPEC = FamilySpec(
    name="kontext",
    pipeline="FluxKontextPipeline",
    adapter=KontextPolicy,
    tiny="ddpo_grpo.tiny.flux:build_tiny_kontext",
    checkpoints=(
        Checkpoint(
            "flux1-kontext-dev", recipe="config.flux:kontext", hub_ids=("black-forest-labs/FLUX.1-Kontext-dev",)
        ),
    ),
    real_cut=real_cut,
    geometry="flux",
    source_tokens=True,
)
