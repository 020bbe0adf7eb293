"""Evaluate a pipeline or a finished run on ShapesWorld: deterministic samples scored by the judge.

Usage:
  python scripts/evaluate.py --model DIR [--prompts shapes_test] [--out DIR] [options]

  --model    a diffusers pipeline directory, a hub id, or a training run's output (the run directory
             or its final/; a LoRA run is loaded as its base model plus the exported LoRA weights),
             exactly as scripts/sample.py takes it
  --prompts  prompt rows: a built-in name (default shapes_test, the held-out ShapesWorld split) or
             a .txt / .json / .jsonl file; rows with task/objects/relation fields are judged by
             them, others by parsing the prompt; prompts outside the ShapesWorld grammar are
             counted as not applicable and left out of the means
  --out      output directory (default: <DIR>/eval when --model is a local directory, else ./eval):
               eval.json  {"metrics": {...}, "model": ..., "args": {...}, ...}
               grid.png   the first <= 64 images, in prompt order (prompts in the PNG's "captions" chunk)
  --limit N  evaluate only the first N prompt rows (quick checks)
  --per_task N  a task-balanced set of N images per task instead of every prompt (the test split has
             3 single-object and 9 counting prompts but 312 position prompts)

Metrics (ddpo_grpo/evaluation.py): eval/strict and eval/partial over all applicable images, per
task eval/strict/<task>, eval/partial/<task>, eval/num_images/<task>, the unweighted mean over
tasks eval/task_mean/strict and eval/task_mean/partial (GenEval's "overall"), plus eval/num_images
and eval/not_applicable. A per-task table (task | n | strict | partial) is printed at the end.

Sampling is deterministic: noise_level 0 (the flow ODE / DDIM η=0) and the initial noise of image k
of prompt i drawn from a seed derived from (--seed, i, k) only, the same seeds as scripts/sample.py;
so scores do not depend on --batch_size or --limit (up to float rounding of batched arithmetic).

Examples:
  python scripts/evaluate.py --model logs/my_run --limit 40 --num_steps 20
  python scripts/evaluate.py --model stabilityai/stable-diffusion-3.5-medium --resolution 512 --out eval/base
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ddpo_grpo.cli import UsageError, load_model, load_rows, native_resolution  # noqa: E402
from ddpo_grpo.report import eval_table  # noqa: E402

#: images in grid.png, at most
GRID_IMAGES = 64


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Score deterministic samples of a pipeline or a run's output with the ShapesWorld judge.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", required=True, help="pipeline directory, hub id, or a run directory / its final/")
    p.add_argument("--prompts", default="shapes_test", help="built-in prompt rows or a .txt / .json / .jsonl file")
    p.add_argument("--out", default=None, help="output directory (default: <model>/eval for a local directory, else ./eval)")
    p.add_argument("--num_steps", type=int, default=40, help="denoising steps")
    p.add_argument("--guidance_scale", type=float, default=4.5, help="classifier-free guidance weight (<= 1: off)")
    p.add_argument("--images_per_prompt", type=int, default=1, help="images per prompt")
    p.add_argument("--seed", type=int, default=0, help="base seed; image k of prompt i uses a seed derived from (seed, i, k)")
    p.add_argument("--resolution", type=int, default=None,
                   help="image side in pixels (default: the pipeline's native size); the judge resizes to 64")
    p.add_argument("--max_sequence_length", type=int, default=77, help="text tokens for encoders that take it (T5)")
    p.add_argument("--negative_prompt", default="", help="negative prompt for classifier-free guidance")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N prompts")
    p.add_argument("--per_task", type=int, default=0,
                   help="> 0: a task-balanced set of N images per task (each task's prompts cycled, a new "
                        "seed per pass) instead of every prompt × --images_per_prompt")
    p.add_argument("--batch_size", type=int, default=16, help="images per denoiser batch")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    return p


def default_out(model: str) -> Path:
    """`<model>/eval` when `model` is a local directory (a pipeline or a run), else `./eval`."""
    path = Path(os.path.expanduser(model))
    return path / "eval" if path.is_dir() else Path("eval")


def _check_args(args) -> None:
    for name in ("num_steps", "batch_size", "images_per_prompt", "max_sequence_length"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.per_task < 0:
        raise UsageError(f"--per_task must be >= 0 (0 = every prompt), got {args.per_task}")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    if args.resolution is not None and args.resolution < 1:
        raise UsageError(f"--resolution must be a positive number of pixels, got {args.resolution}")


def _json_safe(value):
    """NaN / inf -> None (strict JSON), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _write_json(obj: dict, path: Path) -> None:
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(_json_safe(obj), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run(args) -> dict:
    """Evaluate as `args` say, write eval.json and grid.png, print the table; return the eval.json object."""
    import torch

    from ddpo_grpo.evaluation import evaluate, save_grid
    from ddpo_grpo.policies import build_policy

    _check_args(args)
    rows = load_rows(args.prompts)
    if args.limit is not None:
        rows = rows[: args.limit]
    pipeline = load_model(args.model)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    resolution = args.resolution or native_resolution(pipeline)
    try:
        policy = build_policy(pipeline, resolution=resolution, max_sequence_length=args.max_sequence_length)
    except ValueError as exc:
        raise UsageError(f"--resolution {resolution}: {exc}") from exc
    pipeline.to(device)
    out = Path(args.out) if args.out is not None else default_out(args.model)

    metrics, images, captions = evaluate(
        policy, rows, num_steps=args.num_steps, guidance_scale=args.guidance_scale,
        images_per_prompt=args.images_per_prompt, per_task=args.per_task, seed=args.seed, batch_size=args.batch_size,
        negative_prompt=args.negative_prompt, max_images=GRID_IMAGES,
    )

    out.mkdir(parents=True, exist_ok=True)
    model_path = os.path.abspath(os.path.expanduser(args.model)) if os.path.exists(os.path.expanduser(args.model)) else args.model
    result = {
        "metrics": metrics,
        "model": model_path,
        "pipeline_class": type(pipeline).__name__,
        "num_prompts": len(rows),
        "resolution": resolution,
        "args": {**vars(args), "out": str(out)},
    }
    _write_json(result, out / "eval.json")
    nrow = args.images_per_prompt if 1 < args.images_per_prompt <= 16 else 8
    save_grid(images, captions, out / "grid.png", nrow=nrow)
    print(eval_table(None, metrics))
    print(f"wrote {out / 'eval.json'} and {out / 'grid.png'}", flush=True)
    return result


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        run(args)
    except UsageError as exc:
        parser.error(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
