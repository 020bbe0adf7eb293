"""How far the MotionWorld judge can be trusted: agreement with the generator's labels.

:func:`measure_agreement` judges generated clips, recovered from their features and perturbed
(:data:`PERTURBATIONS`: noise, smoothing), against their own prompt and against a one-edit wrong prompt
(:func:`~worlds.motion.grammar.mismatches`); :func:`measure_every` does it clean over every prompt and all its
wrong prompts. ``python -m worlds.motion judge-agreement [--n 40] [--every K]`` prints both tables (the
README's numbers). ShapesWorld's counterpart is :mod:`worlds.shapes.calibration`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from worlds.tables import agreement_table as format_table

from .grammar import TASKS, enumerate_specs, mismatches
from .judge import _moving_average, check_spec, signals

#: perturbation name -> description (see :func:`perturb`)
PERTURBATIONS: dict[str, str] = {
    "clean": "none (features -> recovered joints)",
    "noise_0.5cm": "Gaussian noise, sigma = 0.5 cm per joint coordinate and frame",
    "noise_1cm": "Gaussian noise, sigma = 1 cm",
    "noise_2cm": "Gaussian noise, sigma = 2 cm",
    "smooth_3": "centred 3-frame moving average over time",
    "smooth_5": "centred 5-frame moving average over time",
    "smooth_5+noise_1cm": "5-frame moving average, then 1 cm noise",
}


def perturb(joints: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    """A perturbed copy of joints ``[T, 22, 3]`` (``kind`` in :data:`PERTURBATIONS`)."""
    if kind == "clean":
        return joints.copy()
    if kind.startswith("noise_"):
        sigma = float(kind[len("noise_") : -2]) / 100.0
        return joints + rng.normal(0.0, sigma, joints.shape)
    if kind.startswith("smooth_"):
        parts = kind.split("+")
        out = _moving_average(joints, int(parts[0][len("smooth_") :]))
        return perturb(out, parts[1], rng) if len(parts) > 1 else out
    raise ValueError(f"unknown perturbation {kind!r}; perturbations: {', '.join(PERTURBATIONS)}")


def measure_agreement(
    n_per_task: int = 40,
    seed: int = 0,
    perturbations: Sequence[str] = tuple(PERTURBATIONS),
    tasks: Sequence[str] = TASKS,
) -> dict[str, dict[str, dict[str, float]]]:
    """Strict agreement of the judge with the generator's labels, per perturbation and task.

    For each task, ``n_per_task`` prompts are drawn uniformly from every prompt of the task (train and
    test) and a clip generated for each (seed drawn too); its features (float32) are recovered to joints,
    perturbed, and judged against (a) its own prompt — ``"pos"`` = fraction with strict 1 — and (b) one
    wrong prompt drawn from :func:`mismatches` — ``"neg"`` = fraction with strict 0. Returns
    ``{perturbation: {task: {"pos", "neg"}}}``.
    """
    from .features import recover_joints
    from .generator import generate

    rng = np.random.default_rng(seed)
    table: dict[str, dict[str, dict[str, float]]] = {p: {} for p in perturbations}
    for task in tasks:
        pool = list(enumerate_specs(task))
        hits = {p: [0, 0] for p in perturbations}
        for _ in range(n_per_task):
            spec = pool[int(rng.integers(len(pool)))]
            motion = generate(spec, int(rng.integers(2**31)))
            joints = recover_joints(motion.features())
            negs = mismatches(spec)
            neg = negs[int(rng.integers(len(negs)))][1]
            for p in perturbations:
                sig = signals(perturb(joints, p, rng))
                hits[p][0] += all(chk.ok for chk in check_spec(sig, spec))
                hits[p][1] += not all(chk.ok for chk in check_spec(sig, neg))
        for p in perturbations:
            table[p][task] = {"pos": hits[p][0] / n_per_task, "neg": hits[p][1] / n_per_task}
    return table


def measure_every(clips_per_prompt: int = 1, seed: int = 0) -> dict[str, dict[str, float]]:
    """Clean agreement over *every* prompt and *all* its wrong prompts.

    ``clips_per_prompt`` clips per prompt (seeds :func:`~worlds.motion.generator.dataset_seed`), judged
    against their prompt and every one of its :func:`mismatches`. Returns ``{task: {"pos", "neg",
    "clips", "wrong_prompts"}}``.
    """
    from .features import recover_joints
    from .generator import dataset_seed, generate

    counts: dict[str, list[int]] = {t: [0, 0, 0, 0] for t in TASKS}
    for i, spec in enumerate(enumerate_specs()):
        negs = mismatches(spec)
        for k in range(clips_per_prompt):
            sig = signals(recover_joints(generate(spec, dataset_seed(seed, i, k)).features()))
            c = counts[spec.task]
            c[0] += all(chk.ok for chk in check_spec(sig, spec))
            c[1] += 1
            c[2] += sum(not all(chk.ok for chk in check_spec(sig, neg)) for _, neg in negs)
            c[3] += len(negs)
    return {
        t: {"pos": c[0] / c[1], "neg": c[2] / c[3], "clips": c[1], "wrong_prompts": c[3]} for t, c in counts.items()
    }


__all__ = ["PERTURBATIONS", "format_table", "measure_agreement", "measure_every", "perturb"]
