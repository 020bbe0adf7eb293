"""Adapter for ``DenoiserPipeline`` (ddpo_grpo.pipelines): any denoiser f(x_t, t, **cond), sampled with DDPM or DDIM.

The sample is the model's own space (no VAE): ``latent_shape()`` is the pipeline's ``sample_shape``, and
``sample.resolution`` (pixels) means nothing here and is ignored (as is ``sample.max_sequence_length``: the
tokenizer's own max length applies). The noise schedule comes from the pipeline's scheduler (respaced to
``num_steps`` by its ``set_timesteps``, its ``timestep_spacing``), the prediction type from its
``prediction_type``.

Kernel (``ddpo_grpo.sde``), chosen at construction (``kernel``, the config's ``sample.kernel``):
    "ddpm"  ``ddpm_step``: ancestral sampling, the posterior q(x_prev | x_t, x̂₀) with the scheduler's
            variance_type (fixed_small / fixed_large); std × η (``sample.eta``): η = 1 is MDM's sampler,
            η = 0 the deterministic posterior-mean chain (what evaluation's noise level 0 gives: NOT DDIM)
    "ddim"  ``ddim_step``: DDIM with η (η = 0: deterministic DDIM, the usual fast evaluation sampler)
    ""      the scheduler's kind: DDPMScheduler → "ddpm", DDIMScheduler → "ddim"; ``sde_type`` "ddpm" / "ddim"
            also selects (for scripts that pass --sde_type); the flow kernels' names are ignored, as SD does
The stochasticity field is ``sample.eta`` (``noise_field``), in [0, 1].

Classifier-free guidance mixes the model outputs, ``uncond + s·(cond − uncond)`` (MDM's
ClassifierFreeSampleModel), with the pipeline's unconditional branch (``uncond``: zero text embeddings as
MDM, or the negative prompt); an unconditional pipeline runs one pass whatever the guidance scale.
"""

from __future__ import annotations

import torch
from diffusers import DDIMScheduler

from ddpo_grpo.policies.base import Policy, Schedule
from ddpo_grpo.sde import Step, check_ddim_args, check_ddpm_args, ddim_step, ddpm_forward, ddpm_step

KERNELS = ("ddpm", "ddim")


class DenoiserPolicy(Policy):
    denoiser_attr = "denoiser"
    lora_layers_kwarg = "denoiser_lora_layers"
    noise_field = "sample.eta"
    kernels = KERNELS

    def __init__(self, pipeline, *, resolution: int = 0, kernel: str = "", sde_type: str = "", **kwargs):
        super().__init__(pipeline, resolution=resolution, kernel=kernel, sde_type=sde_type, **kwargs)
        natural = "ddim" if isinstance(pipeline.scheduler, DDIMScheduler) else "ddpm"
        self.kernel = kernel or (sde_type if sde_type in KERNELS else natural)
        # a private copy: set_timesteps mutates the scheduler, and the pipeline's own stays untouched
        self.scheduler = type(pipeline.scheduler).from_config(pipeline.scheduler.config)
        self.prediction_type = pipeline.prediction_type
        self.variance = pipeline.variance

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

    def schedule(self, num_steps):
        """The scheduler's timesteps and ᾱ pairs, the previous ᾱ as the scheduler's own step finds it.

        DDPMScheduler: the next timestep of the list, ᾱ = 1 after the last (its ``previous_timestep``);
        DDIMScheduler: t − N_train // T, ``final_alpha_cumprod`` below 0 (as ``SDPolicy``).
        """
        sched = self.scheduler
        sched.set_timesteps(num_steps)
        timesteps = sched.timesteps.clone().long()  # [T], descending
        alphas = sched.alphas_cumprod.to(torch.float64)  # [N_train]
        if isinstance(sched, DDIMScheduler):
            prev = timesteps - sched.config.num_train_timesteps // num_steps  # [T]
            final = torch.as_tensor(sched.final_alpha_cumprod, dtype=torch.float64)
        else:
            prev = torch.cat([timesteps[1:], timesteps.new_full((1,), -1)])  # [T]
            final = torch.ones((), dtype=torch.float64)
        alpha_prev = torch.where(prev >= 0, alphas[prev.clamp(min=0)], final)  # [T]
        return Schedule(
            timesteps=timesteps,
            kernel_args={"alpha_prod_t": alphas[timesteps].float(), "alpha_prod_t_prev": alpha_prev.float()},
        )

    def check(self, schedule, noise_levels):
        k = schedule.kernel_args
        check = check_ddpm_args if self.kernel == "ddpm" else check_ddim_args
        check(k["alpha_prod_t"], k["alpha_prod_t_prev"], noise_levels.to(k["alpha_prod_t"].device))

    def forward(self, model, latents, timesteps, cond):
        return self.pipeline.call_denoiser(model, latents, timesteps, cond)

    def predict(self, model, latents, timesteps, cond, guidance_scale: float, detach_uncond: bool = False):
        """``Policy.predict``; without a condition (unconditional pipeline) one pass, whatever the guidance scale."""
        if not cond:
            return self.forward(model, latents, timesteps, {})
        return super().predict(model, latents, timesteps, cond, guidance_scale, detach_uncond)

    def step(self, model_output, latents, kernel_args, noise_level, *, prev_sample=None, generator=None) -> Step:
        a_t, a_prev = kernel_args["alpha_prod_t"], kernel_args["alpha_prod_t_prev"]
        common = dict(
            prev_sample=prev_sample, generator=generator, prediction_type=self.prediction_type, validate=False
        )
        if self.kernel == "ddpm":
            return ddpm_step(model_output, latents, a_t, a_prev, eta=noise_level, variance=self.variance, **common)
        return ddim_step(model_output, latents, a_t, a_prev, eta=noise_level, **common)

    def forward_process(self, x0, u, noise) -> tuple:
        """Training timestep t = round(u·(N − 1)) of the scheduler's N, ᾱ_t, DDPM noising and target."""
        alphas = self.scheduler.alphas_cumprod.to(x0.device)  # [N]
        t = torch.round(u.to(torch.float32) * (len(alphas) - 1)).long().clamp(0, len(alphas) - 1)  # [B]
        return t, ddpm_forward(x0, alphas[t], noise, self.prediction_type)

    def decode(self, latents):
        return self.pipeline.decode(latents)  # [B, ...] the normalizer's decode, float32

    def preview(self, samples):
        return self.pipeline.preview(samples)  # [N, 3, H, W] in [0, 1]
