"""Adapter for ``DenoiserPipeline`` (ddpo_grpo.denoiser_pipeline): any denoiser f(x_t, t, **cond), sampled with DDPM or DDIM.

The sample is the model's own space (no VAE): ``latent_shape()`` is the pipeline's ``sample_shape``, and
``sample.resolution`` (pixels) means nothing here and is ignored (as is ``sample.max_sequence_length``: the
tokenizer's own max length applies). The noise schedule comes from the pipeline's scheduler (respaced to
``num_steps`` by its ``set_timesteps``, its ``timestep_spacing``), the prediction type from its
``prediction_type``.

Kernels: ``policies.diffusion`` ("ddpm" = MDM's ancestral sampler with noise level 1; "ddim", whose noise level
0 is the usual fast deterministic evaluation sampler); "" = the scheduler's kind (DDPMScheduler → "ddpm",
DDIMScheduler → "ddim"). The scheduler is a private copy of the pipeline's own class (its timestep rule).

Classifier-free guidance mixes the model outputs, ``uncond + s·(cond − uncond)`` (MDM's
ClassifierFreeSampleModel), with the pipeline's unconditional branch (``uncond``: zero text embeddings as
MDM, or the negative prompt); an unconditional pipeline runs one pass whatever the guidance scale.
"""

from __future__ import annotations

import torch
from diffusers import DDIMScheduler

from ddpo_grpo.policies.diffusion import DiffusionPolicy


class DenoiserPolicy(DiffusionPolicy):
    denoiser_attr = "denoiser"
    lora_layers_kwarg = "denoiser_lora_layers"
    sample_kind = "array"  # the model's own space, decoded by its normalizer (MotionWorld: motion features)

    def __init__(self, pipeline, settings=None, **kwargs):
        super().__init__(pipeline, settings, **kwargs)
        self.prediction_type = pipeline.prediction_type
        self.variance = pipeline.variance

    def default_kernel(self) -> str:
        """The scheduler's kind: "ddim" for a DDIMScheduler, else "ddpm"."""
        return "ddim" if isinstance(self.pipeline.scheduler, DDIMScheduler) else "ddpm"

    def make_scheduler(self):
        """A private copy of the pipeline's scheduler: set_timesteps mutates it, the pipeline's own stays untouched."""
        return type(self.pipeline.scheduler).from_config(self.pipeline.scheduler.config)

    @property
    def shard_blocks(self) -> tuple[str, ...]:
        """The pipeline's shard_blocks, else the class of the items of the denoiser's longest nn.ModuleList."""
        configured = tuple(self.pipeline.config.get("shard_blocks") or ())
        if configured:
            return configured
        lists = [m for m in self.denoiser.modules() if isinstance(m, torch.nn.ModuleList) and len(m)]
        longest = max(lists, key=len, default=None)
        return tuple(dict.fromkeys(type(m).__name__ for m in longest)) if longest is not None else ()

    def check_resolution(self) -> None:
        """No pixels: sample.resolution is ignored (the sample shape is the pipeline's sample_shape)."""

    @classmethod
    def native_resolution(cls, pipeline) -> int:
        return 0

    def latent_shape(self) -> tuple[int, ...]:
        """The pipeline's sample_shape: one sample without the batch dim (the initial noise's shape)."""
        return tuple(int(s) for s in self.pipeline.config.sample_shape)

    @property
    def default_lora_targets(self) -> tuple[str, ...]:
        """The pipeline's lora_target_modules, else every nn.Linear of the denoiser outside nn.MultiheadAttention.

        (nn.MultiheadAttention's forward reads its out_proj weights directly: a LoRA there would be skipped.)
        """
        configured = tuple(self.pipeline.config.get("lora_target_modules") or ())
        if configured:
            return configured
        skipped = {
            f"{name}.{child}" if name else child
            for name, module in self.denoiser.named_modules()
            if isinstance(module, torch.nn.MultiheadAttention)
            for child, _ in module.named_modules()
            if child
        }
        targets = tuple(
            name
            for name, module in self.denoiser.named_modules()
            if isinstance(module, torch.nn.Linear) and name and name not in skipped
        )
        if not targets:
            raise ValueError(
                f"{type(self.denoiser).__name__} has no nn.Linear layer for LoRA: set "
                "train.lora_target_modules, or the pipeline's lora_target_modules"
            )
        return targets

    def frozen_modules(self) -> list[torch.nn.Module]:
        """The text encoder; the normalizer is left out so that it stays float32 (it has nothing to train)."""
        return [m for m in super().frozen_modules() if m is not self.pipeline.normalizer]

    # ---- family-specific pieces -------------------------------------------------------------
    def encode_prompts(self, prompts, negative_prompt=""):
        return self.pipeline.encode_prompt(list(prompts), negative_prompt, self.device)  # [B, D] / [B, L, D] each

    def forward(self, model, latents, timesteps, cond):
        return self.pipeline.call_denoiser(model, latents, timesteps, cond)

    def predict(self, model, latents, timesteps, cond, guidance_scale: float, detach_uncond: bool = False):
        """``Policy.predict``; without a condition (unconditional pipeline) one pass, whatever the guidance scale."""
        if not cond:
            return self.forward(model, latents, timesteps, {})
        return super().predict(model, latents, timesteps, cond, guidance_scale, detach_uncond)

    def guide(self, uncond, text, guidance_scale: float):
        """The pipeline's guidance (CFG, then its normalizer's ``constrain`` hook), so sampling, training and
        ``DenoiserPipeline.__call__`` agree."""
        return self.pipeline.guide(uncond, text, guidance_scale)

    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        return dict(
            prompt=[r["prompt"] for r in rows] if self.pipeline.text_encoder is not None else None,
            num_samples=len(latents),
            negative_prompt=negative_prompt,
            guidance_scale=guidance_scale,
            latents=latents,
            eta=0.0,
        )

    def reference_scheduler(self):
        """The pipeline's own scheduler: its ``__call__`` steps with it (a DDPMScheduler's step always draws noise,
        so only a DDIMScheduler pipeline, sampled by the "ddim" kernel at noise level 0, is deterministic)."""
        return type(self.pipeline.scheduler).from_config(self.pipeline.scheduler.config)

    @torch.no_grad()
    def reference_sample(self, rows, latents, num_steps, guidance_scale, negative_prompt=""):
        """``DenoiserPipeline.__call__`` (its output is the decoded samples, not images)."""
        kwargs = self.pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        return self.pipeline(num_inference_steps=num_steps, **kwargs).samples.float()

    def decode(self, latents):
        return self.pipeline.decode(latents)  # [B, ...] the normalizer's decode, float32

    def preview(self, samples):
        return self.pipeline.preview(samples)  # [N, 3, H, W] in [0, 1]


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import FamilySpec  # noqa: E402 (the spec block closes the adapter file)

SPEC = FamilySpec(
    name="denoiser",
    pipeline="DenoiserPipeline",
    adapter=DenoiserPolicy,
    tiny="ddpo_grpo.tiny:build_tiny_denoiser",
    kit_tiny_kwargs={"scheduler": "ddim"},  # the kit's reference sampler: DDIM at η = 0
    pipeline_target="ddpo_grpo.denoiser_pipeline:DenoiserPipeline",
    benchmark=False,  # no diffusers pipeline call to compare the rollout with
)
