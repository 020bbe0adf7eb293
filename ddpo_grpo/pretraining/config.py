"""The settings every pretraining recipe shares, their JSON round trip, and the rules of ``--resume``.

A recipe's config is a dataclass subclassing :class:`PretrainConfig` with its models' fields, its data
fields and its stage lengths; the whole config is saved in every checkpoint, and a resumed run
continues with the saved one (:func:`resumed_config`), where only the ``RESUME_MUTABLE`` fields may
change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar


class ResumeError(ValueError):
    """A resumed run cannot use these settings (another architecture, or a changed immutable field)."""


@dataclass
class PretrainConfig:
    """Optimisation, evaluation and bookkeeping fields of every recipe (the recipe adds its own)."""

    seed: int = 0
    # ---- denoiser training ----
    batch_size: int = 32  # training examples per step
    lr: float = 8e-4
    warmup_steps: int = 200
    min_lr_ratio: float = 0.1  # cosine decay from lr to min_lr_ratio*lr over the stage
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    cond_dropout: float = 0.1  # fraction of conditions dropped (classifier-free guidance)
    # ---- evaluation (ddpo_grpo.evaluation on the recipe's held-out rows and reward) ----
    eval_every: int = 500  # steps of an evaluating stage; 0 = only at the end
    eval_per_task: int = 16  # samples per evaluation group (the recipe's eval_group_by, e.g. task)
    final_eval_per_task: int = 100
    eval_steps: int = 20
    eval_guidance: float = 4.5
    # ---- bookkeeping ----
    ckpt_every: int = 250  # steps (every stage)
    keep_last: int = 2
    log_every: int = 25

    #: fields a resumed run may change. Evaluation and bookkeeping leave the training trajectory untouched
    #: (evaluation draws from its own generators). A recipe adds its last stage's length, which *extends* a
    #: run: the cosine LR schedule is re-stretched over the new total from the current step on.
    RESUME_MUTABLE: ClassVar[tuple[str, ...]] = (
        "eval_every",
        "eval_per_task",
        "final_eval_per_task",
        "ckpt_every",
        "keep_last",
        "log_every",
    )
    #: the toy sizes of :meth:`tiny`, for tests (a recipe extends them with its own)
    TINY: ClassVar[dict] = dict(
        batch_size=4,
        warmup_steps=1,
        eval_every=0,
        eval_per_task=1,
        final_eval_per_task=1,
        eval_steps=2,
        ckpt_every=2,
        log_every=1,
    )

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
        """ValueError naming the field of the first bad setting (a recipe extends it with its own fields)."""
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1; got {self.batch_size}")
        if not 0.0 <= self.cond_dropout < 1.0:
            raise ValueError(f"cond_dropout must be in [0, 1); got {self.cond_dropout}")
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
        raise ResumeError(
            f"the checkpoint holds a run of another architecture (fields {sorted(unknown)[:4]} are "
            f"not {cls.__name__} fields); resume it with the recipe (--arch) it was started with"
        )
    before = cls.filled(saved)
    changed = {k: (before[k], v) for k, v in given.items() if (list(v) if isinstance(v, tuple) else v) != before[k]}
    clash = [k for k in changed if k not in cls.RESUME_MUTABLE]
    if clash:
        raise ResumeError(
            "a resumed run keeps its saved config; these settings differ from it: "
            + ", ".join(f"{k}={changed[k][1]} (saved {changed[k][0]})" for k in clash)
            + f". Drop them, or start a new run (changeable on resume: {', '.join(cls.RESUME_MUTABLE)})"
        )
    return cls.from_dict({**before, **{k: new for k, (_, new) in changed.items()}}), changed
