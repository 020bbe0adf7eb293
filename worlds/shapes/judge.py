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
4. **Shape.** The component's bounding box ``w × h`` must have aspect ratio ``max/min <=``
   :data:`MAX_ASPECT` = 1.5; its mask is compared with the three ideal masks rasterised by the
   world's own :func:`~worlds.shapes.world.shape_mask` in the same ``w × h`` box; the shape is
   the template of highest IoU if that IoU is ``>=`` :data:`MIN_IOU` = 0.66, else ``"unknown"``.
   Reference numbers (12–18 px): fill ratios (area / box area) square 1.0, circle 0.78–0.81,
   triangle 0.56–0.58; IoU between two different templates <= 0.82 (circle vs square), so the
   argmax separates them; a clean render matches its template with IoU 1, and over 3000 perturbed
   renders (every perturbation below) the right template's IoU was >= 0.74; an upside-down triangle
   reaches <= 0.58 and an L-shaped blob less, hence the 0.66 cut (about midway). An ``"unknown"``
   object still counts as an object (it breaks "nothing else").
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
Resolution-dependent thresholds (area, offsets) scale with ``size / 64``.

``python -m worlds.shapes.judge [--n 200]`` prints the agreement table over clean and perturbed
renders (:func:`measure_agreement`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from .grammar import constraints_of
from .world import (
    BACKGROUND,
    CANVAS,
    COLORS,
    COUNT_WORDS,
    MIN_REL_OFFSET,
    OPPOSITE,
    PALETTE,
    SHAPES,
    TASKS,
    Constraints,
    ObjectSpec,
    relation_holds,
    render,
    sample_scene,
    shape_mask,
)

#: max Euclidean RGB distance (0-255 units) from a pixel to its nearest reference colour
COLOR_TOL = 60.0
#: looser distance for rim pixels next to a core pixel of the same colour (hysteresis)
EDGE_TOL = 90.0
#: min component area in pixels (at 64×64)
MIN_AREA = 30
#: max bounding-box aspect ratio (long side / short side) of a recognised shape
MAX_ASPECT = 1.5
#: min IoU with the best shape template
MIN_IOU = 0.66
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


def classify_shape(mask: np.ndarray) -> tuple[str, dict[str, float]]:
    """Shape of a component's box-cropped boolean mask: ``(shape or "unknown", {shape: IoU})``."""
    h, w = mask.shape
    ious = {}
    for shape in SHAPES:
        t = shape_mask(shape, w, h)
        ious[shape] = float((mask & t).sum()) / float((mask | t).sum())
    if max(w, h) > MAX_ASPECT * min(w, h):
        return "unknown", ious
    best = max(ious, key=ious.get)
    return (best if ious[best] >= MIN_IOU else "unknown"), ious


def detect(image: Any, size: int = CANVAS) -> list[dict]:
    """Objects of ``image``: dicts ``{"color", "shape", "centre": [x, y], "bbox": [x0, y0, x1, y1],
    "area", "iou"}`` (``bbox`` ends exclusive, in ``size``-px coordinates; ``shape`` may be
    ``"unknown"``), sorted by bounding-box top-left corner."""
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
        shape, ious = classify_shape(comp[y0:y1, x0:x1] == root)
        objects.append(
            {
                "color": COLORS[int(lab.flat[root]) - 1],
                "shape": shape,
                "centre": [(x0 + x1) / 2.0, (y0 + y1) / 2.0],
                "bbox": [x0, y0, x1, y1],
                "area": int(areas[root]),
                "iou": round(max(ious.values()), 4),
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


# --------------------------------------------------------------------------------------------
# robustness measurement: perturbations and hard negatives
# --------------------------------------------------------------------------------------------

#: perturbation name -> description (see :func:`perturb`)
PERTURBATIONS: dict[str, str] = {
    "clean": "none",
    "noise": "Gaussian noise, sigma = 8/255 per channel",
    "blur": "PIL GaussianBlur(radius=0.8)",
    "jpeg": "JPEG, PIL quality 75",
    "color_shift": "per-image shift of +12 or -12 (random sign) on each channel",
    "combined": "blur, then colour shift, then noise, then JPEG (all as above)",
}


def perturb(img: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    """A perturbed copy of uint8 ``[H, W, 3]`` ``img`` (``kind`` in :data:`PERTURBATIONS`)."""
    from PIL import Image, ImageFilter

    if kind == "clean":
        return img.copy()
    if kind == "noise":
        return np.clip(np.round(img + rng.normal(0.0, 8.0, img.shape)), 0, 255).astype(np.uint8)
    if kind == "blur":
        return np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=0.8)))
    if kind == "jpeg":
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, format="JPEG", quality=75)
        buf.seek(0)
        return np.asarray(Image.open(buf).convert("RGB"))
    if kind == "color_shift":
        shift = rng.choice([-12, 12], size=3)
        return np.clip(img.astype(np.int16) + shift, 0, 255).astype(np.uint8)
    if kind == "combined":
        for k in ("blur", "color_shift", "noise", "jpeg"):
            img = perturb(img, k, rng)
        return img
    raise ValueError(f"unknown perturbation {kind!r}; perturbations: {', '.join(PERTURBATIONS)}")


