"""``DenoiserPipeline``: a diffusers pipeline around any denoiser whose sample space is the data itself (no VAE).

It carries model families that are not image pipelines — a motion diffusion model (MDM-style: a transformer
over HumanML3D features ``[B, 263, 1, frames]`` or ``[B, frames, 263]``), or any other denoiser
``f(x_t, t, **cond)`` — through the same machinery as SD and SD3: ``save_pretrained`` writes an ordinary
pipeline directory (model_index.json, one folder per component, safetensors), ``from_pretrained`` and
``ddpo_grpo.policies.load_pipeline`` load it back, ``load_lora_weights`` applies a run's LoRA export, and
``ddpo_grpo.policies.denoiser.DenoiserPolicy`` is its GRPO adapter.

Components (model_index.json names each by its importable module and class, so a world's or a user's own
classes load as long as their module imports; diffusers supports this for any ModelMixin):
    denoiser      any diffusers ``ModelMixin`` + ``ConfigMixin`` (``@register_to_config`` on its __init__; diffusers'
                  ``PeftAdapterMixin`` is added to its class when missing, for LoRA), called
                  as ``denoiser(x_t, t, **cond)``: x_t ``[B, *sample_shape]``, t ``[B]`` int64 training timesteps
                  (of the respaced schedule's original indices, as MDM's spaced diffusion feeds them), cond
                  ``text_embeds`` when the pipeline has a text encoder (nothing otherwise). It returns a tensor of
                  x_t's shape (or a tuple / output object whose first item is one): the ε, x₀ or v prediction
                  named by ``scheduler.config.prediction_type`` (MDM: "sample", i.e. x₀).
    scheduler     ``DDPMScheduler`` or ``DDIMScheduler``: β schedule (``squaredcos_cap_v2`` = the cosine schedule,
                  ``linear``, …), num_train_timesteps, prediction_type, timestep_spacing ("linspace" ≈ IDDPM /
                  MDM respacing) and, for DDPM, variance_type ("fixed_small" as MDM, or "fixed_large").
                  ``clip_sample`` and ``thresholding`` must be off: the kernels do not clip x̂₀.
    text_encoder  optional (None = unconditional), with ``tokenizer``: a transformers text model (CLIP, T5, …)
                  or any module called as ``text_encoder(input_ids)`` that returns ``[B, D]`` / ``[B, L, D]``
                  (a tensor, or an output with text_embeds / pooler_output / last_hidden_state).
    normalizer    optional sample-space hook (None = identity): a module with ``decode(x) -> samples`` (what
                  rewards score) and optionally ``preview(samples) -> images [N, 3, H, W]`` in [0, 1] (what
                  reports show). ``SampleNormalizer`` is the plain ``x · std + mean``; a world subclasses it to
                  change the layout (e.g. MDM's ``[B, 263, 1, F]`` → ``[B, F, 263]``) or draw stick figures.

Config (init arguments, saved in model_index.json):
    sample_shape    the per-sample shape, no batch dim: the shape of x_t and of the initial noise
    text_embedding  "pooled": ``text_embeds`` is ``[B, D]`` (the projected embedding when the encoder has one,
                    e.g. CLIPTextModelWithProjection — what MDM's CLIP ``encode_text`` gives), else its pooler
                    output | "sequence": ``[B, L, D]`` (last hidden state, padded to the tokenizer's max length)
    uncond          the unconditional branch of classifier-free guidance: "zeros" = ``text_embeds`` of zeros
                    (MDM's ``mask_cond`` with ``force_mask``: the condition dropped) | "negative_prompt" = the
                    encoded negative prompt ("" = the empty text, as SD)
    preview         "" = the normalizer's preview, else the samples themselves when they are images
                    ``[N, 3, H, W]`` | "heatmap" = otherwise render each sample as a greyscale heatmap
    lora_target_modules  default LoRA targets of this denoiser ([] = every nn.Linear that its forward calls
                    through the module, i.e. not those inside nn.MultiheadAttention, which reads their weights)
    user_modules    written by ``save_pretrained``: module name → file of components imported from user files
                    (``plugins.import_user_file``), re-imported by ``from_pretrained`` so that such a pipeline loads back
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from diffusers import DDIMScheduler, DDPMScheduler, DiffusionPipeline, ModelMixin
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.loaders.lora_base import LoraBaseMixin
from diffusers.utils import BaseOutput

from ddpo_grpo.denoiser_components import (
    VARIANCE_TYPES,
    check_scheduler,
    import_component_modules,
    user_module_files,
    with_peft_adapters,
)
from ddpo_grpo.heatmaps import heatmap  # the names above stay importable from here (worlds and user code)

TEXT_EMBEDDINGS = ("pooled", "sequence")
UNCOND_MODES = ("zeros", "negative_prompt")
PREVIEWS = ("", "heatmap")


# ---- the default sample-space hook ----------------------------------------


class SampleNormalizer(ModelMixin, ConfigMixin):
    """``decode(x) = x · std + mean``: the model's normalised sample space → the data rewards score.

    ``mean`` and ``std`` (buffers saved as safetensors) have shape ``shape``, broadcastable against one
    sample: ``[263]`` for ``[frames, 263]`` samples, ``[263, 1, 1]`` for MDM's ``[263, 1, frames]``.
    Build one with ``from_stats``. Always computes in float32 (the policy keeps this module in float32).
    """

    @register_to_config
    def __init__(self, shape: list[int] | tuple[int, ...] = (1,)):
        super().__init__()
        self.register_buffer("mean", torch.zeros(tuple(shape)))
        self.register_buffer("std", torch.ones(tuple(shape)))

    @classmethod
    def from_stats(cls, mean, std, **config) -> SampleNormalizer:
        """A normalizer with these statistics (array-likes of one shape; std finite and > 0); ``config``: a
        subclass's other settings."""
        mean, std = torch.as_tensor(mean, dtype=torch.float32), torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != std.shape or mean.ndim == 0:
            raise ValueError(
                f"SampleNormalizer.from_stats: mean {tuple(mean.shape)} and std {tuple(std.shape)} must "
                "have one shape with at least one dim, broadcastable against one sample"
            )
        if not (torch.isfinite(mean).all() and torch.isfinite(std).all() and (std > 0).all()):
            raise ValueError("SampleNormalizer.from_stats: mean must be finite and std finite and > 0")
        normalizer = cls(shape=list(mean.shape), **config)
        with torch.no_grad():
            normalizer.mean.copy_(mean)
            normalizer.std.copy_(std)
        return normalizer

    def normalize(self, samples: torch.Tensor) -> torch.Tensor:
        """Data → model space: ``(samples − mean) / std`` ([B, *sample_shape] float32)."""
        return (samples.float() - self.mean.float()) / self.std.float()

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Model space → data: ``x · std + mean`` ([B, *sample_shape] float32)."""
        return x.float() * self.std.float() + self.mean.float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(x)


# ---- the pipeline ---------------------------------------------------------


@dataclass
class DenoiserPipelineOutput(BaseOutput):
    """samples: decoded samples (``output_type="samples"``) or the final x ([B, *sample_shape])."""

    samples: torch.Tensor


class DenoiserPipeline(DiffusionPipeline, LoraBaseMixin):
    """A denoiser, its noise schedule, an optional text encoder and an optional sample-space hook.

    See the module docstring for the components and config. Calling the pipeline samples with the
    scheduler's own ``step`` (diffusers' arithmetic: a reference the policy's kernels are tested against).
    """

    model_cpu_offload_seq = "text_encoder->denoiser"
    _optional_components = ["text_encoder", "tokenizer", "normalizer"]
    _lora_loadable_modules = ["denoiser"]

    def __init__(
        self,
        denoiser: ModelMixin,
        scheduler: DDPMScheduler | DDIMScheduler,
        text_encoder: torch.nn.Module | None = None,
        tokenizer=None,
        normalizer: torch.nn.Module | None = None,
        sample_shape: list[int] | tuple[int, ...] | None = None,
        text_embedding: str = "pooled",
        uncond: str = "zeros",
        preview: str = "",
        lora_target_modules: list[str] | tuple[str, ...] = (),
        user_modules: dict | None = None,
    ):
        super().__init__()
        if not isinstance(denoiser, ModelMixin):
            raise ValueError(
                f"DenoiserPipeline: denoiser must be a diffusers ModelMixin + ConfigMixin (got "
                f"{type(denoiser).__name__}): subclass both, decorate __init__ with @register_to_config"
            )
        denoiser = with_peft_adapters(denoiser)
        check_scheduler(scheduler)
        if (text_encoder is None) != (tokenizer is None):
            raise ValueError("DenoiserPipeline: give both text_encoder and tokenizer, or neither (unconditional)")
        shape = list(sample_shape) if sample_shape is not None else []
        if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
            raise ValueError(
                f"DenoiserPipeline: sample_shape={sample_shape!r} must be a non-empty list of positive "
                "ints, the shape of one sample without the batch dim (e.g. [263, 1, 196] or [196, 263])"
            )
        for name, value, allowed in (
            ("text_embedding", text_embedding, TEXT_EMBEDDINGS),
            ("uncond", uncond, UNCOND_MODES),
            ("preview", preview, PREVIEWS),
        ):
            if value not in allowed:
                raise ValueError(f"DenoiserPipeline: {name}={value!r} is not one of {list(allowed)}")
        if normalizer is not None and not callable(getattr(normalizer, "decode", None)):
            raise ValueError("DenoiserPipeline: normalizer must have a decode(x) method (see SampleNormalizer)")
        self.register_modules(
            denoiser=denoiser,
            scheduler=scheduler,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
            normalizer=normalizer,
        )
        self.register_to_config(
            sample_shape=shape,
            text_embedding=text_embedding,
            uncond=uncond,
            preview=preview,
            lora_target_modules=list(lora_target_modules),
            user_modules=dict(user_modules or {}),
        )

    # ---- conventions ------------------------------------------------------------------------------
    @property
    def prediction_type(self) -> str:
        """What the denoiser predicts: "epsilon", "sample" (x₀) or "v_prediction" (the scheduler's config)."""
        return self.scheduler.config.prediction_type

    @property
    def variance(self) -> str:
        """The DDPM posterior variance of ``ddpo_grpo.kernels.ddpm_step``: "fixed_small" or "fixed_large"."""
        if isinstance(self.scheduler, DDPMScheduler):
            return VARIANCE_TYPES[self.scheduler.config.variance_type]
        return "fixed_small"

    @property
    def _denoiser_device(self) -> torch.device:
        return next(self.denoiser.parameters()).device

    # ---- conditioning ---------------------------------------------------------------------------
    def _text_features(self, texts: list[str], device) -> torch.Tensor:
        """``[B, D]`` ("pooled") or ``[B, L, D]`` ("sequence") embeddings of ``texts``."""
        tokens = self.tokenizer(
            list(texts),
            padding="max_length",
            max_length=self.tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        )
        out = self.text_encoder(tokens.input_ids.to(device))
        pooled = self.config.text_embedding == "pooled"
        names = ("text_embeds", "pooler_output") if pooled else ("last_hidden_state",)
        for name in names:
            value = getattr(out, name, None)
            if isinstance(value, torch.Tensor):
                return value
        if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            out = out[0]
        if isinstance(out, torch.Tensor) and out.ndim == (2 if pooled else 3):
            return out
        raise ValueError(
            f"DenoiserPipeline: text_encoder {type(self.text_encoder).__name__} gave no "
            f"{'[B, D]' if pooled else '[B, L, D]'} embedding for text_embedding={self.config.text_embedding!r} "
            f"(looked for {list(names)} or a tensor); set text_embedding to match the encoder"
        )

    def encode_prompt(self, prompts: list[str], negative_prompt: str = "", device=None) -> dict[str, torch.Tensor]:
        """Condition dict of the denoiser: ``{"text_embeds", "neg_text_embeds"}`` ([B, D] or [B, L, D]), or {}.

        ``neg_text_embeds`` is the unconditional branch of CFG (see ``uncond`` in the module docstring).
        """
        if self.text_encoder is None:
            return {}
        device = device if device is not None else self._denoiser_device
        embeds = self._text_features(prompts, device)
        if self.config.uncond == "zeros":
            neg = torch.zeros_like(embeds)
        else:
            neg = self._text_features([negative_prompt] * len(prompts), device)
        return {"text_embeds": embeds, "neg_text_embeds": neg}

    @staticmethod
    def call_denoiser(model, sample: torch.Tensor, timesteps: torch.Tensor, cond: dict) -> torch.Tensor:
        """``model(x_t, t, **cond)`` reduced to one tensor of x_t's shape (first item of a tuple / output)."""
        out = model(sample, timesteps, **cond)
        if not isinstance(out, torch.Tensor):
            out = out[0] if isinstance(out, (tuple, list)) else out.to_tuple()[0]
        if out.shape != sample.shape:
            raise ValueError(
                f"DenoiserPipeline: the denoiser returned shape {tuple(out.shape)} for x_t of shape "
                f"{tuple(sample.shape)}; it must predict ε, x₀ or v of x_t's shape"
            )
        return out

    # ---- sample space ---------------------------------------------------------------------------
    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """The final x → the samples rewards score (the normalizer's decode; float32)."""
        if self.normalizer is None:
            return x.float()
        return self.normalizer.decode(x).float()

    def preview(self, samples: torch.Tensor) -> torch.Tensor:
        """Decoded samples → float images [N, 3, H, W] in [0, 1] for grids and reports."""
        hook = getattr(self.normalizer, "preview", None) if self.normalizer is not None else None
        if callable(hook):
            return hook(samples)
        if samples.ndim == 4 and samples.shape[1] == 3:
            return samples
        if self.config.preview == "heatmap":
            return heatmap(samples)
        raise ValueError(
            f"DenoiserPipeline: samples of shape {tuple(samples.shape)} are not images [N, 3, H, W] and the pipeline "
            "has no preview hook: give its normalizer a preview(samples) method (e.g. a world's renderer), or "
            "build the pipeline with preview='heatmap'"
        )

    def guide(self, uncond: torch.Tensor, text: torch.Tensor, guidance_scale: float) -> torch.Tensor:
        """Classifier-free guidance ``uncond + w·(text − uncond)``, then the normalizer's ``constrain`` hook if it
        has one: a world's constraint on the model output that holds for each branch need not hold for their
        extrapolation (MotionWorld: bones of constant length, worlds/motion/geometry.py)."""
        out = uncond + guidance_scale * (text - uncond)
        hook = getattr(self.normalizer, "constrain", None) if self.normalizer is not None else None
        return hook(out) if hook is not None else out

    # ---- plain sampling with the scheduler's own step --------------------------------------------
    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float = 1.0,
        negative_prompt: str = "",
        num_samples: int | None = None,
        generator: torch.Generator | None = None,
        latents: torch.Tensor | None = None,
        eta: float = 0.0,
        output_type: str = "samples",
    ) -> DenoiserPipelineOutput:
        """Sample with ``scheduler.step`` (DDPM ancestral, or DDIM with ``eta``) and CFG on the model output.

        prompt: one text or a list (ignored without a text encoder; then num_samples, default 1, sets B);
        latents: the initial noise ``[B, *sample_shape]`` (default: drawn with ``generator``);
        output_type: "samples" (decoded) or "latent" (the final x).
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt or [])
        if self.text_encoder is not None and not prompts:
            raise ValueError("DenoiserPipeline: this pipeline is text-conditioned: pass prompt=")
        batch = len(prompts) if prompts and self.text_encoder is not None else (num_samples or 1)
        device = self._denoiser_device
        cond = self.encode_prompt(prompts, negative_prompt, device)
        positive = {k: v for k, v in cond.items() if not k.startswith("neg_")}
        use_cfg = guidance_scale > 1.0 and bool(positive)
        if latents is None:
            latents = torch.randn(
                (batch, *self.config.sample_shape),
                generator=generator,
                dtype=torch.float32,
                device=generator.device if generator is not None else "cpu",
            )
        x = latents.to(device)
        self.scheduler.set_timesteps(num_inference_steps, device=device)
        extra = {"eta": eta} if isinstance(self.scheduler, DDIMScheduler) else {}
        for t in self.progress_bar(self.scheduler.timesteps):
            timesteps = t.to(device=device, dtype=torch.long).expand(x.shape[0])
            if use_cfg:
                both = {k: torch.cat([cond["neg_" + k], v]) for k, v in positive.items()}
                out = self.call_denoiser(self.denoiser, torch.cat([x, x]), torch.cat([timesteps, timesteps]), both)
                uncond, text = out.chunk(2)
                out = self.guide(uncond, text, guidance_scale)
            else:
                out = self.call_denoiser(self.denoiser, x, timesteps, positive)
            x = self.scheduler.step(out, t, x, generator=generator, **extra).prev_sample
        if output_type not in ("samples", "latent"):
            raise ValueError(f"DenoiserPipeline: output_type={output_type!r} is not 'samples' or 'latent'")
        return DenoiserPipelineOutput(samples=self.decode(x) if output_type == "samples" else x)

    # ---- LoRA -----------------------------------------------------------------------------------
    @classmethod
    def save_lora_weights(
        cls,
        save_directory: str | os.PathLike,
        denoiser_lora_layers: dict[str, torch.Tensor] | None = None,
        denoiser_lora_adapter_metadata: dict | None = None,
        is_main_process: bool = True,
        weight_name: str | None = None,
        save_function=None,
        safe_serialization: bool = True,
    ) -> None:
        """Write the denoiser's LoRA layers and their LoraConfig, as diffusers' pipelines do.

        The layers go in peft's key format, prefixed ``denoiser.``, to ``save_directory/pytorch_lora_weights
        .safetensors``, with the LoraConfig as metadata (so that a loader knows lora_alpha).
        """
        if not denoiser_lora_layers:
            raise ValueError("DenoiserPipeline.save_lora_weights: pass denoiser_lora_layers")
        cls._save_lora_weights(
            save_directory=save_directory,
            lora_layers={"denoiser": denoiser_lora_layers},
            lora_metadata={"denoiser": denoiser_lora_adapter_metadata},
            is_main_process=is_main_process,
            weight_name=weight_name,
            save_function=save_function,
            safe_serialization=safe_serialization,
        )

    def load_lora_weights(self, pretrained_model_name_or_path_or_dict, adapter_name: str | None = None, **kwargs):
        """Load LoRA layers written by ``save_lora_weights`` (a directory, file or state dict) into the denoiser."""
        kwargs.setdefault("use_safetensors", True)
        self.denoiser.load_lora_adapter(
            pretrained_model_name_or_path_or_dict,
            prefix="denoiser",
            adapter_name=adapter_name,
            _pipeline=self,
            **kwargs,
        )

    # ---- save / load ----------------------------------------------------------------------------
    def save_pretrained(self, save_directory: str | os.PathLike, *args, **kwargs) -> None:
        """``DiffusionPipeline.save_pretrained``, recording the files of components defined in user files."""
        self.register_to_config(user_modules=user_module_files(self.components))
        super().save_pretrained(save_directory, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs):
        """``DiffusionPipeline.from_pretrained``, first importing the modules its components' classes live in
        (``denoiser_components.import_component_modules``: user files and trusted packages)."""
        import_component_modules(pretrained_model_name_or_path)
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)
