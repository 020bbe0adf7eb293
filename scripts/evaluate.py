"""Evaluate a pipeline or a finished run: deterministic samples scored by a reward, per group.

Usage:
  python scripts/evaluate.py --model DIR [--prompts shapes_test] [--reward shapes] [--out DIR] [options]
  python scripts/evaluate.py --model logs/my_run --compare worlds/shapes/models/sd3 \
      --reward shapes,shapes_detector                  # paired: the run against its base, by two scorers
  python scripts/evaluate.py --model worlds/motion/models/mdm --kernel ddim --num_steps 20 --guidance_scale 2.5 \
      --per_group 100                                  # a motion pipeline: motion_test, motion_judge, physics

  --model     a diffusers pipeline directory, a hub id, or a training run's output (the run directory
              or its final/; a LoRA run is loaded as its base model plus the exported LoRA weights),
              exactly as scripts/sample.py takes it
  --prompts   prompt rows: a prompt source name (default shapes_test, ShapesWorld's held-out split; for a
              motion pipeline motion_test, MotionWorld's) or a .txt / .json / .jsonl file
  --reward    the scoring reward(s), a registered name or path/to/file.py:fn; repeat the flag or give a comma
              list to score the same samples with several (default shapes, the ShapesWorld judge; for a
              motion pipeline motion_judge, the MotionWorld judge), with --reward_kwargs (a JSON object; with
              several rewards, an object of name -> kwargs object; default {"score": "strict"} for shapes,
              shapes_detector and motion_judge). The first reward's metrics are eval.json's "metrics"; every
              reward's are under "scorers"
  --compare BASE  also evaluate BASE (a model as --model takes it) on the same prompts and initial noises,
              with the same settings, and print the paired difference model − BASE per group and for the
              mean over groups, with its standard error and 95 % interval (ddpo_grpo/paired.py), for every
              metric of every reward; eval.json gets "compare": {"model", "scorers", "paired"}
              With several rewards, the first is also compared with every other on the same images (paired:
              eval.json's "between_scorers"), and with --compare their per-image gains too
              ("compare"."between_scorers"): two scorers that measure the same gain differ by no more than
              that comparison's interval
  --group_by  the per-sample label of the per-group table: the reward's info[label] or the rows' field
              (default task); "" = no groups
  --out       output directory (default: <DIR>/eval when --model is a local directory, else ./eval):
                eval.json  {"metrics": {...}, "model": ..., "args": {...}, ...}
                grid.png   the first <= 64 samples, in prompt order (prompts in the PNG's "captions" chunk)
  --limit N   evaluate only the first N prompt rows (quick checks; every one of them once unless --per_group)
  --per_group N  a balanced set of N samples per group instead of every prompt (ShapesWorld's test split
              has 3 single-object and 9 counting prompts but 312 position prompts); default
              DEFAULT_PER_GROUP when the rows carry the --group_by field and no --limit is given, else 0
              (every prompt). DEFAULT_PER_GROUP is chosen so that the paired SE of the task mean is
              <= 2 points for a fine-tuned ShapesWorld model against its base (measured: see
              docs/experiments/2026-11-26-independent-judge.md)

Sampling settings (--num_steps, --guidance_scale, --max_sequence_length, --resolution, --kernel,
--negative_prompt, --image_guidance_scale): a flag wins; else, for a training run's output, the run's own
(final/ddpo_grpo_final.json's "sampling", else its newest checkpoint's config: ddpo_grpo/cli.py); else the
defaults of DEFAULT_SAMPLING. The values used, and where each came from, are printed and saved in eval.json
("sampling").

Metrics (ddpo_grpo/evaluation.py): the reward's per-sample metrics (the judge's strict and partial)
over all applicable samples (eval/<m>), per group (eval/<m>/<group>, eval/num_samples/<group>), the
unweighted mean over groups (eval/<group_by>_mean/<m>, GenEval's "overall"), eval/num_samples and
eval/not_applicable. The per-group table is printed at the end.

Motion pipelines (decoded samples [frames, 263], e.g. worlds/motion/models/mdm): the physics metrics of
every sample are scored too (worlds/motion/evaluation.py: skate, penetration, max_penetration, accel,
jerk, bone_drift and the motion_physics score as "physics", per group like the judge's), grid.png shows
stick-figure filmstrips, and eval.json's "set_metrics" holds the text–motion evaluator's set-level numbers
(R-precision, matching score, FID, diversity: worlds/motion/evaluator.py) when its weights are installed
({} otherwise). eval.json's "table" and the printed table are the numbers text-to-motion papers print
(worlds/motion/table.py): R-precision top-1/2/3, FID, MM-Dist, Diversity, MultiModality, the judge's
strict / partial per task and the physics metrics (skate, penetration, floating, jerk, bone-length CV per
bone group, sane bodies), each ± one standard error (set metrics: a bootstrap over prompts, B = 200; the
others over samples) and, with --compare, base | model | paired difference. MultiModality needs several
samples per prompt (--per_group cycles prompts with new seeds, or --per_prompt). Generic denoiser pipelines take --kernel: "ddim" (deterministic DDIM, what the motion
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

from ddpo_grpo.cli import (
    UsageError,
    check_model_source,
    load_model,
    load_rows,
    native_resolution,
    resolve_sampling,
)
from ddpo_grpo.evaluation import Scorers
from ddpo_grpo.paired import paired_tables
from ddpo_grpo.report import eval_table, groups_of

#: samples in grid.png, at most
GRID_SAMPLES = 64
#: --prompts / --reward when not given: image pipelines (ShapesWorld) and motion pipelines (MotionWorld)
DEFAULTS = {"image": ("shapes_test", "shapes"), "motion": ("motion_test", "motion_judge")}
#: rewards scored {"score": "strict"} unless --reward_kwargs says otherwise
STRICT_BY_DEFAULT = ("shapes", "shapes_detector", "motion_judge")
#: sampling settings when neither a flag nor the run's own settings give them (resolution None = native)
DEFAULT_SAMPLING = {
    "num_steps": 40,
    "guidance_scale": 4.5,
    "max_sequence_length": 77,
    "resolution": None,
    "kernel": "",
    "negative_prompt": "",
    "image_guidance_scale": None,
    "num_frames": 0,
    "guidance_scale_2": None,
}
#: --per_group when not given and no --limit: image pipelines (ShapesWorld) and motion pipelines (MotionWorld)
DEFAULT_PER_GROUP = {"image": 128, "motion": 100}


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
        action="append",
        default=None,
        help="the scoring reward(s): a registered name or path/to/file.py:fn; repeat or give a comma list for "
        "several (default: shapes; motion_judge for a motion pipeline)",
    )
    p.add_argument(
        "--reward_kwargs",
        default=None,
        help="JSON object of the reward factory's keyword arguments; with several rewards, {name: {...}} (default: "
        '{"score": "strict"} for shapes, shapes_detector and motion_judge)',
    )
    p.add_argument(
        "--compare",
        default=None,
        metavar="BASE",
        help="also evaluate BASE on the same prompts and noises and print the paired difference (model − BASE)",
    )
    p.add_argument("--group_by", default="task", help='per-sample label of the per-group table ("" = none)')
    p.add_argument(
        "--out", default=None, help="output directory (default: <model>/eval for a local directory, else ./eval)"
    )
    p.add_argument("--num_steps", type=int, default=None, help="denoising steps (default: the run's, else 40)")
    p.add_argument(
        "--guidance_scale",
        type=float,
        default=None,
        help="classifier-free guidance weight, <= 1: off (default: the run's, else 4.5)",
    )
    p.add_argument("--per_prompt", type=int, default=1, help="samples per prompt")
    p.add_argument(
        "--seed", type=int, default=0, help="base seed; image k of prompt i uses a seed derived from (seed, i, k)"
    )
    p.add_argument(
        "--resolution",
        type=int,
        default=None,
        help="image side in pixels (default: the run's, else the pipeline's native size); the judge resizes to 64",
    )
    p.add_argument(
        "--max_sequence_length",
        type=int,
        default=None,
        help="text tokens for encoders that take it, T5 (default: the run's, else 77)",
    )
    p.add_argument(
        "--negative_prompt",
        default=None,
        help="negative prompt for classifier-free guidance (default: the run's, else '')",
    )
    p.add_argument(
        "--image_guidance_scale",
        type=float,
        default=None,
        help="image-conditioned pipelines: the image guidance s_I >= 1 (default: the run's, else the adapter's)",
    )
    p.add_argument(
        "--num_frames",
        type=int,
        default=None,
        help="video families: frames per video (Wan: 4k + 1; default: the run's, else 0 = the family's default)",
    )
    p.add_argument(
        "--guidance_scale_2",
        type=float,
        default=None,
        help="two-expert models (Wan 2.2): the low-noise expert's CFG scale (default: the run's, else --guidance_scale)",
    )
    p.add_argument(
        "--frame_reduction",
        default="mean",
        choices=["mean", "min", "max", "median", "first", "last"],
        help="video families: how an image reward's frame scores make a video's (reward.frame_reduction)",
    )
    p.add_argument("--limit", type=int, default=None, help="evaluate only the first N prompts")
    p.add_argument(
        "--per_group",
        type=int,
        default=None,
        help="> 0: a balanced set of N samples per group (each group's prompts cycled, a new seed per pass); 0: every "
        f"prompt × --per_prompt (default: {DEFAULT_PER_GROUP['image']} for images, {DEFAULT_PER_GROUP['motion']} for "
        "motions; 0 with --limit)",
    )
    p.add_argument("--batch_size", type=int, default=16, help="images per denoiser batch")
    p.add_argument(
        "--kernel",
        default=None,
        choices=["", "flow_grpo", "dance", "cps", "ddim", "ddpm"],
        help="the transition kernel (sample.kernel; '' = the family's default: flow_grpo, ddim, or a denoiser "
        "pipeline's scheduler kind; default: the run's)",
    )
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    return p


def reward_names(args) -> list[str]:
    """The rewards of the (repeatable, comma-separated) --reward flag, in order, without repeats."""
    names = [n.strip() for value in args.reward or [] for n in value.split(",")]
    if any(not n for n in names):
        raise UsageError(f"--reward {','.join(args.reward)!r}: an empty reward name; give name[,name...]")
    return list(dict.fromkeys(names))


def _load_rewards(args, names: list[str]) -> dict:
    """``{name: reward fn}`` of ``names`` with --reward_kwargs (a UsageError naming the flag on failure)."""
    from reward_models import load_reward

    try:
        given = json.loads(args.reward_kwargs) if args.reward_kwargs else None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--reward_kwargs is not valid JSON: {exc}") from exc
    if given is not None and not isinstance(given, dict):
        raise UsageError(f"--reward_kwargs must be a JSON object, got {type(given).__name__}")
    if given is not None and len(names) > 1:
        bad = [k for k, v in given.items() if k not in names or not isinstance(v, dict)]
        if bad:
            raise UsageError(
                f"--reward_kwargs with several rewards is an object of reward name -> kwargs object; {bad[0]!r} is "
                f"not one of --reward {', '.join(names)} with an object value"
            )
    rewards = {}
    for name in names:
        kwargs = given if len(names) == 1 else (given or {}).get(name)
        if kwargs is None:
            kwargs = {"score": "strict"} if name in STRICT_BY_DEFAULT else {}
        try:
            rewards[name] = load_reward(name, **kwargs)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--reward {name!r}: {exc}") from exc
    return rewards


def default_out(model: str) -> Path:
    """``<model>/eval`` when ``model`` is a local directory (a pipeline or a run), else ``./eval``."""
    path = Path(os.path.expanduser(model))
    return path / "eval" if path.is_dir() else Path("eval")


def _check_args(args) -> None:
    for name in ("batch_size", "per_prompt"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.per_group is not None and args.per_group < 0:
        raise UsageError(f"--per_group must be >= 0 (0 = every prompt), got {args.per_group}")
    if args.per_group and not args.group_by:
        raise UsageError("--per_group needs --group_by (the row field to balance)")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    if args.out is not None:
        blocked = next((p for p in [Path(args.out), *Path(args.out).parents] if p.exists()), None)
        if blocked is not None and not blocked.is_dir():
            raise UsageError(f"--out {args.out!r}: {str(blocked)!r} is a file; give a directory (created if missing)")
    for flag, model in (("--model", args.model), ("--compare", args.compare)):
        problem = check_model_source(model) if model is not None else None
        if problem:
            raise UsageError(f"{flag} {problem}")


def _check_sampling(args) -> None:
    """The sampling settings, once resolved from flags, the run and the defaults."""
    for name in ("num_steps", "max_sequence_length"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.resolution is not None and args.resolution < 1:
        raise UsageError(f"--resolution must be a positive number of pixels, got {args.resolution}")
    if not math.isfinite(args.guidance_scale):
        raise UsageError(f"--guidance_scale must be a finite number, got {args.guidance_scale}")


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


def _sample_and_score(pipeline, args, rows, rewards: dict, kind: str, device):
    """Deterministic samples of ``pipeline`` for ``rows`` scored by every reward: ``(Scorers, samples, captions,
    policy, resolution)`` (samples: the first GRID_SAMPLES, all of them for motions)."""
    from ddpo_grpo.evaluation import evaluate
    from ddpo_grpo.policies import build_policy

    resolution = args.resolution or native_resolution(pipeline)
    extra = {"kernel": args.kernel} if args.kernel else {}
    if args.image_guidance_scale is not None:  # (read by the image-conditioned families only)
        extra["image_guidance_scale"] = args.image_guidance_scale
    if args.guidance_scale_2 is not None:  # (read by two-expert families only)
        extra["guidance_scale_2"] = args.guidance_scale_2
    try:
        policy = build_policy(
            pipeline,
            resolution=resolution,
            max_sequence_length=args.max_sequence_length,
            num_frames=args.num_frames,
            **extra,
        )
    except ValueError as exc:
        flag = f"--kernel {args.kernel!r}" if "kernel" in str(exc) else f"--resolution {resolution}"
        flag = f"--num_frames {args.num_frames}" if "num_frames" in str(exc) else flag
        flag = f"--guidance_scale_2 {args.guidance_scale_2}" if "guidance_scale_2" in str(exc) else flag
        raise UsageError(f"{flag}: {exc}") from exc
    pipeline.to(device)
    from reward_models import check_kinds, for_sample_kind

    try:  # a video family's frames scored by image rewards, reduced per video by --frame_reduction
        check_kinds(rewards, policy.sample_kind, type(policy).__name__)
        rewards = {n: for_sample_kind(f, policy.sample_kind, args.frame_reduction) for n, f in rewards.items()}
    except ValueError as exc:
        raise UsageError(f"--reward: {exc}") from exc
    scorers = Scorers(rewards, args.group_by)  # ddpo_grpo.evaluation
    _, samples, captions = evaluate(
        policy,
        rows,
        scorers,
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
    return scorers, samples, captions, policy, resolution


def _paired_json(tables: dict, group_by: str) -> dict:
    from ddpo_grpo.paired import MEAN

    def key(label):
        return "all" if label == "" else (f"{group_by}_mean" if label == MEAN else str(label))

    return {n: {m: {key(g): p.to_dict() for g, p in t.items()} for m, t in by_m.items()} for n, by_m in tables.items()}


def _without(metrics: dict, names) -> dict:
    """``metrics`` (eval/<m>, eval/<m>/<group>, eval/<group_by>_mean/<m>) without the metrics ``names``."""

    def metric(key: str) -> str:
        parts = key.split("/")
        return parts[-1] if len(parts) == 3 and parts[1].endswith("_mean") else parts[1] if len(parts) > 1 else key

    return {k: v for k, v in metrics.items() if metric(k) not in names}


def _between_scorers(scorers, names: list[str], base=None) -> dict:
    """``{other: {metric: paired table}}``: the first scorer against every other on the same images, as paired
    comparisons (``before`` = the other scorer, ``after`` = the first; up/down = images only the first / only
    the other scores higher). With ``base`` (the compared model's Scorers), the same of the per-image *gains*
    model − base: whether the two scorers measure the same gain within its noise."""
    first, groups = names[0], scorers.scored[names[0]].groups
    out = {}
    for other in names[1:]:
        a, b = scorers.values(first), scorers.values(other)
        if base is not None:
            a0, b0 = base.values(first), base.values(other)
            a = {m: [x - y for x, y in zip(a[m], a0[m])] for m in a if m in a0}
            b = {m: [x - y for x, y in zip(b[m], b0[m])] for m in b if m in b0}
        out[other] = paired_tables(b, a, groups)
    return out


def _abspath(model: str) -> str:
    path = os.path.expanduser(model)
    return os.path.abspath(path) if os.path.exists(path) else model


def run(args) -> dict:
    """Evaluate as ``args`` say, write eval.json and grid.png, print the tables; return the eval.json object."""
    import torch

    from ddpo_grpo.image_grids import save_grid
    from ddpo_grpo.paired import format_paired

    _check_args(args)
    names = reward_names(args)
    given = args.prompts is not None and bool(names)
    if given:  # bad explicit inputs fail before the model loads
        rewards, rows = _load_rewards(args, names), load_rows(args.prompts)
    pipeline = load_model(args.model)
    kind = pipeline_kind(pipeline)
    args.prompts = args.prompts if args.prompts is not None else DEFAULTS[kind][0]
    names = names or [DEFAULTS[kind][1]]
    args.reward = ",".join(names)
    if not given:
        rewards, rows = _load_rewards(args, names), load_rows(args.prompts)
    if args.limit is not None:
        rows = rows[: args.limit]
    if args.per_group is None:  # balanced groups by default, when the rows have groups and no --limit asks for a few
        grouped = bool(args.group_by) and any(args.group_by in r for r in rows)
        args.per_group = DEFAULT_PER_GROUP[kind] if grouped and args.limit is None else 0
    if kind == "motion":
        from worlds.motion.evaluation import with_physics

        rewards[names[0]] = with_physics(rewards[names[0]])
    sampling = resolve_sampling(args, args.model, DEFAULT_SAMPLING)
    _check_sampling(args)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    out = Path(args.out) if args.out is not None else default_out(args.model)

    pipeline_class = type(pipeline).__name__
    scorers, samples, captions, policy, resolution = _sample_and_score(pipeline, args, rows, rewards, kind, device)
    del pipeline
    by_reward = scorers.metrics()
    metrics = by_reward[names[0]]
    set_metrics = {}
    all_samples, all_captions = samples, captions  # (motions: every sample, for the set metrics and the table)
    if kind == "motion":
        from worlds.motion.evaluation import set_level_metrics

        set_metrics = set_level_metrics(samples, captions)  # the evaluator's R-precision, FID, ... ({} without it)
        samples, captions = samples[:GRID_SAMPLES], captions[:GRID_SAMPLES]
    compare = None
    if args.compare is not None:
        print(
            f"comparing with {args.compare} on the same prompts and initial noises, with the same settings", flush=True
        )
        base, base_samples, base_captions, base_policy, _ = _sample_and_score(
            load_model(args.compare), args, rows, rewards, kind, device
        )
        tables = {n: paired_tables(base.values(n), scorers.values(n), scorers.scored[n].groups) for n in scorers.scored}
        compare = {
            "model": _abspath(args.compare),
            "scorers": base.metrics(),
            "paired": _paired_json(tables, args.group_by),
        }
    table, physics_keys = None, ()
    if kind == "motion":  # the HumanML3D-style table with standard errors (worlds/motion/table.py)
        from worlds.motion.evaluation import PHYSICS_KEYS as physics_keys
        from worlds.motion.table import motion_table

        first = names[0]
        table = motion_table(
            all_samples,
            all_captions,
            scorers.values(first),
            scorers.scored[first].groups,
            base=None
            if compare is None
            else {"features": base_samples, "prompts": base_captions, "values": base.values(first)},
            seed=args.seed,
        )

    between = _between_scorers(scorers, names) if len(names) > 1 else {}
    between_gains = _between_scorers(scorers, names, base) if len(names) > 1 and compare is not None else {}
    for name, m in by_reward.items():
        if m["eval/num_samples"] and m["eval/not_applicable"] == m["eval/num_samples"]:
            raise UsageError(
                f"--reward {name!r} scored none of the {m['eval/num_samples']} samples (every score NaN: not "
                f"applicable): give --prompts it applies to, or another --reward (nothing was written)"
            )
    if args.group_by and not groups_of(metrics):
        raise UsageError(
            f"--group_by {args.group_by!r}: neither the prompt rows nor the reward's per-sample info carry it; "
            f"name a field the rows have ({', '.join(sorted({k for r in rows for k in r} - {'prompt'}))}) or '' "
            "(nothing was written)"
        )
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "metrics": metrics,
        "scorers": by_reward,
        "set_metrics": set_metrics,
        "model": _abspath(args.model),
        "pipeline_class": pipeline_class,
        "num_prompts": len(rows),
        "resolution": resolution,
        "sampling": sampling,
        "args": {**vars(args), "out": str(out)},
    }
    if between:
        result["between_scorers"] = _paired_json(between, args.group_by)
    if compare is not None:
        result["compare"] = compare
        if between_gains:
            compare["between_scorers"] = _paired_json(between_gains, args.group_by)
    if table is not None:
        result["table"] = table
    _write_json(result, out / "eval.json")
    nrow = args.per_prompt if 1 < args.per_prompt <= 16 else (4 if kind == "motion" else 8)
    save_grid(policy.preview(samples), captions, str(out / "grid.png"), nrow=nrow)
    if compare is not None:
        save_grid(
            base_policy.preview(base_samples[:GRID_SAMPLES]),
            base_captions[:GRID_SAMPLES],
            str(out / "grid_base.png"),
            nrow=nrow,
        )
    for name, reward_metrics in by_reward.items():
        if len(by_reward) > 1 or compare is not None:
            print(f"\n{name}" + (f": {args.compare} → {args.model}" if compare is not None else ""))
        shown = (compare["scorers"][name] if compare else None), reward_metrics
        if name == names[0] and physics_keys:  # (the motion table below shows the physics metrics)
            shown = tuple(None if m is None else _without(m, physics_keys) for m in shown)
        print(eval_table(*shown, args.group_by))
        if compare is not None:
            for metric, paired_table in tables[name].items():
                if name == names[0] and metric in physics_keys:
                    continue  # (the motion table below shows the physics metrics' paired differences)
                print(format_paired(paired_table, f"{name} {metric}"))
    for other, by_metric in between.items():
        for metric, paired_table in by_metric.items():
            print(format_paired(paired_table, f"{metric}: after = {names[0]}, before = {other}, on the model's images"))
            if between_gains:
                gains = between_gains[other][metric]
                print(format_paired(gains, f"{metric} gain over the base: after = {names[0]}'s, before = {other}'s"))
    if set_metrics:
        print(
            "set-level (text–motion evaluator): "
            + "  ".join(f"{k.split('/', 1)[1]}={v:.3f}" for k, v in set_metrics.items() if k.count("/") == 1)
        )
    if table is not None:
        from worlds.motion.table import format_table

        print(
            "\n" + format_table(table, f"HumanML3D-style table ({args.compare + ' → ' if compare else ''}{args.model})")
        )
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
