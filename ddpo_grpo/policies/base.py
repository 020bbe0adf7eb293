"""The policy-adapter contract: all that the sampler and the trainer know about a model family.

A ``Policy`` wraps one diffusers pipeline object. It uses the pipeline's own prompt encoding, VAE and
scheduler configuration, but runs the denoiser itself, one step at a time, so that every transition
can be recorded (rollout) and re-scored later (training). It is the only place that knows a model's
calling convention; ``rollout.py`` and the trainer work with any subclass.

Two kernel bases implement the schedule and the transition for a whole kind of model, so that a family
adapter only says how to condition, call and decode its model:

* ``policies.flow.FlowPolicy``: flow-matching (velocity) models, kernels "flow_grpo" | "dance" | "cps";
* ``policies.diffusion.DiffusionPolicy``: DDPM-family (ε / v / x0) models, kernels "ddim" | "ddpm".

A family adapter provides:
    encode_prompts(prompts, negative_prompt)  -> cond: dict of tensors with batch dim first;
                                                 keys "neg_<k>" hold the unconditional twin of "<k>"
    encode_rows(rows, negative_prompt)        -> cond of dataset rows (what the rollout calls; default: the
                                                 rows' prompts through encode_prompts; image-conditioned
                                                 families also read e.g. ``source_image``)
    forward(model, latents, timesteps, cond)  -> raw denoiser output for one (positive or negative) branch
    decode(latents)                           -> the samples rewards score (images in [0, 1]; other families
                                                 their own, e.g. denormalised motion features)
    latent_shape()                            -> shape of one latent without the batch dim (default: image
                                                 families' (C, h, w) at the resolution)
    preview(samples)                          -> images for grids and reports (default: the samples)
and the class attributes below; the kernel base provides ``schedule``, ``check``, ``step`` and
``forward_process`` (see there). Everything an adapter reads from the config arrives in one frozen
``PolicySettings`` (``policies/settings.py``), so no code outside ``policies/`` needs to know which family reads what.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from ddpo_grpo.kernels import BOUNDED_NOISE, DEFAULT_NOISE_LEVELS, KERNELS, Step

# the settings an adapter reads, their pipeline defaults and ranges (ddpo_grpo/policies/settings.py), importable here
from ddpo_grpo.policies.settings import (  # noqa: F401
    CLIP_TEXT_LENGTH,
    VAE_DTYPES,
    PolicySettings,
    noise_level_in_range,
    pipeline_text_length,
)


@dataclass
class Schedule:
    """Per-step parameters of a T-step sampling schedule.

    timesteps:   [T] the time input fed to the denoiser at step j (x_j -> x_{j+1}).
    kernel_args: name -> [T] scalars the transition kernel needs at step j
                 (flow: sigma, sigma_next; DDIM / DDPM: alpha_prod_t, alpha_prod_t_prev).
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
    #: values of `sample.kernel` the family's model can be sampled with (set by the kernel base)
    kernels: ClassVar[tuple[str, ...]] = ()
    #: True for families whose rows carry a condition image (`source_image`): their rollouts read the rows
    image_conditioned: ClassVar[bool] = False
    #: what ``decode`` returns: "image" (B, 3, H, W) in [0, 1], "video" (B, F, 3, H, W) in [0, 1], or the family's own
    sample_kind: ClassVar[str] = "image"
    #: class names of the denoiser's repeated blocks: the units FSDP shards and gradient checkpointing recomputes
    #: (``ddpo_grpo.sharding``); ``distributed.shard_blocks`` overrides them
    shard_blocks: ClassVar[tuple[str, ...]] = ()
    #: True when the family's diffusers pipeline decodes a VAE whose config says ``force_upcast`` in float32 under
    #: float16 weights (StableDiffusionXLPipeline's rule); ``sample.vae_dtype = "auto"`` follows it (``vae_dtype``)
    upcasts_vae: ClassVar[bool] = False

    def __init__(self, pipeline, settings: PolicySettings | None = None, **kwargs):
        """Wrap ``pipeline`` with ``settings`` (or the ``PolicySettings`` fields given as keywords)."""
        if settings is None:
            settings = PolicySettings.unset(**kwargs)
        elif kwargs:
            settings = dataclasses.replace(settings, **kwargs)
        self.pipeline = pipeline
        self.settings = settings.with_pipeline_defaults(type(pipeline))
        self.kernel = self.resolve_kernel(settings.kernel)
        self.noise_level = self.resolve_noise_level(settings.noise_level)
        self.resolution = int(settings.resolution) or self.native_resolution(pipeline)
        self.max_sequence_length = self.resolve_text_length(settings.max_sequence_length)
        if settings.vae_dtype not in VAE_DTYPES:
            raise ValueError(f"sample.vae_dtype={settings.vae_dtype!r} is not one of {list(VAE_DTYPES)}")
        self.check_resolution()
        if settings.attention_backend:
            self.set_attention_backend(settings.attention_backend)

    def set_attention_backend(self, backend: str) -> None:
        """``set_attention_backend(backend)`` on every denoiser module (diffusers' attention dispatcher); ValueError
        naming ``sample.attention_backend`` when the model has no such switch or does not know the backend.

        diffusers also makes the backend the whole process's default; this policy's processors hold it explicitly,
        so the process default is put back and other models in the process keep theirs."""
        from diffusers.models.attention_dispatch import _AttentionBackendRegistry as registry

        previous = registry.get_active_backend()[0]
        try:
            for module in self.denoiser_modules():
                if not hasattr(module, "set_attention_backend"):
                    raise ValueError(
                        f"sample.attention_backend={backend!r}: {type(module).__name__} has no "
                        "set_attention_backend; leave it empty for this family"
                    )
                try:
                    module.set_attention_backend(backend)
                except (ValueError, KeyError, RuntimeError, ImportError) as exc:
                    raise ValueError(f"sample.attention_backend={backend!r}: {exc}") from exc
        finally:
            registry.set_active_backend(previous)

    # ---- kernel -------------------------------------------------------------------------------
    def default_kernel(self) -> str:
        """The kernel used when ``sample.kernel`` is "" (the kernel base's first)."""
        return self.kernels[0]

    def resolve_kernel(self, kernel: str) -> str:
        """``kernel``, or the family's default for ""; ValueError naming ``sample.kernel`` if the family cannot use it."""
        if not kernel:
            return self.default_kernel()
        if kernel not in self.kernels:
            known = f"one of {list(self.kernels)}" if kernel in KERNELS else f"a kernel (one of {list(KERNELS)})"
            raise ValueError(
                f"sample.kernel={kernel!r} is not {known} for {type(self).__name__}: it takes "
                f"{list(self.kernels)} ('' = {self.default_kernel()!r})"
            )
        return kernel

    def resolve_noise_level(self, value: float | None) -> float:
        """``sample.noise_level`` for this policy's kernel: the kernel's default when None. A kernel the config names
        has its range checked at load (``config_checks``); the family's default kernel (``sample.kernel`` "") is
        known only here, so its range is checked here: ValueError when out of range (``noise_level_in_range``)."""
        level = DEFAULT_NOISE_LEVELS[self.kernel] if value is None else float(value)
        if not self.settings.kernel and not noise_level_in_range(level, self.kernel):
            bound = "[0, 1]" if self.kernel in BOUNDED_NOISE else "≥ 0"
            raise ValueError(f"sample.noise_level={value!r} must be {bound} for sample.kernel={self.kernel!r}")
        return level

    # ---- text length and the VAE's dtype ------------------------------------------------------------
    def resolve_text_length(self, value: int) -> int:
        """``sample.max_sequence_length``, or for 0 the pipeline's own default (``pipeline_text_length``); ValueError
        naming the field when negative."""
        length = int(value)
        if length < 0:
            raise ValueError(
                f"sample.max_sequence_length={value!r} must be ≥ 0 (0 = the pipeline's default, "
                f"{pipeline_text_length(type(self.pipeline))} for {type(self.pipeline).__name__})"
            )
        return length or pipeline_text_length(type(self.pipeline))

    def vae_dtype(self, weight_dtype: torch.dtype) -> torch.dtype:
        """The dtype the VAE is kept and run in, for a run whose frozen modules are in ``weight_dtype``
        (``mixed_precision``): ``sample.vae_dtype`` when set; "auto" = the checkpoint's rule: float32 when the
        weights are float16 and the VAE's config says ``force_upcast`` in a family whose pipeline honours it
        (``upcasts_vae``: diffusers' SDXL pipelines upcast such a VAE to decode, because it overflows in float16),
        else ``weight_dtype``. Decoding casts the latents to this dtype (each family's ``decode``)."""
        chosen = VAE_DTYPES[self.settings.vae_dtype]
        if chosen is not None:
            return chosen
        vae = getattr(self.pipeline, "vae", None)
        force_upcast = bool(vae is not None and vae.config.get("force_upcast", False))
        if weight_dtype == torch.float16 and self.upcasts_vae and force_upcast:
            return torch.float32
        return weight_dtype

    def frozen_dtype(self, module: torch.nn.Module, weight_dtype: torch.dtype) -> torch.dtype:
        """The dtype frozen ``module`` runs in: the VAE's ``vae_dtype``, every other frozen module ``weight_dtype``."""
        return self.vae_dtype(weight_dtype) if module is getattr(self.pipeline, "vae", None) else weight_dtype

    # ---- resolution -----------------------------------------------------------------------------
    def check_resolution(self) -> None:
        """ValueError unless ``self.resolution`` suits the model (image families: a multiple of the VAE's factor)."""
        factor = self.resolution_multiple
        if self.resolution % factor:
            low = max(factor, self.resolution // factor * factor)
            raise ValueError(
                f"sample.resolution={self.resolution} must be a multiple of {factor} for {type(self).__name__} "
                f"(nearest: {low} or {low + factor})"
            )

    @property
    def resolution_multiple(self) -> int:
        """What the resolution must be a multiple of: the VAE's downsampling factor (families with patches: × patch)."""
        return self.vae_scale_factor

    @classmethod
    def native_resolution(cls, pipeline) -> int:
        """The pipeline's native ``resolution`` (image families: denoiser sample_size × VAE downsampling factor)."""
        size = getattr(pipeline, cls.denoiser_attr).config.sample_size
        size = size[0] if isinstance(size, (list, tuple)) else size
        return int(size) * 2 ** (len(pipeline.vae.config.block_out_channels) - 1)

    # ---- model access -------------------------------------------------------------------------
    @property
    def denoiser(self) -> torch.nn.Module:
        """THE trainable module: what the trainer LoRA-wraps, optimises, wraps (DDP / FSDP) and passes to ``predict``."""
        return getattr(self.pipeline, self.denoiser_attr)

    def denoiser_modules(self) -> list[torch.nn.Module]:
        """The pipeline's own denoiser component(s) inside ``denoiser`` (two for a two-expert model)."""
        return [self.denoiser]

    @classmethod
    def denoiser_components(cls, index: dict) -> tuple[str, ...]:
        """The names of those components in a pipeline's ``model_index.json`` (``index``), before it is loaded."""
        return (cls.denoiser_attr,)

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
        denoisers = {id(m) for m in self.denoiser_modules()}
        modules = []
        for name, value in self.pipeline.components.items():
            if isinstance(value, torch.nn.Module) and name != self.denoiser_attr and id(value) not in denoisers:
                modules.append(value)
        return modules

    # ---- family-specific pieces -------------------------------------------------------------
    def encode_prompts(self, prompts: list[str], negative_prompt: str = "") -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def encode_rows(self, rows: list[dict], negative_prompt: str = "") -> dict[str, torch.Tensor]:
        """The condition of dataset rows, what the rollout stores per sample: by default ``encode_prompts`` of their
        prompts; an image-conditioned family also reads other fields (``policies.ip2p``: ``source_image``)."""
        return self.encode_prompts([r["prompt"] for r in rows], negative_prompt)

    def forward(self, model, latents, timesteps, cond) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def preview(self, samples: torch.Tensor) -> torch.Tensor:
        """Decoded samples as float images [N, 3, H, W] in [0, 1], for grids and reports (images: themselves)."""
        return samples

    # ---- the plain diffusers pipeline (the kit's and the benchmark's reference) -------------------------
    def pipeline_kwargs(self, rows: list[dict], latents: torch.Tensor, guidance_scale: float, negative_prompt: str):
        """Keyword arguments of ``pipeline(...)`` that sample what a rollout of ``rows`` from the initial noise
        ``latents`` [B, *latent_shape] samples with the ODE / η = 0 (prompts, sizes, guidance and the noise in the
        pipeline's own layout); ``reference_sample`` adds the steps, output type and scheduler."""
        raise NotImplementedError(f"{type(self).__name__} does not describe its plain pipeline call")

    def reference_scheduler(self):
        """The scheduler the plain pipeline runs with for the comparison: a copy of the policy's own (the pipeline's
        shipped one when it is the same kind, e.g. FlowMatchEuler; DDIM for an ε-model shipping Euler)."""
        return type(self.scheduler).from_config(self.scheduler.config)

    @torch.no_grad()
    def reference_sample(
        self, rows: list[dict], latents: torch.Tensor, num_steps: int, guidance_scale: float, negative_prompt: str = ""
    ) -> torch.Tensor:
        """The unmodified diffusers pipeline's ``__call__`` on the same rows and initial noise, with
        ``reference_scheduler`` swapped in for the call: decoded samples as ``decode`` returns them (float32).

        With noise level 0 a rollout must reproduce it (the adapter test kit checks ≤ 1e-5, or the documented reason
        where a family's pipeline differs). ``scripts/benchmark.py`` times it against the rollout."""
        kwargs = self.pipeline_kwargs(rows, latents, guidance_scale, negative_prompt)
        shipped = self.pipeline.scheduler
        self.pipeline.scheduler = self.reference_scheduler()
        try:
            out = self.pipeline(num_inference_steps=num_steps, output_type="pt", return_dict=False, **kwargs)[0]
        finally:
            self.pipeline.scheduler = shipped
        return out.float()

    # ---- the kernel base's pieces ---------------------------------------------------------------
    def schedule(self, num_steps: int) -> Schedule:
        """The T-step schedule (denoiser timesteps + kernel scalars per step)."""
        raise NotImplementedError

    def check(self, schedule: Schedule, noise_levels: torch.Tensor) -> None:
        """ValueError unless the kernel accepts them; called once per rollout, so ``step`` skips per-step checks."""
        raise NotImplementedError

    def step(self, model_output, latents, kernel_args, noise_level, *, prev_sample=None, generator=None) -> Step:
        """One transition of ``self.kernel`` (``kernels.Step``)."""
        raise NotImplementedError

    def forward_process(self, x0: torch.Tensor, u: torch.Tensor, noise: torch.Tensor):
        """Noise clean latents x0 [B, ...] to levels u [B] in (0, 1) with ``noise`` [B, ...]: (denoiser timesteps
        [B], ``sde.Noised``). u is the family's noise fraction (flow: σ after the scheduler's shift; DDPM: t / T)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward_process")

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
        # a key without a "neg_" twin (e.g. a source image's latents) conditions both branches alike
        both = {k: torch.cat([cond.get("neg_" + k, v), v]) for k, v in positive.items()}  # [2B, ...]
        out = self.forward(model, torch.cat([latents, latents]), torch.cat([timesteps, timesteps]), both)
        uncond, text = out.chunk(2)  # [B, C, h, w] each
        if detach_uncond:
            uncond = uncond.detach()
        return self.guide(uncond, text, guidance_scale)

    def guide(self, uncond: torch.Tensor, text: torch.Tensor, guidance_scale: float) -> torch.Tensor:
        """The guided output of the two branches: uncond + w·(text − uncond) (a family may rescale it, e.g. Qwen-Image's
        norm-preserving CFG)."""
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

    def save_lora(self, out_dir, model: torch.nn.Module, state_dict: dict | None = None) -> None:
        """Write the LoRA layers of ``model`` as ``Pipeline.save_lora_weights`` does (read by ``load_lora_weights``).

        The layers are saved in peft's key format, which every diffusers LoRA loader accepts (the old
        ``convert_state_dict_to_diffusers`` renaming to ``lora.up/down`` is NOT applied: SD3's loader silently
        drops such keys), together with the adapter's LoraConfig as metadata, without which a loader
        assumes lora_alpha = rank and scales the update wrongly whenever alpha ≠ rank.
        ``state_dict``: the adapter's tensors when they are not the model's own (a sharded model's, gathered).
        """
        from peft.utils import get_peft_model_state_dict

        layers = get_peft_model_state_dict(model, state_dict=state_dict)
        metadata = model.peft_config["default"].to_dict()
        type(self.pipeline).save_lora_weights(
            str(out_dir), **{self.lora_layers_kwarg: layers, self.lora_metadata_kwarg: metadata}
        )

    @classmethod
    def load_lora(cls, pipeline, lora_dir: str) -> None:
        """Load a ``save_lora`` export into a freshly loaded pipeline: ``pipeline.load_lora_weights(lora_dir)`` (plain
        diffusers); a family whose export spans several files (Wan 2.2's two experts) loads each."""
        pipeline.load_lora_weights(lora_dir)

    @property
    def lora_metadata_kwarg(self) -> str:
        """``unet_lora_adapter_metadata`` / ``transformer_lora_adapter_metadata`` of ``save_lora_weights``."""
        return self.lora_layers_kwarg.replace("_lora_layers", "_lora_adapter_metadata")

    def save_pipeline(self, out_dir) -> None:
        """Write the complete pipeline (full fine-tune), loadable with ``Pipeline.from_pretrained``."""
        self.pipeline.save_pretrained(str(out_dir))
