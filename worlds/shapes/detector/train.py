"""Train the detector's shape classifier from a seed: ``python -m worlds.shapes train-detector [--seed 0]``.

Data, all rendered here from the world's rules (:mod:`worlds.shapes.world`) and perturbations
(:mod:`worlds.shapes.distortions`), nothing downloaded: scenes of 1–3 objects (random colours, boxes at least
2 px apart), each object drawn as one of

* a **spec shape** (label = its shape; 45 %): size 12–19 (the spec's 12–18 and the 1 px by which a soft
  edge can grow a measured box), hard-edged as the world's renderer draws it, or
  (half of them) anti-aliased at a sub-pixel position and a size within ±0.5 px;
* a **mildly distorted spec shape** (label = the shape it claims to be; 15 %): a distortion at a severity of
  :data:`MILD` (about a pixel: below what the image resolves, as the wobbles of generated shapes);
* a **gray-zone distortion** (label ``"other"``; 32 %): a kind of :data:`~worlds.shapes.distortions.DISTORTIONS`
  at a severity drawn uniformly from :data:`SEVERITIES` (the clearly visible part of each range: the
  1-px levels are below the resolution of a 64-px image), hard-edged or anti-aliased;
* a **spec shape of the wrong size** (label ``"other"``; 8 %): 8–10 or 22–25 px;

then the whole image perturbed by one of clean, noise, blur, JPEG, colour shift, all combined, or ``soft`` (a
Gaussian blur of radius 0.6–1.3 px and light noise, as soft as generated images), uniformly.
Every object's input is what the detector sees at inference: the segmentation's component covering most
of its box, cut into a patch (:func:`~.net.patch`). 10 % of the scenes are held out for the accuracy printed
at the end. AdamW (lr 2e-3, batch 128) for ``--epochs`` passes, one CPU thread: about 3 minutes for the
defaults. The weights are written atomically as plain float32 arrays (``.npz``).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from foundation.atomic_io import replacing

from ..distortions import DISTORTIONS, paint, perturb, rasterize
from ..world import CANVAS, COLORS, MAX_SIZE, MIN_GAP, MIN_SIZE, SHAPES, bbox_gap, shape_mask
from .net import CLASSES, MAX_SIDE, MIN_SIDE, ShapeNet, patch, state_to_arrays
from .segment import as_canvas, coverages, segment

#: distortion -> severity range (uniform) of the "other" examples, in the distortion's own unit
SEVERITIES: dict[str, tuple[float, float]] = {
    "trapezoid": (2.0, 5.0),
    "pinched_square": (2.0, 4.0),
    "rounded_square": (4.0, 8.0),
    "oblong": (3.0, 6.0),
    "rotated_square": (15.0, 45.0),
    "lumpy_circle": (1.5, 3.0),
    "oval": (3.0, 6.0),
    "skewed_triangle": (3.0, 7.0),
    "concave_triangle": (2.0, 4.0),
    "rotated_triangle": (15.0, 40.0),
}
#: distortion -> severity range (uniform) of *mild* ones, still labelled as the shape they claim to be: deviations of
#: about a pixel, below what a 64-px image resolves (generated shapes have such wobbles; the judge tolerates 1 px too)
MILD: dict[str, tuple[float, float]] = {
    "trapezoid": (0.0, 1.0),
    "pinched_square": (0.0, 1.0),
    "rounded_square": (0.0, 2.5),
    "oblong": (0.0, 1.0),
    "rotated_square": (0.0, 5.0),
    "lumpy_circle": (0.0, 1.0),
    "oval": (0.0, 1.5),
    "skewed_triangle": (0.0, 1.0),
    "concave_triangle": (0.0, 1.0),
    "rotated_triangle": (0.0, 5.0),
}
#: whole-image perturbations of the training scenes
TRAIN_PERTURBATIONS: tuple[str, ...] = ("clean", "noise", "blur", "jpeg", "color_shift", "combined", "soft")
_WRONG_SIZES = (8, 9, 10, 22, 23, 24, 25)


def _ideal(shape: str):
    """The spec shapes as implicit functions of box coordinates (u right, v down, both in [0, 1])."""
    return {
        "square": lambda u, v: np.ones(np.broadcast(u, v).shape, dtype=bool),
        "circle": lambda u, v: (u - 0.5) ** 2 + (v - 0.5) ** 2 <= 0.25,
        "triangle": lambda u, v: np.abs(u - 0.5) <= v / 2.0,
    }[shape]


def _soft(img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A softer image than ``blur``: Gaussian blur of radius 0.6–1.3 px, then noise (sigma 4/255)."""
    from PIL import Image, ImageFilter

    out = np.asarray(Image.fromarray(img).filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.6, 1.3)))))
    return np.clip(np.round(out + rng.normal(0.0, 4.0, out.shape)), 0, 255).astype(np.uint8)


