"""The update phase: inner epochs over an epoch's items, minibatches, optimizer steps, the KL early stop.

The trainer hands this loop an epoch's data and the parts that act on it, and gets a ``LoopOutcome`` back; the
loop calls nothing of the trainer. Two entry points, one loop:

* ``train_objective``: the items are this process's rollouts and their advantages. The objective's updater
  (``updates.py``: what one minibatch back-propagates) is prepared for the epoch, then back-propagates every
  minibatch, after the supervised term (``supervised.py``) when it is mixed in (λ_sup > 0);
* ``train_supervised``: the staged schedule's supervised-only epochs (λ_pg = 0), the items this process's rows.

For inner epoch i < ``train.num_inner_epochs``:

1. a generator seeded by (seed, epoch, process, i, 3) draws a permutation of the n items, the inner epoch's view
   (the shuffled rollouts, their trained steps reshuffled by the same generator with ``train.shuffle_steps``);
2. minibatch m takes items [m·b, (m + 1)·b) of the view, b = ``train.batch_size``, and returns its
   ``MinibatchResult`` (statistics, counts; the first minibatch of the epoch, before any update, also the
   on-policy check); n // b minibatches (the config checks make b divide n);
3. after every ``train.gradient_accumulation_steps`` minibatches: one optimizer step (``optim.OptimizerStep``);
4. after each inner epoch but the last: stop when the processes' mean approx-KL to the sampling policy (per
   sample) exceeds ``train.kl_threshold`` (> 0).

The result types live here, with the loop that folds them: ``MinibatchResult`` (what an updater or the supervised
term returns for one minibatch), ``Stats`` (their masked running means), ``LoopOutcome`` (an epoch's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from ddpo_grpo import distributed
from ddpo_grpo.seeding import derive_seed


@dataclass(frozen=True)
class LoopSettings:
    """``train.batch_size``, ``gradient_accumulation_steps``, ``num_inner_epochs``, ``kl_threshold``,
    ``shuffle_steps`` and the seed; built from the config only (``from_config``: config/base.py holds the defaults)."""

    batch_size: int
    accumulation: int
    num_inner_epochs: int
    kl_threshold: float
    shuffle_steps: bool
    seed: int

    @classmethod
    def from_config(cls, config) -> LoopSettings:
        t = config.train
        return cls(
            t.batch_size,
            t.gradient_accumulation_steps,
            t.num_inner_epochs,
            t.kl_threshold,
            t.shuffle_steps,
            config.seed,
        )


class MinibatchResult:
    """What one minibatch returns: its per-sample statistics in the order they were produced (masked sums, kept
    as device tensors: no sync per step), the on-policy check and the samples left out of the forward passes."""

    def __init__(self):
        self.records: list[tuple[str, torch.Tensor, torch.Tensor]] = []
        self.mismatch = float("nan")  # max |recomputed − stored log-prob| when checked
        self.counts: dict[str, int] = {}  # e.g. "skipped_samples": zero-advantage samples left out (updates.py)

    def add(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        self.records.append((name, (values.detach().float() * mask).sum(), mask.sum()))

    def then(self, other: MinibatchResult) -> MinibatchResult:
        """The result of ``self`` then ``other`` (records in order, counts summed, the last check's mismatch)."""
        joined = MinibatchResult()
        joined.records = self.records + other.records
        joined.mismatch = other.mismatch if other.mismatch == other.mismatch else self.mismatch
        joined.counts = {k: self.counts.get(k, 0) + other.counts.get(k, 0) for k in {**self.counts, **other.counts}}
        return joined


class Stats:
    """Masked running means of per-sample statistics, folded from minibatch results in order."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, torch.Tensor] = {}

    def add(self, result: MinibatchResult) -> None:
        for name, total, count in result.records:
            self.sums[name] = self.sums[name] + total if name in self.sums else total
            self.counts[name] = self.counts[name] + count if name in self.counts else count

    def mean(self, name: str) -> float:
        if name not in self.sums or float(self.counts[name]) == 0:
            return float("nan")
        return float(self.sums[name] / self.counts[name])


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


def _quiet(iterable, desc: str):
    return iterable


def train_objective(
    rollout,
    advantages: torch.Tensor,
    settings: LoopSettings,
    *,
    epoch: int,
    update,
    step,
    acc,
    supervised=None,
    lam_sup: float = 0.0,
    lam_pg: float = 1.0,
    progress: Callable = _quiet,
) -> LoopOutcome:
    """The objective over this process's samples: ``rollout`` [n] with ``advantages`` [n].

    ``update`` is the objective's updater (``updates.make_update``), prepared here for the epoch; ``supervised``
    the supervised term, mixed in with weight ``lam_sup`` when > 0 (the objective's loss scaled by ``lam_pg``);
    ``step`` the ``optim.OptimizerStep``; ``acc`` the accelerator (the KL early stop averages over processes)."""
    update.prepare(epoch, rollout, advantages)
    mixed = supervised is not None and lam_sup > 0

    def arrange(perm, gen):
        shuffled, adv = rollout.select(perm), advantages[perm.to(advantages.device)]
        return (shuffled.shuffle_steps(gen) if settings.shuffle_steps else shuffled), adv

    def minibatch(view, idx, perm, *, inner, sync, first):
        shuffled, adv = view
        batch = shuffled.select(idx)
        sup = None
        if mixed:  # sync=False: the objective's last backward synchronises the processes
            sup = supervised.backward(batch.rows(), lam_sup=lam_sup, epoch=epoch, key=(inner, int(idx[0])), sync=False)
        result = update.minibatch(batch, adv[idx.to(adv.device)], perm[idx], sync=sync, weight=lam_pg, check=first)
        return result if sup is None else sup.then(result)

    return _inner_epochs(len(rollout), settings, epoch, acc, step, progress, arrange, minibatch)


def train_supervised(
    rows: list[dict],
    settings: LoopSettings,
    *,
    epoch: int,
    supervised,
    lam_sup: float,
    step,
    acc,
    progress: Callable = _quiet,
) -> LoopOutcome:
    """The supervised term alone over this process's ``rows`` of the epoch (the staged schedule's λ_pg = 0)."""

    def minibatch(view, idx, perm, *, inner, sync, first):
        batch = [view[j] for j in idx.tolist()]
        return supervised.backward(batch, lam_sup=lam_sup, epoch=epoch, key=(inner, int(idx[0])), sync=sync)

    arrange = lambda perm, gen: [rows[j] for j in perm.tolist()]  # noqa: E731
    return _inner_epochs(len(rows), settings, epoch, acc, step, progress, arrange, minibatch)


def _inner_epochs(n: int, settings: LoopSettings, epoch: int, acc, step, progress, arrange, minibatch) -> LoopOutcome:
    """The loop of the module docstring over n items: ``arrange(perm, gen)`` is an inner epoch's view,
    ``minibatch(view, idx, perm, inner=…, sync=…, first=…)`` back-propagates the items ``view[idx]`` (``perm[idx]``
    their indices among the epoch's items)."""
    step.start_epoch()
    out = LoopOutcome()
    b = settings.batch_size
    for inner in range(settings.num_inner_epochs):
        gen = torch.Generator().manual_seed(derive_seed(settings.seed, epoch, acc.process_index, inner, 3))
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
        approx_kl = distributed.reduce(acc, inner_stats.mean("approx_kl"))
        if settings.kl_threshold > 0 and approx_kl > settings.kl_threshold and inner + 1 < settings.num_inner_epochs:
            break
    return out


def objective_metrics(out: LoopOutcome, objective: str, with_reference: bool, acc) -> dict:
    """The train/* metrics of an epoch of ``objective``, over every process: the means, the on-policy check (the
    largest), the inner epochs run and the zero-advantage samples left out (summed)."""
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
    if "entropy" in s.sums:  # a language model's tokens (token_updates.py)
        metrics["train/entropy"] = s.mean("entropy")
    if objective != "grpo":
        metrics["train/matching_loss"] = s.mean("matching_loss")
        if objective == "nft":
            metrics["train/drift"] = s.mean("drift")
    metrics = {k: distributed.reduce(acc, v) for k, v in metrics.items()}
    metrics["train/logp_mismatch"] = distributed.reduce(acc, out.mismatch, "max")
    metrics["train/inner_epochs_run"] = out.inner_epochs_run
    metrics["train/skipped_samples"] = distributed.reduce(acc, out.counts.get("skipped_samples", 0), "sum")
    return metrics


__all__ = [
    "LoopOutcome",
    "LoopSettings",
    "MinibatchResult",
    "Stats",
    "objective_metrics",
    "train_objective",
    "train_supervised",
]
