"""Pretraining of the ShapesWorld base models: recipes on the core's loop (:mod:`ddpo_grpo.pretraining`).

* :mod:`.base` — :class:`~.base.ShapesRecipe`, what every ShapesWorld recipe gives the loop: the
  training data and the held-out evaluation (test split, strict ``shapes`` reward, per task);
* :mod:`.data` — train-split rows, renders, caption noise and the training randomness;
* :mod:`.config` — :class:`~.config.ShapesConfig`, the data fields added to the core's config;
* :mod:`.sd3` — ``StableDiffusion3Pipeline`` from scratch (VAE stage, then rectified flow);
* :mod:`.sd` — ``StableDiffusionPipeline`` (UNet + DDIM) on an SD3 model's VAE and text encoder;
* :mod:`.tokenizer` — the word-level CLIP tokenizer of the grammar's words.

Entry point: ``python -m worlds.shapes pretrain --arch sd3|sd``.
"""

from __future__ import annotations

import importlib

from ddpo_grpo.pretraining import PretrainConfig, Pretrainer, Recipe, ResumeError, Stage, run, start
from worlds.shapes.pretrain.config import ShapesConfig

#: --arch -> the module whose ``RECIPE`` it is (imported on demand)
ARCHS = {"sd3": "worlds.shapes.pretrain.sd3", "sd": "worlds.shapes.pretrain.sd"}


def recipe(arch: str) -> type[Recipe]:
    """The recipe class of an architecture (its config class is ``.config_class``)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {sorted(ARCHS)}")
    return importlib.import_module(ARCHS[arch]).RECIPE


__all__ = [
    "ARCHS",
    "PretrainConfig",
    "Pretrainer",
    "Recipe",
    "ResumeError",
    "ShapesConfig",
    "Stage",
    "recipe",
    "run",
    "start",
]