def _coverage(
    kind: str, shape: str, x: int, y: int, size: int, rng: np.random.Generator, ranges: dict | None = None
) -> np.ndarray:
    """``[64, 64]`` coverage of one object: ``kind`` "spec" (the shape) or a distortion name, its severity drawn
    from ``ranges`` (default :data:`SEVERITIES`)."""
    soft = bool(rng.integers(2))
    if kind == "spec" and not soft:
        cov = np.zeros((CANVAS, CANVAS))
        cov[y : y + size, x : x + size] = shape_mask(shape, size)
        return cov
    if kind == "spec":
        inside = _ideal(shape)
    else:
        lo, hi = (ranges or SEVERITIES)[kind]
        inside = DISTORTIONS[kind][1](rng.uniform(lo, hi), size, rng)
    if not soft:
        return rasterize(inside, x, y, size)
    ds = rng.uniform(-0.5, 0.5)
    return rasterize(inside, x + rng.uniform(-0.5, 0.5) - ds / 2, y + rng.uniform(-0.5, 0.5) - ds / 2, size + ds, 4)


def _scene(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[tuple[int, int, int, int], int]]]:
    """One training image and its objects' ``(box, label index)``."""
    img = np.full((CANVAS, CANVAS, 3), 255, dtype=np.uint8)
    boxes: list[tuple[tuple[int, int, int, int], int]] = []
    for _ in range(int(rng.integers(1, 4))):
        u, ranges = rng.random(), None
        if u < 0.45:
            kind, shape = "spec", SHAPES[int(rng.integers(3))]
            size, label = int(rng.integers(MIN_SIZE, MAX_SIZE + 2)), CLASSES.index(shape)
        elif u < 0.6:
            kind, ranges = list(MILD)[int(rng.integers(len(MILD)))], MILD
            shape = DISTORTIONS[kind][0]
            size, label = int(rng.integers(MIN_SIZE, MAX_SIZE + 1)), CLASSES.index(shape)
        elif u < 0.92:
            kind = list(SEVERITIES)[int(rng.integers(len(SEVERITIES)))]
            shape, size, label = DISTORTIONS[kind][0], int(rng.integers(MIN_SIZE, MAX_SIZE + 1)), CLASSES.index("other")
        else:
            kind, shape = "spec", SHAPES[int(rng.integers(3))]
            size, label = int(rng.choice(_WRONG_SIZES)), CLASSES.index("other")
        for _ in range(30):
            x, y = int(rng.integers(0, CANVAS - size + 1)), int(rng.integers(0, CANVAS - size + 1))
            box = (x, y, x + size, y + size)
            if all(bbox_gap(b, box) >= MIN_GAP for b, _ in boxes):
                break
        else:
            continue
        img = paint(img, _coverage(kind, shape, x, y, size, rng, ranges), COLORS[int(rng.integers(len(COLORS)))])
        boxes.append((box, label))
    kind = TRAIN_PERTURBATIONS[int(rng.integers(len(TRAIN_PERTURBATIONS)))]
    return (_soft(img, rng) if kind == "soft" else perturb(img, kind, rng)), boxes


def examples(n_scenes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(patches [N, PATCH, PATCH], labels [N])`` from ``n_scenes`` scenes (objects the segmentation
    misses, or whose component's box is outside the classifier's size range, give no example)."""
    xs, ys = [], []
    for _ in range(n_scenes):
        img, boxes = _scene(rng)
        img = as_canvas(img)
        objs = segment(img)
        cov = coverages(img)
        for (x0, y0, x1, y1), label in boxes:
            overlap = [int(o["mask"][y0:y1, x0:x1].sum()) for o in objs]
            if not overlap or max(overlap) == 0:
                continue
            o = objs[int(np.argmax(overlap))]
            bx0, by0, bx1, by1 = o["bbox"]
            if not all(MIN_SIDE <= s <= MAX_SIDE for s in (bx1 - bx0, by1 - by0)):
                continue
            xs.append(patch(img, o, cov))
            ys.append(label)
    return np.stack(xs).astype(np.float32), np.asarray(ys, dtype=np.int64)


def fit(x: np.ndarray, y: np.ndarray, epochs: int, seed: int, log=print) -> ShapeNet:
    """AdamW (lr 2e-3, no weight decay), cross-entropy, batches of 128, ``epochs`` shuffled passes."""
    torch.manual_seed(seed)
    model = ShapeNet()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    xt, yt = torch.from_numpy(x)[:, None], torch.from_numpy(y)
    for epoch in range(epochs):
        order = torch.randperm(len(xt), generator=gen)
        total = 0.0
        for i in range(0, len(order), 128):
            j = order[i : i + 128]
            loss = torch.nn.functional.cross_entropy(model(xt[j]), yt[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(j)
        log(f"epoch {epoch}: train loss {total / len(xt):.4f}")
    return model.eval()


def accuracy(model: ShapeNet, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Per-class and overall accuracy."""
    with torch.no_grad():
        pred = model(torch.from_numpy(x)[:, None]).argmax(-1).numpy()
    out = {c: float((pred[y == i] == i).mean()) for i, c in enumerate(CLASSES) if (y == i).any()}
    out["all"] = float((pred == y).mean())
    return out


def save(model: ShapeNet, path: str | os.PathLike) -> None:
    """Atomic write of the weights as float32 arrays (refuses non-finite ones)."""
    arrays = state_to_arrays(model)
    bad = [k for k, v in arrays.items() if not np.isfinite(v).all()]
    if bad:
        raise ValueError(f"shapes_detector: non-finite weights in {bad}; not saved")
    with replacing(path) as tmp:
        with open(tmp, "wb") as f:  # a file object: np.savez adds no ".npz" to the name
            np.savez(f, **arrays)