def mismatches(c: Constraints) -> list[tuple[str, Constraints]]:
    """Hard negatives: single edits of ``c`` that no scene satisfying ``c`` can satisfy.

    Kinds: ``"color"`` / ``"shape"`` (change one named object's colour / shape — the multiset of
    objects changes), ``"count"`` (counting: another count; single object: "two ..."), and
    ``"relation"`` (position: the opposite relation). Edits that would name the same pair twice are
    skipped.
    """
    out: list[tuple[str, Constraints]] = []

    def add(kind, task, objs, rel=None):
        try:
            out.append((kind, Constraints(task, tuple(objs), rel)))
        except ValueError:
            pass

    for i, spec in enumerate(c.objects):
        for color in COLORS:
            if color != spec.color:
                objs = list(c.objects)
                objs[i] = ObjectSpec(color, spec.shape, spec.count)
                add("color", c.task, objs, c.relation)
        for shape in SHAPES:
            if shape != spec.shape:
                objs = list(c.objects)
                objs[i] = ObjectSpec(spec.color, shape, spec.count)
                add("shape", c.task, objs, c.relation)
    if c.task in ("single_object", "counting"):
        spec = c.objects[0]
        for n in COUNT_WORDS:
            if n != spec.count:
                add("count", "counting", [ObjectSpec(spec.color, spec.shape, n)])
    if c.relation is not None:
        add("relation", c.task, c.objects, OPPOSITE[c.relation])
    return out


def measure_agreement(
    n_per_task: int = 200,
    seed: int = 0,
    perturbations: Sequence[str] = tuple(PERTURBATIONS),
    tasks: Sequence[str] = TASKS,
) -> dict[str, dict[str, dict[str, float]]]:
    """Strict agreement of the judge with ground truth, per perturbation and task.

    For each task, ``n_per_task`` prompts are drawn uniformly from every prompt of the task and a
    scene rendered for each; every image is perturbed and judged against (a) its own prompt —
    ``"pos"`` = fraction with strict 1 — and (b) one hard negative from :func:`mismatches` —
    ``"neg"`` = fraction with strict 0. Returns ``{perturbation: {task: {"pos", "neg"}}}``.
    """
    from .grammar import enumerate_constraints

    rng = np.random.default_rng(seed)
    table: dict[str, dict[str, dict[str, float]]] = {p: {} for p in perturbations}
    for task in tasks:
        pool = list(enumerate_constraints(task))
        hits = {p: [0, 0] for p in perturbations}
        for _ in range(n_per_task):
            c = pool[int(rng.integers(len(pool)))]
            img = render(sample_scene(c, rng))
            negs = mismatches(c)
            neg = negs[int(rng.integers(len(negs)))][1]
            for p in perturbations:
                im = perturb(img, p, rng)
                det = detect(im)
                hits[p][0] += all(v for _, v in check_constraints(det, c))
                hits[p][1] += not all(v for _, v in check_constraints(det, neg))
        for p in perturbations:
            table[p][task] = {"pos": hits[p][0] / n_per_task, "neg": hits[p][1] / n_per_task}
    return table


def format_table(table: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown table: rows = perturbations, columns = tasks, cells = ``pos / neg`` agreement."""
    tasks = list(next(iter(table.values())))
    lines = ["| perturbation | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for p, row in table.items():
        cells = [f"{row[t]['pos']:.3f} / {row[t]['neg']:.3f}" for t in tasks]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _main(argv: Sequence[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Measure the ShapesWorld judge's strict agreement with ground truth.")
    ap.add_argument("--n", type=int, default=200, help="renders per task")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print("cells: positives judged strict=1 / hard negatives judged strict=0")
    print(format_table(measure_agreement(args.n, args.seed)))


if __name__ == "__main__":
    _main()
