"""The detector's own colour segmentation: ink pixels, their palette colour by hue angle, connected objects.

Independent of the world judge (it imports neither ``judge`` nor ``fidelity``); only the spec's palette and
canvas come from :mod:`worlds.shapes.world`. Model of a pixel ``p`` (RGB, 0–255): a white background ``W``
tinted towards a palette colour ``C`` by coverage ``a``: ``p ≈ W + a (C − W)``. Then

* the **direction** of ``v = p − W`` names the colour, whatever the coverage: colour ``k`` is the one whose
  direction ``C_k − W`` makes the smallest angle with ``v``, and it must be within :data:`MAX_ANGLE_DEG`
  (the closest two palette directions, blue and purple, are 24° apart; grey and black are 19° from
  green and so rejected);
* the **coverage** of colour ``k`` is the projection ``a_k = v · (C_k − W) / |C_k − W|²``; a pixel is ink
  of colour ``k`` when ``a_k >=`` :data:`MIN_COVERAGE` (0.5: the boundary of an anti-aliased edge where
  the shape covers half the pixel) and ``a_k <=`` :data:`MAX_COVERAGE` (darker than the palette colour is
  not it).

Objects are the 8-connected components of ink pixels of one colour with at least :data:`MIN_AREA` pixels
(smaller specks are ignored; the smallest spec object, a 12-px triangle, covers 84). Each object carries its
colour, pixel mask, bounding box (exclusive ends) and bounding-box centre (the spec's object centre).
"""

from __future__ import annotations

import numpy as np

from ..world import BACKGROUND, CANVAS, COLORS, PALETTE

#: max angle (degrees) between a pixel's white -> pixel direction and its colour's white -> colour direction
MAX_ANGLE_DEG = 14.0
#: coverage range of an ink pixel (fraction of the way from white to its palette colour)
MIN_COVERAGE, MAX_COVERAGE = 0.5, 1.6
#: min pixels of an object (smaller components are specks)
MIN_AREA = 20

_W = np.asarray(BACKGROUND, dtype=np.float32)
_DIRS = np.asarray([PALETTE[c] for c in COLORS], dtype=np.float32) - _W  # [5, 3]
_UNIT = _DIRS / np.linalg.norm(_DIRS, axis=1, keepdims=True)
_COS_MIN = float(np.cos(np.radians(MAX_ANGLE_DEG)))
_NONE = -1


def as_canvas(image) -> np.ndarray:
    """uint8 ``[64, 64, 3]`` from uint8 ``[H, W, 3]`` (area-averaged when larger, nearest when smaller)."""
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"shapes_detector: expected a uint8 [H, W, 3] image, got {img.dtype} {img.shape}")
    if img.shape[:2] == (CANVAS, CANVAS):
        return img
    from PIL import Image

    shrink = img.shape[0] > CANVAS
    return np.asarray(Image.fromarray(img).resize((CANVAS, CANVAS), Image.BOX if shrink else Image.NEAREST))


def coverages(img: np.ndarray) -> np.ndarray:
    """``[5, H, W]`` float32: the coverage ``a_k`` of every palette colour (COLORS order) at every pixel."""
    v = img.astype(np.float32) - _W
    return np.einsum("hwc,kc->khw", v, _DIRS) / (_DIRS**2).sum(1)[:, None, None]


def colour_labels(img: np.ndarray) -> np.ndarray:
    """``[H, W]`` int: the palette index (COLORS order) of each ink pixel, -1 elsewhere."""
    v = img.astype(np.float32) - _W
    norm = np.linalg.norm(v, axis=-1)
    cos = np.einsum("hwc,kc->hwk", v, _UNIT) / np.maximum(norm, 1e-6)[..., None]
    k = cos.argmax(-1)
    a = np.take_along_axis(coverages(img).transpose(1, 2, 0), k[..., None], -1)[..., 0]
    ink = (cos.max(-1) >= _COS_MIN) & (a >= MIN_COVERAGE) & (a <= MAX_COVERAGE)
    return np.where(ink, k, _NONE)


def components(labels: np.ndarray) -> np.ndarray:
    """``[H, W]`` int: 8-connected components of equal non-negative labels, numbered 0.. (-1 elsewhere).

    Minimum-index propagation: every ink pixel starts with its own flat index and repeatedly takes the
    smallest index among its 8 neighbours of the same label until nothing changes (at most the
    component's diameter in pixels of sweeps)."""
    h, w = labels.shape
    big = h * w
    idx = np.where(labels >= 0, np.arange(big).reshape(h, w), big)
    lab = np.pad(labels, 1, constant_values=_NONE)
    shifts = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]
    same = [lab[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] == labels for dy, dx in shifts]
    while True:
        p = np.pad(idx, 1, constant_values=big)
        new = idx.copy()
        for (dy, dx), ok in zip(shifts, same):
            nb = p[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w]
            new = np.where(ok & (nb < new), nb, new)
        new = np.where(labels >= 0, new, big)
        if np.array_equal(new, idx):
            break
        idx = new
    roots, comp = np.unique(idx, return_inverse=True)
    comp = comp.reshape(h, w)
    return np.where(idx < big, comp, _NONE)


def segment(image) -> list[dict]:
    """The objects of ``image``: ``[{"color", "mask" [64, 64] bool, "bbox" (x0, y0, x1, y1), "centre" (x, y),
    "area"}]``, largest first."""
    img = as_canvas(image)
    labels = colour_labels(img)
    comp = components(labels)
    out = []
    for c in range(comp.max() + 1):
        mask = comp == c
        area = int(mask.sum())
        if area < MIN_AREA:
            continue
        ys, xs = np.nonzero(mask)
        x0, y0, x1, y1 = int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
        out.append(
            {
                "color": COLORS[int(labels[ys[0], xs[0]])],
                "mask": mask,
                "bbox": (x0, y0, x1, y1),
                "centre": ((x0 + x1) / 2.0, (y0 + y1) / 2.0),
                "area": area,
            }
        )
    return sorted(out, key=lambda o: -o["area"])
