"""The one minibatch loop of every objective: inner epochs over an epoch's items, minibatches, optimizer steps.

Used for the policy-gradient and forward-process objectives (items = this process's rollouts) and for the
supervised-only epochs of the staged schedule (items = this process's rows); the caller says how one minibatch
is back-propagated. For inner epoch i < ``train.num_inner_epochs``:

1. a generator seeded by (seed, epoch, process, i, 3) draws a permutation of the n items, and ``arrange(perm, gen)``
   builds the inner epoch's view (the shuffled rollouts, their steps reshuffled by the same generator);
2. minibatch m takes items [m·b, (m + 1)·b) of the view, b = ``train.batch_size``, and returns its
   ``MinibatchResult`` (statistics, counts; the first minibatch of the epoch, before any update, also the
   on-policy check); n // b minibatches (the config checks make b divide n);
3. after every ``train.gradient_accumulation_steps`` minibatches: one optimizer step (``optim.OptimizerStep``);
4. after each inner epoch but the last: stop when the processes' mean approx-KL to the sampling policy (per
   sample) exceeds ``train.kl_threshold`` (> 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ddpo_grpo.seeding import derive_seed
from ddpo_grpo.updates import MinibatchResult, Stats


@dataclass(frozen=True)
class LoopSettings:
    """``train.batch_size``, ``gradient_accumulation_steps``, ``num_inner_epochs``, ``kl_threshold`` and the seed."""

    batch_size: int
    accumulation: int
    num_inner_epochs: int
    kl_threshold: float
    seed: int

    @classmethod
    def from_config(cls, config) -> LoopSettings:
        t = config.train
        return cls(t.batch_size, t.gradient_accumulation_steps, t.num_inner_epochs, t.kl_threshold, config.seed)


@dataclass
class LoopOutcome:
    """What the loop of one epoch produced."""

    stats: Stats = field(default_factory=Stats)
    grad_norms: list[float] = field(default_factory=list)
    mismatch: float = float("nan")  # the first minibatch's on-policy check
    inner_epochs_run: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # summed MinibatchResult.counts

    @property
    def grad_norm(self) -> float:
        """The mean of the finite gradient norms (NaN when none)."""
        return float(np.mean([g for g in self.grad_norms if np.isfinite(g)] or [np.nan]))


def run_inner_epochs(
    n: int,
    settings: LoopSettings,
    *,
    epoch: int,
    rank: int,
    arrange: Callable[[torch.Tensor, torch.Generator], object],
    minibatch: Callable[..., MinibatchResult],
    step: Callable[[int], float],
    reduce_mean: Callable[[float], float],
    progress: Callable = lambda iterable, desc: iterable,
) -> LoopOutcome:
    """The loop of the module docstring. ``minibatch(view, idx, perm, inner=i, sync=…, first=…)`` back-propagates the
    items ``view[idx]`` (``perm[idx]`` are their indices among the epoch's items) and returns its result."""
    out = LoopOutcome()
    b = settings.batch_size
    for inner in range(settings.num_inner_epochs):
        gen = torch.Generator().manual_seed(derive_seed(settings.seed, epoch, rank, inner, 3))
        perm = torch.randperm(n, generator=gen)
        view = arrange(perm, gen)
        inner_stats = Stats()
        for i in progress(range(n // b), f"epoch {epoch}: training {inner + 1}/{settings.num_inner_epochs}"):
            idx = torch.arange(i * b, (i + 1) * b)
            sync = (i + 1) % settings.accumulation == 0
            first = inner == 0 and i == 0  # before any update: the on-policy check
            result = minibatch(view, idx, perm, inner=inner, sync=sync, first=first)
            out.stats.add(result)
            inner_stats.add(result)
            for name, value in result.counts.items():
                out.counts[name] = out.counts.get(name, 0) + value
            if first:
                out.mismatch = result.mismatch
            if sync:
                out.grad_norms.append(step(epoch))
        out.inner_epochs_run += 1
        approx_kl = reduce_mean(inner_stats.mean("approx_kl"))
        if settings.kl_threshold > 0 and approx_kl > settings.kl_threshold and inner + 1 < settings.num_inner_epochs:
            break
    return out


def objective_metrics(out: LoopOutcome, objective: str, with_reference: bool) -> dict:
    """The train/* means of an epoch of ``objective`` (this process's; the caller reduces them over processes)."""
    s = out.stats
    metrics = {
        "train/loss": s.mean("loss"),
        "train/policy_loss": s.mean("policy_loss"),
        "train/kl": s.mean("kl") if with_reference else float("nan"),
        "train/approx_kl": s.mean("approx_kl"),
        "train/clipfrac": s.mean("clipfrac"),
        "train/ratio_mean": s.mean("ratio"),
        "train/grad_norm": out.grad_norm,
    }
    if objective != "grpo":
        metrics["train/matching_loss"] = s.mean("matching_loss")
        if objective == "nft":
            metrics["train/drift"] = s.mean("drift")
    return metrics


__all__ = ["LoopOutcome", "LoopSettings", "objective_metrics", "run_inner_epochs"]
