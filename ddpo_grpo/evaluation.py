"""Deterministic evaluation: fixed seeds, noise-free sampling, any reward, per-group tables.

    evaluate(policy, rows, reward, ...)         -> (metrics, samples, captions)
    score(samples, rows, reward, group_by)      -> metrics            (the scoring alone, for any samples)
    summarize(values, groups, applicable)       -> metrics            (from per-sample values)
    eval_items(rows, per_prompt, per_group, group_by)  which (prompt index, sample index) pairs are sampled
    image_seed(seed, i, k)                      the initial-noise seed of sample k of prompt i

Sampling is the policy's own sampler (``rollout.sample_rollout``) with noise_level 0: the flow ODE
(Euler) for flow models, DDIM with η = 0 for SD. The only randomness is the initial noise, and
sample k of prompt i starts from the noise of seed ``image_seed(seed, i, k)``, so a score does not
depend on the batch size or on which other prompts are evaluated, and ``scripts/sample.py --seed s``
draws the very same samples.

Which samples: every prompt × per_prompt, or (per_group = N > 0) a balanced set of N samples per
value of the rows' ``group_by`` field (e.g. ShapesWorld's "task") — each group's prompts in file
order, cycled, the r-th pass using sample index r. ShapesWorld's test split has 3 single-object and
9 counting prompts against 312 position prompts; N = 48 gives every task the same weight and
precision for 192 images instead of 402.

Scoring is any reward of the contract (``reward_models.contract``): `reward(samples, prompts, metadata)
-> (scores, info)`. The evaluated metrics are the reward's per-sample numeric info entries (e.g. the
ShapesWorld judge's ``strict`` and ``partial``), or its score as ``score`` when it reports none. A sample's
group is its reward's per-sample ``info[group_by]`` label when there is one (e.g. the judge's ``task``),
else its row's ``group_by`` field. A NaN score means "not applicable": the sample is left out of every
mean and counted in ``eval/not_applicable``.

Metrics (means over the applicable samples; NaN when there are none), for each metric m:
    eval/<m>                       all samples (groups weighted by their share of the samples)
    eval/<group_by>_mean/<m>       the unweighted mean over groups: GenEval's "overall" convention, the
                                   headline number when the eval set is unbalanced (e.g. eval/task_mean/strict)
    eval/<m>/<group>               per group
    eval/num_samples/<group>       samples scored per group
    eval/num_samples               samples drawn (applicable or not)
    eval/not_applicable            samples the reward could not score (a count)
Groups appear in the order of their first sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ddpo_grpo.seeding import derive_seed

PREFIX = "eval"


def image_seed(seed: int, prompt_index: int, k: int) -> int:
    """Initial-noise seed of sample k of prompt ``prompt_index``: independent of batching."""
    return derive_seed(seed, 0, prompt_index, k)


def eval_items(
    rows: Sequence[dict], per_prompt: int = 1, per_group: int = 0, group_by: str = ""
) -> list[tuple[int, int]]:
    """The (prompt index, sample index) pairs an evaluation samples, in sampling order.

    per_group = 0: every row, per_prompt samples each. per_group = N > 0: N pairs per value of the rows'
    ``group_by`` field (rows without one form a group of their own), per_prompt consecutive pairs per row: the
    group's rows in file order, cycled, pass r over them using sample indices r·per_prompt … r·per_prompt +
    per_prompt − 1, so no pair repeats (with per_prompt 1: one sample per row per pass; with per_prompt K: N/K
    rows of K samples each, what pass@k needs, ``pass_at_evaluation.py``).
    """
    if per_group < 0 or per_prompt < 1:
        raise ValueError(f"eval_items: per_group must be >= 0 and per_prompt >= 1, got {per_group} and {per_prompt}")
    if not per_group:
        return [(i, k) for i in range(len(rows)) for k in range(per_prompt)]
    by_group: dict = {}
    for i, row in enumerate(rows):
        by_group.setdefault(row.get(group_by) if group_by else None, []).append(i)
    rows_needed = -(-per_group // per_prompt)  # ceil
    return [
        pair
        for idx in by_group.values()
        for pair in [
            (idx[p % len(idx)], (p // len(idx)) * per_prompt + k) for p in range(rows_needed) for k in range(per_prompt)
        ][:per_group]
    ]


def summarize(
    values: dict[str, Sequence[float]], groups: Sequence[Any], applicable: Sequence[bool], group_by: str = ""
) -> dict:
    """The metrics of the module docstring from per-sample ``values`` (metric -> one value per sample),
    ``groups`` (one label per sample, None = no group) and ``applicable`` (False = left out)."""
    keep = [i for i, ok in enumerate(applicable) if ok]
    metrics: dict = {}
    for name, vals in values.items():
        vals = np.asarray(vals, dtype=np.float64)
        metrics[f"{PREFIX}/{name}"] = float(vals[keep].mean()) if keep else math.nan
    order = list(dict.fromkeys(groups[i] for i in keep if groups[i] is not None))
    for group in order:
        members = [i for i in keep if groups[i] == group]
        for name, vals in values.items():
            metrics[f"{PREFIX}/{name}/{group}"] = float(np.asarray(vals, dtype=np.float64)[members].mean())
        metrics[f"{PREFIX}/num_samples/{group}"] = len(members)
    if group_by:
        for name in values:
            per_group = [metrics[f"{PREFIX}/{name}/{g}"] for g in order]
            metrics[f"{PREFIX}/{group_by}_mean/{name}"] = float(np.mean(per_group)) if per_group else math.nan
    metrics[f"{PREFIX}/num_samples"] = len(applicable)
    metrics[f"{PREFIX}/not_applicable"] = len(applicable) - len(keep)
    return metrics


@dataclass
class Scored:
    """Per-sample results of a reward on an evaluation: metric values, group labels, applicability."""

    values: dict[str, list[float]]
    groups: list[Any]
    applicable: list[bool]

    def extend(self, other: Scored) -> None:
        if self.values and set(other.values) != set(self.values):
            raise ValueError(
                f"the reward's per-sample metrics changed between batches: {sorted(self.values)} "
                f"then {sorted(other.values)}"
            )
        for name, vals in other.values.items():
            self.values.setdefault(name, []).extend(vals)
        self.groups.extend(other.groups)
        self.applicable.extend(other.applicable)


def score_batch(samples: Any, rows: Sequence[dict], reward: Callable, group_by: str = "") -> Scored:
    """One batch through ``reward``: per-sample metrics (its numeric per-sample info entries, else its score
    as "score"), group labels (info[group_by], else each row's field) and applicability (finite score)."""
    from ddpo_grpo.prompts import split_rows
    from reward_models import coerce_scores, per_sample_entries

    if len(samples) != len(rows):
        raise ValueError(f"evaluation: {len(samples)} samples for {len(rows)} rows; pass one row per sample")
    prompts, metadata = split_rows(rows)
    scores, info = reward(samples, prompts, metadata)
    scores = coerce_scores("eval.reward", scores, len(rows))
    entries = per_sample_entries(info or {}, len(rows))
    values = {k: [float(x) for x in v] for k, v in entries.items() if k != group_by and _numeric(v)}
    if not values:
        values = {"score": scores.astype(np.float64).tolist()}
    if group_by and group_by in entries:
        groups = [g if g not in ("", None) else None for g in entries[group_by]]
    else:
        groups = [r.get(group_by) if group_by else None for r in rows]
    return Scored(values, groups, [bool(np.isfinite(s)) for s in scores])


class Scorers:
    """Every reward on every evaluated batch: each reward's per-sample results (``evaluation.score_batch``), and
    the first reward's output handed back to the evaluation loop (its metrics are the evaluation's own)."""

    def __init__(self, rewards: dict, group_by: str):
        self.rewards, self.group_by = rewards, group_by
        self.scored = {name: Scored({}, [], []) for name in rewards}

    def __call__(self, samples, prompts, metadata):
        rows = [{"prompt": p, **(m or {})} for p, m in zip(prompts, metadata)]
        first = None
        for name, fn in self.rewards.items():
            out = fn(samples, prompts, metadata)
            first = out if first is None else first
            self.scored[name].extend(score_batch(samples, rows, lambda *_, out=out: out, self.group_by))
        return first

    def metrics(self) -> dict:
        """``{reward: eval/* metrics}`` (``evaluation.summarize``)."""
        return {n: summarize(s.values, s.groups, s.applicable, self.group_by) for n, s in self.scored.items()}

    def values(self, name: str) -> dict:
        """``{metric: per-sample values}`` of reward ``name``, NaN where it was not applicable."""
        s = self.scored[name]
        return {m: [v if ok else math.nan for v, ok in zip(vals, s.applicable)] for m, vals in s.values.items()}


def _numeric(values: list) -> bool:
    return all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in values)


