"""One ``FamilySpec`` per model family, declared beside its adapter; the registry every table is read from.

A family is a pipeline class with a policy adapter. Its adapter file (``ddpo_grpo/policies/<family>.py``) ends with a
spec block, ``SPEC = FamilySpec(...)`` (or ``SPECS = (...)`` for a file holding two families), that says everything
the rest of the house needs to know about it:

    name            the family's short name: ``pretrained.tiny``, ``scripts/benchmark.py --models``, test ids
    pipeline        the pipeline class name (``model_index.json`` ``_class_name``) the adapter is chosen by
    adapter         the ``Policy`` subclass (its kernels, LoRA targets, shard blocks, sample kind live on it)
    checkpoints     the real checkpoints whose configs ship under ``config/model_configs/`` (``Checkpoint``), each
                    built by ``ddpo_grpo.tiny.from_configs`` with the depth / width cut of ``real_cut``
    tiny            "module:function" building the family's tiny pipeline (``ddpo_grpo.tiny``); optional when the
                    family has a checkpoint: its tiny pipeline is then the first checkpoint's real-config build
    geometry, source_tokens   the planner's token model (``ddpo_grpo.planner.geometry``)
    benchmark       whether ``scripts/benchmark.py --models all`` measures it

The registry (``families()``) is assembled on first use by importing every module of ``ddpo_grpo.policies`` and
collecting their specs, those installed packages offer through the ``ddpo_grpo.families`` entry point
(``plugin_specs``; ``foundation/plugins.py``), and any ``register``-ed at run time, so that ``import ddpo_grpo.policies``
stays cheap; ``policies.ADAPTERS``, ``policies.PIPELINES``, ``tiny.BUILDERS``, ``tiny.FAMILIES`` and the planner's
family table are views of it (``policies.View``). Adding a family: docs/adapters.md.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: config/model_configs/: the real checkpoints' JSON configs (no weights)
MODEL_CONFIGS = Path(__file__).resolve().parents[2] / "config" / "model_configs"


@dataclass(frozen=True)
class Checkpoint:
    """A real checkpoint of a family, by its shipped configs.

    directory: the folder under ``config/model_configs/`` (``model_index.json`` and one ``<component>/config.json``
        or ``scheduler_config.json`` per component, as the hub repository has them).
    recipe: "config.<module>:<experiment>", the recipe that trains it: the kit's real-config mode runs in its
        ``mixed_precision`` and text length (``sample.max_sequence_length``).
    hub_ids: the hub repositories these configs are (``pretrained.model`` values the planner reads them for,
        offline; ``hub_ids()``).
    """

    directory: str
    recipe: str
    hub_ids: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return MODEL_CONFIGS / self.directory

    def recipe_config(self):
        """The recipe's resolved config (``get_config(experiment)`` of its module)."""
        module, experiment = self.recipe.split(":")
        return importlib.import_module(module).get_config(experiment)


