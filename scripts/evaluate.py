"""Evaluate a pipeline or a finished run: deterministic samples scored by a reward, per group.

Usage:
  python scripts/evaluate.py --model DIR [--prompts shapes_test] [--reward shapes] [--out DIR] [options]
  python scripts/evaluate.py --model worlds/motion/models/mdm --kernel ddim --num_steps 20 --guidance_scale 2.5 \
      --per_group 100                                  # a motion pipeline: motion_test, motion_judge, physics

  --model     a diffusers pipeline directory, a hub id, or a training run's output (the run directory
              or its final/; a LoRA run is loaded as its base model plus the exported LoRA weights),
              exactly as scripts/sample.py takes it
  --prompts   prompt rows: a prompt source name (default shapes_test, ShapesWorld's held-out split; for a
              motion pipeline motion_test, MotionWorld's) or a .txt / .json / .jsonl file
  --reward    the scoring reward, a registered name or path/to/file.py:fn (default shapes, the ShapesWorld
              judge; for a motion pipeline motion_judge, the MotionWorld judge), with --reward_kwargs (a JSON
              object; default {"score": "strict"} for shapes and motion_judge)
  --group_by  the per-sample label of the per-group table: the reward's info[label] or the rows' field
              (default task); "" = no groups
  --out       output directory (default: <DIR>/eval when --model is a local directory, else ./eval):
                eval.json  {"metrics": {...}, "model": ..., "args": {...}, ...}
                grid.png   the first <= 64 samples, in prompt order (prompts in the PNG's "captions" chunk)
  --limit N   evaluate only the first N prompt rows (quick checks)
  --per_group N  a balanced set of N samples per group instead of every prompt (ShapesWorld's test split
              has 3 single-object and 9 counting prompts but 312 position prompts)

Metrics (ddpo_grpo/evaluation.py): the reward's per-sample metrics (the judge's strict and partial)
over all applicable samples (eval/<m>), per group (eval/<m>/<group>, eval/num_samples/<group>), the
unweighted mean over groups (eval/<group_by>_mean/<m>, GenEval's "overall"), eval/num_samples and
eval/not_applicable. The per-group table is printed at the end.

Motion pipelines (decoded samples [frames, 263], e.g. worlds/motion/models/mdm): the physics metrics of
every sample are scored too (worlds/motion/evaluation.py: skate, penetration, max_penetration, accel,
jerk, bone_drift and the motion_physics score as "physics", per group like the judge's), grid.png shows
stick-figure filmstrips, and eval.json's "set_metrics" holds the text–motion evaluator's set-level numbers
(R-precision, matching score, FID, diversity: worlds/motion/evaluator.py) when its weights are installed
({} otherwise). Generic denoiser pipelines take --kernel: "ddim" (deterministic DDIM, what the motion
recipes evaluate with) or "ddpm" (at noise level 0 the posterior-mean chain); "" = the scheduler's kind.

Sampling is deterministic: noise_level 0 (the flow ODE / DDIM η=0) and the initial noise of sample k
of prompt i drawn from a seed derived from (--seed, i, k) only, the same seeds as scripts/sample.py;
so scores do not depend on --batch_size or --limit (up to float rounding of batched arithmetic).

Examples:
  python scripts/evaluate.py --model logs/my_run --limit 40 --num_steps 20
  python scripts/evaluate.py --model logs/my_run --per_group 96 --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from ddpo_grpo.cli import UsageError, check_model_source, load_model, load_rows, native_resolution
from ddpo_grpo.report import eval_table

#: samples in grid.png, at most
GRID_SAMPLES = 64
#: --prompts / --reward when not given: image pipelines (ShapesWorld) and motion pipelines (MotionWorld)
DEFAULTS = {"image": ("shapes_test", "shapes"), "motion": ("motion_test", "motion_judge")}
#: rewards scored {"score": "strict"} unless --reward_kwargs says otherwise
STRICT_BY_DEFAULT = ("shapes", "motion_judge")


def pipeline_kind(pipeline) -> str:
    """Return "motion" for a generic denoiser pipeline whose samples are [frames, 263] features, else "image"."""
    from worlds.motion import FEATURE_DIM

    shape = list(getattr(pipeline.config, "sample_shape", None) or [])
    return "motion" if len(shape) == 2 and shape[-1] == FEATURE_DIM else "image"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Score deterministic samples of a pipeline or a run's output with a reward, per group.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", required=True, help="pipeline directory, hub id, or a run directory / its final/")
    p.add_argument(
        "--prompts",
        default=None,
        help="a prompt source name or a .txt / .json / .jsonl file (default: shapes_test; motion_test "
        "for a motion pipeline)",
    )
    p.add_argument(
        "--reward",
        default=None,
        help="the scoring reward: a registered name or path/to/file.py:fn (default: shapes; motion_judge "
        "for a motion pipeline)",
    )
    p.add_argument(
        "--reward_kwargs",
        default=None,
        help='JSON object of the reward factory\'s keyword arguments (default: {"score": "strict"} for '
        "shapes and motion_judge)",
    )
    p.add_argument("--group_by", default="task", help='per-sample label of the per-group table ("" = none)')
    p.add_argument(
        "--out", default=None, help="output directory (default: <model>/eval for a local directory, else ./eval)"
    )
    p.add_argument("--num_steps", type=int, default=40, help="denoising steps")
    p.add_argument("--guidance_scale", type=float, default=4.5, help="classifier-free guidance weight (<= 1: off)")
    p.add_argument("--per_prompt", type=int, default=1, help="samples per prompt")
    p.add_argument(
        "--seed", type=int, default=0, help="base seed; image k of prompt i uses a seed derived from (seed, i, k)"
    )
    p.add_argument(
        "--resolution",
        type=int,
        default=None,
        help="image side in pixels (default: the pipeline's native size); the judge resizes to 64",
    )
    p.add_argument("--max_sequence_length", type=int, default=77, help="text tokens for encoders that take it (T5)")
    p.add_argument(
        "--num_frames", type=int, default=0, help="video families: frames per video (Wan: 4k + 1; 0 = the default)"
    )
    p.add_argument("--negative_prompt", default="", help="negative prompt for classifier-free guidance")
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N prompts")
    p.add_argument(
        "--per_group",
        type=int,
        default=0,
        help="> 0: a balanced set of N samples per group (each group's prompts cycled, a new "
        "seed per pass) instead of every prompt × --per_prompt",
    )
    p.add_argument("--batch_size", type=int, default=16, help="images per denoiser batch")
    p.add_argument(
        "--kernel",
        default="",
        choices=["", "flow_grpo", "dance", "cps", "ddim", "ddpm"],
        help="the transition kernel (sample.kernel; '' = the family's default: flow_grpo, ddim, or a denoiser "
        "pipeline's scheduler kind)",
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    return p


def _load_reward(args):
    """The scoring reward of --reward / --reward_kwargs (a UsageError naming the flag on failure)."""
    from reward_models import load_reward

    try:
        kwargs = json.loads(args.reward_kwargs) if args.reward_kwargs else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"--reward_kwargs is not valid JSON: {exc}") from exc
    if not isinstance(kwargs, dict):
        raise UsageError(f"--reward_kwargs must be a JSON object, got {type(kwargs).__name__}")
    if args.reward_kwargs is None and args.reward in STRICT_BY_DEFAULT:
        kwargs = {"score": "strict"}
    try:
        return load_reward(args.reward, **kwargs)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--reward {args.reward!r}: {exc}") from exc


def default_out(model: str) -> Path:
    """``<model>/eval`` when ``model`` is a local directory (a pipeline or a run), else ``./eval``."""
    path = Path(os.path.expanduser(model))
    return path / "eval" if path.is_dir() else Path("eval")


def _check_args(args) -> None:
    for name in ("num_steps", "batch_size", "per_prompt", "max_sequence_length"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.per_group < 0:
        raise UsageError(f"--per_group must be >= 0 (0 = every prompt), got {args.per_group}")
    if args.per_group and not args.group_by:
        raise UsageError("--per_group needs --group_by (the row field to balance)")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    if args.resolution is not None and args.resolution < 1:
        raise UsageError(f"--resolution must be a positive number of pixels, got {args.resolution}")
    if args.out is not None and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out!r} is a file; give a directory (created if missing)")
    problem = check_model_source(args.model)
    if problem:
        raise UsageError(f"--model {problem}")


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
    """Evaluate as ``args`` say, write eval.json and grid.png, print the table; return the eval.json object."""
    import torch

    from ddpo_grpo.evaluation import evaluate
    from ddpo_grpo.logging_utils import save_grid
    from ddpo_grpo.policies import build_policy

    _check_args(args)
    given = args.prompts is not None and args.reward is not None
    if given:  # bad explicit inputs fail before the model loads
        reward, rows = _load_reward(args), load_rows(args.prompts)
    pipeline = load_model(args.model)
    kind = pipeline_kind(pipeline)
    args.prompts = args.prompts if args.prompts is not None else DEFAULTS[kind][0]
    args.reward = args.reward if args.reward is not None else DEFAULTS[kind][1]
    if not given:
        reward, rows = _load_reward(args), load_rows(args.prompts)
    if args.limit is not None:
        rows = rows[: args.limit]
    if kind == "motion":
        from worlds.motion.evaluation import with_physics

        reward = with_physics(reward)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    resolution = args.resolution or native_resolution(pipeline)
    try:
        policy = build_policy(
            pipeline,
            resolution=resolution,
            max_sequence_length=args.max_sequence_length,
            num_frames=args.num_frames,
            **({"kernel": args.kernel} if args.kernel else {}),
        )
    except ValueError as exc:
        flag = f"--kernel {args.kernel!r}" if "kernel" in str(exc) else f"--resolution {resolution}"
        flag = f"--num_frames {args.num_frames}" if "num_frames" in str(exc) else flag
        raise UsageError(f"{flag}: {exc}") from exc
    pipeline.to(device)
    out = Path(args.out) if args.out is not None else default_out(args.model)

    metrics, samples, captions = evaluate(
        policy,
        rows,
        reward,
        num_steps=args.num_steps,
        guidance_scale=args.guidance_scale,
        per_prompt=args.per_prompt,
        per_group=args.per_group,
        group_by=args.group_by,
        seed=args.seed,
        batch_size=args.batch_size,
        negative_prompt=args.negative_prompt,
        max_samples=None if kind == "motion" else GRID_SAMPLES,
    )
    set_metrics = {}
    if kind == "motion":
        from worlds.motion.evaluation import set_level_metrics

        set_metrics = set_level_metrics(samples, captions)  # the evaluator's R-precision, FID, ... ({} without it)
        samples, captions = samples[:GRID_SAMPLES], captions[:GRID_SAMPLES]

    out.mkdir(parents=True, exist_ok=True)
    model_path = (
        os.path.abspath(os.path.expanduser(args.model))
        if os.path.exists(os.path.expanduser(args.model))
        else args.model
    )
    result = {
        "metrics": metrics,
        "set_metrics": set_metrics,
        "model": model_path,
        "pipeline_class": type(pipeline).__name__,
        "num_prompts": len(rows),
        "resolution": resolution,
        "args": {**vars(args), "out": str(out)},
    }
    _write_json(result, out / "eval.json")
    nrow = args.per_prompt if 1 < args.per_prompt <= 16 else (4 if kind == "motion" else 8)
    save_grid(policy.preview(samples), captions, str(out / "grid.png"), nrow=nrow)
    print(eval_table(None, metrics, args.group_by))
    if set_metrics:
        print(
            "set-level (text–motion evaluator): "
            + "  ".join(f"{k.split('/', 1)[1]}={v:.3f}" for k, v in set_metrics.items() if k.count("/") == 1)
        )
    print(f"wrote {out / 'eval.json'} and {out / 'grid.png'}", flush=True)
    if metrics["eval/num_samples"] and metrics["eval/not_applicable"] == metrics["eval/num_samples"]:
        raise UsageError(
            f"--reward {args.reward!r} scored none of the {metrics['eval/num_samples']} samples (every score "
            f"NaN: not applicable): give --prompts it applies to, or another --reward"
        )
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
