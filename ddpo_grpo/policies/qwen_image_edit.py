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
        from foundation.images import to_pil

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

    @torch.no_grad()
    def encode_images(self, pils: list[list]) -> torch.Tensor:
        """Every row's sources -> normalised latents [B, n, C, h', w'] (the pipeline's preprocess and
        ``_encode_vae_image``, all images in one batch)."""
        side = self.source_side
        flat = [p for row in pils for p in row]
        x = torch.cat([self.pipeline.image_processor.preprocess(p, side, side) for p in flat])  # [B·n, 3, S, S]
        vae = self.pipeline.vae
        x = x.unsqueeze(2).to(device=self.device, dtype=vae.dtype)  # [B·n, 3, 1, S, S]
        z = self.pipeline._encode_vae_image(image=x, generator=None)[:, :, 0]  # [B·n, C, h', w']
        return z.reshape(len(pils), len(pils[0]), *z.shape[1:])

    def encode_text(self, prompts: list[str], images: list) -> tuple[torch.Tensor, torch.Tensor]:
        """(embeds, mask) of the instructions with their rows' vision prompts: Edit encodes the batch in one call (one
        image per text), Edit-Plus one row per call (its template lists every image of the call for each text)."""
        if self.vision_area is None:
            return self.pipeline.encode_prompt(prompt=prompts, image=[i[0] for i in images], device=self.device)
        parts = [self.pipeline.encode_prompt(prompt=[p], image=i, device=self.device) for p, i in zip(prompts, images)]
        length = max(e.shape[1] for e, _ in parts)
        padded = [pad_to(e, m, length) for e, m in parts]
        return torch.cat([e for e, _ in padded]), torch.cat([m for _, m in padded])

    def encode_rows(self, rows, negative_prompt=""):
        pils = self.source_pils(rows)
        images = [self.vision_images(p) for p in pils]
        embeds, mask = self.encode_text([r["prompt"] for r in rows], images)
        neg_embeds, neg_mask = self.encode_text([negative_prompt] * len(rows), images)
        if self._text_length is None:
            self._text_length = int(neg_embeds.shape[1]) + self.max_sequence_length
        embeds, mask = pad_to(embeds, mask, self._text_length)
        neg_embeds, neg_mask = pad_to(neg_embeds, neg_mask, self._text_length)
        cond = {"embeds": embeds, "mask": mask, "neg_embeds": neg_embeds, "neg_mask": neg_mask}
        cond["image_latents"] = self.encode_images(pils).to(embeds.dtype)
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


# ---- the families' registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)
from ddpo_grpo.policies.qwen_image import real_cut  # noqa: E402

SPECS = (
    FamilySpec(
        name="qwen_image_edit",
        pipeline="QwenImageEditPipeline",
        adapter=QwenImageEditPolicy,
        tiny="ddpo_grpo.tiny.qwen:build_tiny_qwen_image_edit",
        checkpoints=(
            Checkpoint("qwen-image-edit", recipe="config.qwen_image:edit", hub_ids=("Qwen/Qwen-Image-Edit",)),
        ),
        real_cut=real_cut,
        geometry="qwen",
        source_tokens=True,
    ),
    FamilySpec(
        name="qwen_image_edit_plus",
        pipeline="QwenImageEditPlusPipeline",
        adapter=QwenImageEditPlusPolicy,
        tiny="ddpo_grpo.tiny.qwen:build_tiny_qwen_image_edit_plus",
        checkpoints=(
            Checkpoint(
                "qwen-image-edit-2509", recipe="config.qwen_image:edit_plus", hub_ids=("Qwen/Qwen-Image-Edit-2509",)
            ),
        ),
        real_cut=real_cut,
        geometry="qwen",
        source_tokens=True,
    ),
)
