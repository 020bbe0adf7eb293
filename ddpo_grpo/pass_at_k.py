"""pass@k of any model's samples: the unbiased estimator of Chen et al. (2021), per prompt and over a set.

    pass_at_k(n, c, k)                          -> float      one prompt: n samples, c of them passed
    per_prompt(values, prompt_of, ks)           -> PerPrompt  pass@k of every prompt, from per-sample pass values
    summary(per, groups)                        -> {label: {"pass@k": …, "prompts": …}} over the prompts (by group)
    bootstrap(values, groups)                   -> {label: (lo, hi)} 95 % intervals, resampling prompts by group
    paired_per_prompt(base, model, groups)      -> {"pass@k": paired table} model − base, prompt by prompt

**The estimator.** A prompt is solved "at k" when at least one of k independent samples passes; pass@k is the
probability of that, ``1 − (1 − p)^k`` for a prompt the model solves with probability ``p``. Plugging the sample
rate ``p̂ = c/n`` into that formula is biased (Jensen: it overestimates ``1 − (1 − p)^k`` on average for k > 1).
Chen et al. draw ``n ≥ k`` samples, count the ``c`` that pass, and average the event "one of k passes" over all
``C(n, k)`` subsets of k of the n samples:

    pass@k = 1 − C(n − c, k) / C(n, k)

since exactly ``C(n − c, k)`` of the subsets hold no passing sample. It is unbiased: each k-subset of n i.i.d.
samples is itself a draw of k i.i.d. samples, so the indicator "the subset holds a pass" has expectation
``1 − (1 − p)^k``, and so does its mean over the subsets. ``C(n − c, k) = 0`` when ``n − c < k`` (every subset holds a
pass: 1); ``c = 0`` gives 0; ``k = 1`` gives ``c/n``, the pass rate. The ratio is computed as the product
``Π_{i = n−c+1}^{n} (1 − k/i)`` (Chen et al.'s numerically stable form: the product and the ratio both equal
``(n−k)! (n−c)! / ((n−c−k)! n!)``), which never forms the large binomials.

**Over a set of prompts.** The set's pass@k is the mean of the prompts' estimates (each prompt weighs the same; with
the same n for every prompt, pass@1 is also the mean over samples). A prompt contributes to pass@k only when it has
``n ≥ k`` scored samples (a sample the reward could not score, NaN, is left out of n). A sample *passes* when its
value is ≥ a threshold (scripts/evaluate.py's --pass_threshold: 1, a correct answer or every test of a program).

**Its interval** (:func:`bootstrap`): the prompts are the random draw (the k samples of a prompt are already
averaged by the estimator), so the interval resamples prompts with replacement — within each group, keeping every
group's size, so the mean over groups (a task mean, each task weighing the same) is recomputed on every resample —
and takes the 2.5 and 97.5 percentiles of the recomputed means (the percentile bootstrap, B = 2000 resamples from
a fixed seed: the same numbers on every run).

**Paired, model against base** (``scripts/evaluate.py --compare``): both draw sample k of prompt i from the same seed,
so each prompt's estimates pair up; the difference is taken prompt by prompt, ``d_i = pass@k_model(i) −
pass@k_base(i)``, with its standard error over the prompts and 95 % interval (``ddpo_grpo/paired.py``). The prompt,
not the sample, is the unit: a prompt's n samples share its difficulty, so they are not independent pairs.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ddpo_grpo.paired import paired_by_group


def pass_at_k(n: int, c: int, k: int) -> float:
    """``1 − C(n − c, k) / C(n, k)``: the unbiased pass@k of one prompt with ``c`` of ``n`` samples passed (module
    docstring); ValueError unless ``0 ≤ c ≤ n`` and ``1 ≤ k ≤ n``."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def default_ks(n: int) -> list[int]:
    """The k of a report with n samples per prompt: 1, the powers of two below n, and n."""
    return sorted({1, n, *(2**j for j in range(1, max(1, n).bit_length()) if 2**j < n)})


@dataclass
class PerPrompt:
    """Per prompt (in order of first appearance): its number of scored samples ``n``, of passes ``c``, and pass@k
    for each k of ``ks`` (NaN where ``n < k``)."""

    prompts: list[int]
    n: list[int]
    c: list[int]
    ks: list[int]
    values: dict[str, list[float]]  # "pass@k" -> one value per prompt


