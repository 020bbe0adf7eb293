"""MotionWorld rendering: stick figures as an animated GIF or a PNG filmstrip (PIL only).

Each frame shows two views side by side, both with the floor line and a camera that follows the root
horizontally (ground ticks every 0.5 m show the travel):

* **side** view, seen from the person's right at frame 0: screen right = ``+z`` (forward), up = ``+y``;
* **front** view, seen from ``+z``: screen right = ``+x`` (the person's left), up = ``+y``.

Bones are drawn left side blue, right side red, spine and head dark grey; joints are dots. Files are
written atomically (:func:`foundation.atomic_io.replacing`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from foundation.atomic_io import replacing

from .skeleton import FPS, N_JOINTS, PARENTS

#: pixels per metre and panel size
SCALE = 70.0
PANEL = (180, 180)
_LEFT = {1, 4, 7, 10, 13, 16, 18, 20}
_RIGHT = {2, 5, 8, 11, 14, 17, 19, 21}
_COLORS = {"left": (40, 90, 220), "right": (220, 50, 50), "mid": (60, 60, 60)}


def _joints(joints: Any) -> np.ndarray:
    if hasattr(joints, "detach"):
        joints = joints.detach().cpu().double().numpy()
    arr = np.asarray(joints, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[1:] != (N_JOINTS, 3):
        raise ValueError(f"joints must have shape [frames, 22, 3] (one clip, metres, y up), got {tuple(arr.shape)}")
    if len(arr) < 1 or not np.all(np.isfinite(arr)):
        raise ValueError("joints must hold at least one frame of finite positions")
    return arr


def _panel(pose: np.ndarray, axis: int, centre: float, label: str):
    """One view of one pose: ``axis`` = the world axis along screen x (2 = z for side, 0 = x for front)."""
    from PIL import Image, ImageDraw

    w, h = PANEL
    img = Image.new("RGB", PANEL, (255, 255, 255))
    d = ImageDraw.Draw(img)
    floor = h - 20

    def to_px(p):
        return (w / 2 + (p[axis] - centre) * SCALE, floor - p[1] * SCALE)

    d.line([(0, floor), (w, floor)], fill=(150, 150, 150), width=1)
    first = np.floor((centre - w / 2 / SCALE) / 0.5) * 0.5
    for k in range(int(w / SCALE / 0.5) + 2):
        x = w / 2 + (first + 0.5 * k - centre) * SCALE
        d.line([(x, floor), (x, floor + 5)], fill=(150, 150, 150), width=1)
    for j in range(1, N_JOINTS):
        side = "left" if j in _LEFT else "right" if j in _RIGHT else "mid"
        d.line([to_px(pose[PARENTS[j]]), to_px(pose[j])], fill=_COLORS[side], width=3)
    for j in range(N_JOINTS):
        x, y = to_px(pose[j])
        d.ellipse([x - 2, y - 2, x + 2, y + 2], fill=(0, 0, 0))
    d.text((4, 4), label, fill=(0, 0, 0))
    return img


def render_frame(joints: Any, t: int, title: str = ""):
    """PIL image of frame ``t``: side and front views side by side (``title`` above them)."""
    from PIL import Image, ImageDraw

    j = _joints(joints)
    pose = j[t]
    side = _panel(pose, 2, float(pose[0, 2]), f"side  t={t}")
    front = _panel(pose, 0, float(pose[0, 0]), "front")
    top = 14 if title else 0
    img = Image.new("RGB", (2 * PANEL[0], PANEL[1] + top), (255, 255, 255))
    img.paste(side, (0, top))
    img.paste(front, (PANEL[0], top))
    if title:
        ImageDraw.Draw(img).text((4, 1), title[:60], fill=(0, 0, 0))
    return img


def _atomic_save(path: str | os.PathLike, save) -> Path:
    """``save(tmp)`` into a temporary file that then replaces ``path`` (:func:`foundation.atomic_io.replacing`)."""
    path = Path(path)
    with replacing(path) as tmp:
        save(tmp)
    return path


def stick_figure_gif(joints: Any, path: str | os.PathLike, fps: float = FPS, title: str = "") -> Path:
    """Write an animated GIF of the clip ``[T, 22, 3]`` at ``fps`` (looping); returns the path."""
    if not (isinstance(fps, (int, float)) and 0 < fps <= 100):
        raise ValueError(f"fps must be a number in (0, 100], got {fps!r}")
    j = _joints(joints)
    frames = [render_frame(j, t, title) for t in range(len(j))]
    duration = max(10, int(round(1000.0 / fps)))

    def save(tmp):
        frames[0].save(tmp, format="GIF", save_all=True, append_images=frames[1:], duration=duration, loop=0)

    return _atomic_save(path, save)


def filmstrip_image(joints: Any, n: int = 8, title: str = "", views: str = "both"):
    """PIL image of ``n`` evenly spaced frames (first to last): a row per view (``views`` "both", "side", "front")."""
    from PIL import Image, ImageDraw

    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer (frames in the strip), got {n!r}")
    if views not in ("both", "side", "front"):
        raise ValueError(f"views must be 'both', 'side' or 'front', got {views!r}")
    j = _joints(joints)
    idx = np.unique(np.linspace(0, len(j) - 1, int(n)).round().astype(int))
    rows = [(2, "side"), (0, "front")] if views == "both" else [(2, "side")] if views == "side" else [(0, "front")]
    top = 14 if title else 0
    w, h = PANEL
    img = Image.new("RGB", (w * len(idx), len(rows) * h + top), (255, 255, 255))
    for k, t in enumerate(idx):
        pose = j[t]
        for r, (axis, name) in enumerate(rows):
            label = f"{name}  t={t}" if r == 0 else name
            img.paste(_panel(pose, axis, float(pose[0, axis]), label), (k * w, top + r * h))
    if title:
        ImageDraw.Draw(img).text((4, 1), title[:120], fill=(0, 0, 0))
    return img


def filmstrip_png(joints: Any, path: str | os.PathLike, n: int = 8, title: str = "") -> Path:
    """Write a PNG of ``n`` evenly spaced frames (first to last), one row per view; returns the path."""
    img = filmstrip_image(joints, n, title)
    return _atomic_save(path, lambda tmp: img.save(tmp, format="PNG"))


__all__ = ["PANEL", "SCALE", "filmstrip_image", "filmstrip_png", "render_frame", "stick_figure_gif"]
