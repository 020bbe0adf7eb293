"""What ``scripts/evaluate.py`` does for a language model (``sample_kinds.TEXT_KIND``): its responses sampled and
scored (:func:`sample_and_score_text`), pass@1, pass@k and response length per prompt, their paired differences
against --compare's base, and responses.jsonl.

Defaults: ``evaluation_extras.TEXT`` (the ``verifiable`` reward, grouped by the rows' ``data_source``; no default
prompts: give --prompts), unless a package registers "text" extras. Whatever the first reward, its score is recorded
as the per-sample metric ``score`` (:func:`with_score`: the verifiable reward's own info holds only ``format`` and a
program's test counts).

Numbers (:func:`text_numbers`, eval.json's "text"): a response *passes* when the first reward's score is ≥
--pass_threshold (default 1: a correct answer; every test of a program). Per prompt, of its n scored responses
(--per_prompt) c pass; pass@k is Chen et al.'s unbiased estimator ``1 − C(n − c, k)/C(n, k)`` (derivation:
``ddpo_grpo/pass_at_k.py``) for each k of --pass_at (default 1, the powers of two below n, and n); ``length`` is the
mean response length in tokens (EOS included), ``truncated`` the fraction cut at --max_response_length. The set's
value of each is the mean over prompts (each prompt weighs the same), overall and per group. With --compare, each is
also paired prompt by prompt, model − base (same prompts and seeds), with its 95 % interval.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ddpo_grpo.cli import UsageError
from ddpo_grpo.pass_at_evaluation import parse_ks
from ddpo_grpo.pass_at_k import default_ks, paired_per_prompt, per_prompt, summary
from ddpo_grpo.sample_kinds import TEXT_KIND
from ddpo_grpo.sampling_cli import Sampled
from ddpo_grpo.text_sampling import add_text_flags, check_rows, text_policy
from foundation.atomic_io import atomic_write_text

#: the per-sample metric a response passes by (the first reward's score, :func:`with_score`)
SCORE = "score"


def with_score(reward):
    """``reward`` whose per-sample info also holds its score as :data:`SCORE`."""

    def scored(samples, prompts, metadata):
        scores, info = reward(samples, prompts, metadata)
        return scores, {**(info or {}), SCORE: scores}

    return scored


def add_text_evaluation_flags(p) -> None:
    """The language-model sampling flags (``text_sampling.add_text_flags``); pass@k's are
    ``pass_at_evaluation.add_pass_flags``'."""
    add_text_flags(p)


def check_pass_flags(args) -> list[int]:
    """The k of --pass_at (checked against --per_prompt), and --greedy with one response per prompt."""
    if args.greedy and args.per_prompt > 1:
        raise UsageError("--greedy draws one response per prompt (every draw is the same); drop --per_prompt")
    if not math.isfinite(args.pass_threshold):
        raise UsageError(f"--pass_threshold must be a finite number, got {args.pass_threshold}")
    if args.pass_at is None:
        return default_ks(args.per_prompt)
    return parse_ks(args.pass_at, args.per_prompt)


@dataclass
class TextSampled(Sampled):
    """A language model's evaluation (``Sampled``: the responses as ``samples``) and, per response, its length in
    tokens, whether it ended by itself, and the index of its prompt row."""

    lengths: list[int] = field(default_factory=list)
    finished: list[bool] = field(default_factory=list)
    prompt_of: list[int] = field(default_factory=list)


def sample_and_score_text(pipeline, args, rows: list[dict], rewards: dict, device, max_samples=None) -> TextSampled:
    """``sampling_cli.sample_and_score`` for a language model: every response of ``evaluation.evaluate`` (--per_prompt,
    --per_group, --group_by, --seed, --batch_size) scored by every reward (the first's score recorded per response,
    :func:`with_score`), with its length and prompt index (every response is kept: ``max_samples`` is
    unused). The pass@k flags are checked first."""
    from ddpo_grpo.evaluation import Scorers, eval_items, evaluate
    from reward_models import check_kinds

    check_pass_flags(args)
    policy = text_policy(pipeline, args)
    check_rows(policy, rows, args.prompts)
    pipeline.to(device)
    try:
        check_kinds(rewards, TEXT_KIND, type(policy).__name__)
    except ValueError as exc:
        raise UsageError(f"--reward: {exc}") from exc
    first = next(iter(rewards))
    rewards = {**rewards, first: with_score(rewards[first])}  # its score per response: what passes or fails
    scorers, lengths, finished = Scorers(rewards, args.group_by), [], []

    def record(rollout) -> None:
        lengths.extend(int(n) for n in rollout.response_lengths.tolist())
        finished.extend(bool(f) for f in rollout.finished.tolist())

    _, samples, captions = evaluate(
        policy,
        rows,
        scorers,
        num_steps=1,  # (unused by a language model)
        guidance_scale=1.0,
        per_prompt=args.per_prompt,
        per_group=args.per_group,
        group_by=args.group_by,
        seed=args.seed,
        batch_size=args.batch_size,
        on_batch=record,
    )
    items = eval_items(rows, args.per_prompt, args.per_group, args.group_by)
    return TextSampled(scorers, samples, captions, policy, 0, lengths, finished, [i for i, _ in items])


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
