"""ShapesWorld judge: detect the objects of an image and score it against a prompt.

The judge is meant for *generated* images, not only clean renders. Pipeline (all thresholds are
module constants, stated at the 64×64 world resolution):

1. **Resolution.** The image (uint8 ``[H, W, 3]``, or float ``[3, H, W]`` / ``[H, W, 3]`` in
   ``[0, 1]``, numpy or torch) is brought to ``size × size`` (64): area averaging (PIL ``BOX``)
   when shrinking, nearest neighbour when enlarging.
2. **Colour.** Blend model: a pixel is ``W + a·(C_k − W)`` (white ``W``, palette colour ``C_k``,
   coverage ``a``) plus noise, which covers anti-aliased and blurred edges. Colour k's reference
   set is the half-segment ``a ∈ [0.5, 1]`` from the white–``C_k`` midpoint to ``C_k``; white's is
   the union of the five halves ``a ∈ [0, 0.5]``. Each pixel takes the reference set at the smallest
   **Euclidean RGB distance** (0–255 units); on exact colours this is plain nearest-palette. A
   pixel farther than :data:`COLOR_TOL` = 60 from every set is *noise* (ignored: neither background
   nor object) — unless it is within :data:`EDGE_TOL` = 90 of a colour's set and 8-adjacent to a
   pixel of that colour within 60 (one step of hysteresis growth: JPEG's chroma subsampling pushes
   a shape's rim off the blend line). The closest two colour sets (blue/purple) are 56.5 apart and
   the closest palette colours 115.8 apart. Examples: grey (128,128,128) is 71.5 from green, so
   noise; pure red (255,0,0) is 66.5 from red, noise unless next to red core pixels; orange
   (255,165,0) is 58.7 from yellow, so it reads as yellow.
3. **Objects.** Connected components (8-connectivity) of each palette colour; components with fewer
   than :data:`MIN_AREA` = 30 px are discarded as specks (the smallest spec object, a 12-px
   triangle, has 84 px).
4. **Shape** (:func:`classify_shape`): fidelity to the ideal rendered shape (:mod:`.fidelity`). For each
   class ``S``, the ideal ``S`` of every integer size ``s`` in the spec's range widened by
   :data:`SIZE_TOL` (12 − 1 … 18 + 1 px) and every position near the component is fitted, and the placement
   nearest in **symmetric Hausdorff distance** ``H`` (px, between the pixel sets) kept. ``S`` is a
   *candidate* when ``H <=`` :data:`MAX_HAUSDORFF` = 1 px (no pixel of the object farther than one pixel
   from the ideal shape, and no pixel of the ideal shape farther than one pixel from the object), the
   fit's IoU ``>=`` :data:`MIN_FIT_IOU` ``[S]`` and the component's bounding-box sides differ by at most
   :data:`MAX_SIDE_DIFF` = 2 px (the spec's boxes are square); the shape is the candidate of highest IoU, else
   ``"unknown"`` (which still counts as an object: it breaks "nothing else"). Calibration
   (``python -m worlds.shapes calibration``; table in the world's README): every clean render fits
   its own class with ``H = 0``, IoU 1; noise, blur, JPEG, colour shifts, their combination and
   anti-aliased redrawing at sub-pixel positions never moved ``H`` above 1 px; so a square whose corner
   is cut, whose side bows or slants, or a circle with a lump, by 2 px or more is rejected (rejection
   rates per distortion and severity in the table). The IoU floors separate the classes where a 1-px
   tolerance alone cannot: a rasterised 12-px circle is within 1 px of a 10-px square (IoU 0.83).
5. **Centre** = bounding-box centre of the component, the same definition as the renderer's.
6. **Relations** use the generation rule (:func:`~worlds.shapes.world.relation_holds`) with a
   tolerance :data:`RELATION_TOL` = 1 px: axis offset ``>= 8 − 1`` and ``> |other offset| − 1``,
   absorbing the ±1 px jitter of measured boxes (e.g. a triangle's 1–2-px apex lost to blur/JPEG).

Scoring (:func:`judge`). The constraint list per task, in this order:

* ``single_object`` "a C S": [exactly one C S, nothing else];
* ``counting`` "N C Ss": [exactly N C S, nothing else];
* ``two_object`` "a C1 S1 and a C2 S2": [exactly one C1 S1, exactly one C2 S2, nothing else];
* ``position`` "a C1 S1 REL a C2 S2": [exactly one C1 S1, exactly one C2 S2, nothing else,
  REL holds for some (C1 S1, C2 S2) pair of detected objects].

"Nothing else" = every detected object (of area >= MIN_AREA, unknown shapes included) has a
colour–shape pair named by the prompt. ``partial`` = fraction of the list satisfied; ``strict`` = 1
iff all are. Extra copies of a named object break its count constraint, not "nothing else".
Resolution-dependent thresholds (area, offsets) scale with ``size / 64``; shapes are fitted at 64 px.

``python -m worlds.shapes calibration`` prints the calibration tables (:mod:`.calibration`: agreement
with the ground truth on clean and mildly perturbed renders, rejection of the gray-zone distortions of
:mod:`.distortions`, and the fit statistics behind the thresholds).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .distortions import PERTURBATIONS, perturb  # noqa: F401  (re-exported: the judge's perturbations)
from .fidelity import Fit, fit_shape
from .grammar import constraints_of
from .world import (
    BACKGROUND,
    CANVAS,
    COLORS,
    MAX_SIZE,
    MIN_REL_OFFSET,
    MIN_SIZE,
    PALETTE,
    SHAPES,
    Constraints,
    relation_holds,
)

#: max Euclidean RGB distance (0-255 units) from a pixel to its nearest reference colour
COLOR_TOL = 60.0
#: looser distance for rim pixels next to a core pixel of the same colour (hysteresis)
EDGE_TOL = 90.0
#: min component area in pixels (at 64×64)
MIN_AREA = 30
#: max symmetric Hausdorff distance (px at 64×64) between an object and the ideal shape it is fitted to;
#: mild perturbations (noise, blur, JPEG, colour shifts, anti-aliased sub-pixel redrawing) never exceeded 1 px
MAX_HAUSDORFF = 1.0
#: min IoU of that fit, per class (the 0.5 % quantile under the mild perturbations, rounded down; see the README)
MIN_FIT_IOU: dict[str, float] = {"circle": 0.85, "square": 0.85, "triangle": 0.75}
#: max difference (px) between the sides of an object's bounding box: the spec's boxes are square, and mild
#: perturbations moved each side by at most 1 px (measured |w − h| <= 2); an 18 × 14 oval is within 1 px of a
#: 16-px circle (its Hausdorff distance alone would pass it), its sides differ by 4
MAX_SIDE_DIFF = 2
#: the fitted ideal size may leave the spec's 12–18 px range by this many px (blur and JPEG move edges by ~1 px)
SIZE_TOL = 1
#: tolerance (px at 64×64) on both inequalities of the relation rule
RELATION_TOL = 1.0

#: colour model: white and the white -> palette colour directions (COLORS order)
_WHITE = np.asarray(BACKGROUND, dtype=np.float32)  # [3]
_DIRS = np.asarray([PALETTE[c] for c in COLORS], dtype=np.float32) - _WHITE  # [5, 3]: white -> colour
_DIR_SQ = (_DIRS**2).sum(-1)  # [5]
_NOISE = -1


# --------------------------------------------------------------------------------------------
# image -> detected objects
# --------------------------------------------------------------------------------------------


def to_uint8_image(image: Any, size: int = CANVAS) -> np.ndarray:
    """uint8 ``[size, size, 3]`` from uint8 ``[H, W, 3]`` or float ``[3, H, W]``/``[H, W, 3]`` in [0, 1].

    Float inputs are clamped and rounded to 256 levels. Resizing: PIL ``BOX`` (area average) when
    shrinking, ``NEAREST`` when enlarging.
    """
    if hasattr(image, "detach"):  # torch tensor, without importing torch
        image = image.detach().cpu().numpy()
    arr = np.asarray(image)
    if arr.ndim != 3 or 3 not in (arr.shape[0], arr.shape[-1]):
        raise ValueError(f"expected an RGB image [H, W, 3] or [3, H, W], got shape {arr.shape}")
    if arr.shape[-1] != 3:
        arr = arr.transpose(1, 2, 0)
    if arr.dtype != np.uint8:
        arr = np.round(np.clip(arr.astype(np.float32), 0.0, 1.0) * 255.0).astype(np.uint8)
    if arr.shape[:2] != (size, size):
        from PIL import Image

        shrink = arr.shape[0] > size or arr.shape[1] > size
        arr = np.asarray(
            Image.fromarray(np.ascontiguousarray(arr)).resize((size, size), Image.BOX if shrink else Image.NEAREST)
        )
    return np.ascontiguousarray(arr)


def classify_pixels(img: np.ndarray, tol: float | None = None, edge_tol: float | None = None) -> np.ndarray:
    """int8 ``[H, W]``: 0 = white, 1..5 = palette colour ``COLORS[k-1]``, -1 = noise.

    Blend model: a pixel is ``W + a (C_k - W)`` (white ``W``, colour ``C_k``, coverage ``a``) plus
    noise. Colour k's reference set is the half-segment ``a in [0.5, 1]``; white's is the union of the
    five halves ``a in [0, 0.5]``. The pixel takes the reference set at the smallest Euclidean RGB
    distance (a *core* pixel), or is noise if that distance exceeds ``tol`` (default
    :data:`COLOR_TOL`) — unless it is within ``edge_tol`` (default :data:`EDGE_TOL`) of a colour and
    8-adjacent to a core pixel of that colour (one step of hysteresis growth: JPEG's chroma
    subsampling desaturates the rim of a shape, pushing it off the blend line).
    """
    tol = COLOR_TOL if tol is None else float(tol)
    edge_tol = EDGE_TOL if edge_tol is None else float(edge_tol)
    p = img.astype(np.float32)[:, :, None, :] - _WHITE  # [H, W, 1, 3]
    a = (p * _DIRS).sum(-1) / _DIR_SQ  # [H, W, 5] coverage of each colour (projection)
    a_col = np.clip(a, 0.5, 1.0)[..., None]
    a_wht = np.clip(a, 0.0, 0.5)[..., None]
    d_col = ((p - a_col * _DIRS) ** 2).sum(-1)  # [H, W, 5]
    d_wht = ((p - a_wht * _DIRS) ** 2).sum(-1).min(-1, keepdims=True)  # [H, W, 1]
    d2 = np.concatenate([d_wht, d_col], axis=-1)  # [H, W, 6]
    nearest = d2.argmin(-1).astype(np.int8)
    dmin = d2.min(-1)
    lab = np.where(dmin <= tol * tol, nearest, _NOISE).astype(np.int8)
    # hysteresis: a loose pixel joins its colour if one of its 8 neighbours is a core pixel of it
    loose = (dmin > tol * tol) & (dmin <= edge_tol * edge_tol) & (nearest > 0)
    if loose.any():
        padded = np.pad(lab, 1, constant_values=_NOISE)
        h, w = lab.shape
        near_core = np.zeros_like(loose)
        for dy in (-1, 0, 1):
            for dx in (-1, 0, 1):
                if dy or dx:
                    near_core |= padded[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] == nearest
        grow = loose & near_core
        lab[grow] = nearest[grow]
    return lab


def connected_components(lab: np.ndarray) -> np.ndarray:
    """8-connected components of equal positive labels: int ``[H, W]`` of component ids, -1 elsewhere.

    A component's id is the smallest flat index of its pixels. Min-label propagation over the
    same-label neighbour edges with pointer jumping (numpy only, no scipy).
    """
    h, w = lab.shape
    n = h * w
    idx = np.arange(n).reshape(h, w)
    src_list, dst_list = [], []
    for dy, dx in ((0, 1), (1, -1), (1, 0), (1, 1)):
        c0, c1 = max(0, -dx), w - max(0, dx)
        a = lab[0 : h - dy, c0:c1]
        b = lab[dy:h, c0 + dx : c1 + dx]
        m = (a > 0) & (a == b)
        s = idx[0 : h - dy, c0:c1][m]
        src_list.append(s)
        dst_list.append(s + dy * w + dx)
    src, dst = np.concatenate(src_list), np.concatenate(dst_list)
    comp = np.arange(n)
    while True:
        new = comp.copy()
        np.minimum.at(new, src, comp[dst])
        np.minimum.at(new, dst, comp[src])
        while True:  # pointer jumping: follow labels to their labels
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, comp):
            break
        comp = new
    out = comp.reshape(h, w)
    return np.where(lab > 0, out, -1)


def classify_shape(mask: np.ndarray, size: int = CANVAS) -> tuple[str, dict[str, Fit]]:
    """Shape of a component's box-cropped boolean mask: ``(shape or "unknown", {class: Fit})``.

    ``size``: the judging resolution; masks at another resolution than 64 px are brought to 64 px (nearest
    neighbour) first, so every threshold is in world pixels.
    """
    if size != CANVAS:
        from PIL import Image

        h, w = mask.shape
        nh, nw = max(1, round(h * CANVAS / size)), max(1, round(w * CANVAS / size))
        mask = np.asarray(Image.fromarray(mask.astype(np.uint8) * 255).resize((nw, nh), Image.NEAREST)) > 127
    sizes = (MIN_SIZE - SIZE_TOL, MAX_SIZE + SIZE_TOL)
    fits = {shape: fit_shape(mask, shape, sizes) for shape in SHAPES}
    square_box = abs(mask.shape[0] - mask.shape[1]) <= MAX_SIDE_DIFF
    ok = [f for f in fits.values() if f.hausdorff <= MAX_HAUSDORFF and f.iou >= MIN_FIT_IOU[f.shape] and square_box]
    return (max(ok, key=lambda f: f.iou).shape if ok else "unknown"), fits


def detect(image: Any, size: int = CANVAS) -> list[dict]:
    """Objects of ``image``: dicts ``{"color", "shape", "centre": [x, y], "bbox": [x0, y0, x1, y1],
    "area", "fit", "iou", "hausdorff"}`` (``bbox`` ends exclusive, in ``size``-px coordinates; ``shape`` may be
    ``"unknown"``; ``fit`` is the class whose ideal shape is nearest — ``shape`` itself when recognised — with its
    IoU and Hausdorff distance, None when no ideal shape of an allowed size is within reach), sorted by
    bounding-box top-left corner."""
    img = to_uint8_image(image, size)
    lab = classify_pixels(img)
    comp = connected_components(lab)
    flat = comp.ravel()
    fg = flat >= 0
    areas = np.bincount(flat[fg], minlength=flat.size)
    min_area = MIN_AREA * (size / CANVAS) ** 2
    objects = []
    for root in np.flatnonzero(areas >= min_area):
        ys, xs = np.nonzero(comp == root)
        x0, x1, y0, y1 = int(xs.min()), int(xs.max()) + 1, int(ys.min()), int(ys.max()) + 1
        shape, fits = classify_shape(comp[y0:y1, x0:x1] == root, size)
        fit = fits[shape] if shape != "unknown" else min(fits.values(), key=lambda f: (f.hausdorff, -f.iou))
        fitted = fit.hausdorff < float("inf")  # False: no ideal shape of an allowed size is near this component
        objects.append(
            {
                "color": COLORS[int(lab.flat[root]) - 1],
                "shape": shape,
                "centre": [(x0 + x1) / 2.0, (y0 + y1) / 2.0],
                "bbox": [x0, y0, x1, y1],
                "area": int(areas[root]),
                "fit": fit.shape if fitted else None,
                "iou": round(fit.iou, 4),
                "hausdorff": round(fit.hausdorff, 3) if fitted else None,
            }
        )
    objects.sort(key=lambda o: (o["bbox"][1], o["bbox"][0]))
    return objects


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------


def check_constraints(
    detected: Sequence[dict], c: Constraints, size: int = CANVAS, relation_tol: float = RELATION_TOL
) -> list[tuple[str, bool]]:
    """The task's constraint list (see the module docstring) as ``[(description, satisfied)]``."""

    def pair(o):
        return (o["color"], o["shape"])

    checks = []
    for spec in c.objects:
        n = sum(pair(o) == spec.pair for o in detected)
        checks.append((f"exactly {spec.count} {spec.color} {spec.shape}", n == spec.count))
    named = {spec.pair for spec in c.objects}
    checks.append(("nothing else", all(pair(o) in named for o in detected)))
    if c.relation is not None:
        scale = size / CANVAS
        a_objs = [o for o in detected if pair(o) == c.objects[0].pair]
        b_objs = [o for o in detected if pair(o) == c.objects[1].pair]
        ok = any(
            relation_holds(c.relation, a["centre"], b["centre"], MIN_REL_OFFSET * scale, relation_tol * scale)
            for a in a_objs
            for b in b_objs
        )
        checks.append((c.relation, ok))
    return checks


def judge(
    image: Any,
    prompt: str | dict | Constraints,
    size: int = CANVAS,
    relation_tol: float = RELATION_TOL,
) -> dict:
    """Score ``image`` against ``prompt`` (a prompt string, a split row, or :class:`Constraints`).

    A row's ``task``/``objects``/``relation`` fields are used directly when present (no re-parse).
    Returns ``{"strict": 0 | 1, "partial": float in [0, 1], "task": str, "detected": [objects],
    "checks": [[description, bool]]}``.
    """
    c = constraints_of(prompt)
    detected = detect(image, size)
    checks = check_constraints(detected, c, size, relation_tol)
    ok = [v for _, v in checks]
    return {
        "strict": int(all(ok)),
        "partial": float(sum(ok)) / len(ok),
        "task": c.task,
        "detected": detected,
        "checks": [[d, bool(v)] for d, v in checks],
    }
