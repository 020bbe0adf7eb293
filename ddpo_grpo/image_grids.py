"""Sample grids: images tiled into one picture, saved as a PNG that carries its captions.

* :func:`make_grid_uint8`: uint8 ``(B, H, W, 3)`` tiles → one ``(H', W', 3)`` picture;
* :func:`save_grid`: float ``(N, 3, H, W)`` images in ``[0, 1]`` → one PNG, written atomically, with the captions
  as a JSON list in its "captions" text chunk; small images are enlarged by an integer factor (nearest neighbour,
  so pixels stay sharp) until a tile's longer side is at least :data:`MIN_TILE` pixels.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np

from foundation.atomic_io import atomic_write
from foundation.images import to_uint8

#: smallest longer side, in pixels, of a tile in a saved grid (smaller images are enlarged to it)
MIN_TILE = 128


def enlarge(images: np.ndarray, min_side: int = MIN_TILE) -> np.ndarray:
    """uint8 ``(B, H, W, C)`` images repeated ``k = ⌈min_side / max(H, W)⌉`` times along H and W (nearest
    neighbour; k = 1, unchanged, for images already that large)."""
    k = max(1, math.ceil(min_side / max(images.shape[1], images.shape[2])))
    return images if k == 1 else images.repeat(k, axis=1).repeat(k, axis=2)


def make_grid_uint8(images: np.ndarray, nrow: int | None = None, padding: int = 2) -> np.ndarray:
    """Tile uint8 ``(B, H, W, 3)`` images into one ``(H', W', 3)`` grid with ``nrow`` per row.

    Same geometry as ``torchvision.utils.make_grid``: black ``padding`` around every
    tile; ``nrow`` defaults to ``ceil(sqrt(B))``.
    """
    b, h, w, c = images.shape
    ncol = min(nrow or math.ceil(math.sqrt(b)), b)
    nrows = math.ceil(b / ncol)
    grid = np.zeros((nrows * (h + padding) + padding, ncol * (w + padding) + padding, c), dtype=np.uint8)
    for i, img in enumerate(images):
        r, col = divmod(i, ncol)
        y, x = padding + r * (h + padding), padding + col * (w + padding)
        grid[y : y + h, x : x + w] = img
    return grid


def save_grid(images: Any, captions: list[str], path: str, nrow: int | None = None) -> None:
    """Tile float ``(N, 3, H, W)`` images in [0, 1] into one PNG at ``path``, written atomically
    (fsynced temporary file + ``os.replace``); ``nrow`` images per row (default ⌈√N⌉), each enlarged to at least
    :data:`MIN_TILE` pixels (``enlarge``). The captions (one per image, in order) go into the PNG's "captions" text
    chunk as a JSON list."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    arr = to_uint8(images)
    if len(arr) == 0:
        raise ValueError("save_grid: no images to save")
    if len(captions) != len(arr):
        raise ValueError(f"save_grid: {len(captions)} captions for {len(arr)} images")
    info = PngInfo()
    info.add_text("captions", json.dumps(list(captions)))
    buf = io.BytesIO()
    Image.fromarray(make_grid_uint8(enlarge(arr), nrow=nrow)).save(buf, format="PNG", pnginfo=info)
    atomic_write(path, buf.getvalue())
