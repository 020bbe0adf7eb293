"""The data fields every ShapesWorld recipe adds to the core's :class:`~ddpo_grpo.pretraining.PretrainConfig`.

A recipe's config (:class:`~worlds.shapes.pretrain.sd3.SD3Config`, :class:`~worlds.shapes.pretrain.sd.SDConfig`)
subclasses :class:`ShapesConfig` with its models' fields and its stage lengths; the optimisation,
evaluation and bookkeeping fields and the ``--resume`` rules are the core's (:mod:`ddpo_grpo.pretraining.config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ddpo_grpo.pretraining import PretrainConfig
from worlds.shapes.world import TASKS


@dataclass
class ShapesConfig(PretrainConfig):
    """ShapesWorld data fields (renders of train-split prompts, :mod:`.data`)."""

    task_weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # sampling weight of each task in TASKS order
    # fraction of denoiser-stage images rendered for a near miss of their caption (data.near_miss), like
    # the mis-captioned share of web alt-text: the model learns to make those mistakes at about that
    # rate. 0 = every image matches its caption (and draws nothing extra from the data RNG)
    caption_noise: float = 0.0
    latent_stats_images: int = 512  # fresh renders that measure the latent scale (and shift)
    noise_per_image: int = 1  # latents per image in a batch (batch_size = images per step * noise_per_image)

    #: ``caption_noise`` changes the data from the current step on (pretrain clean, then continue on noisy
    #: captions); the core's evaluation and bookkeeping fields may change too
    RESUME_MUTABLE: ClassVar[tuple[str, ...]] = ("caption_noise", *PretrainConfig.RESUME_MUTABLE)
    TINY: ClassVar[dict] = dict(PretrainConfig.TINY, latent_stats_images=4, noise_per_image=2)

    def validate(self) -> None:
        super().validate()
        w = self.task_weights
        if len(w) != len(TASKS) or min(w) < 0 or sum(w) <= 0:
            raise ValueError(
                f"task_weights needs {len(TASKS)} non-negative weights ({', '.join(TASKS)}), not all zero; got {w}"
            )
        if self.noise_per_image < 1 or self.batch_size % self.noise_per_image:
            raise ValueError(
                f"batch_size={self.batch_size} must be a multiple of noise_per_image={self.noise_per_image} >= 1"
            )
        if not 0.0 <= self.caption_noise < 1.0:
            raise ValueError(
                f"caption_noise must be in [0, 1) (the fraction of images that miss their caption); "
                f"got {self.caption_noise}"
            )
