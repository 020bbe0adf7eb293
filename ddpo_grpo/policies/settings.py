"""What a policy adapter reads from the config (``PolicySettings``), and the rules that resolve what a setting leaves
to the model: the pipeline's own defaults (``pipeline_default``, ``pipeline_text_length``), the VAE's dtypes, the
range of ``sample.noise_level``.

One source of truth per setting: every field of ``PolicySettings`` is ``sample.<field>`` of the config, whose
default is written once, in config/base.py, beside its documentation. ``PolicySettings`` carries no default of its
own; code without a config (a script, a test) builds it with ``PolicySettings.unset(**given)``, where every field
not given takes its "unset" value (``UNSET``): the model's own choice, or off.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ddpo_grpo.kernels import BOUNDED_NOISE, DIFFUSION_KERNELS, FLOW_KERNELS

#: ``sample.vae_dtype`` -> the VAE's dtype ("auto": ``Policy.vae_dtype`` decides)
VAE_DTYPES = {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: the text length of pipelines whose ``__call__`` takes none: CLIP's 77 tokens (SD 1.x / 2.x, SDXL, InstructPix2Pix)
CLIP_TEXT_LENGTH = 77


def noise_level_in_range(level: float, kernel: str) -> bool:
    """The range of ``sample.noise_level``, written once: ≥ 0 (not NaN) for every kernel, and ≤ 1 for the kernels
    whose noise level is a fraction (``kernels.BOUNDED_NOISE``: cps, ddim, ddpm). Checked at load for the configured
    kernel (``config_checks``), by the policy for a family's default kernel (``Policy.resolve_noise_level``)."""
    return level >= 0 and not (kernel in BOUNDED_NOISE and level > 1)


def pipeline_default(pipeline_class, parameter: str):
    """The default of keyword ``parameter`` of a pipeline class's ``__call__`` (None when it takes no such keyword or
    has no signature to read). ``pipeline_class``: a class or the name of a diffusers pipeline class
    (``model_index.json`` ``_class_name``)."""
    import inspect

    if isinstance(pipeline_class, str):
        import diffusers

        pipeline_class = getattr(diffusers, pipeline_class, None)
    try:
        found = inspect.signature(pipeline_class.__call__).parameters.get(parameter)
    except (AttributeError, TypeError, ValueError):  # no class, or no signature to read
        return None
    return None if found is None or found.default is inspect.Parameter.empty else found.default


def pipeline_text_length(pipeline_class) -> int:
    """The text length a pipeline class encodes by default: the ``max_sequence_length`` default of its ``__call__``
    (diffusers 0.42: FLUX.1 / Kontext, Qwen-Image(-Edit/-Plus), Z-Image, Wan 2.1 / 2.2 512; SD3 256), or CLIP's 77 for
    pipelines without one. What ``sample.max_sequence_length = 0`` means: one source of truth, the pipeline's own."""
    length = pipeline_default(pipeline_class, "max_sequence_length")
    return int(length) if isinstance(length, int) else CLIP_TEXT_LENGTH


