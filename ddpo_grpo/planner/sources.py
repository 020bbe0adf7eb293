"""Where the planner reads a model's configs: a pipeline directory with ``model_index.json``, or a hub id mapped to
the component configs shipped under ``config/model_configs/`` (JSON only, no weights: the planner works offline; each
family's ``Checkpoint`` names its hub ids, ``ddpo_grpo.policies.family.hub_ids``).

A causal language model's directory (a ``config.json`` naming a ``*ForCausalLM`` architecture, no
``model_index.json``: ``causal_lm.is_causal_lm``) resolves the same way. ``model_dir(spec)`` resolves ``pretrained.model`` (or ``--model``); ``components(directory)`` lists the pipeline's
modules as (name, library, class) from its ``model_index.json``. Tokenizers and schedulers hold no weights and are
left out.
"""

from __future__ import annotations

import json
from pathlib import Path

from ddpo_grpo.planner.causal_lm import is_causal_lm
from ddpo_grpo.policies.family import MODEL_CONFIGS, hub_ids
from foundation.errors import ConfigError

#: config/model_configs/ (the shipped component configs)
SHIPPED = MODEL_CONFIGS

#: components without weights
WEIGHTLESS = ("tokenizer", "scheduler", "feature_extractor", "image_processor", "processor")


def model_dir(spec: str) -> Path:
    """A pipeline directory (``model_index.json`` inside), a shipped name, or a hub id with shipped configs;
    ConfigError naming ``pretrained.model`` otherwise."""
    spec = str(spec)
    path = Path(spec).expanduser()
    if (path / "model_index.json").is_file() or is_causal_lm(path):
        return path
    known = hub_ids()
    name = known.get(spec, spec)
    if (SHIPPED / name / "model_index.json").is_file() or is_causal_lm(SHIPPED / name):
        return SHIPPED / name
    raise ConfigError(
        f"pretrained.model={spec!r}: no model_index.json (nor a causal LM's config.json) there and no shipped configs "
        f"for it; give a pipeline or causal LM directory (its JSON configs suffice, no weights needed) or one of "
        f"{', '.join(sorted(known))}"
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
