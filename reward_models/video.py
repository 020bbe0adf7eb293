"""Rewards for video samples: the frame-wise rule that lets any image reward score a video, and sample-kind checks.

A video family decodes float (B, F, 3, H, W) in [0, 1] (docs/rewards.md). A reward says what it scores whole with a
``sample_kinds`` attribute on the reward function (``declare_kinds``), e.g. ``("image", "video")`` for one that takes
videos itself; a reward without the attribute is an image reward. Given videos:

* a reward declaring "video" receives the whole batch;
* any other image reward scores the B·F frames as images, each frame with its video's prompt and metadata row, and
  the F scores of a video are reduced by ``reward.frame_reduction`` (``reduce_frames``):
      "mean" (default)  the average over frames          "min" / "max"  the worst / best frame
      "first" / "last"  that frame alone                 "median"       the median frame score
  NaN frames (not applicable) are left out (all NaN → NaN). The reward's per-sample info lists are reduced alike
  (numbers by the rule; anything else: the first frame's entry).

``check_kinds`` refuses, before anything is sampled, a reward that cannot score what the family samples: a reward
declaring only "video" for an image family, or one declaring kinds that include neither the family's kind nor
"image" for a video family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: reduction name -> fn(scores [B, F]) -> [B] (NaN-aware)
FRAME_REDUCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": lambda s: _nan_reduce(np.nanmean, s),
    "min": lambda s: _nan_reduce(np.nanmin, s),
    "max": lambda s: _nan_reduce(np.nanmax, s),
    "median": lambda s: _nan_reduce(np.nanmedian, s),
    "first": lambda s: s[:, 0],
    "last": lambda s: s[:, -1],
}
#: the attribute a reward function declares its whole-sample kinds with
KINDS_ATTR = "sample_kinds"


def _nan_reduce(fn, scores: np.ndarray) -> np.ndarray:
    out = np.full(scores.shape[0], np.nan, dtype=np.float32)
    valid = ~np.isnan(scores).all(axis=1)
    if valid.any():
        out[valid] = fn(scores[valid], axis=1)
    return out


def reduce_frames(scores: np.ndarray, rule: str = "mean") -> np.ndarray:
    """Per-frame scores [B, F] -> per-video scores [B] by ``rule`` (module docstring); ValueError for an unknown rule."""
    if rule not in FRAME_REDUCTIONS:
        raise ValueError(f"reward.frame_reduction={rule!r} must be one of {sorted(FRAME_REDUCTIONS)}")
    return FRAME_REDUCTIONS[rule](np.asarray(scores, dtype=np.float32)).astype(np.float32)


def declare_kinds(fn: Callable, *kinds: str) -> Callable:
    """Mark ``fn`` as scoring samples of ``kinds`` whole (e.g. ``declare_kinds(fn, "image", "video")``); returns fn."""
    setattr(fn, KINDS_ATTR, tuple(kinds))
    return fn


def sample_kinds(fn: Callable) -> tuple[str, ...]:
    """The kinds ``fn`` scores whole: its declaration, else ("image",)."""
    return tuple(getattr(fn, KINDS_ATTR, ("image",)))


class FrameWise:
    """An image reward applied to every frame of a video batch, reduced per video (module docstring)."""

    def __init__(self, fn: Callable, reduction: str = "mean"):
        reduce_frames(np.zeros((1, 1)), reduction)  # validates the rule
        self.fn, self.reduction = fn, reduction
        self.sample_kinds = ("video",)

    def __call__(self, videos, prompts: list[str], metadata: list[dict]) -> tuple[np.ndarray, dict]:
        from foundation.images import check_video

        from .contract import coerce_scores

        b, f = check_video(videos).shape[:2]
        frames = videos.reshape(b * f, *videos.shape[2:])  # [B·F, 3, H, W]
        scores, info = self.fn(frames, [p for p in prompts for _ in range(f)], [m for m in metadata for _ in range(f)])
        name = getattr(self.fn, "__name__", type(self.fn).__name__)
        per_video = reduce_frames(coerce_scores(name, scores, b * f).reshape(b, f), self.reduction)
        return per_video, self._reduce_info(info or {}, b, f)

    def _reduce_info(self, info: dict, b: int, f: int) -> dict[str, Any]:
        from .contract import per_sample_entries

        out = dict(info)
        for key, values in per_sample_entries(info, b * f).items():
            grid = [values[i * f : (i + 1) * f] for i in range(b)]
            numeric = all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in values)
            out[key] = (
                reduce_frames(np.asarray(grid, dtype=np.float32), self.reduction).tolist()
                if numeric
                else [g[0] for g in grid]
            )
        return out


def for_sample_kind(fn: Callable, kind: str, reduction: str = "mean") -> Callable:
    """``fn`` as it must be called on samples of ``kind``: frame-wise for videos unless it declares "video"."""
    if kind == "video" and "video" not in sample_kinds(fn):
        return FrameWise(fn, reduction)
    return fn


def check_kinds(rewards: dict[str, Callable], kind: str, family: str) -> None:
    """ValueError naming the first reward of ``rewards`` (name -> fn) that cannot score ``kind`` samples of ``family``."""
    for name, fn in rewards.items():
        if not hasattr(fn, KINDS_ATTR):
            continue  # an undeclared reward: an image reward, scored frame-wise on videos (other kinds: the user's call)
        kinds = sample_kinds(fn)
        if kind in kinds or (kind == "video" and "image" in kinds):
            continue
        takes = " and ".join(kinds)
        raise ValueError(
            f"reward {name!r} scores {takes} samples, but {family} samples {kind}s: choose a reward for {kind}s "
            f"(reward.fns), or a model that samples {takes}s (pretrained.model)"
        )
