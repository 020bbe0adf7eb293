"""The optimizer and its step: warm-up, fp16 loss scaling, gradient clipping, the finite guard, the step, the EMA.

``build_optimizer`` makes the optimizer of ``train.optimizer`` over the trainable weights. ``OptimizerStep`` is
called once per accumulated gradient (every ``train.gradient_accumulation_steps`` minibatches) and does, in order:

1. the learning rate of linear warm-up: lr·min(1, (n + 1) / warmup_steps) for the n-th step (n from 0);
2. the clip cap: ``train.max_grad_norm``, and after ``MIN_HISTORY`` steps min(that, ``train.grad_norm_ratio`` ×
   the median norm of the last ``WINDOW`` applied steps) — the relative cap is what acts on spikes;
3. under ``mixed_precision="fp16"``: the gradient divided by the loss scale s (below), so that everything after
   sees the true gradient;
4. the global gradient norm (before clipping, over every process's gradient) and the clip, by accelerate
   (``clip_grad_norm_``); a non-finite norm skips the step (``guard.FiniteGuard``; all processes see the same norm
   and skip together) and drops the gradient;
5. the step, zero_grad, the weight check (a non-finite weight stops the run), n ← n + 1, and the EMA update.

Loss scaling (fp16; ``wiring.loss_scaling`` puts a ``torch.amp.GradScaler`` in ``acc.scaler``): fp16
activations overflow above 65504 and flush gradients below ~6e-8 to zero, so the loss is multiplied by s
before each backward (accelerate's ``backward``: ``scaler.scale(loss)``), and the accumulated gradient, s·g, is
divided by s here (``scaler.unscale_``, stage 3). GradScaler's rule, with its defaults: a step whose gradient
holds an inf / NaN is skipped and s ← s/2; after 2000 applied steps in a row s ← 2s; s starts at 2^16. The
skip decision is identical on every process: under DDP every process holds the same all-reduced gradient, and
under FSDP2 the inf check of the sharded (DTensor) gradients is all-reduced by DTensor itself (its
``_amp_foreach_non_finite_check_and_unscale_`` handler), and the global norm of stage 4, the same number
everywhere, is what the guard decides on. ``scaler.update()`` ends every step, applied or skipped. A skip at
s > 1 is the scale's overflow and does not count toward ``train.max_consecutive_skips`` (``guard.FiniteGuard``).

Its state (the step count, the recent norms and the loss scale) is part of the run state (``checkpoint.RunState``):
a resumed run continues with the scale it had.
"""

from __future__ import annotations

import numpy as np
import torch

from ddpo_grpo.sharding import full

#: applied steps whose median gradient norm sets the relative clip (train.grad_norm_ratio)
WINDOW = 20
#: no relative clip before this many applied steps
MIN_HISTORY = 5


def build_optimizer(params: dict[str, torch.nn.Parameter], t) -> torch.optim.Optimizer:
    """The optimizer of ``train.optimizer`` ("adamw" | "sgd") with ``train``'s hyper-parameters."""
    if t.optimizer == "sgd":
        return torch.optim.SGD(list(params.values()), lr=t.learning_rate, momentum=t.sgd_momentum)
    return torch.optim.AdamW(
        list(params.values()),
        lr=t.learning_rate,
        betas=(t.adam_beta1, t.adam_beta2),
        weight_decay=t.adam_weight_decay,
        eps=t.adam_epsilon,
    )


class OptimizerStep:
    """One optimizer step over the accumulated gradient (the module docstring's four stages)."""

    def __init__(self, optimizer, params: dict, acc, guard, t, ema=None):
        self.optimizer, self.params, self.acc, self.guard, self.ema = optimizer, params, acc, guard, ema
        self.scaler = getattr(acc, "scaler", None)  # the loss scale of accelerate's backward (fp16), or None
        self.learning_rate, self.warmup_steps = t.learning_rate, t.warmup_steps
        self.max_grad_norm, self.grad_norm_ratio = t.max_grad_norm, t.grad_norm_ratio
        self.global_step = 0
        self.history: list[float] = []  # gradient norms of the applied steps
        self.clipped = 0  # steps of the current epoch whose norm exceeded the cap

    def start_epoch(self) -> None:
        self.guard.start_epoch()
        self.clipped = 0

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def cap(self) -> float:
        """The clip threshold of the next step: absolute, and relative to the recent norms."""
        cap = self.max_grad_norm
        recent = self.history[-WINDOW:]
        if self.grad_norm_ratio > 0 and len(recent) >= MIN_HISTORY:
            cap = min(cap, self.grad_norm_ratio * float(np.median(recent)))
        return cap

    def __call__(self, epoch: int) -> float:
        """Apply (or skip) the accumulated gradient; return its norm before clipping."""
        if self.warmup_steps > 0:
            scale = min(1.0, (self.global_step + 1) / self.warmup_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = self.learning_rate * scale
        cap, scaler = self.cap(), self.scaler
        scale = None
        if scaler is not None:
            scale = scaler.get_scale()
            scaler.unscale_(self.optimizer)  # g ← g / s, before the norm, the clip and the log
        norm = float(full(self.acc.clip_grad_norm_(list(self.params.values()), cap)))  # sharded: a DTensor
        if not self.guard.allow(norm, epoch, loss_scale=scale):  # the same norm on every process: all skip together
            if scaler is not None:
                scaler.update()  # s ← s / 2 (the inf check of unscale_), and the step is over for the scaler
            self.optimizer.zero_grad(set_to_none=True)
            return norm
        self.clipped += norm > cap
        self.history.append(norm)
        if scaler is not None:
            scaler.step(self.optimizer)  # the unscaled gradient, finite (the guard's norm): the optimizer's step
            scaler.update()  # one more applied step toward growing s
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.guard.check_weights(self.params, epoch)
        self.global_step += 1
        if self.ema is not None:
            self.ema.update()
        return norm

    def metrics(self) -> dict:
        """train/skipped_steps (non-finite, this epoch), train/grad_clipped (this epoch), train/lr, and under fp16
        train/loss_scale (the scale after the epoch's last step)."""
        out = {"train/skipped_steps": self.guard.skipped, "train/grad_clipped": self.clipped, "train/lr": self.lr}
        if self.scaler is not None:
            out["train/loss_scale"] = float(self.scaler.get_scale())
        return out

    def state_dict(self) -> dict:
        state = {"global_step": self.global_step, "grad_norms": self.history[-WINDOW:]}
        if self.scaler is not None:
            state["loss_scale"] = self.scaler.state_dict()  # scale, growth tracker (and the fixed factors)
        return state

    def load_state_dict(self, state: dict) -> None:
        self.global_step = int(state["global_step"])
        self.history = list(state.get("grad_norms", []))
        if self.scaler is not None and "loss_scale" in state:
            self.scaler.load_state_dict(state["loss_scale"])
