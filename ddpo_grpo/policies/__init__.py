"""Policy adapters, chosen from the pipeline's own class (`model_index.json` → `_class_name`).

    load_pipeline(model)        -> diffusers pipeline (local dir, hub id, or a run's output)
    build_policy(model, **kw)   -> Policy adapter around it

Adding a model family = one adapter module + one line in `ADAPTERS`.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

#: pipeline class name -> "module:Class" of its adapter (imported lazily)
ADAPTERS = {
    "StableDiffusionPipeline": "ddpo_grpo.policies.sd:SDPolicy",
    "StableDiffusion3Pipeline": "ddpo_grpo.policies.sd3:SD3Policy",
}

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

    Accepted: a pipeline directory or hub id; a run's `final/` directory; a run directory holding `final/`.
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


def load_pipeline(model: str, torch_dtype=None):
    """Load any supported pipeline; components saved as null (e.g. SD3 without T5) are passed as None."""
    base, lora_dir = resolve_model(model)
    index = _read_model_index(base)
    class_name = index.get("_class_name")
    if class_name not in ADAPTERS:
        raise ValueError(
            f"pretrained.model={model!r} is a {class_name!r}; supported pipeline classes: {sorted(ADAPTERS)}"
        )
    import diffusers

    missing = {k: None for k, v in index.items() if isinstance(v, list) and v[0] is None}
    kwargs = {"torch_dtype": torch_dtype} if torch_dtype is not None else {}
    pipeline = getattr(diffusers, class_name).from_pretrained(base, **missing, **kwargs)
    if lora_dir is not None:
        pipeline.load_lora_weights(lora_dir)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def policy_class(pipeline):
    target = ADAPTERS.get(type(pipeline).__name__)
    if target is None:
        raise ValueError(f"no policy adapter for {type(pipeline).__name__}; supported: {sorted(ADAPTERS)}")
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def build_policy(pipeline, **kwargs):
    """Wrap a loaded pipeline in its adapter. kwargs: resolution, max_sequence_length, sde_type (flow)."""
    return policy_class(pipeline)(pipeline, **kwargs)
