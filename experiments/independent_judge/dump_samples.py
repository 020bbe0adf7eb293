"""Dump a model's deterministic held-out samples (uint8) and their rows to an .npz, for judge studies.

    python experiments/independent_judge/dump_samples.py --model worlds/shapes/models/sd3 --out /tmp/sd3.npz \
        [--num_steps 20 --max_sequence_length 8 --per_group 48 --seed 0]

The samples are exactly those of scripts/evaluate.py with the same flags (ddpo_grpo.evaluation.evaluate).

Measures nothing itself: it feeds the judge studies of docs/experiments/2026-11-26-independent-judge.md §1.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", default="shapes_test")
    ap.add_argument("--num_steps", type=int, default=20)
    ap.add_argument("--guidance_scale", type=float, default=4.5)
    ap.add_argument("--max_sequence_length", type=int, default=8)
    ap.add_argument("--per_group", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from ddpo_grpo.cli import load_model, load_rows, native_resolution
    from ddpo_grpo.evaluation import eval_items, evaluate
    from ddpo_grpo.policies import build_policy

    rows = load_rows(args.prompts)
    pipeline = load_model(args.model)
    policy = build_policy(
        pipeline, resolution=native_resolution(pipeline), max_sequence_length=args.max_sequence_length
    )
    _, samples, _ = evaluate(
        policy,
        rows,
        None,
        num_steps=args.num_steps,
        guidance_scale=args.guidance_scale,
        per_group=args.per_group,
        group_by="task",
        seed=args.seed,
        batch_size=32,
    )
    images = (samples.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    items = eval_items(rows, 1, args.per_group, "task")
    np.savez_compressed(
        args.out, images=images, rows=np.asarray([json.dumps(rows[i]) for i, _ in items]), args=json.dumps(vars(args))
    )
    print(f"wrote {len(images)} samples to {args.out}")


if __name__ == "__main__":
    main()
