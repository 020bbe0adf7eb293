"""Samples that are not images, drawn as images: a greyscale heatmap per sample (``DenoiserPipeline``'s
``preview="heatmap"``, what the run report shows for a denoiser without a rendering of its own)."""

from __future__ import annotations

import torch


def heatmap(samples: torch.Tensor, min_side: int = 64) -> torch.Tensor:
    """Each sample as a greyscale image in [0, 1], min-max scaled per sample: ``[N, 3, k·d0, k·prod(rest)]``.

    Each value is a k×k block, with the smallest k that makes the shorter side at least ``min_side`` pixels.
    """
    flat = samples.detach().float().reshape(samples.shape[0], samples.shape[1] if samples.ndim > 2 else 1, -1)
    lo = flat.amin(dim=(1, 2), keepdim=True)  # [N, 1, 1]
    hi = flat.amax(dim=(1, 2), keepdim=True)  # [N, 1, 1]
    grey = (flat - lo) / (hi - lo).clamp_min(1e-12)  # [N, d0, rest]
    k = max(1, -(-min_side // min(grey.shape[1:])))
    grey = grey.repeat_interleave(k, dim=1).repeat_interleave(k, dim=2)  # [N, k·d0, k·rest]
    return grey.unsqueeze(1).expand(-1, 3, -1, -1).contiguous()  # [N, 3, k·d0, k·rest]
