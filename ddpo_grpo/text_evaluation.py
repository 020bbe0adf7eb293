"""What ``scripts/evaluate.py`` adds for a language model (``sample_kinds.TEXT_KIND``): its defaults, pass@1, pass@k
and response length per prompt, their paired differences against --compare's base, and responses.jsonl.

Defaults (:data:`EXTRAS`, the library's evaluation extras of the "text" kind; an installed package registering
"text" under ``ddpo_grpo.evaluation_extras`` replaces them): the ``verifiable`` reward, grouped by the rows'
``data_source``, its score recorded as the per-sample metric ``score`` (:func:`with_score`: the verifiable reward's
own info holds only ``format`` and a program's test counts). No default prompts: give --prompts.

Numbers (:func:`text_numbers`, eval.json's "text"): a response *passes* when the first reward's score is ≥
--pass_threshold (default 1: a correct answer; every test of a program). Per prompt, of its n scored responses
(--per_prompt) c pass; pass@k is Chen et al.'s unbiased estimator ``1 − C(n − c, k)/C(n, k)`` (derivation:
``ddpo_grpo/pass_at_k.py``) for each k of --pass_k (default 1, the powers of two below n, and n); ``length`` is the
mean response length in tokens (EOS included), ``truncated`` the fraction cut at --max_response_length. The set's
value of each is the mean over prompts (each prompt weighs the same), overall and per group. With --compare, each is
also paired prompt by prompt, model − base (same prompts and seeds), with its 95 % interval.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ddpo_grpo.cli import UsageError
from ddpo_grpo.evaluation_extras import EvaluationExtras
from ddpo_grpo.pass_at_k import default_ks, paired_per_prompt, per_prompt, summary
from foundation.atomic_io import atomic_write_text

#: the per-sample metric a response passes by (the first reward's score, :func:`with_score`)
SCORE = "score"


def with_score(reward):
    """``reward`` whose per-sample info also holds its score as :data:`SCORE` (its declared sample kinds kept)."""
    from reward_models.video import KINDS_ATTR

    def scored(samples, prompts, metadata):
        scores, info = reward(samples, prompts, metadata)
        return scores, {**(info or {}), SCORE: scores}

    if hasattr(reward, KINDS_ATTR):
        setattr(scored, KINDS_ATTR, getattr(reward, KINDS_ATTR))
    return scored


#: the library's evaluation extras of the "text" kind (module docstring)
EXTRAS = EvaluationExtras(reward="verifiable", group_by="data_source", per_sample=with_score)


def add_text_evaluation_flags(p) -> None:
    """The language-model sampling flags (``text_sampling.add_text_flags``), --pass_k and --pass_threshold."""
    from ddpo_grpo.text_sampling import add_text_flags

    add_text_flags(p)
    group = p.add_argument_group("language models: pass@k")
    group.add_argument(
        "--pass_k", default=None, help="comma list of k <= --per_prompt (default: 1, the powers of two below it, it)"
    )
    group.add_argument(
        "--pass_threshold", type=float, default=1.0, help="a response passes when the first reward's score is >= it"
    )


def check_pass_flags(args) -> list[int]:
    """The k of --pass_k (checked against --per_prompt), and --greedy with one response per prompt."""
    if args.greedy and args.per_prompt > 1:
        raise UsageError("--greedy draws one response per prompt (every draw is the same); drop --per_prompt")
    if not math.isfinite(args.pass_threshold):
        raise UsageError(f"--pass_threshold must be a finite number, got {args.pass_threshold}")
    if args.pass_k is None:
        return default_ks(args.per_prompt)
    try:
        ks = sorted({int(k) for k in str(args.pass_k).split(",")})
    except ValueError:
        raise UsageError(f"--pass_k {args.pass_k!r}: give a comma list of integers, e.g. 1,4") from None
    if ks[0] < 1 or ks[-1] > args.per_prompt:
        raise UsageError(f"--pass_k {args.pass_k!r}: every k must be in 1..--per_prompt ({args.per_prompt})")
    return ks


def _per_prompt_values(sampled, first: str, threshold: float, ks: list[int]):
    """``({"pass@k": …, "length": …, "truncated": …} one value per prompt, the prompts' group labels, the
    ``pass_at_k.PerPrompt``)``."""
    import numpy as np

    scores = sampled.scorers.values(first)[SCORE]
    passed = [float(s >= threshold) if math.isfinite(s) else math.nan for s in scores]
    per = per_prompt(passed, sampled.prompt_of, ks)
    at: dict[int, list[int]] = {}
    for j, i in enumerate(sampled.prompt_of):
        at.setdefault(i, []).append(j)
    groups = sampled.scorers.scored[first].groups
    values = dict(per.values)
    values["length"] = [float(np.mean([sampled.lengths[j] for j in at[i]])) for i in per.prompts]
    values["truncated"] = [float(np.mean([not sampled.finished[j] for j in at[i]])) for i in per.prompts]
    return values, [groups[at[i][0]] for i in per.prompts], per


def text_numbers(model, base, args, first: str) -> tuple[dict, dict]:
    """``(eval.json's "text", the paired tables)`` (module docstring) of ``model`` (a ``text_sampling.TextSampled``)
    and, with ``base``, the base's numbers and the paired per-prompt differences model − base (``{}`` without)."""
    from ddpo_grpo.scorer_pairs import paired_json

    ks = check_pass_flags(args)
    values, groups, per = _per_prompt_values(model, first, args.pass_threshold, ks)
    out = {
        "ks": ks,
        "pass_threshold": args.pass_threshold,
        "reward": first,
        "summary": summary(values, groups),
        "per_prompt": [
            {"row": i, "n": n, "passed": c, **{m: v[j] for m, v in values.items()}}
            for j, (i, n, c) in enumerate(zip(per.prompts, per.n, per.c))
        ],
    }
    paired = {}
    if base is not None:
        base_values, _, _ = _per_prompt_values(base, first, args.pass_threshold, ks)
        paired = paired_per_prompt(base_values, values, groups)
        by_group = paired_json({"": paired}, args.group_by or "group")[""]
        out["compare"] = {"summary": summary(base_values, groups), "paired": by_group}
    return out, paired


def _table(numbers: dict, metrics: list[str]) -> list[str]:
    lines = [f"  {'group':<18} {'prompts':>7} " + " ".join(f"{m:>9}" for m in metrics)]
    for label, row in numbers.items():
        lines.append(f"  {label:<18} {row[f'prompts/{metrics[0]}']:>7} " + " ".join(f"{row[m]:9.3f}" for m in metrics))
    return lines


def format_text(numbers: dict, paired: dict, args) -> str:
    """The printed form of :func:`text_numbers`' results: the model's (and the base's) table, the paired tables."""
    from ddpo_grpo.paired import format_paired

    metrics = [f"pass@{k}" for k in numbers["ks"]] + ["length", "truncated"]
    head = (
        f"\nlanguage model: {args.per_prompt} response(s) per prompt; a response passes when {numbers['reward']}'s "
        f"score >= {numbers['pass_threshold']:g}; pass@k = 1 − C(n−c, k)/C(n, k), the mean over prompts; length in "
        "tokens"
    )
    lines = [head]
    if "compare" in numbers:
        lines += [f"{args.compare} (base):", *_table(numbers["compare"]["summary"], metrics), f"{args.model}:"]
    lines += _table(numbers["summary"], metrics)
    for metric, table in paired.items():
        scale = (100.0, "points") if metric.startswith("pass@") or metric == "truncated" else (1.0, "tokens")
        lines.append(format_paired(table, f"{metric}, per prompt", *scale, labels=("base", "model")))
    return "\n".join(lines)


def write_responses(sampled, out: Path, first: str, threshold: float) -> Path:
    """``responses.jsonl`` under ``out``: per response, its prompt row, k, text, tokens, score and pass."""
    path = out / "responses.jsonl"
    scores = sampled.scorers.values(first)[SCORE]
    lines, seen = [], {}
    for j, (i, text) in enumerate(zip(sampled.prompt_of, sampled.samples)):
        k, seen[i] = seen.get(i, 0), seen.get(i, 0) + 1
        score = scores[j] if math.isfinite(scores[j]) else None
        entry = {"row": i, "index": k, "prompt": sampled.captions[j], "response": text, "tokens": sampled.lengths[j]}
        entry.update(score=score, passed=None if score is None else score >= threshold)
        lines.append(json.dumps(entry))
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
