"""Building a pipeline's modules on the meta device from their configs: shapes and dtypes, no storage, no weights
read (diffusers ``Model.from_config`` / transformers ``Model._from_config`` under accelerate's
``init_empty_weights``, buffers included).

``build(directory, name, library, class_name)`` returns the module; ``nbytes(module, dtype)`` the bytes its
parameters and buffers take in ``dtype`` (what loading the real weights in that dtype allocates: parameters and
buffers are the whole of a module's state).
"""

from __future__ import annotations

import contextlib
import importlib
import io
from pathlib import Path

import torch

from foundation.errors import ConfigError


def build(directory: Path, name: str, library: str, class_name: str) -> torch.nn.Module:
    """The component ``name`` of the pipeline in ``directory`` on the meta device (ConfigError when its config is
    missing or its class unknown)."""
    from accelerate import init_empty_weights

    folder = Path(directory) / name
    if not folder.is_dir():
        raise ConfigError(f"{folder}: missing (model_index.json names {name!r}); add its config.json")
    try:
        cls = getattr(library_module(library), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{folder}: class {library}.{class_name} not found ({exc})") from exc
    quiet = io.StringIO()
    with init_empty_weights(include_buffers=True), contextlib.redirect_stderr(quiet):
        if library == "diffusers" or hasattr(cls, "load_config"):
            return cls.from_config(cls.load_config(folder))
        from transformers import AutoConfig

        return cls._from_config(AutoConfig.from_pretrained(folder))


def library_module(library: str):
    """The module of a model_index.json library: a package ("diffusers", "transformers"), or, as diffusers reads
    it, a pipeline sub-package of diffusers ("stable_diffusion" for SD 1.5's StableDiffusionSafetyChecker)."""
    try:
        return importlib.import_module(library)
    except ImportError:
        from diffusers import pipelines

        if hasattr(pipelines, library):
            return getattr(pipelines, library)
        raise


def numel(module: torch.nn.Module) -> int:
    """Elements of the module's parameters and buffers (shared tensors once)."""
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel()
    return total


def nbytes(module: torch.nn.Module, dtype: torch.dtype | None = None) -> int:
    """Bytes of the module's parameters and buffers, each in ``dtype`` (floating ones; None = their own dtypes)."""
    seen, total = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        size = dtype.itemsize if dtype is not None and t.is_floating_point() else t.element_size()
        total += t.numel() * size
    return total
