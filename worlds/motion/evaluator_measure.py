"""How well the MotionWorld evaluator measures: set metrics of real, perturbed and mismatched clips.

:func:`measure` (the README's evaluator table) and :func:`format_measurement`; the command is
``python -m worlds.motion measure-evaluator``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .evaluator_model import MotionEvaluator, load_evaluator
from .evaluator_text import segment_prompts
from .generator import dataset_seed, generate
from .grammar import format_prompt, spec_of
from .set_metrics import REFERENCE_SEED, matched_frames, reference_features, set_metrics

#: master seed of the "generated" real clips of :func:`measure` (the reference set uses REFERENCE_SEED)
MEASURE_SEED = 30_000
#: conditions of :func:`measure`
CONDITIONS: dict[str, str] = {
    "real": "real clips of the prompts, other seeds than the reference (the ceiling)",
    "noise_1cm": "real clips, Gaussian noise sigma = 1 cm per joint coordinate and frame",
    "noise_3cm": "real clips, Gaussian noise sigma = 3 cm",
    "frozen": "the clip's first pose held for its length",
    "mismatch_close": "a real clip of a one-edit wrong prompt (grammar.mismatches), labelled with the prompt",
    "mismatch_random": "a real clip of another prompt of the set, labelled with the prompt",
}


def _rows(split: str) -> list[dict]:
    from .grammar import load_split

    return load_split(split)


def measure(
    split: str = "test",
    clips: int = 4,
    seed: int = 0,
    evaluator: MotionEvaluator | None = None,
    conditions: Sequence[str] = tuple(CONDITIONS),
    frames: int | None = None,
) -> dict[str, Any]:
    """The README's numbers: set metrics per condition, and the reward's separation of close prompts.

    ``clips`` clips per prompt of ``split`` (``generate(row, dataset_seed(MEASURE_SEED + seed, i, k),
    frames)``; ``frames`` = joint frames of every clip, ``None`` = the generator's own lengths), perturbed or
    swapped per :data:`CONDITIONS`, scored by :func:`set_metrics` against the reference clips of
    :data:`REFERENCE_SEED` (as long as the clips). ``separation``: for every real clip and every one-edit wrong prompt
    of its prompt (:func:`worlds.motion.grammar.mismatches`), the fraction of (clip, wrong prompt) pairs
    whose reward is below the own prompt's, per edit kind, for the whole-clip and the segment-dense
    reward (which differ on "then" prompts only), and the mean cosines.
    """
    from .features import features_from_joints
    from .grammar import mismatches

    ev = evaluator if evaluator is not None else load_evaluator()
    rows = _rows(split)
    rng = np.random.default_rng([seed, 7])
    prompts, specs, motions = [], [], []
    for i, row in enumerate(rows):
        for k in range(clips):
            spec = spec_of(row)
            prompts.append(format_prompt(spec))
            specs.append(spec)
            motions.append(generate(spec, dataset_seed(MEASURE_SEED + seed, i, k), frames))
    reference = reference_features(prompts, REFERENCE_SEED, [matched_frames(m.frames - 1) for m in motions])
    n = len(prompts)
    out: dict[str, Any] = {"split": split, "n": n, "frames": frames, "conditions": {}}
    for cond in conditions:
        if cond == "real":
            feats = [m.features() for m in motions]
        elif cond.startswith("noise_"):
            sigma = float(cond[len("noise_") : -2]) / 100.0
            feats = [
                features_from_joints(m.joints + rng.normal(0.0, sigma, m.joints.shape)).astype(np.float32)
                for m in motions
            ]
        elif cond == "frozen":
            feats = [features_from_joints(np.repeat(m.joints[:1], m.frames, 0)).astype(np.float32) for m in motions]
        elif cond == "mismatch_close":
            feats = []
            for spec, m in zip(specs, motions):
                wrong = mismatches(spec)
                feats.append(generate(wrong[int(rng.integers(len(wrong)))][1], m.seed, frames).features())
        elif cond == "mismatch_random":
            shift = rng.permutation(n)
            feats = []
            for j in range(n):
                other = next(int(x) for x in np.roll(shift, -j) if prompts[int(x)] != prompts[j])
                feats.append(motions[other].features())
        else:
            raise ValueError(f"unknown condition {cond!r}; conditions: {', '.join(CONDITIONS)}")
        out["conditions"][cond] = set_metrics(feats, prompts, reference=reference, seed=seed, evaluator=ev)
    # reward separation on the real clips
    whole = ev.embed_motions([m.features() for m in motions])
    halves = {}
    for j, m in enumerate(motions):
        x = m.features()
        h = len(x) // 2
        halves[j] = ev.embed_motions([x[:h], x[h:]])

    def reward(j: int, spec, dense: bool) -> float:
        seg = segment_prompts(spec) if dense else None
        if seg is None:
            return float(whole[j] @ ev.embed_texts([format_prompt(spec)])[0])
        t = ev.embed_texts(list(seg))
        return float((halves[j] * t).sum(-1).mean())

    sep: dict[str, dict[str, list[float]]] = {}
    for j, spec in enumerate(specs):
        own = {d: reward(j, spec, d) for d in (False, True)}
        for kind, wrong in mismatches(spec):
            for d in (False, True):
                key = ("dense/" if d else "") + kind
                rec = sep.setdefault(key, {"win": [], "own": [], "wrong": []})
                w = reward(j, wrong, d)
                rec["win"].append(float(own[d] > w))
                rec["own"].append(own[d])
                rec["wrong"].append(w)
    out["separation"] = {
        k: {
            "pairs": len(v["win"]),
            "accuracy": float(np.mean(v["win"])),
            "own": float(np.mean(v["own"])),
            "wrong": float(np.mean(v["wrong"])),
        }
        for k, v in sorted(sep.items(), key=lambda kv: (kv[0].startswith("dense/"), kv[0]))
    }
    for d in ("", "dense/"):
        wins = [w for k, v in sep.items() if k.startswith(d) and (d or "/" not in k) for w in v["win"]]
        out["separation"][d + "all"] = {"pairs": len(wins), "accuracy": float(np.mean(wins))}
    return out


def format_measurement(res: dict[str, Any]) -> str:
    """Markdown tables of a :func:`measure` result."""
    keys = ("r_precision_top1", "r_precision_top3", "matching_score", "cosine", "fid", "diversity")
    length = "the generator's own lengths" if res.get("frames") is None else f"{res['frames']} joint frames"
    lines = [
        f"{res['split']} split, {res['n']} clips ({length}); reference diversity "
        f"{next(iter(res['conditions'].values()))['reference_diversity']:.3f}",
        "",
        "| condition | R@1 | R@3 | matching | cosine | FID | diversity |",
        "|---|---|---|---|---|---|---|",
    ]
    for cond, m in res["conditions"].items():
        lines.append(f"| {cond} | " + " | ".join(f"{m[k]:.3f}" for k in keys) + " |")
    lines += ["", "| wrong prompt (edit) | pairs | own > wrong | mean cosine own / wrong |", "|---|---|---|---|"]
    for kind, s in res["separation"].items():
        extra = f"{s['own']:.3f} / {s['wrong']:.3f}" if "own" in s else ""
        lines.append(f"| {kind} | {s['pairs']} | {s['accuracy']:.4f} | {extra} |")
    return "\n".join(lines)
