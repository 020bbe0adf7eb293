"""How different are motions of one prompt? Average pairwise joint distance, models against generated clips.

For ``--prompts`` held-out (test-split) prompts drawn with seed 0, ``--k`` motions each: a model's from
deterministic DDIM (η = 0, 20 steps, CFG ``--guidance``) with noise seed = the prompt's index, the world's
generator's from seeds 1000..1000+k. Per prompt: the mean over pairs of the mean over frames and joints of the
Euclidean joint distance (m), of the recovered joints ("world": with the root's path) and of the pose with the
root's xz path removed ("pose"). Printed: mean ± SE over prompts, and the model / real ratio.

    OMP_NUM_THREADS=1 python experiments/motion_spread.py worlds/motion/models/mdm /tmp/other_mdm

Result: docs/experiments/2026-11-26-motion-base.md (within-prompt variety) and worlds/motion/README.md.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np
import torch

from ddpo_grpo.policies import load_pipeline
from worlds.motion.features import recover_joints
from worlds.motion.generator import generate
from worlds.motion.grammar import test_rows


def spread(joints: list[np.ndarray]) -> tuple[float, float]:
    """(world, pose) mean pairwise joint distance of motions [T, 22, 3] of one prompt (m)."""
    pose = [j - j[:, :1] * np.array([1.0, 0.0, 1.0]) for j in joints]
    world = [np.linalg.norm(a - b, axis=-1).mean() for a, b in itertools.combinations(joints, 2)]
    rel = [np.linalg.norm(a - b, axis=-1).mean() for a, b in itertools.combinations(pose, 2)]
    return float(np.mean(world)), float(np.mean(rel))


def _summary(name: str, values: np.ndarray, real: np.ndarray | None = None) -> str:
    m, se = values.mean(0), values.std(0, ddof=1) / np.sqrt(len(values))
    text = f"{name}: world {m[0]:.3f} ± {se[0]:.3f} m, pose {m[1]:.3f} ± {se[1]:.3f} m"
    if real is not None:
        r = real.mean(0)
        text += f"  (× real: {m[0] / r[0]:.2f}, {m[1] / r[1]:.2f})"
    return text


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="pipeline directories")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--guidance", type=float, default=2.5)
    args = ap.parse_args(argv)
    rows = test_rows()
    pick = [rows[i]["prompt"] for i in np.random.default_rng(0).choice(len(rows), args.prompts, replace=False)]
    real = np.array(
        [
            spread([recover_joints(generate(p, seed=1000 + k, frames=97).features()) for k in range(args.k)])
            for p in pick
        ]
    )
    print(_summary(f"generated clips ({args.prompts} prompts × {args.k})", real))
    for model in args.models:
        pipe = load_pipeline(model)
        out = []
        for i, p in enumerate(pick):
            x = pipe(
                [p] * args.k,
                num_inference_steps=20,
                guidance_scale=args.guidance,
                generator=torch.Generator().manual_seed(i),
            )
            out.append(spread([recover_joints(s.double().numpy()) for s in x.samples]))
        print(_summary(model, np.array(out), real))


if __name__ == "__main__":
    main()
