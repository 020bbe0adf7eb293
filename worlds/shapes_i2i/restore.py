"""Restoration: a clean ShapesWorld render and its degraded version, the degradation recorded in the row.

A row is a ShapesWorld scene (drawn for a prompt of the ShapesWorld split: train rows from ``shapes_train``,
test rows from ``shapes_test``, so test scenes are compositions the base model never saw) and one
degradation (:mod:`ddpo_grpo.degradations` specs, simulated by :mod:`worlds.shapes_i2i.degradations`) at one level:

==========  ===================  ==================  =========================================
kind        train levels         held-out level      parameter
==========  ===================  ==================  =========================================
downsample  ×2, ×4               ×3                  area down, bilinear up (factor)
blur        σ 1.0, 2.0           σ 1.5               Gaussian σ in pixels
noise       σ 0.1, 0.2           σ 0.15              Gaussian σ on [0, 1] intensities, clamped
jpeg        q 10, 30             q 20                PIL JPEG quality
==========  ===================  ==================  =========================================

Test rows use all three levels (``held_out_level`` marks the middle one), so the test split measures
generalisation to unseen compositions and to an unseen strength of every kind.

The instruction is the fixed ``"restore the image"`` for every kind: a restorer is not told what went
wrong (the degradation is only in the row, for the data-consistency term and the per-kind tables) nor
what the scene holds (a caption would hand the model the content it should recover from pixels). The
image-only branch of InstructPix2Pix guidance (no instruction) then means "reproduce the input", and the
text guidance scale pushes away from that towards a restoration.
"""

from __future__ import annotations

from worlds.shapes.grammar import scene_for_prompt

from .scenes import to_rows

INSTRUCTION = "restore the image"
#: kind -> (train levels, held-out level)
LEVELS: dict[str, tuple[tuple[float, ...], float]] = {
    "downsample": ((2, 4), 3),
    "blur": ((1.0, 2.0), 1.5),
    "noise": ((0.1, 0.2), 0.15),
    "jpeg": ((10, 30), 20),
}
KINDS = tuple(LEVELS)
_PARAM = {"downsample": "factor", "blur": "sigma", "noise": "sigma", "jpeg": "quality"}


def degradation(kind: str, level: float) -> dict:
    """The degradation spec of ``kind`` at ``level`` (a dict of :mod:`ddpo_grpo.degradations`)."""
    if kind not in LEVELS:
        raise ValueError(f"unknown degradation kind {kind!r}; kinds: {', '.join(KINDS)}")
    value = int(level) if kind in ("downsample", "jpeg") else float(level)
    return {"kind": kind, _PARAM[kind]: value}


def levels(kind: str, split: str) -> list[float]:
    train, held = LEVELS[kind]
    return list(train) if split == "train" else sorted([*train, held])


def restore_row(shape_row: dict, kind: str, level: float, seed: int, held_out: bool) -> dict:
    """The JSON row (no images) of one restoration example: the scene drawn for ``shape_row`` with ``seed``."""
    from ddpo_grpo.degradations import name

    spec = degradation(kind, level)
    scene = scene_for_prompt(shape_row, seed)
    return {
        "prompt": INSTRUCTION,
        "task": "restore",
        "group": kind,
        "degradation": spec,
        "degradation_name": name(spec),
        "held_out_level": bool(held_out),
        "caption": shape_row["prompt"],
        "scene": to_rows(scene),
        "noise_seed": int(seed),
    }
