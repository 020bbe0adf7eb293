"""Adapter for ``WanImageToVideoPipeline`` (Wan 2.1 I2V, Wan 2.2 I2V A14B): ``policies.wan`` conditioned on a first frame.

Each row's ``source_image`` (``policies.conditioning``) is the video's first frame, resized to the resolution. As the
pipeline's ``prepare_latents`` builds it (and by calling it), the condition is the VAE latent of the video [first
frame, zeros …] (normalised) behind a 4-channel mask marking the first frame's latent positions,
    condition   [B, 4 + C, F', h, w]   concatenated to the noisy latent on channels at every call
and, for a transformer with an image projection (Wan 2.1 I2V: ``image_dim``), the CLIP vision features of the frame
(the pipeline's ``encode_image``): image_embeds [B, N, D]. Both are shared by the CFG branches. The two experts of
Wan 2.2, the schedule, the LoRA export and the video samples are ``WanPolicy``'s.
"""

from __future__ import annotations

import torch

from ddpo_grpo.policies.conditioning import source_images
from ddpo_grpo.policies.wan import WanPolicy


class WanI2VPolicy(WanPolicy):
    image_conditioned = True

    def source_images(self, rows: list[dict]) -> torch.Tensor:
        """The rows' first frames as float [B, 3, H, W] in [0, 1] at the policy's resolution, on 8-bit levels (what the
        pipeline gets from an image: the frame's latent and its CLIP features then see the same pixels)."""
        side = (self.resolution, self.resolution)
        frames = source_images(rows, side, self.settings.source_root, "Wan image-to-video")
        return (frames * 255).round() / 255

    def source_pils(self, rows: list[dict]) -> list:
        from foundation.images import to_pil

        return to_pil(self.source_images(rows))

    @torch.no_grad()
    def encode_rows(self, rows, negative_prompt=""):
        cond = self.encode_prompts([r["prompt"] for r in rows], negative_prompt)
        frames = self.source_images(rows)  # [B, 3, H, W] in [0, 1]
        side = self.resolution
        pipe = self.pipeline
        image = pipe.video_processor.preprocess(frames, height=side, width=side).to(self.device, torch.float32)
        conditions = []
        for i in range(len(rows)):  # the pipeline encodes one conditioning video per call
            dummy = torch.zeros(1, *self.latent_shape(), device=self.device)  # skips its noise draw
            _, condition = pipe.prepare_latents(
                image[i : i + 1], 1, *self._latent_args(), torch.float32, self.device, None, dummy
            )
            conditions.append(condition)
        cond["condition"] = torch.cat(conditions).to(cond["embeds"].dtype)  # [B, 4 + C, F', h, w]
        if self.pipeline.transformer.config.image_dim is not None:  # Wan 2.1 I2V: CLIP features of the frame
            embeds = [pipe.encode_image(pil, self.device) for pil in self.source_pils(rows)]
            cond["image_embeds"] = torch.cat(embeds).to(cond["embeds"].dtype)  # [B, N, D]
        return cond

    def _latent_args(self) -> tuple[int, int, int, int]:
        """(channels, height, width, frames) as ``prepare_latents`` takes them."""
        return (self.pipeline.vae.config.z_dim, self.resolution, self.resolution, self.num_frames)

    def model_input(self, latents, cond):
        if "condition" not in cond:
            raise ValueError(
                "WanI2VPolicy: the condition has no first frame; build it from dataset rows with encode_rows(rows) "
                "(rows with a 'source_image'), not encode_prompts(prompts)"
            )
        return torch.cat([latents, cond["condition"].to(latents.dtype)], dim=1)  # [B, 2C + 4, F', h, w]

    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        kwargs = super().pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        return dict(kwargs, image=self.source_pils(rows)[0] if len(rows) == 1 else self.source_pils(rows))

    @torch.no_grad()
    def reference_sample(self, rows, latents, num_steps, guidance_scale, negative_prompt=""):
        """The pipeline conditions a call on one image: one call per row, the videos stacked."""
        parent = super().reference_sample
        return torch.cat(
            [parent([r], latents[i : i + 1], num_steps, guidance_scale, negative_prompt) for i, r in enumerate(rows)]
        )


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)
from ddpo_grpo.policies.wan import real_cut  # noqa: E402

SPEC = FamilySpec(
    name="wan_i2v",
    pipeline="WanImageToVideoPipeline",
    adapter=WanI2VPolicy,
    tiny="ddpo_grpo.tiny.wan:build_tiny_wan_i2v",
    checkpoints=(
        Checkpoint("wan2.1-i2v-14b-480p", recipe="config.wan:i2v", hub_ids=("Wan-AI/Wan2.1-I2V-14B-480P-Diffusers",)),
        Checkpoint("wan2.2-i2v-a14b", recipe="config.wan:i2v", hub_ids=("Wan-AI/Wan2.2-I2V-A14B-Diffusers",)),
    ),
    real_cut=real_cut,
    geometry="wan",
)
