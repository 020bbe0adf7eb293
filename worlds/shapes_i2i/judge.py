"""Judging an edit: the ShapesWorld judge on the target description, plus preservation of what was not touched.

For an edited image and its row:

* ``strict`` / ``partial``: the ShapesWorld judge (:func:`worlds.shapes.judge.judge`) against the row's
  ``target`` (its caption's constraints: exactly the named objects, nothing else, the relation of a move);
* ``preservation`` = the fraction of the row's ``preserve`` objects found in place: object k (colour, shape,
  box ``B_k`` at 64 px) is in place iff some detected object has k's colour and shape and a bounding box
  ``B`` with ``IoU(B, B_k) = |B ∩ B_k| / |B ∪ B_k| ≥ PRESERVE_IOU`` (0.5; boxes as pixel sets, so a 15-px
  box may shift by up to 5 px on one axis). Detection is the judge's own (:func:`worlds.shapes.judge.detect`);
  the image is judged at 64 px;
* ``success`` = 1 iff ``strict`` and ``preservation == 1`` (an edit that both does what was asked and leaves
  the rest as it was): the per-type edit accuracy.

On clean renders: the target scene scores strict 1, preservation 1; the unedited source image keeps
preservation 1 for add / remove / move (and ``1 − 1/n`` for a recolour of one of n objects) but fails the
target's judge, so copying the input is not a successful edit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worlds.shapes.judge import check_constraints, detect
from worlds.shapes.world import CANVAS, Constraints

#: minimum box IoU of a preserved object with its place in the source
PRESERVE_IOU = 0.5


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two boxes ``(x0, y0, x1, y1)`` with exclusive ends."""
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def preservation(detected: Sequence[dict], preserve: Sequence[dict], iou: float = PRESERVE_IOU) -> float:
    """Fraction of ``preserve`` objects (row dicts with x, y, size) matched in place by ``detected`` (1.0 if none)."""
    if not preserve:
        return 1.0
    hits = 0
    for k in preserve:
        box = (k["x"], k["y"], k["x"] + k["size"], k["y"] + k["size"])
        hits += any(
            d["color"] == k["color"] and d["shape"] == k["shape"] and box_iou(d["bbox"], box) >= iou for d in detected
        )
    return hits / len(preserve)


def judge_edit(image: Any, row: dict) -> dict:
    """``{"strict", "partial", "preservation", "success", "detected"}`` of ``image`` for an edit ``row``."""
    detected = detect(image, CANVAS)
    checks = check_constraints(detected, Constraints.from_row(row["target"]))
    ok = [v for _, v in checks]
    strict = int(all(ok))
    kept = preservation(detected, row["preserve"])
    return {
        "strict": strict,
        "partial": sum(ok) / len(ok),
        "preservation": kept,
        "success": int(strict and kept == 1.0),
        "detected": detected,
    }
