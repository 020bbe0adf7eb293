"""Pretraining base models from scratch: one world-agnostic loop, recipes supplied by worlds.

* :mod:`.loop` — :class:`Pretrainer` (stages, AdamW and the LR schedule, clipping, EMA with warm-up,
  logging, evaluation, checkpoints and exact resume, export and reload), :class:`Recipe` (what a model
  family and its world supply: models, stages, losses, data, pipeline, evaluation rows and reward),
  :func:`start`, :func:`run`;
* :mod:`.stage` — :class:`Stage` and :func:`denoiser_stage`, the one-stage wiring the denoiser recipes share;
* :mod:`.config` — :class:`PretrainConfig` (the fields every recipe shares), the ``--resume`` rules;
* :mod:`.tokenizer` — a word-level ``CLIPTokenizer`` learned on a grammar's words;
* :mod:`.cli` — the command line of a pretraining script (one flag per config field).

Recipes: ``worlds/shapes/pretrain/`` (SD3, SD; ``python -m worlds.shapes pretrain``),
``worlds/motion/pretrain.py`` (MDM; ``python -m worlds.motion pretrain``), ``worlds/shapes_i2i/pretrain.py``
(InstructPix2Pix; ``python -m worlds.shapes_i2i pretrain``).
"""

from __future__ import annotations

from ddpo_grpo.pretraining.config import PretrainConfig, ResumeError, resumed_config
from ddpo_grpo.pretraining.loop import (
    EVAL_SEED,
    FINAL_DIR,
    FINAL_EVAL,
    LOG_FILE,
    Pretrainer,
    Recipe,
    TrainingData,
    lr_at,
    run,
    start,
)
from ddpo_grpo.pretraining.stage import Stage, denoiser_stage

__all__ = [
    "EVAL_SEED",
    "FINAL_DIR",
    "FINAL_EVAL",
    "LOG_FILE",
    "PretrainConfig",
    "Pretrainer",
    "Recipe",
    "ResumeError",
    "Stage",
    "TrainingData",
    "denoiser_stage",
    "lr_at",
    "resumed_config",
    "run",
    "start",
]
