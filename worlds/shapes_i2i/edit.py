"""Editing: instructions on ShapesWorld scenes, the target they describe, and the rows that carry them.

Edit types (``EDIT_TYPES``); the source scene has distinct colour–shape pairs, so "the C S" names one object:

==========  ===================================================  ==========  ====================================
type        instruction                                          source      target (what the judge reads)
==========  ===================================================  ==========  ====================================
recolor     ``make the {c} {s} {c'}``                            1–2 objects the object in colour c' at the same box;
                                                                             single_object / two_object caption
add         ``add a {c} {s}``                                    1 object    the source plus a C S anywhere
                                                                             (≥ 2 px apart); two_object caption
remove      ``remove the {c} {s}``                               2 objects   the other object alone;
                                                                             single_object caption
move        ``move the {c1} {s1} {to the left of|to the right    2 objects,  the first object placed so that the
            of|above|below} the {c2} {s2}``                      relation    relation holds, the second where it
                                                                 false       was; position caption
==========  ===================================================  ==========  ====================================

``preserve`` lists the objects the instruction leaves in place (their boxes): recolor — every object (the
recoloured one with its new colour); add — the source object; remove — the remaining one; move — the
object moved relative to. The row's ``target_scene`` is one valid target (add / move place the new
object at random), rendered as the ``ground_truth`` of supervised training.
"""

from __future__ import annotations

import numpy as np

from worlds.shapes.world import COLORS, RELATIONS, ShapeObject, relation_holds

from .scenes import caption, constraints, pairs, place, random_pair, random_scene, to_rows

EDIT_TYPES = ("recolor", "add", "remove", "move")


def _name(o: ShapeObject) -> str:
    return f"{o.color} {o.shape}"


def make_edit(kind: str, rng: np.random.Generator) -> dict:
    """A random edit of ``kind``: ``{"type", "instruction", "source", "target", "preserve", "relation", "params"}``.

    Scenes are ShapeObject lists; ``relation`` is the target caption's relation (move only).
    """
    if kind == "recolor":
        source = random_scene(int(rng.integers(1, 3)), rng)
        i = int(rng.integers(len(source)))
        o = source[i]
        colors = [c for c in COLORS if c != o.color and (c, o.shape) not in pairs(source)]
        new = colors[int(rng.integers(len(colors)))]
        target = list(source)
        target[i] = ShapeObject(new, o.shape, o.x, o.y, o.size)
        return {
            "type": kind,
            "instruction": f"make the {_name(o)} {new}",
            "source": source,
            "target": target,
            "preserve": list(target),
            "relation": None,
            "params": {"object": _name(o), "color": new},
        }
    if kind == "add":
        while True:
            source = random_scene(1, rng)
            color, shape = random_pair(rng, pairs(source))
            new = place(color, shape, source, rng)
            if new is not None:
                break
        return {
            "type": kind,
            "instruction": f"add a {color} {shape}",
            "source": source,
            "target": source + [new],
            "preserve": list(source),
            "relation": None,
            "params": {"object": f"{color} {shape}"},
        }
    if kind == "remove":
        source = random_scene(2, rng)
        i = int(rng.integers(2))
        kept = [source[1 - i]]
        return {
            "type": kind,
            "instruction": f"remove the {_name(source[i])}",
            "source": source,
            "target": kept,
            "preserve": kept,
            "relation": None,
            "params": {"object": _name(source[i])},
        }
    if kind == "move":
        relations = list(RELATIONS)
        while True:
            source = random_scene(2, rng)
            a, b = source
            rel = relations[int(rng.integers(len(relations)))]
            if relation_holds(rel, a.centre, b.centre):
                continue  # the relation already holds: nothing to move
            holds = lambda o, b=b, rel=rel: relation_holds(rel, o.centre, b.centre)  # noqa: E731
            moved = place(a.color, a.shape, [b], rng, ok=holds)
            if moved is not None:
                break
        return {
            "type": kind,
            "instruction": f"move the {_name(a)} {RELATIONS[rel]} the {_name(b)}",
            "source": source,
            "target": [moved, b],
            "preserve": [b],
            "relation": rel,
            "params": {"object": _name(a), "relation": rel, "anchor": _name(b)},
        }
    raise ValueError(f"unknown edit type {kind!r}; edit types: {', '.join(EDIT_TYPES)}")


def target_row(edit: dict) -> dict:
    """The judge's view of the target: ``{"caption", "task", "objects", "relation"}`` (a ShapesWorld row)."""
    c = constraints(edit["target"], edit["relation"])
    return {"caption": caption(edit["target"], edit["relation"]), **c.to_row()}


def edit_row(edit: dict) -> dict:
    """The JSON row of an edit (no images; :mod:`.data` renders ``source_image`` / ``ground_truth`` from it)."""
    return {
        "prompt": edit["instruction"],
        "task": "edit",
        "group": edit["type"],
        "edit": {"type": edit["type"], **edit["params"]},
        "source_caption": caption(edit["source"]),
        "source_scene": to_rows(edit["source"]),
        "target": target_row(edit),
        "target_scene": to_rows(edit["target"]),
        "preserve": to_rows(edit["preserve"]),
    }
