"""Adapters for ``QwenImageEditPipeline`` and ``QwenImageEditPlusPipeline`` (Qwen-Image-Edit, -2509 / -2511).

Qwen-Image (``policies.qwen_image``: packed latents, norm-preserving true CFG, the shifted schedule) conditioned on
source image(s) twice, as the pipelines do it:

* vision-language: the instruction is encoded by Qwen2.5-VL together with the source image(s) through the pipeline's
  processor and prompt template (Edit: one image in the template; Edit-Plus: "Picture k: <image>" for each of a
  row's images), per row, the negative prompt with the same image(s);
* latents: each source's VAE latent, normalised as the pipeline's ``_encode_vae_image`` does, is packed and joined to
  the noisy latent's tokens on the sequence (``img_shapes`` lists each grid for the 3-D RoPE); only the noisy latent's
  positions of the output are kept (``noise_pred[:, : latents.size(1)]``).

Rows carry ``source_image`` (``policies.conditioning``; Edit-Plus also a list of paths, the same number in every row).
Sizes follow the pipelines' rule ``calculate_dimensions(area, aspect)`` with the aspect of the square output: each
source is resized (the pipeline's own PIL resize) to a square of the area 1024·1024 for its latent (or
``sample.source_pixels`` when set: cheaper training, but not the trained model's conditions) and, for Edit-Plus's
vision prompt, 384·384; a non-square source is stretched to the square. Condition:
    embeds / mask / neg_embeds / neg_mask   [B, L, D] / [B, L]   L = the empty prompt's length (template and vision
                                            tokens) + ``sample.max_sequence_length`` (longer prompts are truncated)
    image_latents                           [B, n, C, h', w']    the n sources' normalised latents
"""

from __future__ import annotations

import importlib

import torch

from ddpo_grpo.policies.conditioning import load_source, pad_to, source_list
from ddpo_grpo.policies.qwen_image import QwenImagePolicy

#: the area the Edit pipelines resize a source to for its latent (VAE_IMAGE_SIZE) and Edit-Plus for its vision prompt
VAE_AREA = 1024 * 1024
VISION_AREA = 384 * 384