@dataclass(frozen=True)
class PolicySettings:
    """What an adapter reads from the config (``sample.*``; each field documented, with its default, in
    config/base.py), built once (``from_config``) or, without a config, by ``unset(**given)``.

    resolution:           image side in pixels; 0 = the pipeline's native size (families without pixels ignore it)
    max_sequence_length:  text tokens of encoders that take a length (T5, Qwen2.5-VL, UMT5); 0 = the family's pipeline
                          default (``pipeline_text_length``: FLUX, Qwen-Image, Z-Image, Wan 512, SD3 256)
    kernel:               the transition kernel (``kernels.KERNELS``); "" = the family's default
    noise_level:          the kernel's stochasticity (``sample.noise_level``); None = the kernel's default
    image_guidance_scale: image-conditioned families' image guidance s_I ≥ 1; None = the pipeline's default
    num_frames:           video families' frame count (pixels); 0 = the family's default
    attention_backend:    ``transformer.set_attention_backend`` where the family's model offers it; "" = as loaded
    source_root:          directory that relative ``source_image`` paths of rows are read from (None = cwd; not a
                          config field)
    distilled_guidance:   the guidance-embedding input of guidance-distilled models (FLUX.1-dev, Kontext); None = the
                          pipeline's default ``guidance_scale``
    experts:              two-expert models (Wan 2.2): the expert(s) LoRA trains, "" = all, or one pipeline
                          attribute ("transformer" = high noise, "transformer_2" = low noise)
    guidance_scale_2:     two-expert models (Wan 2.2): the low-noise expert's CFG w; None / 0 = the guidance scale
    source_pixels:        editing families that resize source images to a pixel area (Qwen-Image-Edit): that
                          area; 0 = the pipeline's own (1024·1024)
    vae_dtype:            the VAE's dtype (``VAE_DTYPES``): "auto" = the checkpoint's rule (``Policy.vae_dtype``)
    """

    resolution: int
    max_sequence_length: int
    kernel: str
    noise_level: float | None
    image_guidance_scale: float | None
    num_frames: int
    attention_backend: str
    source_root: str | None
    distilled_guidance: float | None
    experts: str
    guidance_scale_2: float | None
    source_pixels: int
    vae_dtype: str

    @classmethod
    def unset(cls, **given) -> PolicySettings:
        """Settings without a config: ``given`` fields, every other one at its ``UNSET`` value (the model's own)."""
        unknown = sorted(set(given) - set(UNSET))
        if unknown:
            raise TypeError(f"PolicySettings has no field {unknown[0]!r}; fields: {', '.join(UNSET)}")
        return cls(**{**UNSET, **given})

    @classmethod
    def from_config(cls, sample, kernels: tuple[str, ...] = ()) -> PolicySettings:
        """The settings of a config's ``sample`` section for a family sampled with ``kernels``: each field read from
        the section (a field it lacks, such as ``source_root``, or leaves None, is unset). The deprecated knobs keep
        their old meaning for one release: ``sample.sde_type`` names the kernel of a flow family whose
        ``sample.kernel`` is "", ``sample.eta`` is the noise level of a DDPM-family model (it won over
        ``sample.noise_level`` there, and still does)."""
        values = {n: sample[n] for n in UNSET if n in sample and sample[n] is not None}
        legacy_kernel, legacy_eta = sample.get("sde_type"), sample.get("eta")
        if legacy_kernel and not values.get("kernel") and legacy_kernel in kernels and legacy_kernel in FLOW_KERNELS:
            values["kernel"] = legacy_kernel
        if legacy_eta is not None and kernels and set(kernels) <= set(DIFFUSION_KERNELS):
            values["noise_level"] = legacy_eta
        return cls.unset(**values)

    def with_pipeline_defaults(self, pipeline_class) -> PolicySettings:
        """These settings with the guidance values left unset (None) read from the pipeline class's ``__call__``
        defaults (InstructPix2Pix's ``image_guidance_scale`` 1.5, FLUX.1's ``guidance_scale`` 3.5)."""
        image, distilled = self.image_guidance_scale, self.distilled_guidance
        if image is None:
            image = pipeline_default(pipeline_class, "image_guidance_scale")
        if distilled is None:
            distilled = pipeline_default(pipeline_class, "guidance_scale")
        return dataclasses.replace(self, image_guidance_scale=image, distilled_guidance=distilled)


#: each ``PolicySettings`` field's value when nothing sets it: the model's own choice (its native resolution, its
#: pipeline's text length and guidance, its family's kernel and frame count, its kernel's noise level) or off
UNSET = {
    "resolution": 0,
    "max_sequence_length": 0,
    "kernel": "",
    "noise_level": None,
    "image_guidance_scale": None,
    "num_frames": 0,
    "attention_backend": "",
    "source_root": None,
    "distilled_guidance": None,
    "experts": "",
    "guidance_scale_2": None,
    "source_pixels": 0,
    "vae_dtype": "auto",
}
