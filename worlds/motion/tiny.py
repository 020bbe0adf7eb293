"""A tiny, randomly initialised MotionWorld pipeline (the shipped MDM's architecture at toy sizes), for tests.

:func:`build_tiny_mdm` returns (and with ``path`` saves) a ``DenoiserPipeline`` of the components of
:mod:`worlds.motion.pretrain` — an MDM denoiser of width 16 over ``frames`` frames of the 263 features, the
cosine DDPM scheduler, a one-layer CLIP text encoder on the word-level tokenizer, the motion normalizer
with the shipped statistics — built by :class:`~worlds.motion.pretrain.MDMRecipe` from
``MotionConfig.tiny()``, so it exercises exactly the shipped model's code. It is also a factory for
``pretrained.model`` (deterministic: its own RNG, seed 0)::

    pretrained.model = "<repo>/worlds/motion/tiny.py:build_tiny_mdm"     # config/motion.py:motion_tiny
"""

from __future__ import annotations

from pathlib import Path

import torch


def build_tiny_mdm(path: str | Path | None = None, seed: int = 0, frames: int = 24, text_embedding: str = "sequence"):
    """A tiny random MotionWorld ``DenoiserPipeline`` (module docstring); saved to ``path`` when given."""
    from worlds.motion.pretrain import MDMRecipe, MotionConfig

    cfg = MotionConfig.tiny(seed=seed, frames=frames, text_embedding=text_embedding)
    with torch.random.fork_rng(devices=[]):  # its own RNG: building it leaves the caller's random state alone
        pipe = MDMRecipe(cfg).pipeline()
    if path is not None:
        pipe.save_pretrained(Path(path))
    return pipe


__all__ = ["build_tiny_mdm"]
