"""The detector as the ``shapes_detector`` reward: ``eval.reward = "shapes,shapes_detector"``.

Same contract as the ``shapes`` reward (worlds/shapes/reward.py): per sample the constraints come from the
metadata row when it carries ``task`` and ``objects``, else from parsing the prompt; a prompt outside the
grammar scores NaN; ``info`` holds per-sample ``strict``, ``partial`` (NaN where not applicable) and ``task``.
Images (float ``(B, 3, H, W)`` in ``[0, 1]``) are rounded to uint8 and brought to 64 × 64 (area averaging
when shrinking). Registered by name through this package's entry point (``pyproject.toml``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from reward_models import register, to_uint8

SCORES = ("strict", "partial")


@register("shapes_detector")
def shapes_detector(score: str = "strict", weights: str = ""):
    """Reward = the detector's ``score`` ("strict" 0/1 or "partial" in [0, 1]); ``weights``: a classifier
    ``.npz`` other than the shipped one ("" = shipped)."""
    if score not in SCORES:
        raise ValueError(f"reward 'shapes_detector': score must be one of {SCORES}, got {score!r}")
    from ..grammar import constraints_of
    from .net import load
    from .score import score as judge_image

    model = load(weights or None)

    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        arr = to_uint8(images)
        batch = arr.shape[0]
        out = {k: [math.nan] * batch for k in SCORES}
        tasks: list[str | None] = [None] * batch
        for i in range(batch):
            row = metadata[i] if metadata is not None and i < len(metadata) else None
            try:
                use_row = isinstance(row, dict) and "task" in row and "objects" in row
                c = constraints_of(row if use_row else prompts[i])
            except (ValueError, KeyError, TypeError):
                continue  # not a ShapesWorld prompt: NaN
            res = judge_image(arr[i], c, model)
            out["strict"][i] = float(res["strict"])
            out["partial"][i] = res["partial"]
            tasks[i] = res["task"]
        return np.asarray(out[score], dtype=np.float32), {**out, "task": tasks}

    return fn
