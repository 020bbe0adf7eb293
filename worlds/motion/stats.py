"""The shipped normalisation statistics of MotionWorld's features, and how to reproduce them.

``data/motion_{mean,std}.npy`` (float32 [263] each) are the per-dimension mean and the grouped std
(:func:`~worlds.motion.features.group_std`) of one generated clip per train prompt;
``compute_stats(STATS_SEED)`` reproduces them bit for bit and ``write_stats()`` rewrites them. Kept apart
from :mod:`.features` because it needs the generator, which itself builds on the features.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .features import DATA_DIR, MEAN_PATH, STATS_SEED, STD_PATH, group_std


def compute_stats(seed: int = STATS_SEED, clips_per_prompt: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (float32 ``[263]``) over ``clips_per_prompt`` generated clips per train prompt.

    Clip ``k`` of train prompt ``i`` is :func:`~worlds.motion.generator.generate` with seed
    ``dataset_seed(seed, i, k)``; all feature frames are pooled; the std is post-processed by
    :func:`group_std`. ``compute_stats(STATS_SEED)`` reproduces the shipped files bit for bit.
    """
    from .generator import generate_dataset
    from .grammar import train_rows

    items = generate_dataset(train_rows(), clips_per_prompt=clips_per_prompt, seed=seed, with_joints=False)
    data = np.concatenate([it["features"].astype(np.float64) for it in items], axis=0)  # [N, 263]
    mean = data.mean(axis=0)
    std = group_std(data.std(axis=0))
    return mean.astype(np.float32), std.astype(np.float32)


def write_stats(seed: int = STATS_SEED) -> tuple[Path, Path]:
    """Recompute the statistics and write ``data/motion_{mean,std}.npy``."""
    mean, std = compute_stats(seed)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    np.save(MEAN_PATH, mean)
    np.save(STD_PATH, std)
    return MEAN_PATH, STD_PATH


__all__ = ["compute_stats", "write_stats"]
