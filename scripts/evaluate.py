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
  --prompts   prompt rows: a prompt source name or a .txt / .json / .jsonl file (default: the world's, below)
  --reward    the scoring reward(s), a registered name or path/to/file.py:fn, repeated or a comma list (default:
              the world's), with --reward_kwargs (JSON; with several rewards {name: kwargs}; default: the worlds'
              evaluation kwargs, e.g. {"score": "strict"}). The first reward's metrics are eval.json's "metrics"
  --compare BASE  also evaluate BASE on the same prompts, noises and settings, and print the paired difference
              model − BASE per group and group mean with its 95 % interval (ddpo_grpo/paired.py), for every metric
              of every reward (eval.json's "compare"). With several rewards, the first is also compared with every
              other on the same images ("between_scorers"; with --compare their per-image gains too): two scorers
              that measure the same gain differ by no more than that comparison's interval
  --group_by  the per-group table's label: the reward's info[label] or the rows' field ("" = none; default: task)
  --out       output directory (default: <run>/eval for a training run, else ./eval/<model name>; never inside
              a pipeline directory): eval.json, and grid.png, the first <= 64 samples in prompt order
  --limit N   evaluate only the first N prompt rows; --per_group N: a balanced set of N samples per group, --per_prompt
              per prompt (default: the world's when the rows carry --group_by and no --limit is given, else 0)

Sampling settings (--num_steps, --guidance_scale, --max_sequence_length, --resolution, --kernel,
--negative_prompt, --image_guidance_scale): a flag wins; else, for a training run's output, the run's own
(final/sampling.json; an older run: its manifest or newest checkpoint, ddpo_grpo/run_sampling.py); else the model's
recommended settings (its pipeline directory's sampling.json: docs/models.md); else the defaults of
ddpo_grpo/sampling_cli.py's DEFAULT_SAMPLING. The values used, and where each came from, are printed
and saved in eval.json ("sampling"). Sampling is deterministic: noise_level 0 (the flow ODE / DDIM η=0) and the
initial noise of sample k of prompt i drawn from a seed derived from (--seed, i, k) only, the same seeds as
scripts/sample.py; so scores do not depend on --batch_size or --limit (up to float rounding of batched arithmetic).
Generic denoiser pipelines take --kernel "ddim" (deterministic DDIM) or "ddpm" (posterior-mean chain), "" = theirs.

Metrics (ddpo_grpo/evaluation.py): the reward's per-sample metrics (the judge's strict and partial) over all applicable
samples (eval/<m>), per group (eval/<m>/<group>), the unweighted mean over groups (eval/<group_by>_mean/<m>), counts.
--pass_at 1,4,8 with --per_prompt 8 (or --per_group): pass@k per group and group mean with bootstrap intervals over
prompts (eval.json's "pass_at": ddpo_grpo/pass_at_evaluation.py), a base's ceiling for RL on its own samples.

The world's defaults and extras (ddpo_grpo/evaluation_extras.py) are those registered for the pipeline's sample
kind (ddpo_grpo/sample_kinds.py: "image" unless a world's plug-in kind claims the pipeline); this script imports
no world. Images (ShapesWorld, worlds/shapes/extras.py): shapes_test, the strict shapes judge, 128 samples per
task. Motions (decoded samples [frames, 263], e.g. worlds/motion/models/mdm; worlds/motion/extras.py):
motion_test, the strict motion_judge, 100 samples per task, the physics metrics of every sample beside the judge's,
stick-figure filmstrips in grid.png, the text–motion evaluator's set-level numbers (eval.json's "set_metrics", {}
without its weights) and the HumanML3D-style table with standard errors (eval.json's "table", printed; with
--compare base | model | paired difference).

Language models (a causal-LM directory or a run's output): rows {prompt, ground_truth, data_source}, --reward default
verifiable, --per_prompt n responses each (ddpo_grpo/text_sampling.py); pass@k always, mean length in tokens, paired
with --compare (eval.json's "text": ddpo_grpo/text_evaluation.py); responses.jsonl in place of grid.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from ddpo_grpo import pass_at_evaluation as pass_eval
from ddpo_grpo import text_evaluation as lm_eval
from ddpo_grpo.cli import UsageError, check_model_source, load_model, load_rows
from ddpo_grpo.evaluation_extras import EvaluationExtras, extras_for
from ddpo_grpo.report import eval_table, groups_of
from ddpo_grpo.reward_flags import load_rewards, reward_names
from ddpo_grpo.run_sampling import default_out
from ddpo_grpo.sample_kinds import kind_of_pipeline
from ddpo_grpo.sampling_cli import (
    Sampled,
    add_sampling_flags,
    check_out,
    check_sampling,
    device_of,
    resolve_and_check,
    run_command,
    sample_and_score,
)
from ddpo_grpo.scorer_pairs import between_scorers, format_between, model_against_base, paired_json, without_metrics
from ddpo_grpo.script_args import ScriptParser, script_parser
from ddpo_grpo.text_sampling import is_text, resolve_text
from foundation.atomic_io import atomic_write_text

#: samples in grid.png, at most
GRID_SAMPLES = 64


def build_parser() -> ScriptParser:
    p = script_parser(__file__, "Score deterministic samples of a pipeline or a run's output with a reward, per group")
    p.add_argument("--model", required=True, help="pipeline directory, hub id, or a run directory / its final/")
    p.add_argument(
        "--prompts",
        default=None,
        help="a prompt source name or a .txt / .json / .jsonl file (default: the world's for the pipeline's kind)",
    )
    p.add_argument(
        "--reward",
        action="append",
        default=None,
        help="the scoring reward(s): a registered name or path/to/file.py:fn; repeat or give a comma list for "
        "several (default: the world's for the pipeline's kind)",
    )
    p.add_argument(
        "--reward_kwargs",
        default=None,
        help="JSON object of the reward factory's keyword arguments; with several rewards, {name: {...}} (default: "
        "the kwargs the worlds give their rewards for evaluation)",
    )
    p.add_argument(
        "--compare",
        default=None,
        metavar="BASE",
        help="also evaluate BASE on the same prompts and noises and print the paired difference (model − BASE)",
    )
    p.add_argument(
        "--group_by", default=None, help='per-sample label of the per-group table ("" = none; default: the world\'s)'
    )
    p.add_argument(
        "--out",
        default=None,
        help="output directory (default: <run>/eval for a training run, else ./eval/<model name>)",
    )
    add_sampling_flags(p, batch_size=16)
    p.add_argument("--per_prompt", type=int, default=1, help="samples per prompt")
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
        help="> 0: N samples per group, --per_prompt of each prompt (its prompts in order, cycled with new seeds); 0: "
        "every prompt × --per_prompt (default: the world's for the pipeline's kind; 0 with --limit)",
    )
    lm_eval.add_text_evaluation_flags(p)
    pass_eval.add_pass_flags(p)
    return p


def _check_args(args) -> None:
    check_sampling(args)
    pass_eval.check_flags(args)
    if args.per_prompt < 1:
        raise UsageError(f"--per_prompt must be >= 1, got {args.per_prompt}")
    if args.per_group is not None and args.per_group < 0:
        raise UsageError(f"--per_group must be >= 0 (0 = every prompt), got {args.per_group}")
    if args.per_group and args.group_by == "":
        raise UsageError("--per_group needs --group_by (the row field to balance)")
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be >= 1, got {args.limit}")
    check_out(args.out)
    for flag, model in (("--model", args.model), ("--compare", args.compare)):
        problem = check_model_source(model) if model is not None else None
        if problem:
            raise UsageError(f"{flag} {problem}")


def _json_safe(value):
    """NaN / inf -> None (strict JSON), recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _inputs(args) -> tuple[Any, dict, list[dict], EvaluationExtras]:
    """``(pipeline, rewards, rows, extras)``: the flags checked, explicit prompts and rewards loaded before the model
    (bad ones fail first), the rest from the world's defaults for the pipeline's sample kind; the flags left None
    filled in (except the sampling settings: ``resolve_and_check``)."""
    _check_args(args)
    names = reward_names(args.reward)
    given = args.prompts is not None and bool(names)
    if given:
        rewards, rows = load_rewards(names, args.reward_kwargs), load_rows(args.prompts)
    pipeline = load_model(args.model)
    kind = kind_of_pipeline(pipeline)
    extras = extras_for(kind)
    for flag, value in (("--prompts", args.prompts or extras.prompts), ("--reward", names or extras.reward)):
        if not value:
            raise UsageError(
                f"{flag}: no installed package gives a default for {kind!r} pipelines (entry points "
                f"ddpo_grpo.evaluation_extras; reinstall after pulling new ones: pip install -e .); give {flag}"
            )
    args.prompts = args.prompts if args.prompts is not None else extras.prompts
    names = names or [extras.reward]
    args.reward = ",".join(names)
    args.group_by = extras.group_by if args.group_by is None else args.group_by
    if args.per_group and not args.group_by:
        raise UsageError("--per_group needs --group_by (the row field to balance)")
    if not given:
        rewards, rows = load_rewards(names, args.reward_kwargs), load_rows(args.prompts)
    if args.limit is not None:
        rows = rows[: args.limit]
    if args.per_group is None:  # balanced groups by default, when the rows have groups and no --limit asks for a few
        grouped = bool(args.group_by) and any(args.group_by in r for r in rows)
        args.per_group = extras.per_group if grouped and args.limit is None else 0
    if extras.per_sample is not None:  # the world's extra per-sample metrics beside the first reward's
        rewards[names[0]] = extras.per_sample(rewards[names[0]])
    return pipeline, rewards, rows, extras


def max_samples(extras: EvaluationExtras) -> int | None:
    """The samples an evaluation keeps: the grid's, or every one when the world's set metrics or table need them."""
    return None if extras.keeps_all_samples else GRID_SAMPLES


def _check_scored(scorers, args, rows) -> None:
    """Refuse (before anything is written) a reward that scored nothing, and a --group_by nothing carries."""
    by_reward = scorers.metrics()
    for name, m in by_reward.items():
        if m["eval/num_samples"] and m["eval/not_applicable"] == m["eval/num_samples"]:
            raise UsageError(
                f"--reward {name!r} scored none of the {m['eval/num_samples']} samples (every score NaN: not "
                f"applicable): give --prompts it applies to, or another --reward (nothing was written)"
            )
    if args.group_by and not groups_of(next(iter(by_reward.values()))):
        raise UsageError(
            f"--group_by {args.group_by!r}: neither the prompt rows nor the reward's per-sample info carry it; "
            f"name a field the rows have ({', '.join(sorted({k for r in rows for k in r} - {'prompt'}))}) or '' "
            "(nothing was written)"
        )


def _abspath(model: str) -> str:
    path = os.path.expanduser(model)
    return os.path.abspath(path) if os.path.exists(path) else model


class Evaluation:
    """Everything one run of the script found: the model's samples and scores, the base's with --compare, the
    paired tables and the world's extras' numbers."""

    def __init__(self, args: argparse.Namespace, extras: EvaluationExtras, model: Sampled):
        self.args, self.extras, self.model = args, extras, model
        self.names = list(model.scorers.scored)  # the rewards, the first one's metrics being eval.json's "metrics"
        self.base: Sampled | None = None
        self.paired = {}  # reward -> metric -> paired table (model against base)
        self.between = {}  # other scorer -> metric -> paired table (the first against it)
        self.between_gains = {}  # the same of the per-image gains over the base
        self.set_metrics, self.table = {}, None
        self.text, self.text_paired = None, {}  # a language model's pass@k and lengths (text_evaluation.py)
        self.passes, self.passes_paired = None, {}  # any other kind's pass@k with --pass_at (pass_at_evaluation.py)

    def pair(self) -> None:
        """The paired tables: the model against the base (with --compare), the first scorer against the others."""
        model, base = self.model.scorers, None if self.base is None else self.base.scorers
        if base is not None:
            self.paired = model_against_base(base, model)
        if len(self.names) > 1:
            self.between = between_scorers(model, self.names)
            self.between_gains = between_scorers(model, self.names, base) if base is not None else {}

    def world_numbers(self) -> None:
        """The world's set-level metrics and results table of every sample (and the base's, with --compare)."""
        first, model, base = self.names[0], self.model, self.base
        self.set_metrics, self.table = self.extras.numbers(
            model.samples,
            model.captions,
            model.scorers.values(first),
            model.scorers.scored[first].groups,
            None
            if base is None
            else {"features": base.samples, "prompts": base.captions, "values": base.scorers.values(first)},
            self.args.seed,
        )


def _result(ev: Evaluation, pipeline_class: str, rows, sampling: dict, out: Path) -> dict:
    """The eval.json object."""
    args, by_reward = ev.args, ev.model.scorers.metrics()
    result = {
        "metrics": by_reward[ev.names[0]],
        "scorers": by_reward,
        "set_metrics": ev.set_metrics,
        "model": _abspath(args.model),
        "pipeline_class": pipeline_class,
        "num_prompts": len(rows),
        "resolution": ev.model.resolution,
        "sampling": sampling,
        "args": {**vars(args), "out": str(out)},
    }
    if ev.between:
        result["between_scorers"] = paired_json(ev.between, args.group_by)
    if ev.base is not None:
        compare = {
            "model": _abspath(args.compare),
            "scorers": ev.base.scorers.metrics(),
            "paired": paired_json(ev.paired, args.group_by),
        }
        if ev.between_gains:
            compare["between_scorers"] = paired_json(ev.between_gains, args.group_by)
        result["compare"] = compare
    if ev.table is not None:
        result["table"] = ev.table
    if ev.text is not None:
        result["text"] = ev.text
    if ev.passes is not None:
        result["pass_at"] = ev.passes
    return result


def _write(ev: Evaluation, result: dict, out: Path) -> None:
    """eval.json, grid.png and, with --compare, grid_base.png (a language model: responses.jsonl)."""
    from ddpo_grpo.figures import scored_grid

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "eval.json", json.dumps(_json_safe(result), indent=2, allow_nan=False) + "\n")
    if ev.text is not None:
        lm_eval.write_responses(ev.model, out, ev.names[0], ev.args.pass_threshold)
        return
    per_prompt = ev.args.per_prompt
    nrow = per_prompt if 1 < per_prompt <= 16 else ev.extras.grid_columns
    for sampled, name in ((ev.model, "grid.png"), (ev.base, "grid_base.png")):
        if sampled is not None:
            images = sampled.policy.preview(sampled.samples[:GRID_SAMPLES])
            scored_grid(images, sampled.captions[:GRID_SAMPLES], sampled.scorers, out / name, ncol=nrow)


def _print_report(ev: Evaluation, result: dict) -> None:
    """The per-group table of every reward, the paired differences, the world's numbers and table."""
    from ddpo_grpo.paired import format_paired

    args, first, compare = ev.args, ev.names[0], result.get("compare")
    hidden = ev.extras.table_keys if ev.extras.table is not None else ()  # (shown by the world's table instead)
    by_reward = result["scorers"]
    for name, reward_metrics in by_reward.items():
        if len(by_reward) > 1 or compare is not None:
            print(f"\n{name}" + (f": {args.compare} → {args.model}" if compare is not None else ""))
        shown = (compare["scorers"][name] if compare else None), reward_metrics
        if name == first and hidden:
            shown = tuple(None if m is None else without_metrics(m, hidden) for m in shown)
        print(eval_table(*shown, args.group_by))
        for metric, paired_table in ev.paired.get(name, {}).items():
            if not (name == first and metric in hidden):
                print(format_paired(paired_table, f"{name} {metric}"))
    for other, by_metric in ev.between.items():
        for metric, paired_table in by_metric.items():
            print(format_between(paired_table, metric, first, other))
            if ev.between_gains:
                gains = ev.between_gains[other][metric]
                print(format_between(gains, metric, first, other, gains=True))
    title = f"{args.compare + ' → ' if compare else ''}{args.model}"
    if ev.set_metrics or ev.table is not None:
        print(ev.extras.report(ev.set_metrics, ev.table, title))
    if ev.text is not None:
        print(lm_eval.format_text(ev.text, ev.text_paired, args))
    if ev.passes is not None:
        print(pass_eval.format_every(ev.passes, ev.passes_paired, args))


def run(args) -> dict:
    """Evaluate as ``args`` say, write eval.json and grid.png, print the tables; return the eval.json object."""
    pipeline, rewards, rows, extras = _inputs(args)
    text = is_text(pipeline)
    sampling = resolve_text(args) if text else resolve_and_check(args)
    sample = lm_eval.sample_and_score_text if text else sample_and_score
    device = device_of(args)
    out = Path(args.out) if args.out is not None else default_out(args.model)
    pipeline_class = type(pipeline).__name__
    ev = Evaluation(args, extras, sample(pipeline, args, rows, rewards, device, max_samples(extras)))
    del pipeline
    _check_scored(ev.model.scorers, args, rows)
    if args.compare is not None:
        print(
            f"comparing with {args.compare} on the same prompts and initial noises, with the same settings", flush=True
        )
        ev.base = sample(load_model(args.compare), args, rows, rewards, device, max_samples(extras))
    ev.pair()
    ev.world_numbers()
    ev.text, ev.text_paired = lm_eval.text_numbers(ev.model, ev.base, args, ev.names[0]) if text else (None, {})
    if not text and args.pass_at is not None:
        ev.passes, ev.passes_paired = pass_eval.every_reward(ev.model, ev.base, args, rows, ev.names, extras)
    result = _result(ev, pipeline_class, rows, sampling, out)
    _write(ev, result, out)
    _print_report(ev, result)
    print(f"wrote {out / 'eval.json'} and {out / ('responses.jsonl' if text else 'grid.png')}", flush=True)
    return result


def main(argv=None) -> int:
    return run_command(build_parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
