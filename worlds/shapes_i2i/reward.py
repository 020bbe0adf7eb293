"""Rewards of the image-to-image worlds: ``edit`` (editing rows) and ``shapes_i2i`` (both worlds, for evaluation).

``edit`` (entry point ``edit = "worlds.shapes_i2i.reward:edit"``): per sample, the edit judge
(:func:`.judge.judge_edit`) of the image against its row's ``target`` and ``preserve`` fields; the score is
``score=`` one of

* ``"mix"`` (default): ``(partial + preservation) / 2`` — dense, and both halves are needed; but copying the
  source image scores 0.83 / 0.75 / 0.88 on add / remove / move (the test rows' means), so a policy can climb it
  by not editing;
* ``"graded"``: ``(partial + preservation + 2·success) / 4`` — half of it is the edit accuracy: a correct edit
  scores 1 and any failed one at most 0.5 (copying the source: 0.42 / 0.38 / 0.44 on add / remove / move, 0.12
  on recolor), while failures keep mix's order among themselves (the config/edit.py recipes train on it);
* ``"strict"`` / ``"partial"``: the ShapesWorld judge on the target description alone;
* ``"preservation"``: the fraction of untouched objects left in place;
* ``"success"``: strict and every untouched object in place (the edit accuracy).

Rows without ``target`` / ``preserve`` (not editing rows) score NaN. Per-sample ``info``: ``strict``,
``partial``, ``preservation``, ``success`` (NaN where not applicable) and ``edit_type``.

``shapes_i2i`` (entry point ``shapes_i2i = "worlds.shapes_i2i.reward:shapes_i2i"``): editing rows as ``edit``,
restoration rows (``task == "restore"``) by PSNR and SSIM against their ``ground_truth``; its score and
per-sample ``quality`` are SSIM for restoration and ``success`` for editing; ``info`` also carries every
metric above (NaN where it does not apply) and ``group`` (the degradation kind or the edit type).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from reward_models import register, to_uint8

SCORES = ("mix", "graded", "strict", "partial", "preservation", "success")
EDIT_METRICS = ("strict", "partial", "preservation", "success")


def _judged(arr: np.ndarray, metadata: list[dict]) -> dict[str, list]:
    from .judge import judge_edit

    n = arr.shape[0]
    out: dict[str, list] = {k: [math.nan] * n for k in EDIT_METRICS}
    out["edit_type"] = [None] * n
    for i in range(n):
        row = metadata[i] if metadata is not None and i < len(metadata) else None
        if not isinstance(row, dict) or "target" not in row or "preserve" not in row:
            continue
        res = judge_edit(arr[i], row)
        for k in EDIT_METRICS:
            out[k][i] = float(res[k])
        out["edit_type"][i] = row.get("group") or (row.get("edit") or {}).get("type")
    return out


@register("edit")
def edit(score: str = "mix"):
    """Reward = the edit judge's ``score`` (module docstring) of each image against its row."""
    if score not in SCORES:
        raise ValueError(f"reward 'edit': score must be one of {SCORES}, got {score!r}")

    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        out = _judged(to_uint8(images), metadata)
        if score == "mix":
            values = [(p + q) / 2 for p, q in zip(out["partial"], out["preservation"])]
        elif score == "graded":
            values = [(p + q + 2 * w) / 4 for p, q, w in zip(out["partial"], out["preservation"], out["success"])]
        else:
            values = out[score]
        return np.asarray(values, dtype=np.float32), out

    return fn


@register("shapes_i2i")
def shapes_i2i():
    """Reward = SSIM (restoration rows) or edit success (editing rows); every metric in ``info`` (module docstring)."""
    from reward_models.similarity import psnr, ssim

    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        import torch

        images = torch.as_tensor(images).float().clamp(0, 1)
        n = images.shape[0]
        out = _judged(to_uint8(images), metadata)
        out["psnr"], out["ssim"] = [math.nan] * n, [math.nan] * n
        restore = [i for i in range(n) if (metadata[i] or {}).get("task") == "restore"]
        if restore:
            from foundation.images import load_image

            truth = torch.stack([load_image(metadata[i]["ground_truth"], index=i) for i in restore]).to(images.device)
            gen = images[restore]
            for name, metric in (("psnr", psnr), ("ssim", ssim)):
                for i, v in zip(restore, metric(gen, truth).tolist()):
                    out[name][i] = v
        quality = [out["ssim"][i] if i in restore else out["success"][i] for i in range(n)]
        group = [(metadata[i] or {}).get("group") for i in range(n)]
        info = {**{k: v for k, v in out.items() if k != "edit_type"}, "quality": quality, "group": group}
        return np.asarray(quality, dtype=np.float32), info

    return fn
