"""Reward plug-ins: batched ``fn(images, prompts, metadata) -> (scores, info)``.

Use :func:`build_reward` with ``{name: weight}`` to get a :class:`MultiReward`;
names come from :data:`REGISTRY` or are ``"path/to/file.py:fn_name"`` specs.
Importing this package registers the built-in rewards (cheap: no model weights).
"""

from . import aesthetic, clip_score, color, compression, hps, per_sample, pickscore, remote, similarity, verifiable  # noqa: F401,E402,I001
from ._clip_backbones import resolve_dtype
from .aesthetic import AestheticMLP
from .contract import RewardFactory, RewardFn, coerce_scores, per_sample_entries, to_pil, to_uint8
from .registry import REGISTRY, MultiReward, build_reward, check_reward_spec, load_reward, register
from .video import check_kinds, declare_kinds, for_sample_kind

# (importing only registers factories: model weights load when a reward is built)

__all__ = [
    "REGISTRY",
    "AestheticMLP",
    "MultiReward",
    "RewardFactory",
    "RewardFn",
    "build_reward",
    "check_kinds",
    "check_reward_spec",
    "coerce_scores",
    "declare_kinds",
    "for_sample_kind",
    "load_reward",
    "per_sample_entries",
    "register",
    "resolve_dtype",
    "to_pil",
    "to_uint8",
]
