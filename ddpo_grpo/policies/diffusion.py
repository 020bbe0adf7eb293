"""The kernel base of DDPM-family models (ε-, v- or x0-prediction): SD 1.x/2.x, InstructPix2Pix, generic denoisers.

Whatever scheduler a checkpoint ships, the policy is one of two exact Gaussian kernels of ``ddpo_grpo.kernels`` on
the checkpoint's noise schedule (``sample.kernel``):

    "ddim"  ``ddim_step``: DDIM with η = ``sample.noise_level`` (η = 0: deterministic DDIM; η = 1: DDPO's default)
    "ddpm"  ``ddpm_step``: ancestral sampling, the posterior q(x_prev | x_t, x̂₀) with the scheduler's
            variance (fixed_small / fixed_large), its std × ``sample.noise_level`` (1 = the sampler of DDPM and MDM;
            0 = the deterministic posterior-mean chain, NOT DDIM)

The respaced timesteps are the scheduler's own ``set_timesteps`` (its ``timestep_spacing``). The previous ᾱ
of step j is what the scheduler's own step would use: for a ``DDIMScheduler``, ᾱ at t − N_train // T, or
``final_alpha_cumprod`` below 0; for a ``DDPMScheduler``, ᾱ at the next timestep of the list, 1 after the last.
"""

from __future__ import annotations

import torch

from ddpo_grpo.kernels import (
    DDPM_VARIANCES,
    DIFFUSION_KERNELS,
    Step,
    check_ddim_args,
    check_ddpm_args,
    ddim_step,
    ddpm_forward,
    ddpm_step,
    predicted_x0,
)
from ddpo_grpo.policies.base import Policy, Schedule


class DiffusionPolicy(Policy):
    """DDPM-family kernels on ``self.scheduler`` (set by ``make_scheduler``) with ``self.prediction_type``."""

    kernels = DIFFUSION_KERNELS

    def __init__(self, pipeline, settings=None, **kwargs):
        super().__init__(pipeline, settings, **kwargs)
        self.scheduler = self.make_scheduler()
        self.prediction_type = self.scheduler.config.prediction_type
        variance = self.scheduler.config.get("variance_type", "fixed_small")
        self.variance = variance if variance in DDPM_VARIANCES else "fixed_small"

    def make_scheduler(self):
        """A private scheduler of the pipeline's noise schedule (default: a ``DDIMScheduler`` built from its config).

        x̂0 clipping and thresholding are off: the kernels never clip (a config without ``clip_sample``, e.g. SDXL's
        Euler one, would otherwise get DDIMScheduler's default True, which the plain pipeline would then apply)."""
        from diffusers import DDIMScheduler

        return DDIMScheduler.from_config(self.pipeline.scheduler.config, clip_sample=False, thresholding=False)

    def schedule(self, num_steps):
        """The scheduler's timesteps and ᾱ pairs (module docstring), computed in float64."""
        from diffusers import DDIMScheduler

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

    def predicted_x0(self, model_output: torch.Tensor, latents: torch.Tensor, timesteps: torch.Tensor):
        """x̂0 [B, ...] of a denoiser output at (x_t, t) (ε / v / x0 prediction); differentiable."""
        alphas = self.scheduler.alphas_cumprod.to(latents.device)
        return predicted_x0(model_output, latents, alphas[timesteps.long()], self.prediction_type)
