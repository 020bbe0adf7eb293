"""Colour rewards: cheap, dense, differentiable-in-spirit scores that tests and smoke runs can watch rise.

``redness``: the mean over pixels (and over frames, for a video) of R − (G + B) / 2, in [−1, 1]; it scores images
(B, 3, H, W) and videos (B, F, 3, H, W) whole (``reward_models.video.declare_kinds``). A random-weight model
moves it within a few epochs, which is what the adapter test kit's learning check uses it for.
"""

from __future__ import annotations

import numpy as np

from .registry import register
from .video import declare_kinds


def redness_scores(samples) -> np.ndarray:
    """[B] mean of R − (G + B) / 2 over every pixel (and frame) of each sample; channels on dim −3."""
    x = samples.detach().float().cpu() if hasattr(samples, "detach") else samples
    x = np.asarray(x, dtype=np.float32)
    red = x[..., 0, :, :] - 0.5 * (x[..., 1, :, :] + x[..., 2, :, :])  # [B, (F,) H, W]
    return red.reshape(red.shape[0], -1).mean(axis=1)


@register("redness")
def redness():
    """Factory of the ``redness`` reward (no arguments)."""

    def fn(samples, prompts, metadata):
        return redness_scores(samples), {}

    return declare_kinds(fn, "image", "video")
