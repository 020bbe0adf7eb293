"""Image helpers shared by the core and the rewards: float images ↔ uint8 / PIL, and reading a row's image field.

Part of the foundation package (README, "Architecture"): it imports neither the core (``ddpo_grpo``) nor the
rewards (``reward_models``), and both import it.

* :func:`to_uint8` / :func:`to_pil`: float ``(B, 3, H, W)`` images in ``[0, 1]`` -> uint8 ``[B, H, W, 3]`` /
  PIL images (the rounding every image reward and the run report use).
* :func:`load_image`: a dataset row's image field (``source_image`` of image-conditioned rows, ``ground_truth``
  of the similarity rewards) as float32 ``[3, H, W]`` in ``[0, 1]``. Accepted: a path to an image file (relative
  paths against ``root``, default the working directory; decoded files cached by path, size and mtime); a float
  ``(3, H, W)`` tensor / array in ``[0, 1]`` (uint8: levels); a nested ``(3, H, W)`` list of numbers as JSON
  carries an array (all integers: uint8 levels; any float: values in ``[0, 1]``); a ``PIL.Image``.
* :func:`is_video` / :func:`check_video`: a video family's float ``(B, F, 3, H, W)`` batch (ddpo_grpo/video.py
  writes and shows them; reward_models/video.py scores them frame-wise).

**Path policy.** Inside a ``with image_path_policy(policy):`` block (on the calling thread / context), a path
is not resolved as above: ``policy(path, index, key)`` receives the raw string (no ``root``, no ``~``
expansion) and returns the real path to read, or raises to refuse it. The reward server uses this to refuse
client-named paths, or to confine them to its ``--data_root``. A policy's ``TypeError`` / ``ValueError`` /
``OSError`` is reported like any other invalid image (with the row index and key); any other exception (the
server's HTTP errors) propagates unchanged. Under a policy, error messages never contain the path.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch


def to_uint8(images: Any) -> np.ndarray:
    """Float ``(B, 3, H, W)`` images in ``[0, 1]`` (tensor or array) -> uint8 ``[B, H, W, 3]``.

    Values are clamped to ``[0, 1]`` and rounded to the nearest of the 256 levels.
    """
    if hasattr(images, "detach"):  # torch tensor, without importing torch here
        images = images.detach().float().cpu().numpy()
    arr = np.asarray(images, dtype=np.float32)
    if arr.ndim != 4 or arr.shape[1] != 3:
        raise ValueError(f"expected images of shape (B, 3, H, W) in [0, 1], got shape {tuple(arr.shape)}")
    arr = np.round(np.clip(arr, 0.0, 1.0) * 255.0).astype(np.uint8)
    return np.ascontiguousarray(arr.transpose(0, 2, 3, 1))


def to_pil(images: Any) -> list:
    """Float ``(B, 3, H, W)`` images in ``[0, 1]`` -> list of RGB ``PIL.Image`` (uint8 rounding)."""
    from PIL import Image

    return [Image.fromarray(a) for a in to_uint8(images)]


#: ``policy(path, index, key) -> real path to open``; it raises to refuse. See :func:`image_path_policy`.
PathPolicy = Callable[[str, int, str], str]
_PATH_POLICY: contextvars.ContextVar[PathPolicy | None] = contextvars.ContextVar("image_path_policy", default=None)


@contextlib.contextmanager
def image_path_policy(policy: PathPolicy | None) -> Iterator[None]:
    """Within the block, image paths from metadata are resolved (or refused) by ``policy``.

    ``policy(path, index, key)`` gets the raw string of ``metadata[index][key]`` and returns the real
    path of the file to read, or raises. The setting is per thread / ``contextvars`` context, so a
    reward must read its ground truths on the thread that calls it (``psnr`` and ``ssim`` do).
    ``None`` restores the local behaviour (paths relative to ``root`` or the working directory).
    """
    token = _PATH_POLICY.set(policy)
    try:
        yield
    finally:
        _PATH_POLICY.reset(token)


@functools.lru_cache(maxsize=32)
def _read_image(path: str, size: int, mtime_ns: int) -> np.ndarray:
    """uint8 ``[3, H, W]`` of an image file (size and mtime only key the cache)."""
    from PIL import Image

    with Image.open(path) as img:
        return np.ascontiguousarray(np.asarray(img.convert("RGB"), dtype=np.uint8).transpose(2, 0, 1))


def _nested_ground_truth(value: list | tuple, what: str = "ground-truth") -> torch.Tensor:
    """A nested ``(3, H, W)`` list of numbers (a JSON array) -> float32 ``[3, H, W]``; ints are uint8 levels."""
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError):
        raise ValueError(f"a nested-list {what} must be a rectangular (3, H, W) array of numbers") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"a nested-list {what} must hold numbers, got {arr.dtype.kind!r} values")
    if arr.ndim != 3 or arr.shape[0] != 3 or 0 in arr.shape:
        raise ValueError(f"{what} array must have shape (3, H, W), got {arr.shape}")
    if arr.dtype.kind in "iu":
        if arr.min() < 0 or arr.max() > 255:
            raise ValueError("a nested list of integers is read as uint8 levels and must lie in 0..255")
        return torch.from_numpy(arr.astype(np.float32)) / 255.0
    return torch.from_numpy(arr.astype(np.float32))


def read_image(value: Any, root: str | None, index: int = 0, key: str = "", what: str = "ground-truth"):
    """A row's image (its ``what``) -> float32 ``[3, H, W]`` in ``[0, 1]`` on the CPU; Type/ValueError if invalid."""
    if isinstance(value, (str, os.PathLike)):
        policy = _PATH_POLICY.get()
        if policy is not None:  # the caller (the reward server) resolves and vets the path; never echo it
            path = policy(os.fspath(value), index, key)
            try:
                st = os.stat(path)
                arr = _read_image(path, st.st_size, st.st_mtime_ns)
            except Exception as exc:  # OSError, PIL's UnidentifiedImageError / DecompressionBombError, ...
                raise ValueError(f"the {what} file cannot be read as an image ({type(exc).__name__})") from None
            return torch.from_numpy(arr).float() / 255.0
        path = os.path.expanduser(os.fspath(value))
        if not os.path.isabs(path):
            path = os.path.join(root if root is not None else os.getcwd(), path)
        if not os.path.isfile(path):
            raise ValueError(f"{what} image {path!r} does not exist")
        st = os.stat(path)
        return torch.from_numpy(_read_image(path, st.st_size, st.st_mtime_ns)).float() / 255.0
    if hasattr(value, "convert") and hasattr(value, "size"):  # PIL.Image
        arr = np.asarray(value.convert("RGB"), dtype=np.uint8).transpose(2, 0, 1).copy()
        return torch.from_numpy(arr).float() / 255.0
    if isinstance(value, (np.ndarray, torch.Tensor)):
        t = torch.from_numpy(value.copy()) if isinstance(value, np.ndarray) else value.detach().cpu()  # read-only ok
        if t.ndim != 3 or t.shape[0] != 3:
            raise ValueError(f"{what} array must have shape (3, H, W), got {tuple(t.shape)}")
        return t.float() / 255.0 if t.dtype == torch.uint8 else t.float()
    if isinstance(value, (list, tuple)):
        return _nested_ground_truth(value, what)
    raise TypeError(
        f"{what} of type {type(value).__name__}; expected an image path, a (3, H, W) array "
        "(or nested list) or a PIL image"
    )