@dataclass(frozen=True)
class FamilySpec:
    """A model family's registration (module docstring). ``real_cut(shipped, encoders) -> dict``: the denoiser config
    keys a CPU build changes (depth: 1–2 blocks; width: heads; the text widths of the cut encoders, ``encoders`` the
    built text / image encoders' configs by component name); every other key stays as shipped."""

    name: str
    pipeline: str
    adapter: type
    tiny: str = ""
    kit_tiny_kwargs: Mapping[str, Any] = field(default_factory=dict)  # what the adapter kit builds the tiny one with
    pipeline_target: str = ""  # "module:Class" of a pipeline class that is not diffusers'
    checkpoints: tuple[Checkpoint, ...] = ()
    real_cut: Callable[[dict, Mapping], dict] | None = None
    geometry: str = ""  # the planner's family key: "flux" | "sd3" | "qwen" | "wan" | "" (not modelled)
    source_tokens: bool = False  # a source image's tokens join the denoiser's sequence (editing)
    benchmark: bool = True

    @property
    def adapter_target(self) -> str:
        """The adapter as "module:Class"."""
        return f"{self.adapter.__module__}:{self.adapter.__qualname__}"

    @property
    def video(self) -> bool:
        return self.adapter.sample_kind == "video"

    @property
    def image_conditioned(self) -> bool:
        return bool(self.adapter.image_conditioned)

    @property
    def lora_targets(self) -> tuple[str, ...]:
        """The adapter's default LoRA targets (() where the adapter picks them per model, e.g. every nn.Linear)."""
        targets = self.adapter.default_lora_targets
        return tuple(targets) if isinstance(targets, (tuple, list)) else ()

    def __post_init__(self):
        if not (self.tiny or self.checkpoints):
            raise ValueError(f"family {self.name!r}: its spec needs a tiny builder or a checkpoint to build from")
        if self.checkpoints and self.real_cut is None:
            raise ValueError(f"family {self.name!r}: checkpoints need a real_cut (the denoiser's CPU cut)")

    def tiny_builder(self) -> Callable:
        """The tiny builder ``fn(path, seed=0, **kw)`` (imported now): ``tiny``, else the first checkpoint's build."""
        if self.tiny:
            return _import(self.tiny)
        from ddpo_grpo.tiny.from_configs import build_from_configs

        return functools.partial(build_from_configs, self, self.checkpoints[0])

    def pipeline_class(self):
        """The pipeline class (diffusers', or ``pipeline_target``'s)."""
        if self.pipeline_target:
            return _import(self.pipeline_target)
        import diffusers

        return getattr(diffusers, self.pipeline)


def _import(target: str):
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


_REGISTERED: list[FamilySpec] = []  # from outside the package (``register``)
_CACHE: dict[str, FamilySpec] | None = None


def register(spec: FamilySpec) -> None:
    """Register a family defined outside ``ddpo_grpo/policies/`` at run time: it joins every view (an installed
    package declares its families through the ``ddpo_grpo.families`` entry point instead: ``plugin_specs``)."""
    global _CACHE
    _REGISTERED.append(spec)
    _CACHE = None


def plugin_specs() -> list[FamilySpec]:
    """The families installed packages offer (entry point group ``ddpo_grpo.families``, each a ``FamilySpec`` named
    as its entry point), by name; a ValueError names an entry point of the wrong type."""
    from foundation import plugins

    return [
        plugins.load_checked("families", name, FamilySpec, "ddpo_grpo.policies.FamilySpec")
        for name in plugins.names("families")
    ]


def _discover() -> dict[str, FamilySpec]:
    """Pipeline class -> spec, from every ``SPEC`` / ``SPECS`` of the modules of ``ddpo_grpo.policies``, the plug-ins'
    and the ``register``-ed."""
    import pkgutil

    import ddpo_grpo.policies as package

    specs = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        specs += [module.SPEC] if hasattr(module, "SPEC") else []
        specs += list(getattr(module, "SPECS", ()))
    found: dict[str, FamilySpec] = {}
    names: dict[str, str] = {}
    for spec in specs + plugin_specs() + _REGISTERED:
        for key, table in ((spec.pipeline, found), (spec.name, names)):
            if key in table:
                raise ValueError(f"two family specs claim {key!r}; a pipeline class and a name belong to one family")
        found[spec.pipeline], names[spec.name] = spec, spec.pipeline
    return found


def families() -> dict[str, FamilySpec]:
    """Every registered family: pipeline class name -> ``FamilySpec`` (sorted by pipeline class)."""
    global _CACHE
    if _CACHE is None:
        _CACHE = dict(sorted(_discover().items()))
    return _CACHE


def hub_ids() -> dict[str, str]:
    """Hub id -> its checkpoint's directory under ``config/model_configs/``, from every family's checkpoints."""
    return {hub: c.directory for spec in families().values() for c in spec.checkpoints for hub in c.hub_ids}


def by_name(name: str) -> FamilySpec:
    """The family whose ``name`` (``pretrained.tiny``) is ``name``; KeyError listing the names otherwise."""
    for spec in families().values():
        if spec.name == name:
            return spec
    raise KeyError(f"no model family named {name!r}; known: {sorted(s.name for s in families().values())}")
