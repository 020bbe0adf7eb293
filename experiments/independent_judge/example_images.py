"""Before/after example images for docs/reward_hacking.md: the same held-out prompts and noise, base vs tuned,
each image labelled with the world judge's and the detector's strict verdicts.

    python experiments/independent_judge/example_images.py --base worlds/shapes/models/sd \
        --model /tmp/judge_runs/sd_nft_s0 --out docs/images/shapes_before_after.png [--per_group 24 --rows 8]

Samples are scripts/evaluate.py's (ddpo_grpo.evaluation.evaluate: --num_steps 20, CFG 4.5, 8 text tokens, seed 0,
a balanced --per_group per task). Rows are chosen in this order, at most --rows in all, prompt order within each
kind: images both scorers call a gain (0 -> 1 by both), images where the two scorers disagree on the tuned model,
images both call a loss (1 -> 0 by both). Each cell: the 64-px sample enlarged 2x (nearest), under it
``J`` (judge) and ``D`` (detector) strict verdicts. Prints the counts of every kind.
"""

from __future__ import annotations

import argparse

import numpy as np


def _sample(model: str, rows: list[dict], per_group: int):
    import torch

    from ddpo_grpo.cli import load_model, native_resolution
    from ddpo_grpo.evaluation import eval_items, evaluate
    from ddpo_grpo.policies import build_policy

    pipeline = load_model(model)
    policy = build_policy(pipeline, resolution=native_resolution(pipeline), max_sequence_length=8)
    _, samples, _ = evaluate(
        policy,
        rows,
        None,
        num_steps=20,
        guidance_scale=4.5,
        per_group=per_group,
        group_by="task",
        seed=0,
        batch_size=32,
        max_samples=None,
    )
    images = (samples.clamp(0, 1) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    return images, [rows[i] for i, _ in eval_items(rows, 1, per_group, "task")]


def _verdicts(images, items):
    from worlds.shapes.detector import score
    from worlds.shapes.judge import judge

    return np.asarray([[judge(im, r)["strict"], score(im, _constraints(r))["strict"]] for im, r in zip(images, items)])


def _constraints(row):
    from worlds.shapes.grammar import constraints_of

    return constraints_of(row)


def _cell(img: np.ndarray, label: str):
    from PIL import Image, ImageDraw

    big = Image.fromarray(img).resize((128, 128), Image.NEAREST)
    cell = Image.new("RGB", (128, 142), "white")
    cell.paste(big, (0, 0))
    ImageDraw.Draw(cell).text((4, 130), label, fill="black")
    return cell


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--per_group", type=int, default=24)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()

    from PIL import Image, ImageDraw

    from ddpo_grpo.cli import load_rows

    rows = load_rows("shapes_test")
    before, items = _sample(args.base, rows, args.per_group)
    after, _ = _sample(args.model, rows, args.per_group)
    vb, va = _verdicts(before, items), _verdicts(after, items)
    gain = np.nonzero((vb == 0).all(1) & (va == 1).all(1))[0]
    split = np.nonzero(va[:, 0] != va[:, 1])[0]
    loss = np.nonzero((vb == 1).all(1) & (va == 0).all(1))[0]
    print(
        f"{len(items)} prompts: gains by both {len(gain)}, tuned verdicts disagree {len(split)} "
        f"(judge only {int((va[split, 0] == 1).sum())}, detector only {int((va[split, 1] == 1).sum())}), "
        f"losses by both {len(loss)}"
    )
    chosen = (list(gain[: args.rows // 2]) + list(split[: args.rows // 4 or 1]) + list(loss))[: args.rows]
    sheet = Image.new("RGB", (2 * 128 + 330, 142 * len(chosen)), "white")
    draw = ImageDraw.Draw(sheet)
    for r, i in enumerate(chosen):
        sheet.paste(_cell(before[i], f"base  J {vb[i, 0]}  D {vb[i, 1]}"), (0, 142 * r))
        sheet.paste(_cell(after[i], f"tuned J {va[i, 0]}  D {va[i, 1]}"), (128, 142 * r))
        draw.text((266, 142 * r + 60), items[i]["prompt"], fill="black")
    sheet.save(args.out, optimize=True)
    print(f"wrote {args.out} ({len(chosen)} rows)")


if __name__ == "__main__":
    main()
