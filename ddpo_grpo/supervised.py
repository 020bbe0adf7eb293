"""The supervised term mixed into policy-gradient training (image-conditioned models: restoration, editing).

Loss of one minibatch of rows (the rollout's samples' rows, or the epoch's rows in supervised-only epochs):

    λ_sup · L_sup + λ_pg · L_pg  (+ λ_cons · L_cons)

1. L_sup, the model's own pretraining loss on the rows' (condition, ground truth) pairs: the ground truth
   (row field ``train.sup_key``) encoded to the clean latent x0, noised to a uniform level u
   (``policy.forward_process``), and mean_d (f_θ(x_u, u, c) − y*)² with the conditional prediction f_θ.
   Rows without a ground truth are skipped for this term and counted (``train/sup_skipped``).
2. L_cons (optional, ``train.consistency_weight`` > 0), data consistency: the prediction's clean image
   x̂ = decode(x̂0(f_θ, x_u, u)) degraded by the row's degradation D (``train.degradation``: "row" = each row's
   ``degradation`` field, or one spec for all; ``ddpo_grpo.degradations``) should reproduce the observed input
   y, the row's source image: mean (D(x̂) − y)².
3. (λ_sup, λ_pg) per epoch come from ``ddpo_grpo.schedules.loss_weights`` (constant, linear decay, or the
   staged recipe: supervised only → hand-over → GRPO with a floor on λ_sup); λ_pg scales the objective of
   ``updates.py``.

The term is the family's: it needs ``policy.supervised_batch(rows, key=…)`` (image-conditioned adapters
provide it) and, for the consistency term, ``policy.predicted_x0`` and ``policy.source_images``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ddpo_grpo import distributed
from ddpo_grpo.inner_loop import MinibatchResult
from ddpo_grpo.seeding import derive_seed
from ddpo_grpo.sharding import no_sync
from ddpo_grpo.updates import U_EPS, UpdateContext


@dataclass(frozen=True)
class SupervisedSettings:
    """The term's config fields (``train.sup_key``, ``consistency_weight``, ``degradation``, …), built from the
    config only (``from_config``: config/base.py holds the defaults and documents each field)."""

    key: str
    consistency_weight: float
    degradation: str
    negative_prompt: str
    gradient_accumulation_steps: int
    seed: int

    @classmethod
    def from_config(cls, config) -> SupervisedSettings:
        t = config.train
        return cls(
            key=t.sup_key,
            consistency_weight=t.consistency_weight,
            degradation=t.degradation,
            negative_prompt=config.sample.negative_prompt,
            gradient_accumulation_steps=t.gradient_accumulation_steps,
            seed=config.seed,
        )


class SupervisedTerm:
    """Back-propagates λ_sup · L_sup (+ λ_cons · L_cons) of a minibatch of rows (see the module docstring)."""

    def __init__(self, ctx: UpdateContext, settings: SupervisedSettings):
        self.ctx, self.settings = ctx, settings
        if not hasattr(ctx.policy, "supervised_batch"):
            from foundation.errors import ConfigError

            raise ConfigError(
                f"train.sup_weight > 0 needs a model family with a supervised term (image-conditioned pipelines); "
                f"{type(ctx.policy).__name__} has none: set train.sup_weight = 0"
            )

    def backward(self, rows: list[dict], *, lam_sup: float, epoch: int, key: tuple, sync: bool) -> MinibatchResult:
        """Add the term's gradient for ``rows``, scaled for the minibatch (mean over its supervised rows) and the
        gradient accumulation; ``sync`` lets this backward synchronise the processes (when it is the last one).
        The noise levels and noises are drawn from (seed, epoch, process, 6, *key), ``key`` naming the minibatch
        within the epoch (inner epoch, index), so a resumed run draws what the uninterrupted one did."""
        ctx, st = self.ctx, self.settings
        gen = torch.Generator().manual_seed(derive_seed(st.seed, epoch, ctx.rank, 6, *key))
        batch = ctx.policy.supervised_batch(rows, key=st.key, negative_prompt=st.negative_prompt, generator=gen)
        result = MinibatchResult()
        result.counts["sup_skipped"] = batch.skipped
        n = len(batch.index)
        device = ctx.policy.device
        with contextlib.nullcontext() if sync else no_sync(ctx.model, ctx.acc):
            if not n:  # nothing to learn here, but every process must take part in a synchronised backward
                if sync:
                    ctx.acc.backward(sum(p.sum() for p in ctx.params.values()) * 0.0)
                return result
            u = torch.rand(n, generator=gen).clamp(U_EPS, 1 - U_EPS).to(device)  # [n]
            noise = torch.randn(batch.x0.shape, generator=gen).to(device)  # [n, C, h, w]
            timesteps, noised = ctx.policy.forward_process(batch.x0, u, noise)
            x_t = noised.x_t.to(batch.x0.dtype)
            with ctx.autocast():
                pred = ctx.policy.predict(ctx.model, x_t, timesteps, batch.cond, 1.0)
            sup = (pred.float() - noised.target).square().reshape(n, -1).mean(dim=1)  # [n]
            loss = lam_sup * sup.mean()
            result.add("sup_loss", sup, torch.ones(n, device=sup.device))
            if st.consistency_weight > 0:
                cons = self._consistency(rows, batch.index, pred, x_t, timesteps)
                if cons is not None:
                    loss = loss + st.consistency_weight * cons.mean()
                    result.add("consistency_loss", cons, torch.ones(len(cons), device=cons.device))
            ctx.acc.backward(loss / st.gradient_accumulation_steps)
        return result

    def metrics(self, out, acc) -> dict:
        """train/sup_loss, train/sup_skipped (rows without a ground truth) and train/consistency_loss of an epoch's
        ``inner_loop.LoopOutcome``, over every process (``acc``: the accelerator)."""
        metrics = {
            "train/sup_loss": distributed.reduce(acc, out.stats.mean("sup_loss")),
            "train/sup_skipped": distributed.reduce(acc, out.counts.get("sup_skipped", 0), "sum"),
        }
        if self.settings.consistency_weight > 0:
            metrics["train/consistency_loss"] = distributed.reduce(acc, out.stats.mean("consistency_loss"))
        return metrics

    def _consistency(self, rows, index, pred, x_t, timesteps):
        """mean (D(x̂) − y)² [m] over the supervised rows that have a degradation (None when none has)."""
        from ddpo_grpo import degradations

        ctx, degradation = self.ctx, self.settings.degradation
        keep = [j for j, i in enumerate(index.tolist()) if degradation != "row" or rows[i].get("degradation")]
        if not keep:
            return None
        sel = torch.as_tensor(keep, device=pred.device)
        picked = [rows[index[j]] for j in keep]
        x_hat = ctx.policy.decode(ctx.policy.predicted_x0(pred[sel], x_t[sel], timesteps[sel]))  # [m, 3, H, W]
        y = ctx.policy.source_images(picked).to(x_hat)  # [m, 3, H, W]
        specs = [r["degradation"] for r in picked] if degradation == "row" else degradation
        return degradations.consistency_loss(x_hat, y, specs)
