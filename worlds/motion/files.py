"""Motion samples as files: the features, a stick-figure GIF and a filmstrip PNG per sample.

:func:`is_motion` tells denormalised HumanML3D features ``[B, frames, 263]`` (what a MotionWorld pipeline
decodes) from images ``[B, 3, H, W]``; :func:`write_motion` writes one sample as

* ``<stem>.npy`` — float32 ``[frames, 263]``, denormalised features (``numpy.load``; joints with
  :func:`worlds.motion.features.recover_joints`);
* ``<stem>.gif`` — the recovered joints as an animated stick figure at 20 fps (:func:`~.render.stick_figure_gif`);
* ``<stem>.png`` — a filmstrip of ``strip_frames`` evenly spaced poses (:func:`~.render.filmstrip_png`).

A sample with non-finite values keeps its ``.npy`` (for inspection) but gets no drawings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .features import FEATURE_DIM


def is_motion(samples: Any) -> bool:
    """True for a batch of motion features ``[B, frames, 263]`` (tensor or array)."""
    shape = tuple(getattr(samples, "shape", ()))
    return len(shape) == 3 and shape[-1] == FEATURE_DIM


def write_motion(
    features: Any, out_dir: str | os.PathLike, stem: str, title: str = "", strip_frames: int = 8
) -> dict[str, str]:
    """Write ``<stem>.npy``, ``.gif`` and ``.png`` of one sample ``[frames, 263]`` into ``out_dir``.

    Returns the file names written (relative to ``out_dir``): ``{"file": npy, "gif": ..., "png": ...}``
    (no "gif" / "png" for a non-finite sample).
    """
    from .features import recover_joints
    from .render import filmstrip_png, stick_figure_gif

    if hasattr(features, "detach"):
        features = features.detach().float().cpu().numpy()
    x = np.asarray(features, dtype=np.float32)
    if x.ndim != 2 or x.shape[-1] != FEATURE_DIM:
        raise ValueError(f"write_motion: features must be [frames, {FEATURE_DIM}], got {tuple(x.shape)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = {"file": f"{stem}.npy"}
    tmp = out / f".{stem}.npy.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        np.save(f, x)
    os.replace(tmp, out / names["file"])
    if np.isfinite(x).all() and len(x) >= 2:
        joints = recover_joints(x.astype(np.float64))
        names["gif"] = stick_figure_gif(joints, out / f"{stem}.gif", title=title).name
        names["png"] = filmstrip_png(joints, out / f"{stem}.png", n=strip_frames, title=title).name
    return names


__all__ = ["is_motion", "write_motion"]
