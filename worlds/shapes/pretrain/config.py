"""The settings every pretraining recipe shares, their JSON round trip, and the rules of ``--resume``.

A recipe's config is a dataclass subclassing :class:`PretrainConfig` with its models' fields and its
stage lengths; the whole config is saved in every checkpoint, and a resumed run continues with the
saved one (:func:`resumed_config`), where only the ``RESUME_MUTABLE`` fields may change.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from worlds.shapes.world import TASKS


class ResumeError(ValueError):
    """A resumed run cannot use these settings (another architecture, or a changed immutable field)."""


@dataclass
class PretrainConfig:
    """Data, optimisation, evaluation and bookkeeping fields of every recipe (the recipe adds its own)."""

    seed: int = 0
    # ---- data ----
    task_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # sampling weight of each task in TASKS order
    # fraction of denoiser-stage images rendered for a near miss of their caption (data.near_miss), like
    # the mis-captioned share of web alt-text: the model learns to make those mistakes at about that
    # rate. 0 = every image matches its caption (and draws nothing extra from the data RNG)
    caption_noise: float = 0.0
    latent_stats_images: int = 512  # fresh renders that measure the latent scale (and shift)
    # ---- denoiser training (text encoders + transformer / UNet) ----
    batch_size: int = 32  # latents per step (= images per step * noise_per_image)
    noise_per_image: int = 1
    lr: float = 8e-4
    warmup_steps: int = 200
    min_lr_ratio: float = 0.1  # cosine decay from lr to min_lr_ratio*lr over the stage
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    cond_dropout: float = 0.1  # fraction of prompts replaced by "" (classifier-free guidance)
    # ---- evaluation (ddpo_grpo.evaluation on test-split prompts, judged by the strict `shapes` reward) ----
    eval_every: int = 500  # denoiser steps; 0 = only at the end
    eval_per_task: int = 16
    final_eval_per_task: int = 100
    eval_steps: int = 20
    eval_guidance: float = 4.5
    # ---- bookkeeping ----
    ckpt_every: int = 250  # steps (every stage)
    keep_last: int = 2
    log_every: int = 25

    #: fields a resumed run may change. Evaluation and bookkeeping leave the training trajectory untouched
    #: (evaluation draws from its own generators); ``caption_noise`` changes the data from the current step on
    #: (pretrain clean, then continue on noisy captions). A recipe adds its last stage's length, which
    #: *extends* a run: the cosine LR schedule is re-stretched over the new total from the current step on.
    RESUME_MUTABLE: ClassVar[tuple[str, ...]] = (
        "caption_noise", "eval_every", "eval_per_task", "final_eval_per_task", "ckpt_every", "keep_last", "log_every")
    #: the toy sizes of :meth:`tiny`, for tests (a recipe extends them with its own)
    TINY: ClassVar[dict] = dict(
        latent_stats_images=4, batch_size=4, noise_per_image=2, warmup_steps=1, eval_every=0, eval_per_task=1,
        final_eval_per_task=1, eval_steps=2, ckpt_every=2, log_every=1)

    @classmethod
    def tiny(cls, **overrides) -> PretrainConfig:
        """A seconds-long configuration for tests (same code paths, toy sizes)."""
        return cls(**{**cls.TINY, **overrides})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PretrainConfig:
        """The inverse of :meth:`to_dict` (JSON turns tuples into lists)."""
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    @classmethod
    def filled(cls, saved: dict) -> dict:
        """A checkpoint's saved config with every field the run predates set to its default."""
        return {**cls().to_dict(), **saved}

    def validate(self) -> None:
        w = self.task_weights
        if len(w) != len(TASKS) or min(w) < 0 or sum(w) <= 0:
            raise ValueError(f"task_weights needs {len(TASKS)} non-negative weights ({', '.join(TASKS)}), "
                             f"not all zero; got {w}")
        if self.noise_per_image < 1 or self.batch_size % self.noise_per_image:
            raise ValueError(f"batch_size={self.batch_size} must be a multiple of noise_per_image="
                             f"{self.noise_per_image} >= 1")
        if not 0.0 <= self.cond_dropout < 1.0:
            raise ValueError(f"cond_dropout must be in [0, 1); got {self.cond_dropout}")
        if not 0.0 <= self.caption_noise < 1.0:
            raise ValueError(f"caption_noise must be in [0, 1) (the fraction of images that miss their caption); "
                             f"got {self.caption_noise}")
        for name in ("ckpt_every", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")


def resumed_config(cls: type[PretrainConfig], saved: dict, given: dict) -> tuple[PretrainConfig, dict]:
    """The config a resumed run continues with, and what changed: ``{field: (saved, new)}``.

    ``saved`` is the checkpoint's config; ``given`` the settings asked for now (e.g. the command-line
    flags). A given value equal to the saved one is fine; a different one is applied when the field is
    in ``cls.RESUME_MUTABLE`` and refused with :class:`ResumeError` otherwise.
    """
    unknown = set(saved) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ResumeError(f"the checkpoint holds a run of another architecture (fields {sorted(unknown)[:4]} are "
                          f"not {cls.__name__} fields); resume it with the --arch it was started with")
    before = cls.filled(saved)
    changed = {k: (before[k], v) for k, v in given.items() if (list(v) if isinstance(v, tuple) else v) != before[k]}
    clash = [k for k in changed if k not in cls.RESUME_MUTABLE]
    if clash:
        raise ResumeError("a resumed run keeps its saved config; these settings differ from it: "
                          + ", ".join(f"{k}={changed[k][1]} (saved {changed[k][0]})" for k in clash)
                          + f". Drop them, or start a new run (changeable on resume: {', '.join(cls.RESUME_MUTABLE)})")
    return cls.from_dict({**before, **{k: new for k, (_, new) in changed.items()}}), changed
