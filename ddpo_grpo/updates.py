"""What one minibatch of an epoch back-propagates: the objective of ``train.objective``.

The trainer owns the loop (inner epochs, shuffling, minibatches, optimizer steps, the KL early stop);
an updater turns one minibatch of samples into gradients and per-sample statistics:

* ``TransitionUpdate`` ("grpo"): every trained transition x_j → x_{j+1} stored by the rollout is
  re-scored (the same ``policy.predict`` + ``policy.step`` calls the sampler made), and the PPO clipped
  surrogate of its log-probability ratio to the stored one is back-propagated, one denoising step at
  a time (+ β·KL to the reference). The trust region is per sample (``losses.clipped_surrogate``).
* ``ForwardUpdate`` ("awm", "nft", "rwr"): the rollout's FINAL samples are noised again at
  ``train.forward_timesteps`` levels u per sample (``policy.forward_process``) and the objective of
  ``losses.FORWARD_OBJECTIVES`` compares the model's conditional prediction there with the pretraining
  target, against the sampling policy's prediction at the same point (the epoch-start weights, or the
  lagging sampler's with ``train.sampler_decay_rate`` > 0, swapped in under no_grad) (+ β·E‖f_θ − f_ref‖²,
  the reference's squared prediction gap). No log-density of a transition is needed, so rollouts may be
  deterministic (noise level 0) and use any number of steps.

Samples whose advantage is exactly 0 contribute no gradient to "grpo" and "awm" (their losses are
−A·ratio) when there is no KL term: they are left out of the forward passes and counted
(``train/skipped_samples``); the per-step weights keep the full minibatch's normalisation, so the
gradient is the same as with them.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from ddpo_grpo.losses import aggregation_weight, forward_objective, kl_estimator, policy_loss
from ddpo_grpo.rollout import Rollout, transition_inputs
from ddpo_grpo.seeding import derive_seed
from ddpo_grpo.weights import snapshot, swapped

#: objectives whose per-sample loss is −A · (something): a zero advantage gives a zero gradient
ADVANTAGE_LINEAR = ("grpo", "awm")
#: noise levels of the forward process are kept inside (U_EPS, 1 − U_EPS)
U_EPS = 1e-3


@dataclass
class UpdateContext:
    """What an updater needs from the trainer (no circle: the trainer is not handed over)."""

    config: object
    policy: object
    model: torch.nn.Module  # the (possibly wrapped) denoiser to differentiate
    acc: object  # the accelerate.Accelerator
    params: dict  # name -> trainable parameter
    reference: object | None
    autocast: object
    rank: int
    sampler: object | None = None  # the lagging sampling policy (weights.LaggingSampler), when configured


class Stats:
    """Masked running sums of per-sample statistics, kept as device tensors (no sync per step)."""

    def __init__(self):
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, torch.Tensor] = {}

    def add(self, name: str, values: torch.Tensor, mask: torch.Tensor) -> None:
        total = (values.detach().float() * mask).sum()
        self.sums[name] = self.sums[name] + total if name in self.sums else total
        self.counts[name] = self.counts[name] + mask.sum() if name in self.counts else mask.sum()

    def mean(self, name: str) -> float:
        if name not in self.sums or float(self.counts[name]) == 0:
            return float("nan")
        return float(self.sums[name] / self.counts[name])


def _kept(adv: torch.Tensor, objective: str, beta: float) -> tuple[torch.Tensor, int]:
    """(indices of the samples that contribute a gradient, how many zero-advantage samples were left out).

    All of them unless their advantage is 0 (see the module docstring); at least one is kept so that
    every process takes part in the gradient synchronisation."""
    every = torch.arange(len(adv), device=adv.device)
    if objective not in ADVANTAGE_LINEAR or beta > 0:
        return every, 0
    keep = torch.nonzero(adv != 0).flatten()
    if not len(keep):
        return every[:1], len(adv) - 1
    return keep, len(adv) - len(keep)


class TransitionUpdate:
    """Objective "grpo": the clipped surrogate on the stored transitions (see the module docstring)."""

    name = "grpo"

    def __init__(self, ctx: UpdateContext):
        self.ctx = ctx
        t = ctx.config.train
        self.loss_fn, self.kl_fn = policy_loss("clipped"), kl_estimator(t.kl_estimator)
        self.skipped = 0
        self.pg_weight = 1.0  # λ_pg of the supervised mixing schedule (supervised.py); 1 without it

    def prepare(self, epoch: int, rollout: Rollout, advantages: torch.Tensor) -> None:
        self.skipped = 0

    def minibatch(
        self,
        batch: Rollout,
        adv: torch.Tensor,
        index: torch.Tensor,
        *,
        sync: bool,
        stats: Stats,
        inner: Stats,
        check: bool,
    ) -> float:
        """Backward every trained transition of one minibatch; max |recomputed − stored log-prob| when ``check``."""
        ctx, t, s = self.ctx, self.ctx.config.train, self.ctx.config.sample
        guidance = s.guidance_scale if t.cfg else 1.0
        k_steps = batch.train_steps.shape[1]
        constant = t.loss_norm_constant or k_steps
        weight = (
            aggregation_weight(
                t.loss_aggregation,
                num_samples=len(batch),
                num_transitions=k_steps,
                constant=constant,
                num_valid=int(batch.train_mask.sum()),
            )
            * self.pg_weight
            / t.gradient_accumulation_steps
        )
        kept, skipped = _kept(adv, self.name, t.beta)
        self.skipped += skipped
        batch, adv = batch.select(kept.cpu()), adv[kept]
        dims = math.prod(batch.latents.shape[2:])
        max_diff = torch.zeros((), device=batch.log_probs.device)
        for k in range(k_steps):
            x, timesteps, x_next, args, levels, j, valid = transition_inputs(batch, k)
            rows = torch.arange(len(batch), device=j.device)
            ref_step = None
            if ctx.reference is not None:  # before the policy forward: see reference.py
                ref_out = ctx.reference.predict(x, timesteps, batch.cond, guidance, ctx.autocast)
                ref_step = ctx.policy.step(ref_out, x, args, levels, prev_sample=x_next)
            last = sync and k == k_steps - 1
            with contextlib.nullcontext() if last else ctx.acc.no_sync(ctx.model):
                with ctx.autocast():
                    out = ctx.policy.predict(
                        ctx.model, x, timesteps, batch.cond, guidance, detach_uncond=t.cfg_uncond_grad == "detach"
                    )
                step = ctx.policy.step(out, x, args, levels, prev_sample=x_next)
                old = batch.log_probs[rows, j]  # [B]
                policy_term, info = self.loss_fn(step.log_prob, old, adv, t.clip_range, dims)
                loss = policy_term
                if ref_step is not None:
                    dt = args["sigma"] - args["sigma_next"] if "sigma" in args else None
                    kl = self.kl_fn(
                        step.log_prob, ref_step.log_prob, mean=step.mean, ref_mean=ref_step.mean, std=step.std, step=dt
                    )
                    loss = loss + t.beta * kl
                mask = valid.float()
                ctx.acc.backward((loss * mask).sum() * weight)
            if check:
                max_diff = torch.maximum(max_diff, ((step.log_prob.detach() - old).abs() * mask).max())
            stats.add("loss", loss, mask)
            stats.add("policy_loss", policy_term, mask)
            stats.add("approx_kl", info["approx_kl"], mask)
            stats.add("clipfrac", info["clipped"], mask)
            stats.add("ratio", info["ratio"], mask)
            inner.add("approx_kl", info["approx_kl"], mask)  # for the KL early stop
            if ref_step is not None:
                stats.add("kl", kl, mask)
        return float(max_diff) if check else float("nan")


class ForwardUpdate:
    """Objectives "awm", "nft", "rwr" on the forward process of the final samples (see the module docstring).

    Per sample i of an epoch: noise levels u_ik, k < K = train.forward_timesteps, stratified in (0, 1)
    ("uniform": u_ik = (k + U_ik) / K) or logit-normal ("logit_normal": u = sigmoid(N(0, 1)), SD3's
    training density), and the noise ε_ik drawn from a seed derived from (seed, epoch, process, i, k):
    the same whichever minibatch or inner epoch the sample lands in.
    """

    def __init__(self, ctx: UpdateContext):
        self.ctx = ctx
        t = ctx.config.train
        self.name = t.objective
        self.objective = forward_objective(t.objective)
        self.skipped = 0
        self.pg_weight = 1.0  # λ_pg of the supervised mixing schedule (supervised.py); 1 without it

    def prepare(self, epoch: int, rollout: Rollout, advantages: torch.Tensor) -> None:
        """Noise levels and noise seeds of every sample, the sampling policy's weights, the RWR weights."""
        cfg, t = self.ctx.config, self.ctx.config.train
        n, k = len(rollout), t.forward_timesteps
        gen = torch.Generator().manual_seed(derive_seed(cfg.seed, epoch, self.ctx.rank, 4))
        if t.forward_time == "logit_normal":
            u = torch.sigmoid(torch.randn(n, k, generator=gen))  # [n, K]
        else:
            u = (torch.arange(k).float() + torch.rand(n, k, generator=gen)) / k  # [n, K], one per stratum
        self.u = u.clamp(U_EPS, 1 - U_EPS)
        self.seeds = [derive_seed(cfg.seed, epoch, self.ctx.rank, 5, i) for i in range(n)]
        # the sampling policy: the lagging sampler's weights, else this epoch's weights before any update
        self.old = self.ctx.sampler.shadow if self.ctx.sampler is not None else snapshot(self.ctx.params)
        self.skipped = 0
        self.options = {"beta": t.nft_beta, "adv_max": t.adv_clip_max if t.adv_clip_max > 0 else 5.0}
        if self.name == "rwr":
            w = torch.exp(advantages.float() / t.rwr_temperature)  # [n]
            self.rwr_weights = w / w.mean()

    def _noise(self, index: torch.Tensor, k: int, shape, device) -> torch.Tensor:
        noise = [
            torch.randn(shape, generator=torch.Generator().manual_seed(derive_seed(self.seeds[i], k)))
            for i in index.tolist()
        ]
        return torch.stack(noise).to(device)

    def minibatch(
        self,
        batch: Rollout,
        adv: torch.Tensor,
        index: torch.Tensor,
        *,
        sync: bool,
        stats: Stats,
        inner: Stats,
        check: bool,
    ) -> float:
        """Backward the objective at K noise levels of every sample of one minibatch (no on-policy check here:
        ``train/logp_mismatch`` is about stored transitions, which these objectives do not use)."""
        ctx, t = self.ctx, self.ctx.config.train
        k_levels = t.forward_timesteps
        weight = aggregation_weight("mean", num_samples=len(batch), num_transitions=k_levels) * (
            self.pg_weight / t.gradient_accumulation_steps
        )
        kept, skipped = _kept(adv, self.name, t.beta)
        self.skipped += skipped
        index, adv = index[kept.cpu()], adv[kept]
        x0 = batch.latents[kept, -1]  # [B, ...] the final latents
        cond = {key: v[kept] for key, v in batch.cond.items()}
        dims = math.prod(x0.shape[1:])
        options = dict(self.options)
        if self.name == "rwr":
            options["weights"] = self.rwr_weights[index].to(x0.device)
        mask = torch.ones(len(x0), device=x0.device)
        for k in range(k_levels):
            u = self.u[index, k].to(x0.device)  # [B]
            timesteps, noised = ctx.policy.forward_process(x0, u, self._noise(index, k, x0.shape[1:], x0.device))
            x_t = noised.x_t.to(x0.dtype)
            with torch.no_grad(), swapped(ctx.params, self.old), ctx.autocast():
                old_pred = ctx.policy.predict(ctx.model, x_t, timesteps, cond, 1.0)
            ref_pred = None
            if ctx.reference is not None:
                ref_pred = ctx.reference.predict(x_t, timesteps, cond, 1.0, ctx.autocast)
            last = sync and k == k_levels - 1
            with contextlib.nullcontext() if last else ctx.acc.no_sync(ctx.model):
                with ctx.autocast():
                    pred = ctx.policy.predict(ctx.model, x_t, timesteps, cond, 1.0)
                term, info = self.objective(
                    pred,
                    noised.target,
                    adv,
                    old_pred=old_pred,
                    scale=noised.scale,
                    dims=dims,
                    clip_range=t.clip_range,
                    options=options,
                )
                loss = term
                if ref_pred is not None:
                    kl = (pred.float() - ref_pred.float()).square().reshape(len(pred), -1).mean(dim=1)  # [B]
                    loss = loss + t.beta * kl
                ctx.acc.backward(loss.sum() * weight)
            stats.add("loss", loss, mask)
            stats.add("policy_loss", term, mask)
            stats.add("matching_loss", info["matching_loss"], mask)
            for key in ("approx_kl", "clipped", "ratio", "drift"):
                if key in info:
                    stats.add({"clipped": "clipfrac"}.get(key, key), info[key], mask)
                    if key == "approx_kl":
                        inner.add("approx_kl", info[key], mask)
            if ref_pred is not None:
                stats.add("kl", kl, mask)
        return float("nan")


def make_update(ctx: UpdateContext):
    """The updater of ``train.objective``."""
    return TransitionUpdate(ctx) if ctx.config.train.objective == "grpo" else ForwardUpdate(ctx)


__all__ = ["ADVANTAGE_LINEAR", "ForwardUpdate", "Stats", "TransitionUpdate", "UpdateContext", "make_update"]
