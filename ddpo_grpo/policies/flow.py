"""The kernel base of flow-matching (velocity) models: SD3 / SD3.5 and every family sampled the same way.

The schedule comes from the pipeline's own ``FlowMatchEulerDiscreteScheduler`` configuration (so ``shift``
and dynamic shifting apply as in diffusers); the transition is one of the stochastic kernels of
``ddpo_grpo.kernels.flow_sde_step`` (``sample.kernel`` = "flow_grpo" | "dance" | "cps"), which turn the
deterministic Euler ODE into a Gaussian policy with the same marginals (noise level 0 = the ODE itself).

A family adapter subclasses ``FlowPolicy`` and provides conditioning, the denoiser call and decoding; with
dynamic shifting it may override ``image_seq_len`` (the token count that sets the shift μ), ``pipeline_sigmas`` when
its pipeline hands the scheduler its own σ grid, and ``sampling_sigmas`` when its checkpoint ships another scheduler
whose σ grid FlowMatchEuler does not draw (Wan's UniPC).
"""

from __future__ import annotations

import torch

from ddpo_grpo.kernels import FLOW_KERNELS, Step, check_flow_args, flow_forward, flow_sde_step
from ddpo_grpo.policies.base import Policy, Schedule

#: the line's ends where the scheduler config omits them: (base_image_seq_len, max_image_seq_len, base_shift,
#: max_shift) as diffusers' FLUX.1, Kontext, Qwen-Image(-Edit/-Plus) and Z-Image pipelines fall back (0.42:
#: ``scheduler.config.get("max_shift", 1.15)`` in each ``__call__``), also FlowMatchEulerDiscreteScheduler's own
#: defaults. (SD3's pipeline writes 1.16 there, but its scheduler's config always carries max_shift, so the
#: fallback never applies to it.)
SHIFT_FALLBACKS = {"base_image_seq_len": 256, "max_image_seq_len": 4096, "base_shift": 0.5, "max_shift": 1.15}


def calculate_shift(seq_len: int, config) -> float:
    """μ of dynamic shifting: linear in the image token count between (base_image_seq_len, base_shift) and
    (max_image_seq_len, max_shift) of the scheduler config (SD3 §5.3.2, the resolution-dependent shift; the
    same line diffusers' SD3 and FLUX pipelines draw), each end falling back as the pipelines do
    (``SHIFT_FALLBACKS``)."""
    base_len, max_len, base_shift, max_shift = (config.get(k, v) for k, v in SHIFT_FALLBACKS.items())
    slope = (max_shift - base_shift) / (max_len - base_len)
    return seq_len * slope + (base_shift - slope * base_len)


def linear_sigmas(num_steps: int):
    """``linspace(1, 1/T, T)``: the unshifted σ grid FLUX's, Qwen-Image's and Z-Image's pipelines pass their scheduler
    (it then applies the time shift and appends σ_T = 0)."""
    import numpy as np

    return np.linspace(1.0, 1.0 / num_steps, num_steps)


class FlowPolicy(Policy):
    """Flow matching: σ_0 = 1 > σ_1 > … > σ_T = 0, x_σ = (1 − σ)·x0 + σ·ε, the denoiser predicts v = ε − x0."""

    kernels = FLOW_KERNELS

    def __init__(self, pipeline, settings=None, **kwargs):
        from diffusers import FlowMatchEulerDiscreteScheduler

        super().__init__(pipeline, settings, **kwargs)
        self.scheduler = FlowMatchEulerDiscreteScheduler.from_config(self.scheduler_config())

    def scheduler_config(self):
        """The flow scheduler's configuration (the pipeline's own; a family shipping another scheduler maps it here)."""
        return self.pipeline.scheduler.config

    def pipeline_sigmas(self, num_steps: int):
        """The σ grid the family's pipeline hands its scheduler before the shift (None = the scheduler's own
        ``linspace(1, σ_min, T)``; FLUX, Qwen-Image and Z-Image pass ``linspace(1, 1/T, T)``, see ``linear_sigmas``)."""
        return None

    def sampling_sigmas(self, num_steps: int) -> torch.Tensor | None:
        """The grid σ_0 … σ_T [T + 1] sampled as it is (no shift applied here), for a family whose checkpoint ships a
        scheduler with a grid of its own (Wan: UniPC); None = the flow scheduler's (its shift, ``pipeline_sigmas``)."""
        return None

    def image_seq_len(self) -> int:
        """Image tokens the denoiser sees, for dynamic shifting (patchified latent: (h / p)·(w / p))."""
        _, h, w = self.latent_shape()[-3:]
        patch = self.denoiser.config.patch_size
        return (h // patch) * (w // patch)

    def schedule(self, num_steps):
        """σ_0 = 1 > σ_1 > … > σ_T = 0 from the scheduler (shifted; μ from ``image_seq_len`` with dynamic
        shifting), or the family's own grid (``sampling_sigmas``); the denoiser sees t = 1000·σ."""
        sched = self.scheduler
        grid = self.sampling_sigmas(num_steps)
        if grid is not None:
            grid = grid.float()  # [T + 1]
            return Schedule(
                timesteps=grid[:-1] * sched.config.num_train_timesteps,  # as FlowMatchEuler given these σ's
                kernel_args={"sigma": grid[:-1].clone(), "sigma_next": grid[1:].clone()},
            )
        kwargs = {}
        if sched.config.get("use_dynamic_shifting", False):
            kwargs["mu"] = calculate_shift(self.image_seq_len(), sched.config)
        sigmas = self.pipeline_sigmas(num_steps)
        if sigmas is not None:
            kwargs["sigmas"] = sigmas
        sched.set_timesteps(num_steps, **kwargs)
        sigmas = sched.sigmas.float()  # [T + 1], last = 0
        return Schedule(
            timesteps=sched.timesteps.float().clone(),
            kernel_args={"sigma": sigmas[:-1].clone(), "sigma_next": sigmas[1:].clone()},
        )

    def check(self, schedule, noise_levels):
        k = schedule.kernel_args
        check_flow_args(k["sigma"], k["sigma_next"], noise_levels.to(k["sigma"].device), self.kernel)

    def step(self, model_output, latents, kernel_args, noise_level, *, prev_sample=None, generator=None) -> Step:
        return flow_sde_step(
            model_output,
            latents,
            kernel_args["sigma"],
            kernel_args["sigma_next"],
            noise_level=noise_level,
            sde_type=self.kernel,
            prev_sample=prev_sample,
            generator=generator,
            validate=False,
        )

    def forward_process(self, x0, u, noise) -> tuple:
        """σ = shift·u / (1 + (shift − 1)·u) (the scheduler's static time shift, SD3 §5.3.2; u itself with
        dynamic shifting, whose shift depends on the resolution), timestep 1000·σ, rectified-flow noising."""
        cfg = self.scheduler.config
        shift = 1.0 if cfg.get("use_dynamic_shifting", False) else float(cfg.get("shift", 1.0))
        u = u.to(torch.float32)
        sigma = shift * u / (1 + (shift - 1) * u)  # [B]
        return sigma * 1000.0, flow_forward(x0, sigma, noise)
