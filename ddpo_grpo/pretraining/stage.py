"""A recipe's stages: :class:`Stage` (what the loop trains in one stage) and :func:`denoiser_stage`, the
single-stage wiring that the denoiser recipes share (MotionWorld's MDM, ShapesWorld's SD, the InstructPix2Pix
model)."""

from __future__ import annotations

from dataclasses import dataclass

from ddpo_grpo.pretraining.config import PretrainConfig


@dataclass(frozen=True)
class Stage:
    """One stage of a recipe.

    groups: the optimizer's parameter groups in order, each ``(module names, lr scale)``; their
    parameters, in this order, are what the gradient clipping sees.
    """

    name: str
    steps: int
    groups: tuple[tuple[tuple[str, ...], float], ...]
    lr: float
    warmup: int
    weight_decay: float = 0.0
    ema: bool = False  # update the EMA after every step
    evaluate: bool = False  # evaluate every eval_every steps of this stage
    needs_latents: bool = False  # measure the latent statistics at its start unless known

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(name for names, _ in self.groups for name in names)


def denoiser_stage(name: str, cfg: PretrainConfig, denoiser: str, needs_latents: bool = False) -> Stage:
    """The one stage of a recipe that trains the model ``denoiser`` at ``cfg.lr`` and, when
    ``cfg.text_lr_ratio > 0``, its ``text_encoder`` at ``text_lr_ratio · lr`` (after the denoiser in the
    optimizer's groups), for ``cfg.steps`` steps with ``cfg.warmup_steps`` of warm-up and ``cfg.weight_decay``,
    updating the EMA and evaluating. The recipe's ``ema_modules`` are the stage's :attr:`~Stage.modules`."""
    text = ((("text_encoder",), cfg.text_lr_ratio),) if cfg.text_lr_ratio > 0 else ()
    return Stage(
        name,
        cfg.steps,
        (((denoiser,), 1.0), *text),
        cfg.lr,
        warmup=cfg.warmup_steps,
        weight_decay=cfg.weight_decay,
        ema=True,
        evaluate=True,
        needs_latents=needs_latents,
    )


__all__ = ["Stage", "denoiser_stage"]
