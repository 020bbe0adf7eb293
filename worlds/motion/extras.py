"""MotionWorld's plug-ins for the scripts: the "motion" sample kind and its evaluation extras.

Declared in ``pyproject.toml`` (``foundation/plugins.py`` looks them up), so ``scripts/sample.py`` and
``scripts/evaluate.py`` serve motion pipelines without importing this world:

* :data:`SAMPLE_KIND` (``ddpo_grpo.sample_kinds``): a pipeline whose ``sample_shape`` is ``[frames, 263]`` and a
  decoded batch ``[B, frames, 263]`` are motions; one is written as ``<stem>.npy``, a stick-figure ``<stem>.gif``
  and a filmstrip ``<stem>.png`` (:func:`worlds.motion.files.write_motion`).
* :data:`EVALUATION` (``ddpo_grpo.evaluation_extras``): the held-out ``motion_test`` prompts scored by the strict
  ``motion_judge`` by default, 100 samples per task; the physics metrics of every sample beside the judge's
  (:func:`worlds.motion.evaluation.with_physics`); the text–motion evaluator's set-level numbers
  (:func:`~worlds.motion.evaluation.set_level_metrics`); the HumanML3D-style table with standard errors
  (:func:`worlds.motion.table.motion_table`), which shows the physics metrics in place of the per-group table.
"""

from __future__ import annotations

from typing import Any

from ddpo_grpo.evaluation_extras import EvaluationExtras
from ddpo_grpo.sample_kinds import SampleKind

from .evaluation import PHYSICS_KEYS, set_level_metrics, with_physics
from .features import FEATURE_DIM
from .files import is_motion, write_motion
from .table import format_table, motion_table


def is_motion_pipeline(pipeline: Any) -> bool:
    """True for a generic denoiser pipeline whose samples are ``[frames, 263]`` features."""
    shape = list(getattr(pipeline.config, "sample_shape", None) or [])
    return len(shape) == 2 and shape[-1] == FEATURE_DIM


SAMPLE_KIND = SampleKind("motion", of_samples=is_motion, write=write_motion, of_pipeline=is_motion_pipeline)

EVALUATION = EvaluationExtras(
    prompts="motion_test",
    reward="motion_judge",
    reward_kwargs={"motion_judge": {"score": "strict"}},
    per_group=100,
    pass_metric="strict",
    grid_columns=4,
    per_sample=with_physics,
    set_metrics=set_level_metrics,
    set_metrics_label="set-level (text–motion evaluator)",
    table=motion_table,
    format_table=format_table,
    table_title="HumanML3D-style table",
    table_keys=PHYSICS_KEYS,
)
