"""Motion samples as files: the features, a stick-figure GIF and a filmstrip PNG per sample.

:func:`is_motion` tells denormalised HumanML3D features ``[B, frames, 263]`` (what a MotionWorld pipeline
decodes) from images ``[B, 3, H, W]``; :func:`write_motion` writes one sample as

* ``<stem>.npy`` — float32 ``[frames, 263]``, denormalised features (``numpy.load``; joints with
  :func:`worlds.motion.features.recover_joints`);
* ``<stem>.gif`` — the recovered joints as an animated stick figure at 20 fps (:func:`~.render.stick_figure_gif`);
* ``<stem>.png`` — a filmstrip of ``strip_frames`` evenly spaced poses (:func:`~.render.filmstrip_png`).

A sample with non-finite values keeps its ``.npy`` (for inspection) but gets no drawings.

:func:`read_motion` reads one such ``.npy`` back for scoring and refuses a bad file in one line that names
it and the shape expected (:class:`MotionFileError`): not a plain ``.npy`` array, a width other than 263
(joints ``[frames, 22, 3]`` are pointed to :func:`~worlds.motion.features.features_from_joints`), frames
holding NaN or inf, or fewer frames than :data:`worlds.motion.reward.MIN_FRAMES` (8: what the judge, the
physics metrics and the evaluator need). :func:`read_samples` reads a directory that ``scripts/sample.py``
wrote (``index.jsonl`` rows ``{"prompt", "file", ...}``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from foundation.atomic_io import replacing

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
    with replacing(out / names["file"]) as tmp, open(tmp, "wb") as f:
        np.save(f, x)
    if np.isfinite(x).all() and len(x) >= 2:
        joints = recover_joints(x.astype(np.float64))
        names["gif"] = stick_figure_gif(joints, out / f"{stem}.gif", title=title).name
        names["png"] = filmstrip_png(joints, out / f"{stem}.png", n=strip_frames, title=title).name
    return names


class MotionFileError(ValueError):
    """A motion file that cannot be scored; the message is one line naming the file and the shape expected."""


def _expected(min_frames: int) -> str:
    return f"expected float features of shape (frames >= {min_frames}, {FEATURE_DIM})"


def read_motion(path: str | os.PathLike, min_frames: int | None = None) -> np.ndarray:
    """One motion file as float32 ``[frames, 263]`` denormalised features, checked (module docstring).

    ``min_frames``: the fewest frames accepted (default :data:`worlds.motion.reward.MIN_FRAMES`).
    Raises :class:`MotionFileError` (a ``ValueError``) with one line naming ``path`` and the shape expected.
    """
    if min_frames is None:
        from .reward import MIN_FRAMES

        min_frames = MIN_FRAMES
    path = Path(path)
    want = _expected(min_frames)
    if not path.is_file():
        raise MotionFileError(f"motion file {str(path)!r}: no such file; {want} in a .npy (scripts/sample.py)")
    try:
        x = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise MotionFileError(f"motion file {str(path)!r}: not a NumPy .npy array ({exc}); {want}") from exc
    if not isinstance(x, np.ndarray) or not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        kind = type(x).__name__ if not isinstance(x, np.ndarray) else f"dtype {x.dtype}"
        raise MotionFileError(f"motion file {str(path)!r}: holds {kind}; {want}")
    if x.ndim == 3 and x.shape[1:] == (22, 3):
        raise MotionFileError(
            f"motion file {str(path)!r}: shape {tuple(x.shape)} looks like joint positions; {want} — convert joints "
            "with worlds.motion.features.features_from_joints"
        )
    if x.ndim != 2 or x.shape[1] != FEATURE_DIM:
        raise MotionFileError(f"motion file {str(path)!r}: shape {tuple(x.shape)}; {want} (HumanML3D's 263 features)")
    if len(x) < min_frames:
        raise MotionFileError(f"motion file {str(path)!r}: {len(x)} frames, too short; {want}")
    bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
    if len(bad):
        shown = ", ".join(str(int(i)) for i in bad[:5]) + (", ..." if len(bad) > 5 else "")
        raise MotionFileError(
            f"motion file {str(path)!r}: {len(bad)} of {len(x)} frames hold NaN or inf (frames {shown}); {want}, "
            "every value finite"
        )
    return x.astype(np.float32)


def read_samples(directory: str | os.PathLike, min_frames: int | None = None) -> tuple[list[np.ndarray], list[dict]]:
    """The motions of a ``scripts/sample.py`` output directory and their ``index.jsonl`` rows, in index order.

    Each row's ``"file"`` (relative to ``directory``) goes through :func:`read_motion`; a missing index or a
    row without ``prompt`` / ``file`` is a :class:`MotionFileError` naming it.
    """
    directory = Path(directory)
    index = directory / "index.jsonl"
    if not index.is_file():
        raise MotionFileError(
            f"{str(directory)!r}: no index.jsonl; give a directory written by scripts/sample.py on a motion pipeline"
        )
    feats, rows = [], []
    for n, line in enumerate(index.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MotionFileError(f"{index}: line {n} is not JSON ({exc})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not isinstance(row.get("file"), str):
            raise MotionFileError(f'{index}: line {n} needs "prompt" and "file" strings, got {line.strip()[:80]!r}')
        feats.append(read_motion(directory / row["file"], min_frames))
        rows.append(row)
    if not rows:
        raise MotionFileError(f"{index}: no rows")
    return feats, rows


__all__ = ["MotionFileError", "is_motion", "read_motion", "read_samples", "write_motion"]
