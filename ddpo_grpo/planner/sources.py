"""Where the planner reads a model's configs: a pipeline directory with ``model_index.json``, or a hub id mapped to
the component configs shipped under ``config/model_configs/`` (JSON only, no weights: the planner works offline).

``model_dir(spec)`` resolves ``pretrained.model`` (or ``--model``); ``components(directory)`` lists the pipeline's
modules as (name, library, class) from its ``model_index.json``. Tokenizers and schedulers hold no weights and are
left out.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddpo_grpo.errors import ConfigError

#: config/model_configs/ (the shipped component configs)
SHIPPED = Path(__file__).resolve().parents[2] / "config" / "model_configs"

#: hub id -> shipped directory name (the recipes under config/ point at these ids; each directory's sources:
#: config/model_configs/README.md)
HUB_IDS = {
    "stable-diffusion-v1-5/stable-diffusion-v1-5": "sd1.5",
    "runwayml/stable-diffusion-v1-5": "sd1.5",
    "stabilityai/stable-diffusion-xl-base-1.0": "sdxl-base-1.0",
    "stabilityai/stable-diffusion-3.5-medium": "sd3.5-medium",
    "black-forest-labs/FLUX.1-dev": "flux1-dev",
    "black-forest-labs/FLUX.1-schnell": "flux1-schnell",
    "black-forest-labs/FLUX.1-Kontext-dev": "flux1-kontext-dev",
    "Qwen/Qwen-Image": "qwen-image",
    "Qwen/Qwen-Image-Edit": "qwen-image-edit",
    "Qwen/Qwen-Image-Edit-2509": "qwen-image-edit-2509",
    "Tongyi-MAI/Z-Image-Turbo": "z-image-turbo",
    "Wan-AI/Wan2.1-T2V-14B-Diffusers": "wan2.1-t2v-14b",
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": "wan2.1-t2v-1.3b",
    "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers": "wan2.1-i2v-14b-480p",
    "Wan-AI/Wan2.2-T2V-A14B-Diffusers": "wan2.2-t2v-a14b",
    "Wan-AI/Wan2.2-I2V-A14B-Diffusers": "wan2.2-i2v-a14b",
}

#: components without weights
WEIGHTLESS = ("tokenizer", "scheduler", "feature_extractor", "image_processor", "processor")


def model_dir(spec: str) -> Path:
    """A pipeline directory (``model_index.json`` inside), a shipped name, or a hub id with shipped configs;
    ConfigError naming ``pretrained.model`` otherwise."""
    spec = str(spec)
    path = Path(spec).expanduser()
    if (path / "model_index.json").is_file():
        return path
    name = HUB_IDS.get(spec, spec)
    if (SHIPPED / name / "model_index.json").is_file():
        return SHIPPED / name
    known = ", ".join(sorted(HUB_IDS))
    raise ConfigError(
        f"pretrained.model={spec!r}: no model_index.json there and no shipped configs for it; give a pipeline "
        f"directory (its JSON configs suffice, no weights needed) or one of {known}"
    )


def components(directory: Path) -> list[tuple[str, str, str]]:
    """(component name, library, class name) of every module with weights in ``directory``'s model_index.json."""
    try:
        index = json.loads((Path(directory) / "model_index.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{directory}/model_index.json: cannot read it ({exc})") from exc
    found = []
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, list) or len(value) != 2 or value[0] is None:
            continue
        if any(name.startswith(w) for w in WEIGHTLESS):
            continue
        found.append((name, value[0], value[1]))
    return found
