"""What ``DenoiserPipeline`` (ddpo_grpo/denoiser_pipeline.py) asks of its components, and where it finds their classes.

* :func:`check_scheduler`: a ``DDPMScheduler`` or ``DDIMScheduler`` without x̂₀ clipping, with a variance the
  kernels know (:data:`VARIANCE_TYPES`);
* :func:`with_peft_adapters`: any diffusers ``ModelMixin`` made LoRA-capable (diffusers' ``PeftAdapterMixin``);
* :func:`user_module_files` / :func:`import_component_modules`: the modules of components defined in user files
  are recorded at save time and imported, with those of trusted packages, before diffusers loads the directory.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

from diffusers import DDIMScheduler, DDPMScheduler, ModelMixin
from diffusers.loaders.peft import PeftAdapterMixin

from foundation.plugins import USER_MODULE_PREFIX, import_user_file, trusted_packages

#: DDPMScheduler.variance_type -> the `ddpo_grpo.kernels.ddpm_step` variance it means
VARIANCE_TYPES = {"fixed_small": "fixed_small", "fixed_small_log": "fixed_small", "fixed_large": "fixed_large"}


def check_scheduler(scheduler) -> None:
    """ValueError naming the setting and its fix unless ``scheduler`` is one the sampling kernels reproduce."""
    if not isinstance(scheduler, (DDPMScheduler, DDIMScheduler)):
        raise ValueError(
            f"DenoiserPipeline: scheduler must be a DDPMScheduler or DDIMScheduler, got "
            f"{type(scheduler).__name__}; build one with DDPMScheduler(beta_schedule=..., ...)"
        )
    config = scheduler.config
    if config.get("clip_sample", False) or config.get("thresholding", False):
        raise ValueError(
            "DenoiserPipeline: the scheduler has clip_sample=True or thresholding=True; the sampling "
            "kernels (ddpo_grpo.kernels) do not clip x̂₀: build the scheduler with clip_sample=False, "
            "thresholding=False (motion features are not bounded to [-1, 1])"
        )
    variance = config.get("variance_type", "fixed_small") if isinstance(scheduler, DDPMScheduler) else "fixed_small"
    if variance not in VARIANCE_TYPES:
        raise ValueError(
            f"DenoiserPipeline: scheduler variance_type={variance!r} is not supported; use one of "
            f"{list(VARIANCE_TYPES)} (learned variances need a second output head)"
        )


_PEFT_CLASSES: dict[type, type] = {}


def with_peft_adapters(model: ModelMixin) -> ModelMixin:
    """``model``, with diffusers' PeftAdapterMixin added to its class when it lacks it.

    PeftAdapterMixin gives add_adapter, load_lora_adapter, disable_adapters, …: any ModelMixin then takes LoRA
    adapters as diffusers' own models do.

    The class is swapped in place for a subclass that keeps the original's name and module, so that
    ``save_pretrained`` still names the user's class in model_index.json and loading finds it.
    """
    if isinstance(model, PeftAdapterMixin):
        return model
    cls = type(model)
    mixed = _PEFT_CLASSES.get(cls)
    if mixed is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        mixed = _PEFT_CLASSES[cls] = type(cls.__name__, (cls, PeftAdapterMixin), namespace)
    model.__class__ = mixed
    return model


def user_module_files(components: dict) -> dict[str, str]:
    """module name -> file, of the components (a pipeline's ``components``) whose classes a user file defines
    (``plugins.import_user_file``): saved in model_index.json as ``user_modules``."""
    files = {}
    for component in components.values():
        module = sys.modules.get(type(component).__module__) if component is not None else None
        if module is not None and module.__name__.startswith(USER_MODULE_PREFIX):
            files[module.__name__] = str(Path(module.__file__).resolve())
    return files


def import_component_modules(directory: str | os.PathLike) -> None:
    """Import the modules that the components of the pipeline ``directory`` live in, before diffusers loads it.

    diffusers loads a component of a class outside diffusers / transformers only when its module is already
    imported. Imported here, for a local directory: the user files of ``user_modules`` (written by
    ``save_pretrained``), and installed modules of trusted packages (``plugins.trusted_packages``: ddpo_grpo and
    the packages that plug into it through entry points, e.g. the embedded worlds). Anything else is left to
    diffusers, whose error says to import the module first.
    """
    index = Path(os.path.expanduser(str(directory))) / "model_index.json"
    if index.is_file():
        config = json.loads(index.read_text())
        for name, file in (config.get("user_modules") or {}).items():
            if name not in sys.modules:
                import_user_file(file, name)
        trusted = trusted_packages()
        for value in config.values():
            if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
                module = value[0]
                if module not in sys.modules and module.split(".")[0] in trusted:
                    importlib.import_module(module)
