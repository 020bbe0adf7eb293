"""The embedded worlds: small, offline, re-checkable settings in which the library visibly works.

Each world is a package beside the library core (``ddpo_grpo``, ``reward_models``), which never
imports it. A world plugs in the way a user's own package would, through the entry points declared
in ``pyproject.toml``: its rewards (group ``ddpo_grpo.rewards``) and prompt sources (group
``ddpo_grpo.prompt_sources``) become available by name, e.g. ``reward.fns = {"shapes": 1.0}`` and
``prompts.source = "shapes_train"``.

* :mod:`worlds.shapes` — ShapesWorld, a compositional text-to-image world (spec: ``worlds/shapes/README.md``).
* :mod:`worlds.motion` — MotionWorld, text-to-motion in HumanML3D's format (spec: ``worlds/motion/README.md``).
* :mod:`worlds.shapes_i2i` — image-conditioned ShapesWorld: restoration and instruction editing rows, their rewards
  and the shipped InstructPix2Pix model (spec: ``worlds/shapes_i2i/README.md``).
* :mod:`worlds.arithmetic` — ArithmeticWorld, arithmetic word problems for language-model GRPO and the shipped tiny
  Qwen2 model (spec: ``worlds/arithmetic/README.md``).
"""
