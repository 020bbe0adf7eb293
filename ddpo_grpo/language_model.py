"""A causal language model and its tokenizer, held as one "pipeline" so that a run treats it as it treats a diffusers
pipeline: loaded from ``pretrained.model``, its trained module named by ``components``, saved whole by
``save_pretrained`` (``final/`` of a full fine-tune), moved with ``to``.

A directory is a causal language model when it has a transformers ``config.json`` whose ``architectures`` names a
``*ForCausalLM`` class and no diffusers ``model_index.json`` (``is_causal_lm``). Its tokenizer is read from the same
directory with ``AutoTokenizer``; any library loads the pair back with ``AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

#: the adapter of this "pipeline" (``policies.policy_class``)
ADAPTER = "ddpo_grpo.policies.causal_lm:CausalLMPolicy"


def causal_lm_architecture(model: str) -> str | None:
    """The ``*ForCausalLM`` class named by the transformers config of directory ``model``, else None (a diffusers
    pipeline, a factory file, a hub id)."""
    path = Path(str(model))
    config = path / "config.json"
    if not path.is_dir() or (path / "model_index.json").is_file() or not config.is_file():
        return None
    try:
        architectures = json.loads(config.read_text()).get("architectures") or []
    except (json.JSONDecodeError, AttributeError):
        return None
    return next((a for a in architectures if str(a).endswith("ForCausalLM")), None)


def is_causal_lm(model: str) -> bool:
    return causal_lm_architecture(model) is not None


class LanguageModel:
    """``model`` (a transformers ``*ForCausalLM``) and its ``tokenizer``."""

    adapter_target = ADAPTER

    def __init__(self, model: torch.nn.Module, tokenizer):
        self.model = model
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, directory: str, torch_dtype=None, model: torch.nn.Module | None = None) -> LanguageModel:
        """Read the model (in ``torch_dtype``: one dtype, or a per-component dict whose "model" / "default" entry
        applies) and its tokenizer from ``directory``; ``model``: a module to use instead of reading the model (the
        gathered weights of a sharded run, ``load_pipeline(components=…)``)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging

        logging.disable_progress_bar()  # (one line per load is noise in a run's log)

        if isinstance(torch_dtype, dict):
            torch_dtype = torch_dtype.get("model", torch_dtype.get("default"))
        kwargs = {"dtype": torch_dtype} if torch_dtype is not None else {}
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(directory, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model.eval()
        return cls(model, tokenizer)

    @property
    def components(self) -> dict:
        return {"model": self.model, "tokenizer": self.tokenizer}

    def register_modules(self, **modules) -> None:
        for name, module in modules.items():
            setattr(self, name, module)

    def to(self, *args, **kwargs) -> LanguageModel:
        self.model.to(*args, **kwargs)
        return self

    def set_progress_bar_config(self, **kwargs) -> None:
        """(Nothing to configure: the rollout draws its own tokens.)"""

    def save_pretrained(self, directory: str) -> None:
        """The model and its tokenizer, as ``from_pretrained`` (and any transformers user) reads them."""
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
