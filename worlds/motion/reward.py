"""MotionWorld rewards: the judge (``motion_judge``) and the physics score (``motion_physics``).

Both follow the reward contract (:mod:`reward_models.contract`): ``fn(samples, prompts, metadata) ->
(scores, info)`` where ``samples`` are **denormalised** HumanML3D features ``(B, frames, 263)`` (torch
tensor or numpy array, or a list of ``[frames_i, 263]`` arrays); joints are recovered with
:func:`~worlds.motion.features.recover_joints`. A metadata row may carry ``"length"`` (the number of valid
feature frames of a padded sample); the sample is then cut to it.

``reward.fns = {"motion_judge": 1.0}``, ``reward.kwargs = {"motion_judge": {"score": "partial"}}``:

* the spec comes from the metadata row when it has ``actions`` (the rows of
  ``data/motion_{train,test}.jsonl``), else from parsing the prompt; a prompt outside the grammar scores
  ``NaN`` ("not applicable"), counted in ``info["motion_judge/not_applicable"]`` (fraction of the batch);
* a sample with non-finite values or fewer than 8 frames scores 0 (counted in ``motion_judge/invalid``);
* ``score``: ``"strict"``, ``"partial"`` or ``"soft"`` (graded near misses; :func:`worlds.motion.judge.judge`);
* ``info`` per sample (lists of length B): ``task`` (label, "" when not applicable), ``strict``, ``partial``,
  ``soft`` (NaN when not applicable); batch means ``motion_judge/<score>`` and per task
  ``motion_judge/<score>/<task>`` for each of the three.

``reward.fns = {"motion_physics": 1.0}`` (prompt-free, dense): ``exp(−λ_skate · skate − λ_jerk · jerk −
λ_pen · max_penetration − λ_float · floating)`` (:mod:`worlds.motion.physics`; a negative weight is refused
in one line naming it); ``info`` per sample: every metric of :data:`worlds.motion.physics.METRICS` (skate,
penetration, max_penetration, floating, accel, jerk, bone_drift, bone_cv_max, bone_cv_<group>, sane; NaN
for an invalid sample, which scores 0), and their batch means ``motion_physics/<metric>``.

``reward.fns = {"motion_matching": 1.0}`` (``kwargs``: ``{"dense": True}`` for the segment-dense variant):
the cosine of the prompt's and the sample's embeddings under the shipped text–motion evaluator
(:mod:`worlds.motion.evaluator`, the semantic reward MDM-style fine-tuning uses); off-grammar prompt ->
NaN, invalid sample -> -1; ``info`` per sample: ``task``, ``cosine`` (and ``cosine_first`` /
``cosine_second`` when dense). The evaluator is loaded (torch) when the reward is built, not on import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reward_models import register

from .features import FEATURE_DIM
from .physics import LAMBDA_FLOATING, LAMBDA_JERK, LAMBDA_PENETRATION, LAMBDA_SKATE, METRICS

SCORES = ("strict", "partial", "soft")
#: fewest feature frames a sample needs
MIN_FRAMES = 8


def _as_list(samples: Any, batch: int, name: str) -> list[np.ndarray]:
    """``samples`` as ``batch`` float64 arrays ``[frames_i, 263]``."""
    if isinstance(samples, (list, tuple)):
        items = list(samples)
    else:
        if hasattr(samples, "detach"):
            samples = samples.detach().float().cpu().numpy()
        arr = np.asarray(samples)
        if arr.ndim != 3 or arr.shape[-1] != FEATURE_DIM:
            raise ValueError(
                f"reward {name!r}: samples must be denormalised HumanML3D features of shape (B, frames, "
                f"{FEATURE_DIM}), got shape {tuple(arr.shape)}"
            )
        items = list(arr)
    out = []
    for x in items:
        if hasattr(x, "detach"):
            x = x.detach().float().cpu().numpy()
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[-1] != FEATURE_DIM:
            raise ValueError(f"reward {name!r}: each sample must be [frames, {FEATURE_DIM}], got {tuple(x.shape)}")
        out.append(x)
    if len(out) != batch:
        raise ValueError(f"reward {name!r}: {len(out)} samples for {batch} prompts; pass one prompt per sample")
    return out


def _crop(x: np.ndarray, row: Any) -> np.ndarray:
    if isinstance(row, dict) and row.get("length") is not None:
        n = int(row["length"])
        if 1 <= n < len(x):
            return x[:n]
    return x


def _valid(x: np.ndarray) -> bool:
    return len(x) >= MIN_FRAMES and bool(np.all(np.isfinite(x)))


@register("motion_judge")
def motion_judge(score: str = "strict"):
    """Reward = the MotionWorld judge's score of each sample.

    ``score="strict"`` (0/1: every check holds), ``"partial"`` (the fraction of the prompt's checks
    that hold) or ``"soft"`` (partial credit for near misses too, a denser training signal); see
    :mod:`worlds.motion.judge`.
    """
    if score not in SCORES:
        raise ValueError(f"reward 'motion_judge': score must be one of {SCORES}, got {score!r}")
    from .features import recover_joints
    from .grammar import spec_of
    from .judge import judge

    def fn(samples: Any, prompts: list[str], metadata: list[dict]):
        batch = len(prompts)
        feats = _as_list(samples, batch, "motion_judge")
        out = {k: np.full(batch, np.nan, dtype=np.float32) for k in SCORES}
        tasks = [""] * batch
        invalid = 0
        for i in range(batch):
            row = metadata[i] if metadata is not None and i < len(metadata) else None
            try:
                spec = spec_of(row) if isinstance(row, dict) and "actions" in row else spec_of(prompts[i])
            except ValueError:
                continue  # not a MotionWorld prompt: NaN
            tasks[i] = spec.task
            x = _crop(feats[i], row)
            if not _valid(x):
                invalid += 1
                for k in SCORES:
                    out[k][i] = 0.0
                continue
            res = judge(recover_joints(x), spec)
            for k in SCORES:
                out[k][i] = res[k]
        applicable = ~np.isnan(out["strict"])
        info: dict[str, Any] = {
            "task": tasks,
            **{k: out[k].tolist() for k in SCORES},
            "motion_judge/not_applicable": float((~applicable).mean()) if batch else 0.0,
            "motion_judge/invalid": float(invalid / batch) if batch else 0.0,
        }
        if applicable.any():
            for k in SCORES:
                info[f"motion_judge/{k}"] = float(out[k][applicable].mean())
            for task in sorted({t for t in tasks if t}):
                sel = np.array([t == task for t in tasks]) & applicable
                for k in SCORES:
                    info[f"motion_judge/{k}/{task}"] = float(out[k][sel].mean())
        return out[score], info

    return fn


@register("motion_physics")
def motion_physics(
    lambda_skate: float = LAMBDA_SKATE,
    lambda_jerk: float = LAMBDA_JERK,
    lambda_penetration: float = LAMBDA_PENETRATION,
    lambda_floating: float = LAMBDA_FLOATING,
):
    """Reward = ``exp(−λ_skate·skate − λ_jerk·jerk − λ_pen·max_penetration − λ_float·floating)`` per sample.

    A dense score of each motion's recovered joints (:mod:`worlds.motion.physics`; prompts are not read):
    skate in m/s, jerk in m²/s⁶, the worst foot depth below the floor and the lowest foot's height above
    the contact band in m; each weight is per unit of its metric (``1 / λ`` costs a factor ``e``) and
    must be >= 0 (0 turns the term off; the defaults keep the penetration and floating terms off).
    """
    weights = {
        "lambda_skate": lambda_skate,
        "lambda_jerk": lambda_jerk,
        "lambda_penetration": lambda_penetration,
        "lambda_floating": lambda_floating,
    }
    for name, value in weights.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise ValueError(f"reward 'motion_physics': {name} must be a finite number >= 0, got {value!r}")
        if value < 0:
            raise ValueError(
                f"reward 'motion_physics': {name} = {value!r} is negative, which would reward the flaw it measures; "
                f"give a weight >= 0 (0 turns the term off) in reward.kwargs['motion_physics']['{name}']"
            )
    from .features import recover_joints
    from .physics import physics_metrics, physics_score

    def fn(samples: Any, prompts: list[str], metadata: list[dict]):
        batch = len(prompts)
        feats = _as_list(samples, batch, "motion_physics")
        scores = np.zeros(batch, dtype=np.float32)
        per = {k: [float("nan")] * batch for k in METRICS}
        for i in range(batch):
            row = metadata[i] if metadata is not None and i < len(metadata) else None
            x = _crop(feats[i], row)
            if not _valid(x):
                continue  # invalid sample: score 0, metrics NaN
            m = physics_metrics(recover_joints(x))
            scores[i] = physics_score(m, **weights)
            for k in METRICS:
                per[k][i] = m[k]
        info: dict[str, Any] = dict(per)
        for k in METRICS:
            vals = np.array(per[k], dtype=np.float64)
            if np.isfinite(vals).any():
                info[f"motion_physics/{k}"] = float(np.nanmean(vals))
        return scores, info

    return fn


#: score of a non-finite or too-short sample under ``motion_matching`` (the lowest cosine)
MATCHING_INVALID = -1.0


@register("motion_matching")
def motion_matching(dense: bool = False, model: str | None = None, device: str = "cpu"):
    """Reward = cosine of the text and motion embeddings of the MotionWorld evaluator (TMR-style).

    :mod:`worlds.motion.evaluator`; ``model`` = an evaluator folder (default: the shipped
    ``models/evaluator``). ``dense=True`` scores an "A then B" prompt segment by segment: the first
    ``n // 2`` frames against "a person A", the rest against "a person B", averaged (other prompts keep the
    whole-clip cosine). A prompt outside the grammar scores NaN (``motion_matching/not_applicable``); a
    non-finite sample or one shorter than 8 frames (or a half that short) scores -1
    (``motion_matching/invalid``). ``info`` per sample: ``task``, ``cosine`` (whole clip), and with
    ``dense`` ``cosine_first`` / ``cosine_second`` (NaN unless "then"); batch means
    ``motion_matching/cosine[/<task>]`` (and ``motion_matching/dense`` with ``dense``).
    """
    if not isinstance(dense, bool):
        raise ValueError(f"reward 'motion_matching': dense must be True or False, got {dense!r}")
    from .evaluator import load_evaluator, segment_prompts
    from .grammar import format_prompt, spec_of

    evaluator = load_evaluator(model, device)

    def fn(samples: Any, prompts: list[str], metadata: list[dict]):
        batch = len(prompts)
        feats = _as_list(samples, batch, "motion_matching")
        scores = np.full(batch, np.nan, dtype=np.float32)
        cosine = np.full(batch, np.nan, dtype=np.float32)
        halves = np.full((batch, 2), np.nan, dtype=np.float32)
        tasks = [""] * batch
        jobs: list[tuple[int, int, np.ndarray, str]] = []  # (sample, part: 0 whole / 1 first / 2 second, x, text)
        invalid = 0
        for i in range(batch):
            row = metadata[i] if metadata is not None and i < len(metadata) else None
            try:
                spec = spec_of(row) if isinstance(row, dict) and "actions" in row else spec_of(prompts[i])
            except ValueError:
                continue  # not a MotionWorld prompt: NaN
            tasks[i] = spec.task
            x = _crop(feats[i], row)
            segments = segment_prompts(spec) if dense else None
            h = len(x) // 2
            if not _valid(x) or (segments is not None and h < MIN_FRAMES):
                invalid += 1
                scores[i] = MATCHING_INVALID
                continue
            jobs.append((i, 0, x, format_prompt(spec)))
            if segments is not None:
                jobs += [(i, 1, x[:h], segments[0]), (i, 2, x[h:], segments[1])]
        if jobs:
            m = evaluator.embed_motions([x.astype(np.float32) for _, _, x, _ in jobs])
            t = evaluator.embed_texts([text for _, _, _, text in jobs])
            cos = (m * t).sum(-1)
            for (i, part, _, _), c in zip(jobs, cos):
                if part == 0:
                    cosine[i] = c
                else:
                    halves[i, part - 1] = c
            for i, part, _, _ in jobs:
                if part == 0:
                    scores[i] = halves[i].mean() if dense and np.isfinite(halves[i]).all() else cosine[i]
        applicable = np.array([bool(t) for t in tasks])
        info: dict[str, Any] = {
            "task": tasks,
            "cosine": cosine.tolist(),
            "motion_matching/not_applicable": float((~applicable).mean()) if batch else 0.0,
            "motion_matching/invalid": float(invalid / batch) if batch else 0.0,
        }
        if dense:
            info["cosine_first"], info["cosine_second"] = halves[:, 0].tolist(), halves[:, 1].tolist()
        if np.isfinite(cosine).any():
            info["motion_matching/cosine"] = float(np.nanmean(cosine))
            for task in sorted({t for t in tasks if t}):
                vals = cosine[np.array([t == task for t in tasks])]
                if np.isfinite(vals).any():
                    info[f"motion_matching/cosine/{task}"] = float(np.nanmean(vals))
            if dense:
                info["motion_matching/dense"] = float(np.nanmean(scores[np.isfinite(cosine)]))
        return scores, info

    return fn


__all__ = ["MATCHING_INVALID", "MIN_FRAMES", "SCORES", "motion_judge", "motion_matching", "motion_physics"]
