"""ShapesWorld reward: the judge's strict (0/1) or partial ([0, 1]) score of each image.

``reward.fns = {"shapes": 1.0}``, ``reward.kwargs = {"shapes": {"score": "partial"}}``.

Per sample, the constraints come from the metadata row when it carries ``task`` and ``objects``
(the rows of ``worlds/shapes/data/shapes_{train,test}.jsonl``), otherwise from parsing the prompt. A
prompt outside the ShapesWorld grammar (with no such row) scores ``NaN`` — "not applicable" in the
reward contract — and is counted in ``info["shapes/not_applicable"]``.

Images (float ``(B, 3, H, W)`` in ``[0, 1]``) are rounded to uint8 and, when not ``size × size``,
resized to it by area averaging (PIL ``BOX``) when shrinking or nearest neighbour when enlarging;
the judge's geometric thresholds are defined at 64 px and scale with ``size / 64`` (see
``worlds/shapes/judge.py`` for every threshold).

``info`` holds NaN-free means over the applicable samples: ``shapes/strict``, ``shapes/partial``,
and per task ``shapes/strict/<task>``, ``shapes/partial/<task>`` for the tasks present in the
batch (tasks: single_object, counting, two_object, position), plus ``shapes/not_applicable``
(fraction of the batch).
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from reward_models import register, to_uint8

SCORES = ("strict", "partial")


@register("shapes")
def shapes(score: str = "strict", size: int = 64, relation_tol: float = 1.0):
    """Reward = ShapesWorld judge score: ``score="strict"`` (0/1) or ``"partial"`` (fraction of
    the prompt's constraints satisfied); ``size`` is the judging resolution, ``relation_tol`` the
    pixel tolerance of the relation rule (at 64 px)."""
    if score not in SCORES:
        raise ValueError(f"reward 'shapes': score must be one of {SCORES}, got {score!r}")
    if int(size) < 16:
        raise ValueError(f"reward 'shapes': size must be >= 16 pixels, got {size!r}")
    size = int(size)
    from .grammar import constraints_of
    from .judge import judge

    def fn(images: Any, prompts: List[str], metadata: List[dict]):
        arr = to_uint8(images)  # [B, H, W, 3]
        batch = arr.shape[0]
        out = {k: np.full(batch, np.nan, dtype=np.float32) for k in SCORES}
        tasks: List[str] = [""] * batch
        for i in range(batch):
            row = metadata[i] if metadata is not None and i < len(metadata) else None
            try:
                if isinstance(row, dict) and "task" in row and "objects" in row:
                    c = constraints_of(row)
                else:
                    c = constraints_of(prompts[i])
            except ValueError:
                continue  # not a ShapesWorld prompt: NaN
            res = judge(arr[i], c, size=size, relation_tol=relation_tol)
            out["strict"][i] = res["strict"]
            out["partial"][i] = res["partial"]
            tasks[i] = res["task"]
        info: Dict[str, float] = {"shapes/not_applicable": float(np.isnan(out["strict"]).mean()) if batch else 0.0}
        applicable = ~np.isnan(out["strict"])
        if applicable.any():
            for k in SCORES:
                info[f"shapes/{k}"] = float(out[k][applicable].mean())
            for task in sorted(set(t for t in tasks if t)):
                sel = np.asarray([t == task for t in tasks])
                for k in SCORES:
                    info[f"shapes/{k}/{task}"] = float(out[k][sel].mean())
        return out[score], info

    return fn
