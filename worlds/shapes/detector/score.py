"""The detector's detection and scoring: segmentation + learned shape per object, then the spec's checks.

:func:`detect` = :func:`~.segment.segment` and, per object, the class of :func:`~.net.classify` (``"other"``
when its box side is outside ``[MIN_SIDE, MAX_SIDE]``). :func:`score` reads the spec (worlds/shapes/README.md)
directly, written here again rather than shared with the world judge:

* one check per named group: exactly ``count`` objects of that colour and shape;
* "nothing else": every object is of a named colour–shape pair (an ``"other"`` object never is);
* position prompts: "A REL B" holds for some detected (A, B) pair, between bounding-box centres: the offset
  along the relation's axis ``>= 8 − RELATION_TOL`` px and ``> |offset on the other axis| − RELATION_TOL``
  (:data:`RELATION_TOL` = 1 px absorbs the ±1-px jitter of a measured box).

``strict`` = 1 iff every check holds, ``partial`` = the fraction that hold.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..world import MIN_REL_OFFSET, Constraints
from .net import CLASSES, MAX_SIDE, MIN_SIDE, classify, patch
from .segment import as_canvas, coverages, segment

#: tolerance (px) on both inequalities of the relation rule
RELATION_TOL = 1.0


def detect(image, model=None) -> list[dict]:
    """Objects of a uint8 ``[H, W, 3]`` image: ``[{"color", "shape", "confidence", "bbox", "centre", "area"}]``."""
    img = as_canvas(image)
    objs = segment(img)
    cov = coverages(img)
    sized = [
        o
        for o in objs
        if all(MIN_SIDE <= s <= MAX_SIDE for s in (o["bbox"][2] - o["bbox"][0], o["bbox"][3] - o["bbox"][1]))
    ]
    cls, conf = classify([patch(img, o, cov) for o in sized], model) if sized else ([], [])
    found = {id(o): (CLASSES[int(c)], float(p)) for o, c, p in zip(sized, cls, conf)}
    out = []
    for o in objs:
        shape, p = found.get(id(o), ("other", 1.0))
        out.append({k: o[k] for k in ("color", "bbox", "centre", "area")} | {"shape": shape, "confidence": p})
    return out


def _relation_holds(relation: str, a: Sequence[float], b: Sequence[float], tol: float) -> bool:
    dx, dy = b[0] - a[0], b[1] - a[1]  # > 0: A left of / above B (y grows downwards)
    main, other = {"left_of": (dx, dy), "right_of": (-dx, dy), "above": (dy, dx), "below": (-dy, dx)}[relation]
    return main >= MIN_REL_OFFSET - tol and main > abs(other) - tol


def checks(objects: Sequence[dict], c: Constraints, relation_tol: float = RELATION_TOL) -> list[tuple[str, bool]]:
    """The spec's checks of the module docstring as ``[(description, holds)]``."""
    pairs = [(o["color"], o["shape"]) for o in objects]
    out = [(f"{s.count} {s.color} {s.shape}", pairs.count(s.pair) == s.count) for s in c.objects]
    named = {s.pair for s in c.objects}
    out.append(("nothing else", all(p in named for p in pairs)))
    if c.relation is not None:
        a_objs = [o for o, p in zip(objects, pairs) if p == c.objects[0].pair]
        b_objs = [o for o, p in zip(objects, pairs) if p == c.objects[1].pair]
        ok = any(_relation_holds(c.relation, a["centre"], b["centre"], relation_tol) for a in a_objs for b in b_objs)
        out.append((c.relation, ok))
    return out


def score(image, c: Constraints, model=None, relation_tol: float = RELATION_TOL) -> dict:
    """``{"strict": 0 | 1, "partial": float, "task": str, "detected": [...], "checks": [...]}`` of ``image``
    against the constraints ``c``."""
    detected = detect(image, model)
    res = checks(detected, c, relation_tol)
    ok = [v for _, v in res]
    return {
        "strict": int(all(ok)),
        "partial": sum(ok) / len(ok),
        "task": c.task,
        "detected": detected,
        "checks": [[d, bool(v)] for d, v in res],
    }