def per_prompt(passed: Sequence[float], prompt_of: Sequence[int], ks: Sequence[int]) -> PerPrompt:
    """Each prompt's pass@k from per-sample ``passed`` (1 passed, 0 failed, NaN not scored) and ``prompt_of`` (the
    prompt index of each sample)."""
    if len(passed) != len(prompt_of):
        raise ValueError(f"per_prompt: {len(passed)} pass values for {len(prompt_of)} prompt indices")
    order = list(dict.fromkeys(int(i) for i in prompt_of))
    counts = {i: [0, 0] for i in order}
    for value, i in zip(passed, prompt_of):
        if np.isfinite(value):
            counts[int(i)][0] += 1
            counts[int(i)][1] += int(value > 0)
    n = [counts[i][0] for i in order]
    c = [counts[i][1] for i in order]
    values = {f"pass@{k}": [pass_at_k(a, b, k) if a >= k else math.nan for a, b in zip(n, c)] for k in ks}
    return PerPrompt(order, n, c, list(ks), values)


def means(values: dict[str, Sequence[float]], members: Sequence[int] | None = None) -> dict:
    """``{name: mean over the finite values}`` (of the prompts ``members``; NaN when none) and, per name, how many
    prompts it averaged (``prompts/<name>``)."""
    out = {}
    for name, vals in values.items():
        v = np.asarray(vals, dtype=np.float64)
        v = v[list(members)] if members is not None else v
        v = v[np.isfinite(v)]
        out[name] = float(v.mean()) if len(v) else math.nan
        out[f"prompts/{name}"] = int(len(v))
    return out


def summary(values: dict[str, Sequence[float]], groups: Sequence[Hashable]) -> dict:
    """``{"all": means(values), <group>: means over that group's prompts, …}`` of per-prompt ``values`` and one
    group label per prompt (None: no group)."""
    out = {"all": means(values)}
    for label in dict.fromkeys(g for g in groups if g is not None):
        out[str(label)] = means(values, [j for j, g in enumerate(groups) if g == label])
    return out


def bootstrap(
    values: Sequence[float], groups: Sequence[Hashable], resamples: int = 2000, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """``{group: (lo, hi), "": (lo, hi), "mean": (lo, hi)}``: 95 % percentile-bootstrap intervals of each group's
    mean of the per-prompt ``values``, of the pooled mean over every prompt (``""``) and of the unweighted mean over
    the groups (``"mean"``), resampling prompts with replacement within each group (module docstring). Prompts with
    a NaN value (fewer than k samples) are left out; a group with none has no interval."""
    v = np.asarray(values, dtype=np.float64)
    labels = list(dict.fromkeys(groups))
    rng = np.random.default_rng(seed)
    draws: dict = {}
    for label in labels:
        idx = np.array([j for j, g in enumerate(groups) if g == label and np.isfinite(v[j])], dtype=np.int64)
        if len(idx):
            picks = rng.integers(0, len(idx), size=(resamples, len(idx)))
            draws[label] = v[idx][picks]  # (resamples, prompts of the group)
    out: dict[str, tuple[float, float]] = {}

    def interval(x) -> tuple[float, float]:
        lo, hi = np.percentile(x, [2.5, 97.5])
        return float(lo), float(hi)

    for label, d in draws.items():
        if label is not None:
            out[str(label)] = interval(d.mean(axis=1))
    if draws:
        out[""] = interval(np.concatenate(list(draws.values()), axis=1).mean(axis=1))
        grouped = [d.mean(axis=1) for label, d in draws.items() if label is not None]
        if grouped:
            out["mean"] = interval(np.mean(grouped, axis=0))
    return out


def paired_per_prompt(base: dict, model: dict, groups: Sequence[Hashable]) -> dict:
    """``{name: paired_by_group(base[name], model[name], groups)}``: the per-prompt values (pass@k, mean length) of a
    model against a base's on the same prompts and seeds, paired prompt by prompt (module docstring)."""
    return {name: paired_by_group(base[name], model[name], groups) for name in model if name in base}


__all__ = ["PerPrompt", "bootstrap", "default_ks", "means", "paired_per_prompt", "pass_at_k", "per_prompt", "summary"]
