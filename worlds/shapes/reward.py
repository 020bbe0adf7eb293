"""ShapesWorld reward: the judge's strict (0/1), partial ([0, 1]) or mixed (their mean) score of each image.

``reward.fns = {"shapes": 1.0}``, ``reward.kwargs = {"shapes": {"score": "partial"}}``; registered
by name through this package's entry point (``pyproject.toml``), so the core never imports it.

Per sample, the constraints come from the metadata row when it carries ``task`` and ``objects``
(the rows of the ``shapes_train`` / ``shapes_test`` prompt sources), otherwise from parsing the prompt.
A prompt outside the ShapesWorld grammar (with no such row) scores ``NaN``, "not applicable" in the
reward contract.

Images (float ``(B, 3, H, W)`` in ``[0, 1]``) are rounded to uint8 and, when not ``size × size``,
resized to it by area averaging (PIL ``BOX``) when shrinking or nearest neighbour when enlarging;
the judge's geometric thresholds are defined at 64 px and scale with ``size / 64`` (see
``worlds/shapes/judge.py`` for every threshold).

``info`` holds per-sample lists (the contract's convention, read by the evaluation's per-group
tables): ``strict`` and ``partial`` (NaN where not applicable) and ``task`` (the judged task:
single_object, counting, two_object, position; None where not applicable).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from reward_models import register, to_uint8

SCORES = ("strict", "partial")
#: the scores a run may train on: the judge's two, and "mixed" = ½(strict + partial): partial credit for each
#: constraint met plus a step of ½ for meeting all of them (a position image with the right shapes and the wrong
#: relation scores 0.375 where partial gives 0.75 and a correct one 1.0; docs/learning.md)
TRAINING_SCORES = (*SCORES, "mixed")


@register("shapes")
def shapes(score: str = "strict", size: int = 64, relation_tol: float = 1.0):
    """Reward = ShapesWorld judge score: ``score="strict"`` (0/1), ``"partial"`` (fraction of
    the prompt's constraints satisfied) or ``"mixed"`` (their mean); ``size`` is the judging resolution,
    ``relation_tol`` the pixel tolerance of the relation rule (at 64 px)."""
    if score not in TRAINING_SCORES:
        raise ValueError(f"reward 'shapes': score must be one of {TRAINING_SCORES}, got {score!r}")
    if int(size) < 16:
        raise ValueError(f"reward 'shapes': size must be >= 16 pixels, got {size!r}")
    size = int(size)
    from .grammar import constraints_of
    from .judge import judge

    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        arr = to_uint8(images)  # [B, H, W, 3]
        batch = arr.shape[0]
        out = {k: [math.nan] * batch for k in SCORES}  # Python floats: exact means in the evaluation
        tasks: list[str | None] = [None] * batch
        for i in range(batch):
            row = metadata[i] if metadata is not None and i < len(metadata) else None
            try:
                if isinstance(row, dict) and "task" in row and "objects" in row:
                    c = constraints_of(row)
                else:
                    c = constraints_of(prompts[i])
            except (ValueError, KeyError, TypeError):
                continue  # not a ShapesWorld prompt (or a malformed row): NaN
            res = judge(arr[i], c, size=size, relation_tol=relation_tol)
            out["strict"][i] = res["strict"]
            out["partial"][i] = res["partial"]
            tasks[i] = res["task"]
        strict, partial = (np.asarray(out[k], dtype=np.float32) for k in SCORES)
        values = {"strict": strict, "partial": partial, "mixed": 0.5 * (strict + partial)}[score]
        return values, {**out, "task": tasks}

    return fn
