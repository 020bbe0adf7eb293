"""ShapesWorld's evaluation extras for image pipelines (``ddpo_grpo.evaluation_extras`` entry point "image").

Declared in ``pyproject.toml`` (``foundation/plugins.py`` looks it up): ``scripts/evaluate.py`` on any pipeline
that no plug-in sample kind claims (``ddpo_grpo/sample_kinds.py``) scores ShapesWorld's held-out split
(``shapes_test``) with the strict judge (``shapes``) unless --prompts / --reward say otherwise, 128 samples per
task. 128 is chosen so that the paired SE of the task mean is <= 2 points for a fine-tuned ShapesWorld model
against its base (measured: docs/experiments/2026-11-26-independent-judge.md); the split has 3 single-object and
9 counting prompts but 312 position prompts, so every prompt once would weigh the tasks very unequally.
Both ShapesWorld scorers, the judge and the independent detector, are evaluated strict by default.
"""

from __future__ import annotations

from ddpo_grpo.evaluation_extras import EvaluationExtras

EVALUATION = EvaluationExtras(
    prompts="shapes_test",
    reward="shapes",
    reward_kwargs={"shapes": {"score": "strict"}, "shapes_detector": {"score": "strict"}},
    per_group=128,
    pass_metric="strict",
)
