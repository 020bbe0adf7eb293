"""ShapesWorld: a synthetic compositional text-to-image world, our CPU-sized stand-in for GenEval.

The specification is ``worlds/shapes/README.md``; this package is its executable form:

* :mod:`.world` — palette, shapes, constraints, scene sampling, the deterministic renderer;
* :mod:`.grammar` — the prompt grammar, every prompt of every task, parsing, the train/test split
  (``data/shapes_{train,test}.jsonl``: the prompt sources ``shapes_train`` and ``shapes_test``);
* :mod:`.judge` — object detection on generated images and strict / partial scoring
  (not imported here, so ``python -m worlds.shapes calibration`` runs cleanly);
* :mod:`.reward` — the judge as the ``shapes`` reward;
* :mod:`.detector` — ``shapes_detector``, a second scorer sharing no code with the judge (own segmentation and a
  small CNN; weights in ``models/detector``), and :mod:`.agreement`, the two side by side;
* ``models/sd3`` and ``models/sd`` — the shipped base models (:data:`SHAPES_SD3`, :data:`SHAPES_SD`),
  reproduced by ``python -m worlds.shapes pretrain``.
"""

from pathlib import Path

from .grammar import (
    SPLIT_SEED,
    all_prompts,
    constraints_of,
    enumerate_constraints,
    format_prompt,
    load_split,
    make_split,
    parse_prompt,
    render_prompt,
    scene_for_prompt,
    split_path,
    split_rule,
)
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
    sample_scene,
    scene_satisfies,
    scene_violations,
    shape_mask,
)

_MODELS = Path(__file__).resolve().parent / "models"
#: the ShapesWorld base model in SD3 architecture: a ``StableDiffusion3Pipeline`` (two CLIP text
#: encoders, no T5; 2.9M parameters, 12 MB). Load it with
#: ``StableDiffusion3Pipeline.from_pretrained(SHAPES_SD3, text_encoder_3=None, tokenizer_3=None)``.
SHAPES_SD3 = str(_MODELS / "sd3")
#: the same world in SD architecture: a ``StableDiffusionPipeline`` (UNet2DConditionModel + DDIM, one
#: CLIP text encoder; the SD3 model's VAE and tokenizer). Load it with
#: ``StableDiffusionPipeline.from_pretrained(SHAPES_SD)``.
SHAPES_SD = str(_MODELS / "sd")

__all__ = [
    "BACKGROUND",
    "CANVAS",
    "COLORS",
    "MAX_SIZE",
    "MIN_GAP",
    "MIN_REL_OFFSET",
    "MIN_SIZE",
    "PALETTE",
    "RELATIONS",
    "SHAPES",
    "SHAPES_SD",
    "SHAPES_SD3",
    "SPLIT_SEED",
    "TASKS",
    "Constraints",
    "ObjectSpec",
    "ShapeObject",
    "all_prompts",
    "constraints_of",
    "enumerate_constraints",
    "format_prompt",
    "load_split",
    "make_split",
    "parse_prompt",
    "relation_holds",
    "render",
    "render_prompt",
    "sample_scene",
    "scene_for_prompt",
    "scene_satisfies",
    "scene_violations",
    "shape_mask",
    "split_path",
    "split_rule",
]