def load_image(value: Any, *, root: str | None = None, index: int = 0, key: str = "ground_truth") -> torch.Tensor:
    """One row's image field (``metadata[index][key]``) as float32 ``[3, H, W]`` in ``[0, 1]`` on the CPU.

    Accepts what the rewards accept for a ground truth (a path, resolved against ``root`` or under the
    active :func:`image_path_policy`; a (3, H, W) array / tensor / nested list; a PIL image);
    ValueError naming the row and the key otherwise.
    """
    try:
        return read_image(value, root, index, key, what=key.replace("_", " "))
    except (TypeError, ValueError, OSError) as exc:
        raise ValueError(f"row {index}, {key!r}: {exc}") from exc


def is_video(samples) -> bool:
    """True for a (B, F, 3, H, W) batch."""
    return getattr(samples, "ndim", 0) == 5 and samples.shape[2] == 3


def check_video(samples):
    """``samples`` if it is a (B, F, 3, H, W) batch, else ValueError saying the shape expected."""
    if not is_video(samples):
        shape = tuple(getattr(samples, "shape", ()))
        raise ValueError(f"expected videos of shape (B, F, 3, H, W) in [0, 1], got shape {shape}")
    return samples


__all__ = [
    "PathPolicy",
    "check_video",
    "image_path_policy",
    "is_video",
    "load_image",
    "read_image",
    "to_pil",
    "to_uint8",
]
