"""The world judge and the independent detector side by side: ``python -m worlds.shapes agreement [--n 100]``.

Two tables, each reproducible from its seed (the detector's rows of the README's calibration tables):

1. **Ground truth** (:func:`measure_truth`): per mild perturbation of :data:`~.distortions.PERTURBATIONS`,
   ``n`` scenes per task (prompts drawn uniformly from every prompt of the task); per scorer the fraction of
   positives (the scene's own prompt) judged strict 1, of hard negatives (one edit of
   :func:`~.calibration.mismatches`) judged strict 0, and the fraction of images on which the two scorers'
   strict verdicts on the positive prompt agree.
2. **Gray zones** (:func:`measure_gray`): per distortion of :data:`~.distortions.DISTORTIONS` and severity,
   ``n`` scenes with one object of the claimed shape drawn distorted (hard-edged); per scorer the fraction
   rejected (strict 0, the ground truth).

This module imports both scorers; the detector itself (``worlds/shapes/detector/``) imports neither the
judge nor this module.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .calibration import gray_zone_scenes, rates, scenes_with_negatives, severity_table
from .detector.net import load
from .detector.score import score as detector_score
from .distortions import DISTORTIONS, PERTURBATIONS, perturb
from .judge import judge
from .world import TASKS

SCORERS = ("judge", "detector")


def _verdicts(img: np.ndarray, c, model) -> dict[str, int]:
    return {"judge": judge(img, c)["strict"], "detector": detector_score(img, c, model)["strict"]}


def measure_truth(
    n_per_task: int = 100, seed: int = 0, perturbations: Sequence[str] = tuple(PERTURBATIONS)
) -> dict[str, dict[str, float]]:
    """Table 1: ``{perturbation: {"<scorer>_pos", "<scorer>_neg", "agree", "n"}}`` over all tasks."""
    model = load()
    rng = np.random.default_rng(seed)
    tallies = {p: {**{f"{s}_{k}": 0 for s in SCORERS for k in ("pos", "neg")}, "agree": 0} for p in perturbations}
    n = 0
    for _, c, scene, img, neg in scenes_with_negatives(TASKS, n_per_task, rng):
        n += 1
        for p in perturbations:
            im = perturb(img, p, rng, scene=scene)
            pos_v, neg_v = _verdicts(im, c, model), _verdicts(im, neg, model)
            for s in SCORERS:
                tallies[p][f"{s}_pos"] += pos_v[s]
                tallies[p][f"{s}_neg"] += 1 - neg_v[s]
            tallies[p]["agree"] += pos_v["judge"] == pos_v["detector"]
    return {p: {**{k: v / n for k, v in t.items()}, "n": n} for p, t in tallies.items()}


def measure_gray(
    n: int = 100, seed: int = 0, distortions: Sequence[str] = tuple(DISTORTIONS)
) -> dict[str, dict[float, dict[str, float]]]:
    """Table 2: ``{distortion: {severity: {"judge", "detector"}}}``, rejection rates (strict 0)."""
    model = load()
    counts: dict[str, dict[float, dict[str, int]]] = {}
    for kind, level, c, _, img in gray_zone_scenes(n, np.random.default_rng(seed), distortions):
        rejected = counts.setdefault(kind, {}).setdefault(level, dict.fromkeys(SCORERS, 0))
        v = _verdicts(img, c, model)
        for s in SCORERS:
            rejected[s] += 1 - v[s]
    return rates(counts, n)


def format_truth(table: dict[str, dict[str, float]]) -> str:
    lines = [
        "| perturbation | judge: pos / neg | detector: pos / neg | verdicts agree |",
        "|---|---|---|---|",
    ]
    for p, r in table.items():
        lines.append(
            f"| {p} | {r['judge_pos']:.3f} / {r['judge_neg']:.3f} | {r['detector_pos']:.3f} / "
            f"{r['detector_neg']:.3f} | {r['agree']:.3f} |"
        )
    return "\n".join(lines)


def format_gray(table: dict[str, dict[float, dict[str, float]]]) -> str:
    return severity_table(table, "rejected: judge / detector, per severity", "judge", "detector")
