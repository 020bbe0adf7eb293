"""pass@k of any world's samples in ``scripts/evaluate.py`` (--pass_at): roughly how far RL that reweights a model's
own samples can go.

For every scoring reward, a sample *passes* when the reward's per-sample metric --pass_metric (default: the world's,
``EvaluationExtras.pass_metric``, e.g. ShapesWorld's and MotionWorld's 0/1 ``strict``) is ≥ --pass_threshold (default
1). A prompt's n samples are the evaluation's samples of that prompt row: --per_prompt of them (sample k of prompt i
from the seed of (--seed, i, k), deterministic sampling from different initial noises), or with --per_group the
balanced set's passes over the group's prompts. Per prompt, pass@k is Chen et al.'s unbiased estimator (derivation:
``ddpo_grpo/pass_at_k.py``), for each k of --pass_at; a prompt with fewer than k samples is left out of pass@k.

Numbers (eval.json's "pass_at", by reward): per group (the --group_by label) the mean over its prompts, the pooled mean over
every prompt ("all") and the unweighted mean over the groups ("mean", a task mean: each task weighs the same, as
eval/<group_by>_mean does), each with a 95 % bootstrap interval over prompts (``pass_at_k.bootstrap``). With --compare
the base's numbers too and the paired per-prompt difference model − base (``pass_at_k.paired_per_prompt``).

Reading it: a base's pass@k at the group size GRPO samples is roughly the ceiling of what reweighting its own samples
can reach on those prompts; a recipe "closes x % of the gap" when its pass@1 moves x % of the way from the base's
pass@1 to the base's pass@k (docs/learning.md).
"""

from __future__ import annotations

import math
from collections import Counter

from ddpo_grpo.cli import UsageError
from ddpo_grpo.evaluation import eval_items
from ddpo_grpo.pass_at_k import bootstrap, paired_per_prompt, per_prompt, summary

#: the label of the unweighted mean over groups (a task mean) in the summary
MEAN = "mean"


def add_pass_flags(p) -> None:
    """--pass_at (also --pass_k, the language models' first name for it), --pass_metric, --pass_threshold."""
    group = p.add_argument_group("pass@k")
    group.add_argument(
        "--pass_at",
        "--pass_k",
        dest="pass_at",
        default=None,
        help="comma list of k, e.g. 1,4,8 (samples per prompt ≥ k); images and motions: pass@k only when given; "
        "language models: default 1, the powers of two below --per_prompt, and it",
    )
    group.add_argument(
        "--pass_metric",
        default=None,
        help="the first reward's per-sample metric a sample passes by (default: the world's, e.g. strict; a language "
        "model's: its score)",
    )
    group.add_argument("--pass_threshold", type=float, default=1.0, help="a sample passes when its metric is >= it")


def parse_ks(text: str, most: int) -> list[int]:
    """The sorted k of a --pass_at value, each in 1..``most`` (the samples a prompt can have)."""
    try:
        ks = sorted({int(k) for k in str(text).split(",")})
    except ValueError:
        raise UsageError(f"--pass_at {text!r}: give a comma list of integers, e.g. 1,4,8") from None
    if ks[0] < 1 or ks[-1] > most:
        raise UsageError(f"--pass_at {text!r}: every k must be in 1..{most} (the samples per prompt)")
    return ks


def check_flags(args) -> None:
    """Refuse a non-finite --pass_threshold before anything is sampled."""
    if not math.isfinite(args.pass_threshold):
        raise UsageError(f"--pass_threshold must be a finite number, got {args.pass_threshold}")


def _samples_per_prompt(args, rows) -> list[int]:
    """The prompt row of each evaluated sample, in sampling order (``evaluation.eval_items``)."""
    return [i for i, _ in eval_items(rows, args.per_prompt, args.per_group, args.group_by)]


def _per_prompt(sampled, first: str, metric: str, threshold: float, prompt_of: list[int], ks: list[int]):
    """``(pass@k values per prompt, each prompt's group label, the PerPrompt)`` of one model's samples."""
    values = sampled.scorers.values(first)
    if metric not in values:
        raise UsageError(
            f"--pass_metric {metric!r}: the reward {first!r} reports {', '.join(sorted(values))}; name one of them"
        )
    passed = [float(v >= threshold) if math.isfinite(v) else math.nan for v in values[metric]]
    per = per_prompt(passed, prompt_of, ks)
    first_sample: dict[int, int] = {}
    for j, i in enumerate(prompt_of):
        first_sample.setdefault(i, j)
    groups = sampled.scorers.scored[first].groups
    return per.values, [groups[first_sample[i]] for i in per.prompts], per


