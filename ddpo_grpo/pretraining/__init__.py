"""Pretraining base models from scratch: one world-agnostic loop, recipes supplied by worlds.

* :mod:`.loop` — :class:`Pretrainer` (stages, AdamW and the LR schedule, clipping, EMA with warm-up,
  logging, evaluation, checkpoints and exact resume, export and reload), :class:`Recipe` (what a model
  family and its world supply: models, stages, losses, data, pipeline, evaluation rows and reward),
  :class:`Stage`, :func:`start`, :func:`run`;
* :mod:`.config` — :class:`PretrainConfig` (the fields every recipe shares), the ``--resume`` rules;
* :mod:`.tokenizer` — a word-level ``CLIPTokenizer`` learned on a grammar's words;
* :mod:`.cli` — the command line of a pretraining script (one flag per config field).

Recipes: ``worlds/shapes/pretrain/`` (SD3, SD; ``scripts/pretrain_shapes.py``),
``worlds/motion/pretrain.py`` (MDM; ``scripts/pretrain_motion.py``).
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
    Stage,
    TrainingData,
    lr_at,
    run,
    start,
)

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
    "lr_at",
    "resumed_config",
    "run",
    "start",
]