class QwenImageEditPolicy(QwenImagePolicy):
    image_conditioned = True
    #: the pipeline module whose ``calculate_dimensions`` sizes the sources
    pipeline_module = "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit"
    #: "Edit": the vision prompt sees the source at its latent's size; "Edit-Plus": at ``VISION_AREA``
    vision_area: int | None = None

    def __init__(self, pipeline, settings=None, **kwargs):
        super().__init__(pipeline, settings, **kwargs)
        self._text_length = None  # set by the first encoding (module docstring)

    # ---- sizes ----------------------------------------------------------------------------------
    def square(self, area: int) -> int:
        """The side the pipeline's ``calculate_dimensions(area, 1)`` gives (a multiple of 32)."""
        calculate = importlib.import_module(self.pipeline_module).calculate_dimensions
        return int(calculate(area, 1.0)[0])

    @property
    def source_side(self) -> int:
        return self.square(int(self.settings.source_pixels) or VAE_AREA)

    def text_length(self) -> int:
        if self._text_length is None:
            raise RuntimeError("text_length is set by the first encode_rows call")
        return self._text_length

    # ---- conditioning -----------------------------------------------------------------------------
    def source_pils(self, rows: list[dict]) -> list[list]:
        """Per row, its source images as PIL images (8-bit, as the pipeline receives them), in the row's order."""
        from ddpo_grpo.images import to_pil

        family = type(self.pipeline).__name__
        out = []
        for i, row in enumerate(rows):
            values = source_list(row, i, family)
            side = (self.source_side,) * 2
            out.append([to_pil(load_source(v, side, self.settings.source_root, i)[None])[0] for v in values])
        counts = {len(p) for p in out}
        if len(counts) > 1:
            raise ValueError(
                f"{family}: rows give different numbers of source images ({sorted(counts)}); every row of a prompt "
                "source must give the same number"
            )
        return out

    def vision_images(self, pils: list) -> list:
        """A row's images as its vision prompt sees them (the pipeline's resize)."""
        if self.vision_area is None:
            side = self.source_side
            return [self.pipeline.image_processor.resize(p, side, side) for p in pils]
        side = self.square(self.vision_area)
        return [self.pipeline.image_processor.resize(p, side, side) for p in pils]

    def vision_prompt_image(self, images: list):
        """What ``encode_prompt(image=...)`` takes for one row: Edit one image, Edit-Plus the list."""
        return images[0] if len(images) == 1 and self.vision_area is None else images

    @torch.no_grad()
    def encode_images(self, pils: list) -> torch.Tensor:
        """A row's sources -> normalised latents [n, C, h', w'] (the pipeline's preprocess and ``_encode_vae_image``)."""
        side = self.source_side
        x = torch.cat([self.pipeline.image_processor.preprocess(p, side, side) for p in pils])  # [n, 3, S, S]
        vae = self.pipeline.vae
        x = x.unsqueeze(2).to(device=self.device, dtype=vae.dtype)  # [n, 3, 1, S, S]
        return self.pipeline._encode_vae_image(image=x, generator=None)[:, :, 0]  # [n, C, h', w']

    def encode_rows(self, rows, negative_prompt=""):
        pils = self.source_pils(rows)
        parts = {"embeds": [], "mask": [], "neg_embeds": [], "neg_mask": []}
        raw = []
        for row, images in zip(rows, pils):
            image = self.vision_prompt_image(self.vision_images(images))
            pos = self.pipeline.encode_prompt(prompt=[row["prompt"]], image=image, device=self.device)
            neg = self.pipeline.encode_prompt(prompt=[negative_prompt], image=image, device=self.device)
            raw.append((pos, neg))
        if self._text_length is None:
            empty = max(int(n[0].shape[1]) for _, n in raw)
            self._text_length = empty + self.max_sequence_length
        for pos, neg in raw:
            for key, (embeds, mask) in (("embeds", pos), ("neg_embeds", neg)):
                embeds, mask = pad_to(embeds, mask, self._text_length)
                parts[key].append(embeds)
                parts[key.replace("embeds", "mask")].append(mask)
        cond = {k: torch.cat(v) for k, v in parts.items()}
        cond["image_latents"] = torch.stack([self.encode_images(p) for p in pils]).to(cond["embeds"].dtype)
        if self.denoiser.config.guidance_embeds:
            cond["guidance"] = torch.full((len(rows),), float(self.settings.distilled_guidance), device=self.device)
        return cond

    def encode_prompts(self, prompts, negative_prompt=""):
        raise ValueError(
            f"{type(self).__name__} edits source images: build the condition from dataset rows with encode_rows(rows) "
            "(rows with a 'source_image'), not encode_prompts(prompts)"
        )

    # ---- denoiser -------------------------------------------------------------------------------
    def forward(self, model, latents, timesteps, cond):
        b, _, h, w = latents.shape
        sources = cond["image_latents"].to(latents.dtype)  # [B, n, C, h', w']
        tokens = self.pack(latents)  # [B, N, 4C]
        n = tokens.shape[1]
        joined = torch.cat([tokens] + [self.pack(sources[:, k]) for k in range(sources.shape[1])], dim=1)
        grid = [(1, s.shape[-2] // 2, s.shape[-1] // 2) for s in sources[0]]
        shapes = [[(1, h // 2, w // 2), *grid]] * b
        out = self.call_transformer(model, joined, shapes, timesteps, cond)
        return self.unpack(out[:, :n], h, w)  # [B, C, h, w]

    # ---- the plain pipeline ---------------------------------------------------------------------
    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        kwargs = super().pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        kwargs.pop("max_sequence_length")
        return dict(kwargs, image=[p[0] for p in self.source_pils(rows)])


class QwenImageEditPlusPolicy(QwenImageEditPolicy):
    pipeline_module = "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus"
    vision_area = VISION_AREA

    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        kwargs = super().pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        return dict(kwargs, image=self.source_pils(rows)[0])

    @torch.no_grad()
    def reference_sample(self, rows, latents, num_steps, guidance_scale, negative_prompt=""):
        """The pipeline takes one prompt per call: one call per row, the samples stacked."""
        parent = super().reference_sample
        return torch.cat(
            [parent([r], latents[i : i + 1], num_steps, guidance_scale, negative_prompt) for i, r in enumerate(rows)]
        )
