"""ShapesWorld: a synthetic compositional text-to-image world (our CPU-sized GenEval).

* :mod:`.world` — palette, shapes, constraints, scene sampling, the deterministic renderer;
* :mod:`.prompts` — the prompt grammar, enumeration of every prompt, parsing, the train/test split;
* :mod:`.judge` — object detection on (generated) images and strict/partial scoring
  (``from ddpo_grpo.shapes.judge import judge``; not imported here, so ``python -m
  ddpo_grpo.shapes.judge`` runs cleanly).

The spec lives in DESIGN.md ("ShapesWorld — the embedded world"); the reward plug-in is
``reward_models/shapes.py`` (registered as ``"shapes"``).
"""
from .world import (
    BACKGROUND,
    CANVAS,
    COLORS,
    MAX_SIZE,
    MIN_GAP,
    MIN_REL_OFFSET,
    MIN_SIZE,
    PALETTE,
    RELATIONS,
    SHAPES,
    TASKS,
    Constraints,
    ObjectSpec,
    ShapeObject,
    relation_holds,
    render,
    render_prompt,
    sample_scene,
    scene_for_prompt,
    scene_satisfies,
    scene_violations,
    shape_mask,
)
from .prompts import (
    SPLIT_SEED,
    all_prompts,
    constraints_of,
    enumerate_constraints,
    format_prompt,
    load_split,
    make_split,
    parse_prompt,
    split_path,
    split_rule,
)

__all__ = [
    "BACKGROUND", "CANVAS", "COLORS", "MAX_SIZE", "MIN_GAP", "MIN_REL_OFFSET", "MIN_SIZE", "PALETTE",
    "RELATIONS", "SHAPES", "TASKS", "Constraints", "ObjectSpec", "ShapeObject", "relation_holds", "render",
    "render_prompt", "sample_scene", "scene_for_prompt", "scene_satisfies", "scene_violations", "shape_mask",
    "SPLIT_SEED", "all_prompts", "constraints_of", "enumerate_constraints", "format_prompt", "load_split",
    "make_split", "parse_prompt", "split_path", "split_rule",
]
