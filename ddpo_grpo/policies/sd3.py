"""Adapter for ``StableDiffusion3Pipeline`` (SD3 / SD3.5): SD3Transformer2DModel with flow matching.

The schedule comes from the pipeline's own ``FlowMatchEulerDiscreteScheduler`` (so ``shift`` and dynamic
shifting apply as in diffusers); the transition is one of the stochastic kernels of ``ddpo_grpo.sde``
(``sample.sde_type``), which turns the deterministic ODE into a Gaussian policy.
"""

from __future__ import annotations

import torch

from ddpo_grpo.policies.base import Policy, Schedule
from ddpo_grpo.sde import Step, check_flow_args, flow_forward, flow_sde_step


class SD3Policy(Policy):
    denoiser_attr = "transformer"
    lora_layers_kwarg = "transformer_lora_layers"
    default_lora_targets = ("to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out")
    noise_field = "sample.noise_level"

    def __init__(self, pipeline, **kwargs):
        from diffusers import FlowMatchEulerDiscreteScheduler

        super().__init__(pipeline, **kwargs)
        self.scheduler = FlowMatchEulerDiscreteScheduler.from_config(pipeline.scheduler.config)

    def encode_prompts(self, prompts, negative_prompt=""):
        prompts = list(prompts)
        negative = [negative_prompt] * len(prompts)
        embeds, neg_embeds, pooled, neg_pooled = self.pipeline.encode_prompt(
            prompt=prompts,
            prompt_2=prompts,
            prompt_3=prompts,
            device=self.device,
            num_images_per_prompt=1,
            do_classifier_free_guidance=True,
            negative_prompt=negative,
            negative_prompt_2=negative,
            negative_prompt_3=negative,
            max_sequence_length=self.max_sequence_length,
        )
        # embeds: [B, L, D]; pooled: [B, P]
        return {"embeds": embeds, "neg_embeds": neg_embeds, "pooled": pooled, "neg_pooled": neg_pooled}

    def schedule(self, num_steps):
        """σ_0 = 1 > σ_1 > … > σ_T = 0 from the scheduler (shifted); the denoiser sees t = 1000·σ."""
        sched = self.scheduler
        kwargs = {}
        if sched.config.get("use_dynamic_shifting", False):
            from diffusers.pipelines.stable_diffusion_3.pipeline_stable_diffusion_3 import calculate_shift

            _, h, w = self.latent_shape()
            patch = self.denoiser.config.patch_size
            kwargs["mu"] = calculate_shift(
                (h // patch) * (w // patch),
                sched.config.get("base_image_seq_len", 256),
                sched.config.get("max_image_seq_len", 4096),
                sched.config.get("base_shift", 0.5),
                sched.config.get("max_shift", 1.16),
            )
        sched.set_timesteps(num_steps, **kwargs)
        sigmas = sched.sigmas.float()  # [T + 1], last = 0
        return Schedule(
            timesteps=sched.timesteps.float().clone(),
            kernel_args={"sigma": sigmas[:-1].clone(), "sigma_next": sigmas[1:].clone()},
        )

    def check(self, schedule, noise_levels):
        k = schedule.kernel_args
        check_flow_args(k["sigma"], k["sigma_next"], noise_levels.to(k["sigma"].device), self.sde_type)

    def forward(self, model, latents, timesteps, cond):
        return model(
            hidden_states=latents,
            timestep=timesteps,
            encoder_hidden_states=cond["embeds"],
            pooled_projections=cond["pooled"],
            return_dict=False,
        )[0]

    def step(self, model_output, latents, kernel_args, noise_level, *, prev_sample=None, generator=None) -> Step:
        return flow_sde_step(
            model_output,
            latents,
            kernel_args["sigma"],
            kernel_args["sigma_next"],
            noise_level=noise_level,
            sde_type=self.sde_type,
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

    def decode(self, latents):
        vae = self.pipeline.vae
        shift = vae.config.shift_factor or 0.0
        images = vae.decode((latents.to(vae.dtype) / vae.config.scaling_factor) + shift, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)  # [B, 3, H, W]