def _summary(values: dict, groups: list, seed: int) -> dict:
    """Per group, "all" and :data:`MEAN`: each pass@k's mean over prompts and its bootstrap interval."""
    out = summary(values, groups)
    labelled = [g for g in dict.fromkeys(groups) if g is not None]
    if labelled:
        out[MEAN] = {}
    for name, vals in values.items():
        intervals = bootstrap(vals, groups, seed=seed)
        for label, row in out.items():
            key = "" if label == "all" else label
            if label == MEAN:
                means = [out[str(g)][name] for g in labelled]
                finite = [m for m in means if math.isfinite(m)]
                row[name] = sum(finite) / len(finite) if finite else math.nan
                row[f"prompts/{name}"] = sum(out[str(g)][f"prompts/{name}"] for g in labelled)
            row[f"ci/{name}"] = intervals.get(key)
    return out


def pass_metric(args, extras, scorers, first: str) -> str:
    """--pass_metric, else the world's (``extras.pass_metric``) when the first reward reports it, else that reward's
    only per-sample metric."""
    metrics = sorted(scorers.values(first))
    if args.pass_metric or extras.pass_metric in metrics:
        return args.pass_metric or extras.pass_metric
    if len(metrics) != 1:
        raise UsageError(f"--pass_metric: the reward {first!r} reports {', '.join(metrics)}; name the one to pass by")
    return metrics[0]


def pass_numbers(model, base, args, rows, first: str, extras) -> tuple[dict, dict]:
    """``(eval.json's "pass_at", the paired tables)`` of ``model`` (a ``sampling_cli.Sampled``) and, with ``base``,
    the base's numbers and the paired per-prompt differences model − base (``{}`` without); ``extras``: the world's
    ``EvaluationExtras`` (its pass metric)."""
    from ddpo_grpo.scorer_pairs import paired_json

    metric = pass_metric(args, extras, model.scorers, first)
    prompt_of = _samples_per_prompt(args, rows)
    most = max(Counter(prompt_of).values())
    ks = parse_ks(args.pass_at, most)
    values, groups, per = _per_prompt(model, first, metric, args.pass_threshold, prompt_of, ks)
    out = {
        "ks": ks,
        "reward": first,
        "metric": metric,
        "pass_threshold": args.pass_threshold,
        "summary": _summary(values, groups, args.seed),
        "per_prompt": [
            {"row": i, "n": n, "passed": c, **{m: v[j] for m, v in values.items()}}
            for j, (i, n, c) in enumerate(zip(per.prompts, per.n, per.c))
        ],
    }
    paired = {}
    if base is not None:
        base_values, _, _ = _per_prompt(base, first, metric, args.pass_threshold, prompt_of, ks)
        paired = paired_per_prompt(base_values, values, groups)
        out["compare"] = {
            "summary": _summary(base_values, groups, args.seed),
            "paired": paired_json({"": paired}, args.group_by or "group")[""],
        }
    return out, paired


def every_reward(model, base, args, rows, names: list[str], extras) -> tuple[dict, dict]:
    """:func:`pass_numbers` of each scoring reward: ``({reward: numbers}, {reward: paired tables})``."""
    numbers, paired = {}, {}
    for name in names:
        numbers[name], paired[name] = pass_numbers(model, base, args, rows, name, extras)
    return numbers, paired


def _table(summary_: dict, ks: list[int]) -> list[str]:
    names = [f"pass@{k}" for k in ks]
    lines = [f"  {'group':<18} {'prompts':>7} " + " ".join(f"{n + ' [95 %]':>22}" for n in names)]
    for label, row in summary_.items():
        cells = []
        for n in names:
            ci = row.get(f"ci/{n}")
            cells.append(f"{row[n]:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{row[n]:.3f}")
        lines.append(f"  {label:<18} {row[f'prompts/{names[0]}']:>7} " + " ".join(f"{c:>22}" for c in cells))
    return lines


def format_every(numbers: dict, paired: dict, args) -> str:
    """The printed form of :func:`every_reward`."""
    return "\n".join(format_pass(numbers[name], paired[name], args) for name in numbers)


def format_pass(numbers: dict, paired: dict, args) -> str:
    """The printed form of :func:`pass_numbers`: the model's (and the base's) table, the paired tables."""
    from ddpo_grpo.paired import format_paired

    head = (
        f"\npass@k: a sample passes when {numbers['reward']}'s {numbers['metric']} >= {numbers['pass_threshold']:g}; "
        "pass@k = 1 − C(n−c, k)/C(n, k) per prompt, the mean over prompts; 95 % bootstrap intervals over prompts"
    )
    lines = [head]
    if "compare" in numbers:
        lines += [f"{args.compare} (base):", *_table(numbers["compare"]["summary"], numbers["ks"]), f"{args.model}:"]
    lines += _table(numbers["summary"], numbers["ks"])
    for name, table in paired.items():
        lines.append(format_paired(table, f"{name}, per prompt", 100.0, "points", labels=("base", "model")))
    return "\n".join(lines)
