"""Pretraining of the ShapesWorld base models: one loop, one recipe per architecture.

* :mod:`.loop` — the loop (stages, optimizer and LR schedule, clipping, EMA, logging, evaluation,
  checkpoints and exact resume, export); :class:`~.loop.Recipe` is what an architecture supplies;
* :mod:`.data` — train-split rows, renders, caption noise and the training randomness;
* :mod:`.config` — the shared config fields and the ``--resume`` rules;
* :mod:`.sd3` — ``StableDiffusion3Pipeline`` from scratch (VAE stage, then rectified flow);
* :mod:`.sd` — ``StableDiffusionPipeline`` (UNet + DDIM) on an SD3 model's VAE and text encoder;
* :mod:`.tokenizer` — the word-level CLIP tokenizer.

Entry point: ``scripts/pretrain_shapes.py --arch sd3|sd``.
"""
from __future__ import annotations

import importlib

from worlds.shapes.pretrain.config import PretrainConfig, ResumeError
from worlds.shapes.pretrain.loop import Pretrainer, Recipe, Stage, run, start

#: --arch -> the module whose ``RECIPE`` it is (imported on demand)
ARCHS = {"sd3": "worlds.shapes.pretrain.sd3", "sd": "worlds.shapes.pretrain.sd"}


def recipe(arch: str) -> type[Recipe]:
    """The recipe class of an architecture (its config class is ``.config_class``)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {sorted(ARCHS)}")
    return importlib.import_module(ARCHS[arch]).RECIPE


__all__ = ["ARCHS", "PretrainConfig", "Pretrainer", "Recipe", "ResumeError", "Stage", "recipe", "run", "start"]
