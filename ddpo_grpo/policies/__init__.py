"""Policy adapters, chosen from the pipeline's own class (``model_index.json`` → ``_class_name``).

    load_pipeline(model)        -> pipeline (local dir, hub id, a run's output, or a factory file)
    denoiser_components(model)  -> the pipeline components its adapter trains (read from model_index.json)
    build_policy(model, **kw)   -> Policy adapter around it
    canonical_model(model)      -> the same model with local paths made absolute (for manifests)

A directory holding a transformers causal language model (``config.json`` naming a ``*ForCausalLM``, no
``model_index.json``) loads as a ``language_model.LanguageModel`` with the adapter ``policies.causal_lm``.

Every family is registered once, by the ``FamilySpec`` at the end of its adapter file (``policies.family``): the
tables here (``ADAPTERS``, ``PIPELINES``), ``ddpo_grpo.tiny``'s and the planner's are views of that registry. Adding a
model family = one adapter module (a ``policies.flow.FlowPolicy`` or ``policies.diffusion.DiffusionPolicy`` subclass)
with its spec, its tiny builder, a config and its checkpoints' configs; the adapter test kit
(tests/test_adapter_kit.py) then checks it (docs/adapters.md). An installed package may add a family without
touching this package: a ``FamilySpec`` under the ``ddpo_grpo.families`` entry point (``policies.family.plugin_specs``).
The supported families and their recipes: docs/models.md.

A model may also be a user's own code: ``pretrained.model = "path/to/my_model.py:build"`` (or
``"path/to/my_model.py"``, which calls ``build``) imports the file (``foundation.plugins.import_user_file``)
and calls ``build()``, which returns a pipeline with an adapter — typically a
``ddpo_grpo.denoiser_pipeline.DenoiserPipeline`` wrapping the user's denoiser — or a dict of ``DenoiserPipeline``
arguments (``{"denoiser": ..., "scheduler": ..., "sample_shape": [...], ...}``). The factory runs on every
load, including a LoRA run's ``final/`` (its manifest names the factory as the base model), so keep it
deterministic (load a checkpoint, seed any random init).
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

#: the registry's API, re-exported from ``policies.family`` on first use (``__getattr__``: keeps this import light)
_FAMILY_API = ("Checkpoint", "FamilySpec", "by_name", "families", "plugin_specs", "register")


def __getattr__(name: str):
    if name in _FAMILY_API:
        from ddpo_grpo.policies import family

        return getattr(family, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class View(Mapping):
    """A read-only mapping computed from the family registry on each use (``ADAPTERS``, ``tiny.BUILDERS``, …):
    ``build`` gets ``families()`` (pipeline class -> ``FamilySpec``) and returns the dict."""

    def __init__(self, build):
        self._build = build

    def _data(self) -> dict:
        from ddpo_grpo.policies.family import families

        return self._build(families())

    def __getitem__(self, key):
        return self._data()[key]

    def __iter__(self) -> Iterator:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __repr__(self) -> str:
        return repr(self._data())


#: pipeline class name -> "module:Class" of its adapter (a view of the family specs; adapters imported on first use)
ADAPTERS = View(lambda specs: {p: spec.adapter_target for p, spec in specs.items()})

#: pipeline classes that are not diffusers': class name (model_index.json `_class_name`) -> "module:Class"
PIPELINES = View(lambda specs: {p: spec.pipeline_target for p, spec in specs.items() if spec.pipeline_target})

#: the function a factory file spec without ":name" calls
DEFAULT_FACTORY = "build"
_FACTORY_SPEC = re.compile(r"^(?P<file>.+\.py)(?::(?P<attr>[A-Za-z_][A-Za-z0-9_]*))?$")

#: written into `<run>/final/` so that a run's output can be loaded back (sample.py, evaluate.py)
FINAL_MANIFEST = "ddpo_grpo_final.json"


def _read_model_index(model: str) -> dict:
    path = Path(model)
    if path.is_dir():
        index = path / "model_index.json"
        if not index.is_file():
            raise FileNotFoundError(
                f"pretrained.model={model!r} is a directory without model_index.json: point it at a diffusers "
                "pipeline directory (one saved with `pipeline.save_pretrained`)"
            )
        return json.loads(index.read_text())
    from diffusers import DiffusionPipeline

    return DiffusionPipeline.load_config(model)  # hub id (uses the local cache when HF_HUB_OFFLINE=1)


def resolve_model(model: str) -> tuple[str, str | None]:
    """Return (pipeline directory or hub id, LoRA directory or None) for a model or a run's output.

    Accepted: a pipeline directory or hub id; a run's ``final/`` directory; a run directory holding ``final/``.
    """
    path = Path(model)
    if (path / "final" / FINAL_MANIFEST).is_file():
        path = path / "final"
    manifest = path / FINAL_MANIFEST
    if manifest.is_file():
        info = json.loads(manifest.read_text())
        if info.get("kind") == "lora":
            return info["base_model"], str(path)
        return str(path), None
    return model, None


def is_factory_spec(model: str) -> bool:
    """True when ``model`` names a factory file: "path/to/file.py" or "path/to/file.py:fn"."""
    return bool(_FACTORY_SPEC.match(str(model)))


def canonical_model(model: str) -> str:
    """``model`` with local paths made absolute (a directory, or the file of a factory spec).

    For a manifest that must load from any working directory; hub ids are returned unchanged.
    """
    match = _FACTORY_SPEC.match(str(model))
    if match:
        file = os.path.abspath(os.path.expanduser(match["file"]))
        return f"{file}:{match['attr']}" if match["attr"] else file
    path = os.path.expanduser(str(model))
    return os.path.abspath(path) if os.path.exists(path) else str(model)


def _import_target(target: str):
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def _from_factory(spec: str):
    """Import the factory file of ``spec`` and return what its function builds, as a pipeline."""
    match = _FACTORY_SPEC.match(spec)
    file, attr = match["file"], match["attr"] or DEFAULT_FACTORY
    from ddpo_grpo.denoiser_pipeline import DenoiserPipeline
    from foundation.plugins import import_user_file

    try:
        module = import_user_file(file)
    except ValueError as exc:
        raise ValueError(f"pretrained.model={spec!r}: factory file {file!r} not found: {exc}") from exc
    except RuntimeError as exc:
        raise RuntimeError(f"pretrained.model={spec!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        public = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
        raise ValueError(
            f"pretrained.model={spec!r}: {os.path.basename(file)!r} has no function {attr!r} "
            f"(callables defined there: {public}); name it as 'path/to/file.py:fn_name'"
        )
    try:
        built = factory()
    except Exception as exc:  # the user's code: surface its error with context
        raise RuntimeError(f"pretrained.model={spec!r}: {attr}() in {file!r} failed: {exc}") from exc
    if isinstance(built, Mapping):
        built = DenoiserPipeline(**built)
    if _adapter_target(type(built)) is None:
        raise ValueError(
            f"pretrained.model={spec!r}: {attr}() returned a {type(built).__name__}; it must return a pipeline with "
            f"a policy adapter ({sorted(ADAPTERS)}), e.g. DenoiserPipeline(denoiser=..., scheduler=..., "
            "sample_shape=[...]), or a dict of DenoiserPipeline's arguments"
        )
    return built


def _pipeline_class(class_name: str, model: str):
    if class_name not in ADAPTERS:
        from foundation.errors import ConfigError

        raise ConfigError(
            f"pretrained.model={model!r} is a {class_name!r}; supported pipeline classes: {sorted(ADAPTERS)} "
            "(adding a family is one adapter file: docs/adapters.md)"
        )
    if class_name in PIPELINES:
        return _import_target(PIPELINES[class_name])
    import diffusers

    return getattr(diffusers, class_name)


def load_pipeline(model: str, torch_dtype=None, components: dict | None = None):
    """Load any supported pipeline; components saved as null (e.g. SD3 without T5) are passed as None.

    ``model``: a pipeline directory or hub id, a run's output (``resolve_model``), or a factory file spec
    ("path/to/file.py:fn"; see the module docstring). A LoRA run's output loads its base, then the LoRA.
    ``torch_dtype``: one dtype, or diffusers' per-component dict (``{"transformer": torch.float32, "default":
    torch.bfloat16}``): each component is read from its files straight into it (a factory's pipeline is cast).
    ``components``: component name -> a module to use instead of loading that one (e.g. a denoiser built empty for
    sharded loading, ``ddpo_grpo.sharded_loading``).
    """
    from ddpo_grpo.console import quiet_library_logs

    with quiet_library_logs():  # no loading bars, no notes about components and LoRA layers absent on purpose
        return _load_pipeline(model, torch_dtype, components)


def _load_pipeline(model: str, torch_dtype, components: dict | None):
    from ddpo_grpo.language_model import LanguageModel, is_causal_lm

    base, lora_dir = resolve_model(model)
    if is_causal_lm(base):
        pipeline = LanguageModel.from_pretrained(base, torch_dtype=torch_dtype, **(components or {}))
    elif is_factory_spec(base):
        pipeline = _from_factory(base)
        if components:
            pipeline.register_modules(**components)
        if torch_dtype is not None:
            import torch

            for name, module in pipeline.components.items():
                if isinstance(module, torch.nn.Module) and name not in (components or {}):
                    module.to(component_dtype(torch_dtype, name))
    else:
        index = _read_model_index(base)
        pipeline_class = _pipeline_class(index.get("_class_name"), model)
        missing = {k: None for k, v in index.items() if isinstance(v, list) and len(v) == 2 and v[0] is None}
        kwargs = {"dtype": torch_dtype} if torch_dtype is not None else {}  # (diffusers' torch_dtype is deprecated)
        pipeline = pipeline_class.from_pretrained(base, **missing, **(components or {}), **kwargs)
    if lora_dir is not None:
        policy_class(pipeline).load_lora(pipeline, lora_dir)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def component_dtype(torch_dtype, name: str):
    """The dtype ``torch_dtype`` (one dtype or a per-component dict with "default") gives component ``name``."""
    import torch

    if isinstance(torch_dtype, Mapping):
        return torch_dtype.get(name, torch_dtype.get("default", torch.float32))
    return torch_dtype


def denoiser_components(model: str) -> tuple[str, ...]:
    """The component names of the pipeline directory or hub id ``model`` that its adapter trains (a two-expert
    model's both); () for a factory file or a run's LoRA output, whose pipeline is only known once built."""
    from ddpo_grpo.language_model import is_causal_lm

    base, lora_dir = resolve_model(model)
    if is_factory_spec(base) or lora_dir is not None:
        return ()
    if is_causal_lm(base):
        return ("model",)
    index = _read_model_index(base)
    cls = _import_target(_adapter_target(_pipeline_class(index.get("_class_name"), model)))
    return cls.denoiser_components(index)


def _adapter_target(cls) -> str | None:
    """The "module:Class" of the adapter of pipeline class ``cls`` or of its nearest registered base class."""
    return next((ADAPTERS[c.__name__] for c in cls.__mro__ if c.__name__ in ADAPTERS), None)


def policy_class(pipeline):
    target = getattr(type(pipeline), "adapter_target", None) or _adapter_target(type(pipeline))
    if target is None:
        raise ValueError(f"no policy adapter for {type(pipeline).__name__}; supported: {sorted(ADAPTERS)}")
    return _import_target(target)


def policy_settings(pipeline, sample):
    """The ``PolicySettings`` of a config's ``sample`` section for ``pipeline``'s family (its kernels)."""
    from ddpo_grpo.policies.base import PolicySettings

    cls = policy_class(pipeline)
    if hasattr(cls, "settings_from"):  # a family with settings of its own (causal language models)
        return cls.settings_from(sample)
    return PolicySettings.from_config(sample, cls.kernels)


def build_policy(pipeline, settings=None, **kwargs):
    """Wrap a loaded pipeline in its adapter, with a ``PolicySettings`` (or its fields as keywords: resolution,
    max_sequence_length, kernel, image_guidance_scale, num_frames, attention_backend, source_root).

    ``sde_type`` is accepted for one release as the old name of a flow kernel (``kernel`` wins when both are given).
    """
    legacy = kwargs.pop("sde_type", None)
    if legacy and not kwargs.get("kernel") and (settings is None or not settings.kernel):
        cls = policy_class(pipeline)
        if legacy in cls.kernels:
            kwargs["kernel"] = legacy
    return policy_class(pipeline)(pipeline, settings, **kwargs)
