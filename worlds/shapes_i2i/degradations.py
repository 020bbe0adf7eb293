"""The degradation simulation of restoration data: what turns a clean ShapesWorld render into a row's source image.

Specs are the core's (``ddpo_grpo.degradations``: ``{"kind": ..., <parameter>: ...}``, ``"kind:value"`` or a list
of them); :func:`degrade` applies their simulation, in order: downsampling and blur as the differentiable operators
of the consistency loss do, additive Gaussian noise from a generator, JPEG through PIL (4:2:0 chroma).
"""

from __future__ import annotations

import io

import numpy as np
import torch

from ddpo_grpo.degradations import Spec, downsample, gaussian_blur, parse


def add_noise(x: torch.Tensor, sigma: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """``clamp(x + σ·n, 0, 1)`` with ``n ~ N(0, I)`` drawn on the CPU from ``generator`` (reproducible anywhere)."""
    n = torch.randn(x.shape, generator=generator, dtype=torch.float32).to(device=x.device, dtype=x.dtype)
    return (x + sigma * n).clamp(0.0, 1.0)


def jpeg(x: torch.Tensor, quality: int) -> torch.Tensor:
    """Round-trip ``x`` [B, 3, H, W] in [0, 1] through PIL JPEG at ``quality`` (uint8 in between)."""
    from PIL import Image

    arr = (x.detach().clamp(0, 1) * 255.0).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    out = []
    for img in arr:
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=int(quality))
        buf.seek(0)
        with Image.open(buf) as decoded:
            out.append(torch.from_numpy(np.asarray(decoded.convert("RGB")).copy()))
    return torch.stack(out).permute(0, 3, 1, 2).to(device=x.device, dtype=x.dtype) / 255.0


def degrade(x: torch.Tensor, spec: Spec, generator: torch.Generator | None = None) -> torch.Tensor:
    """The simulation of ``spec`` on images ``x`` [B, 3, H, W] in [0, 1] (data generation); float, in [0, 1]."""
    for step in parse(spec):
        if step.kind == "downsample":
            x = downsample(x, step.value).clamp(0.0, 1.0)
        elif step.kind == "blur":
            x = gaussian_blur(x, step.value)
        elif step.kind == "noise":
            x = add_noise(x, step.value, generator)
        elif step.kind == "jpeg":
            x = jpeg(x, int(step.value))
    return x


__all__ = ["add_noise", "degrade", "jpeg"]
