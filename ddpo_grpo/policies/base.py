"""The policy-adapter contract: all that the sampler and the trainer know about a model family.

A ``Policy`` wraps one diffusers pipeline object. It uses the pipeline's own prompt encoding, VAE and
scheduler configuration, but runs the denoiser itself, one step at a time, so that every transition
can be recorded (rollout) and re-scored later (training). It is the only place that knows a model's
calling convention; ``rollout.py`` and ``trainer.py`` work with any subclass.

A subclass provides:
    latent_shape()                            -> shape of one latent / sample without the batch dim
    encode_prompts(prompts, negative_prompt)  -> cond: dict of tensors with batch dim first;
                                                 keys "neg_<k>" hold the unconditional twin of "<k>"
    encode_rows(rows, negative_prompt)        -> cond of dataset rows (what the rollout calls; default: the
                                                 rows' prompts through encode_prompts)
    schedule(num_steps)                       -> Schedule (denoiser timesteps + kernel scalars per step)
    check(schedule, noise_levels)             -> ValueError unless the kernel accepts them; called once per
                                                 rollout, so that step() can skip per-step validation
    forward(model, latents, timesteps, cond)  -> raw denoiser output for one (positive or negative) branch
    step(model_output, latents, kernel_args, noise_level, prev_sample, generator) -> sde.Step
    decode(latents)                           -> the samples rewards score (images in [0, 1]; other families
                                                 their own, e.g. denormalised motion features)
    preview(samples)                          -> images for grids and reports (default: the samples)
    forward_process(x0, u, noise)             -> (timesteps, sde.Noised): the clean latent noised to level
                                                 u ∈ (0, 1) and the pretraining target there (the
                                                 forward-process objectives and supervised losses)
and the class attributes below. Image families also use ``check_resolution`` / ``native_resolution`` (the VAE's
downsampling factor); a family without pixels (``policies.denoiser``) overrides them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ddpo_grpo.sde import Step


@dataclass
class Schedule:
    """Per-step parameters of a T-step sampling schedule.

    timesteps:   [T] the time input fed to the denoiser at step j (x_j -> x_{j+1}).
    kernel_args: name -> [T] scalars the transition kernel needs at step j
                 (flow: sigma, sigma_next; DDIM: alpha_prod_t, alpha_prod_t_prev).
    """

    timesteps: torch.Tensor
    kernel_args: dict[str, torch.Tensor]

    @property
    def num_steps(self) -> int:
        return int(self.timesteps.shape[0])


class Policy:
    """Base adapter. See the module docstring for what a model family implements."""

    #: attribute of the pipeline that holds the trainable denoiser ("unet" / "transformer")
    denoiser_attr: ClassVar[str]
    #: keyword of `Pipeline.save_lora_weights` that receives the denoiser's LoRA layers
    lora_layers_kwarg: ClassVar[str]
    #: LoRA target modules used when `train.lora_target_modules` is empty
    default_lora_targets: ClassVar[tuple[str, ...]]
    #: config field that sets the kernel's stochasticity, for messages and logs
    noise_field: ClassVar[str]
    #: values of `kernel` (`sample.kernel`) the family offers; () = no choice (SD: DDIM; SD3: `sde_type`)
    kernels: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self, pipeline, *, resolution: int, max_sequence_length: int = 77, sde_type: str = "flow_grpo", kernel: str = ""
    ):
        """Wrap ``pipeline``.

        resolution: image side in pixels; max_sequence_length: text tokens of encoders that take it
        (SD3's T5 slot); sde_type: the flow kernel (``sde.flow_sde_step``), ignored by DDIM families;
        kernel: the transition kernel of families that offer a choice (``kernels``), "" = the family's default.
        """
        if kernel and kernel not in self.kernels:
            if self.kernels:
                raise ValueError(
                    f"sample.kernel={kernel!r} is not one of {list(self.kernels)} for "
                    f"{type(self).__name__} ('' = its default)"
                )
            raise ValueError(
                f"sample.kernel={kernel!r}: {type(self).__name__} has no kernel choice; leave sample.kernel empty "
                "(it selects the kernel of generic denoiser pipelines: 'ddpm' or 'ddim')"
            )
        self.pipeline = pipeline
        self.sde_type = sde_type
        self.resolution = int(resolution)
        self.max_sequence_length = int(max_sequence_length)
        self.check_resolution()

    def check_resolution(self) -> None:
        """ValueError unless ``self.resolution`` suits the model (image families: a multiple of the VAE's factor)."""
        factor = self.vae_scale_factor
        if self.resolution % factor:
            raise ValueError(
                f"sample.resolution={self.resolution} must be a multiple of the VAE's downsampling factor {factor}"
            )

    @classmethod
    def native_resolution(cls, pipeline) -> int:
        """The pipeline's native ``resolution`` (image families: denoiser sample_size × VAE downsampling factor)."""
        size = getattr(pipeline, cls.denoiser_attr).config.sample_size
        size = size[0] if isinstance(size, (list, tuple)) else size
        return int(size) * 2 ** (len(pipeline.vae.config.block_out_channels) - 1)

    # ---- model access -------------------------------------------------------------------------
    @property
    def denoiser(self) -> torch.nn.Module:
        return getattr(self.pipeline, self.denoiser_attr)

    @property
    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.pipeline.vae.config.block_out_channels) - 1)

    @property
    def device(self) -> torch.device:
        # (diffusers' ModelMixin.device walks every submodule: ~1 ms on a LoRA'd model)
        return next(self.denoiser.parameters()).device

    def latent_shape(self) -> tuple[int, ...]:
        """Shape of one latent without the batch dim (image families: (C, h, w) at ``self.resolution``)."""
        side = self.resolution // self.vae_scale_factor
        return (self.denoiser.config.in_channels, side, side)

    def frozen_modules(self) -> list[torch.nn.Module]:
        """Every pipeline module that is never trained (VAE, text encoders)."""
        modules = []
        for name, value in self.pipeline.components.items():
            if isinstance(value, torch.nn.Module) and name != self.denoiser_attr:
                modules.append(value)
        return modules

    # ---- family-specific pieces -------------------------------------------------------------
    def encode_prompts(self, prompts: list[str], negative_prompt: str = "") -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def encode_rows(self, rows: list[dict], negative_prompt: str = "") -> dict[str, torch.Tensor]:
        """The condition of dataset rows, what the rollout stores per sample: by default ``encode_prompts`` of their
        prompts; an image-conditioned family also reads other fields (``policies.ip2p``: ``source_image``)."""
        return self.encode_prompts([r["prompt"] for r in rows], negative_prompt)

    def schedule(self, num_steps: int) -> Schedule:
        raise NotImplementedError

    def check(self, schedule: Schedule, noise_levels: torch.Tensor) -> None:
        raise NotImplementedError

    def forward(self, model, latents, timesteps, cond) -> torch.Tensor:
        raise NotImplementedError

    def step(self, model_output, latents, kernel_args, noise_level, *, prev_sample=None, generator=None) -> Step:
        raise NotImplementedError

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward_process(self, x0: torch.Tensor, u: torch.Tensor, noise: torch.Tensor):
        """Noise clean latents x0 [B, ...] to levels u [B] in (0, 1) with ``noise`` [B, ...]: (denoiser timesteps
        [B], ``sde.Noised``). u is the family's noise fraction (flow: σ after the scheduler's shift; DDPM: t / T)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward_process")

    def preview(self, samples: torch.Tensor) -> torch.Tensor:
        """Decoded samples as float images [N, 3, H, W] in [0, 1], for grids and reports (images: themselves)."""
        return samples

    # ---- shared logic ---------------------------------------------------------------------------
    def predict(
        self, model, latents, timesteps, cond, guidance_scale: float, detach_uncond: bool = False
    ) -> torch.Tensor:
        """Denoiser output with classifier-free guidance when guidance_scale > 1.

        CFG (Ho & Salimans 2022): ε̃ = ε(x, ∅) + w·(ε(x, c) − ε(x, ∅)). Both branches run as one batch of
        2B, unconditional first, exactly as the diffusers pipelines do, so that sampling and training
        (which both call this method) see identical arithmetic. ``detach_uncond`` stops the gradient
        through ε(x, ∅) (Flow-GRPO's choice): the value is unchanged, the gradient w·∇ε(x, c) instead of the
        exact (1 − w)·∇ε(x, ∅) + w·∇ε(x, c) (``train.cfg_uncond_grad``).
            latents: [B, C, h, w]; timesteps: [B]; cond: dict of [B, ...] -> [B, C, h, w]
        """
        positive = {k: v for k, v in cond.items() if not k.startswith("neg_")}
        if guidance_scale <= 1.0:
            return self.forward(model, latents, timesteps, positive)
        both = {k: torch.cat([cond["neg_" + k], v]) for k, v in positive.items()}  # [2B, ...]
        out = self.forward(model, torch.cat([latents, latents]), torch.cat([timesteps, timesteps]), both)
        uncond, text = out.chunk(2)  # [B, C, h, w] each
        if detach_uncond:
            uncond = uncond.detach()
        return uncond + guidance_scale * (text - uncond)

    # ---- LoRA and export ------------------------------------------------------------------------
    def add_lora(self, *, rank: int, alpha: float, target_modules, dropout: float = 0.0) -> None:
        """Attach a peft LoRA adapter named "default" to the denoiser (base weights frozen)."""
        from peft import LoraConfig

        targets = list(target_modules) or list(self.default_lora_targets)
        self.denoiser.requires_grad_(False)
        config = LoraConfig(
            r=rank, lora_alpha=alpha, lora_dropout=dropout, init_lora_weights="gaussian", target_modules=targets
        )
        self.denoiser.add_adapter(config)

    def save_lora(self, out_dir, model: torch.nn.Module) -> None:
        """Write the LoRA layers of ``model`` as ``Pipeline.save_lora_weights`` does (read by ``load_lora_weights``).

        The layers are saved in peft's key format, which every diffusers LoRA loader accepts (the old
        ``convert_state_dict_to_diffusers`` renaming to ``lora.up/down`` is NOT applied: SD3's loader silently
        drops such keys), together with the adapter's LoraConfig as metadata, without which a loader
        assumes lora_alpha = rank and scales the update wrongly whenever alpha ≠ rank.
        """
        from peft.utils import get_peft_model_state_dict

        layers = get_peft_model_state_dict(model)
        metadata = model.peft_config["default"].to_dict()
        type(self.pipeline).save_lora_weights(
            str(out_dir), **{self.lora_layers_kwarg: layers, self.lora_metadata_kwarg: metadata}
        )

    @property
    def lora_metadata_kwarg(self) -> str:
        """``unet_lora_adapter_metadata`` / ``transformer_lora_adapter_metadata`` of ``save_lora_weights``."""
        return self.lora_layers_kwarg.replace("_lora_layers", "_lora_adapter_metadata")

    def save_pipeline(self, out_dir) -> None:
        """Write the complete pipeline (full fine-tune), loadable with ``Pipeline.from_pretrained``."""
        self.pipeline.save_pretrained(str(out_dir))
