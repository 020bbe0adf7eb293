"""Adapter for ``StableDiffusionPipeline`` (SD 1.x / 2.x): UNet2DConditionModel sampled with DDIM."""

from __future__ import annotations

import torch

from ddpo_grpo.policies.base import Policy, Schedule
from ddpo_grpo.sde import Step, check_ddim_args, ddim_step, ddpm_forward


class SDPolicy(Policy):
    denoiser_attr = "unet"
    lora_layers_kwarg = "unet_lora_layers"
    default_lora_targets = ("to_q", "to_k", "to_v", "to_out.0")
    noise_field = "sample.eta"

    def __init__(self, pipeline, **kwargs):
        from diffusers import DDIMScheduler

        super().__init__(pipeline, **kwargs)
        # Whatever scheduler the checkpoint ships, the policy is the DDIM kernel on its noise schedule.
        self.scheduler = DDIMScheduler.from_config(pipeline.scheduler.config)
        self.prediction_type = self.scheduler.config.prediction_type

    def encode_prompts(self, prompts, negative_prompt=""):
        embeds, neg_embeds = self.pipeline.encode_prompt(
            list(prompts), self.device, 1, True, negative_prompt=[negative_prompt] * len(prompts)
        )
        return {"embeds": embeds, "neg_embeds": neg_embeds}  # [B, L, D] each

    def schedule(self, num_steps):
        """DDIM timesteps and ᾱ pairs, with the previous timestep t − N_train/T exactly as diffusers computes it."""
        sched = self.scheduler
        sched.set_timesteps(num_steps)
        timesteps = sched.timesteps.clone()  # [T], descending
        prev = timesteps - sched.config.num_train_timesteps // num_steps  # [T]
        alphas = sched.alphas_cumprod.to(torch.float64)
        alpha_t = alphas[timesteps]
        alpha_prev = torch.where(
            prev >= 0, alphas[prev.clamp(min=0)], torch.as_tensor(sched.final_alpha_cumprod, dtype=torch.float64)
        )
        return Schedule(
            timesteps=timesteps,
            kernel_args={"alpha_prod_t": alpha_t.float(), "alpha_prod_t_prev": alpha_prev.float()},
        )

    def check(self, schedule, noise_levels):
        k = schedule.kernel_args
        check_ddim_args(k["alpha_prod_t"], k["alpha_prod_t_prev"], noise_levels.to(k["alpha_prod_t"].device))

    def forward(self, model, latents, timesteps, cond):
        return model(latents, timesteps, encoder_hidden_states=cond["embeds"], return_dict=False)[0]

    def step(self, model_output, latents, kernel_args, noise_level, *, prev_sample=None, generator=None) -> Step:
        return ddim_step(
            model_output,
            latents,
            kernel_args["alpha_prod_t"],
            kernel_args["alpha_prod_t_prev"],
            eta=noise_level,
            prev_sample=prev_sample,
            generator=generator,
            prediction_type=self.prediction_type,
            validate=False,
        )

    def forward_process(self, x0, u, noise) -> tuple:
        """Training timestep t = round(u·(N − 1)) of the scheduler's N, ᾱ_t, DDPM noising and target."""
        alphas = self.scheduler.alphas_cumprod.to(x0.device)  # [N]
        t = torch.round(u.to(torch.float32) * (len(alphas) - 1)).long().clamp(0, len(alphas) - 1)  # [B]
        return t, ddpm_forward(x0, alphas[t], noise, self.prediction_type)

    def decode(self, latents):
        vae = self.pipeline.vae
        images = vae.decode(latents.to(vae.dtype) / vae.config.scaling_factor, return_dict=False)[0]
        return (images.float() / 2 + 0.5).clamp(0, 1)  # [B, 3, H, W]