def score(samples: Any, rows: Sequence[dict], reward: Callable, group_by: str = "") -> dict:
    """Score ``samples`` (one per row) with ``reward`` and return the metrics; see ``score_batch``."""
    scored = score_batch(samples, rows, reward, group_by)
    return summarize(scored.values, scored.groups, scored.applicable, group_by)


def evaluate(
    policy,
    rows: Sequence[dict],
    reward: Callable | None,
    *,
    num_steps: int,
    guidance_scale: float,
    per_prompt: int = 1,
    per_group: int = 0,
    group_by: str = "",
    seed: int = 0,
    batch_size: int = 16,
    negative_prompt: str = "",
    autocast=None,
    model=None,
    max_samples: int | None = None,
    on_batch: Callable | None = None,
):
    """Sample the items of ``eval_items(rows, per_prompt, per_group, group_by)`` deterministically and score them.

    policy: a ``Policy`` adapter; rows: dataset rows with a "prompt" key; reward: a reward fn of the
    contract (None: sample only, the metrics are {}); model: the denoiser to call (default ``policy.denoiser``; pass a wrapped one, e.g. with EMA
    weights applied); autocast: a context-manager factory for mixed precision (None: full precision).
    max_samples: keep only the first that many samples in the returned tensor (all are scored), to
    bound host memory on large evaluations; None keeps them all. on_batch: called with each batch's rollout (a
    ``rollout.Rollout``, or a language model's ``token_rollout.TokenRollout``) in order, e.g. to read the responses'
    lengths in tokens (``ddpo_grpo/text_sampling.py``).

    Returns (metrics, samples, captions): samples as the policy decodes them (images: float
    [N, 3, H, W] in [0, 1]; a language model's: the response strings, drawn at the rollout's temperature from fixed
    seeds, so "deterministic" here means reproducible) on the CPU in the order of the items, captions their prompts.
    """
    import torch

    from ddpo_grpo import rollout as rollout_lib

    for name, value in (("num_steps", num_steps), ("per_prompt", per_prompt), ("batch_size", batch_size)):
        if value < 1:
            raise ValueError(f"evaluate: {name} must be >= 1, got {value}")
    model = policy.denoiser if model is None else model
    items = eval_items(rows, per_prompt, per_group, group_by)
    keep = len(items) if max_samples is None else max(0, int(max_samples))
    scored, kept, captions = Scored({}, [], []), [], []
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(items), batch_size):
                batch = items[start : start + batch_size]
                batch_rows = [rows[i] for i, _ in batch]
                seeds = [image_seed(seed, i, k) for i, k in batch]
                if getattr(policy, "sample_kind", "") == "text":  # a language model's responses, at its temperature
                    from ddpo_grpo.token_rollout import sample_tokens

                    rollout = sample_tokens(policy, model, batch_rows, seeds=seeds, autocast=autocast)
                    samples = rollout.samples
                else:
                    rollout = rollout_lib.sample_rollout(
                        policy,
                        model,
                        batch_rows,
                        seeds=seeds,
                        num_steps=num_steps,
                        guidance_scale=guidance_scale,
                        noise_level=0.0,
                        negative_prompt=negative_prompt,
                        autocast=autocast,
                    )
                    samples = rollout.samples.detach().float().cpu()  # [b, ...]
                if on_batch is not None:
                    on_batch(rollout)
                if reward is not None:
                    scored.extend(score_batch(samples, batch_rows, reward, group_by))
                if start < keep:
                    kept.append(samples[: keep - start])
                    captions.extend(r["prompt"] for r in batch_rows[: keep - start])
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    if kept and isinstance(kept[0], list):  # responses (text)
        samples = [text for part in kept for text in part]
    else:
        samples = torch.cat(kept) if kept else torch.zeros(0)
    metrics = summarize(scored.values, scored.groups, scored.applicable, group_by) if reward is not None else {}
    return metrics, samples, captions


__all__ = [
    "Scorers",
    "derive_seed",
    "eval_items",
    "evaluate",
    "image_seed",
    "score",
    "summarize",
]
