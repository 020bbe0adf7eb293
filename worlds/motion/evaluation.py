"""MotionWorld evaluation helpers: the judge and the physics metrics in one scoring pass, and set-level numbers.

:func:`with_physics` wraps a reward of the contract (typically ``motion_judge``) so that every scored batch
also reports the physics metrics of :mod:`worlds.motion.physics` per sample — ``skate``, ``penetration``,
``max_penetration``, ``floating``, ``accel``, ``jerk``, ``bone_drift``, ``bone_cv_max``, ``bone_cv_<group>``,
``sane`` and the default ``motion_physics`` score as ``physics`` — next to the wrapped
reward's own (e.g. the judge's ``strict`` / ``partial`` / ``task``). The library's evaluation
(:func:`ddpo_grpo.evaluation.evaluate`) turns every numeric per-sample entry into ``eval/<metric>``,
``eval/<metric>/<group>`` and ``eval/<group_by>_mean/<metric>``, so one deterministic evaluation gives
judge accuracy and physics per task. The score returned is the wrapped reward's.

:func:`set_level_metrics` is the place of the text–motion evaluator's set-level numbers (R-precision,
matching score, FID, diversity; :mod:`worlds.motion.evaluator`) over a whole evaluation's samples; it
returns ``{}`` when no evaluator is installed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .physics import METRICS

#: per-sample physics entries added by :func:`with_physics` (the physics metrics and the reward's score)
PHYSICS_KEYS = (*METRICS, "physics")


def with_physics(reward: Callable) -> Callable:
    """``reward`` plus the per-sample physics metrics of its samples (see the module docstring)."""
    from .reward import motion_physics

    physics = motion_physics()

    def fn(samples: Any, prompts: list[str], metadata: list[dict]):
        scores, info = reward(samples, prompts, metadata)
        phys_scores, phys_info = physics(samples, prompts, metadata)
        info = dict(info or {})
        for key in PHYSICS_KEYS[:-1]:
            info[key] = list(phys_info[key])
        info["physics"] = [float(s) for s in phys_scores]
        return scores, info

    return fn


def set_level_metrics(samples: Sequence[np.ndarray] | Any, prompts: Sequence[str]) -> dict[str, float]:
    """The text–motion evaluator's set metrics of denormalised samples ``[N, F, 263]`` against their prompts.

    Keys ``evaluator/<name>`` (R-precision top-1/2/3, matching score, FID, diversity, ...) as
    :func:`worlds.motion.evaluator.set_metrics` names them, over the finite samples whose prompts are in the
    grammar (``evaluator/n`` of them); ``{}`` when the evaluator or its shipped weights are missing, or no
    sample qualifies (the numbers are then simply not reported).
    """
    try:
        from . import evaluator
    except ImportError:
        return {}
    if not hasattr(evaluator, "set_metrics") or not evaluator.MODEL_DIR.joinpath(evaluator.WEIGHTS_NAME).is_file():
        return {}
    from .grammar import spec_of

    if hasattr(samples, "detach"):
        samples = samples.detach().float().cpu().numpy()
    keep_x, keep_p = [], []
    for x, prompt in zip(samples, prompts):
        x = np.asarray(x, dtype=np.float32)
        try:
            spec_of(prompt)
        except ValueError:
            continue
        if np.isfinite(x).all():
            keep_x.append(x)
            keep_p.append(prompt)
    if not keep_x:
        return {}
    metrics = evaluator.set_metrics(keep_x, keep_p)
    return {f"evaluator/{k}": float(v) for k, v in metrics.items() if isinstance(v, (int, float, np.floating))}


__all__ = ["PHYSICS_KEYS", "set_level_metrics", "with_physics"]
