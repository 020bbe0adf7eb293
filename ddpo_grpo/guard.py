"""Fail-safe training: non-finite updates are skipped, a diverging or starved run stops with a reason.

``FiniteGuard`` sits on the update path. Before every optimizer step the trainer asks it whether the
accumulated gradient is usable: a non-finite gradient norm (from a NaN / inf loss, reward or weight)
means the step is skipped (gradients dropped, no update, ``train/skipped_steps`` counts it). Under fp16 loss
scaling a non-finite gradient at a scale > 1 may be the scale's overflow: ``optim.OptimizerStep`` halves the scale
and it is skipped without counting toward the stop below. After a step it checks the trainable weights
themselves. The run stops with ``TrainingStopped`` (exit status ≠ 0)
naming the epoch and the likely cause when ``max_consecutive_skips`` steps in a row were skipped or a
weight became non-finite; checkpoints and exports refuse non-finite tensors on their own
(``ddpo_grpo.checkpoint.NonFiniteError``), so nothing non-finite is ever written.

``DegenerateEpochs`` watches the rewards: an epoch whose rewards are all NaN (no sample scored) or whose
prompt groups are all flat (every group's rewards equal, so every advantage is 0) teaches nothing (its
update is zero, up to weight decay). It warns once per run, naming the rewards, and stops the run after
``max_in_a_row`` such epochs in a row (0 = never stop).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

LIKELY_CAUSES = (
    "The likely cause is a learning rate too large for this gradient scale (train.learning_rate; with SGD the "
    "step norm is learning_rate × train/grad_norm) or a reward on an extreme scale (reward.fns weights)"
)


class TrainingStopped(RuntimeError):
    """The run cannot usefully continue; the message names the epoch and the likely cause."""


class FiniteGuard:
    """Skip non-finite optimizer steps; stop after ``max_consecutive_skips`` in a row or on non-finite weights."""

    def __init__(self, max_consecutive_skips: int):
        self.max_consecutive = int(max_consecutive_skips)
        self.consecutive = 0
        self.skipped = 0  # in the current epoch

    def start_epoch(self) -> None:
        self.skipped = 0

    def allow(self, grad_norm: float, epoch: int, loss_scale: float | None = None) -> bool:
        """Whether the step with this (pre-clipping, unscaled) gradient norm may be applied; raises after too many
        skips. ``loss_scale``: the fp16 loss scale the gradient was computed at (None without loss scaling). A
        non-finite gradient at a scale > 1 may be the scale's overflow: it is skipped (and the scale halved by the
        caller) without counting toward ``max_consecutive_skips``; at a scale ≤ 1 the scale cannot be the cause."""
        if math.isfinite(grad_norm):
            self.consecutive = 0
            return True
        self.skipped += 1
        if loss_scale is not None and loss_scale > 1:
            return False
        self.consecutive += 1
        if self.max_consecutive and self.consecutive >= self.max_consecutive:
            raise TrainingStopped(
                f"epoch {epoch}: {self.consecutive} optimizer steps in a row had a non-finite gradient (loss, "
                f"advantages or weights are NaN / inf) and were skipped; stopping. {LIKELY_CAUSES}"
            )
        return False

    @staticmethod
    def check_weights(params: dict[str, torch.nn.Parameter], epoch: int) -> None:
        """TrainingStopped naming the first trainable weight that is not finite."""
        from ddpo_grpo.distributed import all_processes
        from ddpo_grpo.sharding import local

        # one flag per weight, on the weights' device; sharded weights: every process checks its own part, and
        # the flag of all of them is reduced where it was computed (distributed.all_processes)
        finite = torch.stack([torch.isfinite(local(p.detach())).all() for p in params.values()])
        if all_processes(finite.all()):
            return
        bad = [name for name, ok in zip(params, finite.tolist()) if not ok]
        what = f"trainable weight {bad[0]!r}" if bad else "a trainable weight (its shard on another process)"
        raise TrainingStopped(
            f"epoch {epoch}: {what} became non-finite after an optimizer step; stopping before anything is saved. "
            f"{LIKELY_CAUSES}"
        )


class DegenerateEpochs:
    """Warn once about epochs that teach nothing (rewards all NaN / groups all flat); stop after N in a row."""

    def __init__(self, max_in_a_row: int):
        self.max_in_a_row = int(max_in_a_row)
        self.in_a_row = 0
        self.warned: set[str] = set()

    def check(self, epoch: int, per_reward: dict[str, np.ndarray], combined: np.ndarray, stats: dict) -> bool:
        """True when this epoch is degenerate (logged as train/degenerate_epoch); raises after too many in a row."""
        reason = None
        if len(combined) and bool(np.isnan(combined).all()):
            dead = [name for name, v in per_reward.items() if bool(np.isnan(v).all())]
            reason = (
                f"every reward is NaN (not applicable) for every sample: {', '.join(dead)}; check that the "
                "prompts are ones these rewards can score (prompts.source) and that the rewards read the "
                "right metadata fields"
            )
            kind = "nan"
        elif stats.get("adv/frac_zero_std") == 1.0:
            reason = (
                f"every prompt group's rewards are equal ({', '.join(per_reward)}), so every advantage is 0: "
                "the reward is saturated or too coarse for these prompts (larger sample.group_size, harder "
                "prompts, or a graded reward)"
            )
            kind = "flat"
        if reason is None:
            self.in_a_row = 0
            return False
        self.in_a_row += 1
        if kind not in self.warned:
            self.warned.add(kind)
            warnings.warn(f"epoch {epoch}: {reason}", RuntimeWarning, stacklevel=2)
        if self.max_in_a_row and self.in_a_row >= self.max_in_a_row:
            raise TrainingStopped(
                f"epoch {epoch}: {self.in_a_row} epochs in a row taught nothing: {reason} "
                f"(train.max_degenerate_epochs = {self.max_in_a_row})"
            )
        return True
