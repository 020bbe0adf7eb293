"""The reward contract, in one place: what a reward receives, what it returns, and the helpers
that convert between the two sides.

A reward is a plain callable::

    fn(samples, prompts, metadata) -> (scores, info)

* ``samples``: what the policy decodes, batch first. Image families (SD, SDXL, SD3, FLUX, Qwen-Image,
  Z-Image, image-conditioned models) give a float tensor in ``[0, 1]`` of shape ``(B, 3, H, W)``; video
  families (Wan) a float tensor in ``[0, 1]`` of shape ``(B, F, 3, H, W)``, which an image reward scores
  frame-wise (:mod:`reward_models.video`); other families give their own decoded tensor (a motion model:
  denormalised HumanML3D features ``(B, frames, 263)``). A reward documents which kind it scores (and may
  declare it, ``reward_models.video.declare_kinds``); image rewards convert with :func:`to_uint8` / :func:`to_pil`.
* ``prompts``: ``list[str]`` of length ``B``.
* ``metadata``: ``list[dict]`` of length ``B``: the dataset rows (every field but ``"prompt"``).
* ``scores``: anything :func:`coerce_scores` turns into float32 ``[B]`` (array, list, tensor);
  ``NaN`` means "not applicable to this sample" and is left out of that reward's statistics.
* ``info``: a dict. An entry that is a list or 1-D array of length ``B`` is **per sample**: numbers
  (e.g. a judge's ``strict`` and ``partial`` sub-scores) or labels (e.g. a ``task``); evaluation
  (:mod:`ddpo_grpo.evaluation`) averages the numbers per label. Other entries are batch diagnostics.

A *factory* ``factory(**kwargs) -> fn`` defers heavy imports (models, weights) until a reward is
built; :mod:`reward_models.registry` maps names to factories.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from foundation.images import to_pil, to_uint8

#: ``fn(samples, prompts, metadata) -> (scores, info)``
RewardFn = Callable[[Any, list[str], list[dict]], tuple[Any, dict]]
#: ``factory(**kwargs) -> RewardFn``
RewardFactory = Callable[..., RewardFn]


def coerce_scores(name: str, scores: Any, batch: int) -> np.ndarray:
    """A reward's scores as float32 ``[batch]``, or a ValueError naming the reward ``name``."""
    if hasattr(scores, "detach"):  # torch tensor without importing torch
        scores = scores.detach().float().cpu().numpy()
    bad_type = (
        f"reward {name!r} returned non-numeric scores of type {type(scores).__name__}; "
        "return a float array/list/tensor of shape [B] (NaN = not applicable)"
    )
    if scores is None or isinstance(scores, (str, bytes, dict)):
        raise ValueError(bad_type)
    try:
        arr = np.asarray(scores, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise ValueError(bad_type) from exc
    arr = arr.reshape(-1) if arr.ndim > 1 and arr.size == batch else arr
    if arr.ndim != 1 or arr.shape[0] != batch:
        got = arr.shape[0] if arr.ndim == 1 else tuple(arr.shape)
        raise ValueError(f"reward {name!r} returned {got} scores, expected {batch} (one per sample)")
    return arr


def per_sample_entries(info: dict, batch: int) -> dict[str, list]:
    """The per-sample entries of a reward's ``info``: lists / 1-D arrays of length ``batch``."""
    out = {}
    for key, value in info.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu().numpy()
        if isinstance(value, np.ndarray) and value.ndim == 1 and len(value) == batch:
            out[key] = value.tolist()
        elif isinstance(value, (list, tuple)) and len(value) == batch:
            out[key] = list(value)
    return out


def takes_three_positional(obj: Callable) -> bool:
    """True when ``obj`` can be called as ``obj(samples, prompts, metadata)`` (a batched reward)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # no signature (some builtins): assume a reward
        return True
    try:
        sig.bind(None, None, None)
    except TypeError:
        return False
    return True


__all__ = [
    "RewardFactory",
    "RewardFn",
    "coerce_scores",
    "per_sample_entries",
    "takes_three_positional",
    "to_pil",
    "to_uint8",
]
