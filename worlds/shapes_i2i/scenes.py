"""Scenes of the image-to-image worlds: ShapesWorld objects as JSON rows, captions, renders, placement.

A scene is a list of :class:`~worlds.shapes.world.ShapeObject`; rows store it as ``[{"color", "shape", "x",
"y", "size"}, ...]`` (:func:`to_rows` / :func:`from_rows`). Every scene here has distinct colour–shape
pairs, so "the red circle" names one object. Captions are ShapesWorld prompts (a single object, two
objects, or a relation), so the ShapesWorld judge reads them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from worlds.shapes.grammar import format_prompt
from worlds.shapes.world import (
    CANVAS,
    COLORS,
    MAX_SIZE,
    MIN_GAP,
    MIN_SIZE,
    SHAPES,
    Constraints,
    ObjectSpec,
    ShapeObject,
    bbox_gap,
    relation_holds,
    render,
)

Scene = list[ShapeObject]


def to_rows(scene: Sequence[ShapeObject]) -> list[dict]:
    return [o.to_dict() for o in scene]


def from_rows(rows: Sequence[dict]) -> Scene:
    return [ShapeObject.from_dict(r) for r in rows]


def pairs(scene: Sequence[ShapeObject]) -> list[tuple[str, str]]:
    return [(o.color, o.shape) for o in scene]


def random_pair(rng: np.random.Generator, exclude: Sequence[tuple[str, str]] = ()) -> tuple[str, str]:
    """A colour–shape pair drawn uniformly among the 15 minus ``exclude``."""
    options = [(c, s) for c in COLORS for s in SHAPES if (c, s) not in exclude]
    return options[int(rng.integers(len(options)))]


def place(
    color: str,
    shape: str,
    others: Sequence[ShapeObject],
    rng: np.random.Generator,
    ok=lambda obj: True,
    tries: int = 200,
) -> ShapeObject | None:
    """A new object of uniform size and corner, ≥ MIN_GAP from ``others`` and satisfying ``ok`` (None: none found)."""
    for _ in range(tries):
        size = int(rng.integers(MIN_SIZE, MAX_SIZE + 1))
        x = int(rng.integers(0, CANVAS - size + 1))
        y = int(rng.integers(0, CANVAS - size + 1))
        obj = ShapeObject(color, shape, x, y, size)
        if all(bbox_gap(p.bbox, obj.bbox) >= MIN_GAP for p in others) and ok(obj):
            return obj
    return None


def random_scene(n: int, rng: np.random.Generator, tries: int = 100) -> Scene:
    """``n`` objects (1 or 2) with distinct random colour–shape pairs, placed by :func:`place`."""
    for _ in range(tries):
        scene: Scene = []
        for _ in range(n):
            color, shape = random_pair(rng, pairs(scene))
            obj = place(color, shape, scene, rng)
            if obj is None:
                break
            scene.append(obj)
        if len(scene) == n:
            return scene
    raise RuntimeError(f"could not place a {n}-object scene in {tries} tries")


def constraints(scene: Sequence[ShapeObject], relation: str | None = None) -> Constraints:
    """The ShapesWorld constraints a scene satisfies: one object, two objects, or (``relation``) a position."""
    specs = tuple(ObjectSpec(o.color, o.shape) for o in scene)
    if len(specs) == 1:
        return Constraints("single_object", specs)
    if len(specs) == 2:
        if relation is not None:
            if not relation_holds(relation, scene[0].centre, scene[1].centre):
                raise ValueError(f"relation {relation!r} does not hold in {to_rows(scene)}")
            return Constraints("position", specs, relation)
        return Constraints("two_object", specs)
    raise ValueError(f"scenes of the image-to-image worlds have 1 or 2 objects, got {len(scene)}")


def caption(scene: Sequence[ShapeObject], relation: str | None = None) -> str:
    return format_prompt(constraints(scene, relation))


def render_chw(scene: Sequence[ShapeObject]) -> np.ndarray:
    """The scene rendered as uint8 ``[3, 64, 64]`` (the layout rewards and the adapter read)."""
    return np.ascontiguousarray(render(scene).transpose(2, 0, 1))
