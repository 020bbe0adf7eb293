"""JPEG (in)compressibility rewards, as in DDPO: file size at quality 95, in kB."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from .contract import to_pil
from .registry import register


def jpeg_sizes_kb(images: Any, quality: int = 95) -> np.ndarray:
    """JPEG-encoded size of each image in kB (1 kB = 1000 bytes), float32 ``[B]``."""
    sizes = []
    for img in to_pil(images):
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=quality)
        sizes.append(buf.tell() / 1000.0)
    return np.asarray(sizes, dtype=np.float32)


@register("jpeg_compressibility")
def jpeg_compressibility(quality: int = 95):
    """Reward = -(JPEG size in kB): smaller files score higher."""

    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        return -jpeg_sizes_kb(images, quality), {}

    return fn


@register("jpeg_incompressibility")
def jpeg_incompressibility(quality: int = 95):
    """Reward = +(JPEG size in kB): larger (more detailed) files score higher."""

    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        return jpeg_sizes_kb(images, quality), {}

    return fn
