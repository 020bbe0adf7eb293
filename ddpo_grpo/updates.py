"""What one minibatch of an epoch back-propagates: the objective of ``train.objective``.

The update loop (``inner_loop.py``: inner epochs, shuffling, minibatches, optimizer steps, the KL early stop) hands
an updater one minibatch at a time; the updater turns it into gradients and per-sample statistics (the loop's
``MinibatchResult``), after ``prepare`` once per epoch:

* ``TransitionUpdate`` ("grpo"): every trained transition x_j → x_{j+1} stored by the rollout is
  re-scored (the same ``policy.predict`` + ``policy.step`` calls the sampler made), and the PPO clipped
  surrogate of its log-probability ratio to the stored one is back-propagated, one denoising step at
  a time (+ β·KL to the reference), each step's policy term weighted by ``train.policy_step_weight``
  (``step_weight``). The trust region is per sample (``losses.clipped_surrogate``).
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

from ddpo_grpo.inner_loop import MinibatchResult
from ddpo_grpo.losses import aggregation_weight, clipped_surrogate, forward_objective, kl_estimator
from ddpo_grpo.rollout import Rollout, transition_inputs
from ddpo_grpo.seeding import derive_seed
from ddpo_grpo.sharding import no_sync
from ddpo_grpo.weights import snapshot, swapped

#: objectives whose per-sample loss is −A · (something): a zero advantage gives a zero gradient
ADVANTAGE_LINEAR = ("grpo", "awm")
#: noise levels of the forward process are kept inside (U_EPS, 1 − U_EPS)
U_EPS = 1e-3
#: values of train.policy_step_weight
STEP_WEIGHTS = ("none", "std_over_dt")


def step_weight(std: torch.Tensor, args: dict) -> torch.Tensor:
    """w_j = s_j / Δσ_j per sample [B], "std_over_dt" of ``train.policy_step_weight`` (flow_grpo's Wan trainer).

    Derivation. A flow-kernel step is x_{j+1} ~ N(μ_θ, s² I) with Δσ = σ_j − σ_{j+1} > 0 and, for the flow_grpo and
    dance kernels, s = g·√Δσ and μ_θ = a·x_j − c·Δσ·v_θ (kernels/flow.py, step 6; c = 1 + g²(1 − σ)/(2σ)).
    1. The log-prob averaged over the d latent dimensions has the gradient
       ∇ log π = (1/d) Σ_i (x_{j+1} − μ)_i / s² · ∇μ_i = −(c·Δσ / s²)·(1/d) Σ_i (x_{j+1} − μ)_i ∇v_i.
    2. At a sampled transition x_{j+1} − μ = s·ε, so ∇ log π = −(c·Δσ / s)·(1/d) Σ_i ε_i ∇v_i = −(c·√Δσ / g)·(…):
       a step's score shrinks with its size √Δσ and with its noise g.
    3. Weighting its surrogate by w = s / Δσ = g / √Δσ leaves −c·(1/d) Σ_i ε_i ∇v_i: every step's gradient in
       velocity units, of one order whatever the step size and noise level.
    flow_grpo multiplies its step's loss by std_dev_t / √Δσ (its minibatch holds one step; here w is per sample). w is
    a constant of the step (no gradient through it); deterministic steps (s = 0) get w = 0.
    """
    dt = (args["sigma"] - args["sigma_next"]).float().clamp_min(1e-12)  # [B]
    return std.detach().float().reshape(len(dt), -1)[:, 0] / dt  # [B]


@dataclass(frozen=True)
class UpdateSettings:
    """What the updaters read from the config, built from it only (``from_config``: config/base.py holds the
    defaults and documents each field); field names are ``train.*``'s."""

    objective: str
    seed: int
    beta: float
    clip_range: float
    kl_estimator: str
    loss_aggregation: str
    loss_norm_constant: float
    gradient_accumulation_steps: int
    guidance_scale: float  # of the re-scored transitions: sample.guidance_scale with train.cfg, else 1
    detach_uncond: bool  # train.cfg_uncond_grad == "detach"
    policy_step_weight: str
    forward_timesteps: int
    forward_time: str
    nft_beta: float
    rwr_temperature: float
    adv_clip_max: float

    @classmethod
    def from_config(cls, config) -> UpdateSettings:
        t = config.train
        return cls(
            objective=t.objective,
            seed=config.seed,
            beta=t.beta,
            clip_range=t.clip_range,
            kl_estimator=t.kl_estimator,
            loss_aggregation=t.loss_aggregation,
            loss_norm_constant=t.loss_norm_constant,
            gradient_accumulation_steps=t.gradient_accumulation_steps,
            guidance_scale=config.sample.guidance_scale if t.cfg else 1.0,
            detach_uncond=t.cfg_uncond_grad == "detach",
            policy_step_weight=t.policy_step_weight,
            forward_timesteps=t.forward_timesteps,
            forward_time=t.forward_time,
            nft_beta=t.nft_beta,
            rwr_temperature=t.rwr_temperature,
            adv_clip_max=t.adv_clip_max,
        )


@dataclass
class UpdateContext:
    """What an updater needs from the run (no circle: the trainer is not handed over)."""

    settings: UpdateSettings
    policy: object
    model: torch.nn.Module  # the (possibly wrapped) denoiser to differentiate
    acc: object  # the accelerate.Accelerator
    params: dict  # name -> trainable parameter
    reference: object | None
    autocast: object
    rank: int
    sampler: object | None = None  # the lagging sampling policy (weights.LaggingSampler), when configured


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
        from ddpo_grpo.kernels import FLOW_KERNELS

        self.ctx = ctx
        self.kl_fn = kl_estimator(ctx.settings.kl_estimator)
        weight = ctx.settings.policy_step_weight
        if weight not in STEP_WEIGHTS:
            raise ValueError(f"train.policy_step_weight={weight!r} must be one of {list(STEP_WEIGHTS)}")
        if weight != "none" and ctx.policy.kernel not in FLOW_KERNELS:
            raise ValueError(
                f"train.policy_step_weight={weight!r} weighs flow-kernel steps by s / Δσ; sample.kernel="
                f"{ctx.policy.kernel!r} has no σ: use 'none'"
            )
        self.weighted = weight != "none"

    def prepare(self, epoch: int, rollout: Rollout, advantages: torch.Tensor) -> None:
        """Nothing to prepare: the stored transitions are all this objective needs."""

    def minibatch(
        self, batch: Rollout, adv: torch.Tensor, index: torch.Tensor, *, sync: bool, weight: float, check: bool
    ) -> MinibatchResult:
        """Backward every trained transition of one minibatch, the loss scaled by ``weight`` (λ_pg of the supervised
        mixing, 1 without it); with ``check``, the result's mismatch is max |recomputed − stored log-prob|."""
        ctx, st = self.ctx, self.ctx.settings
        result = MinibatchResult()
        k_steps = batch.train_steps.shape[1]
        constant = st.loss_norm_constant or k_steps
        scale = (
            aggregation_weight(
                st.loss_aggregation,
                num_samples=len(batch),
                num_transitions=k_steps,
                constant=constant,
                num_valid=int(batch.train_mask.sum()),
            )
            * weight
            / st.gradient_accumulation_steps
        )
        kept, result.counts["skipped_samples"] = _kept(adv, self.name, st.beta)
        batch, adv = batch.select(kept.cpu()), adv[kept]
        dims = math.prod(batch.latents.shape[2:])
        max_diff = torch.zeros((), device=batch.log_probs.device)
        for k in range(k_steps):
            x, timesteps, x_next, args, levels, j, valid = transition_inputs(batch, k)
            rows = torch.arange(len(batch), device=j.device)
            ref_step = None
            if ctx.reference is not None:  # before the policy forward: see reference.py
                ref_out = ctx.reference.predict(x, timesteps, batch.cond, st.guidance_scale, ctx.autocast)
                ref_step = ctx.policy.step(ref_out, x, args, levels, prev_sample=x_next)
            last = sync and k == k_steps - 1
            with contextlib.nullcontext() if last else no_sync(ctx.model, ctx.acc):
                with ctx.autocast():
                    out = ctx.policy.predict(
                        ctx.model, x, timesteps, batch.cond, st.guidance_scale, detach_uncond=st.detach_uncond
                    )
                step = ctx.policy.step(out, x, args, levels, prev_sample=x_next)
                old = batch.log_probs[rows, j]  # [B]
                policy_term, info = clipped_surrogate(step.log_prob, old, adv, st.clip_range, dims)
                if self.weighted:
                    policy_term = policy_term * step_weight(step.std, args)
                loss = policy_term
                if ref_step is not None:
                    dt = args["sigma"] - args["sigma_next"] if "sigma" in args else None
                    kl = self.kl_fn(
                        step.log_prob, ref_step.log_prob, mean=step.mean, ref_mean=ref_step.mean, std=step.std, step=dt
                    )
                    loss = loss + st.beta * kl
                mask = valid.float()
                ctx.acc.backward((loss * mask).sum() * scale)
            if check:
                max_diff = torch.maximum(max_diff, ((step.log_prob.detach() - old).abs() * mask).max())
            result.add("loss", loss, mask)
            result.add("policy_loss", policy_term, mask)
            result.add("approx_kl", info["approx_kl"], mask)
            result.add("clipfrac", info["clipped"], mask)
            result.add("ratio", info["ratio"], mask)
            if ref_step is not None:
                result.add("kl", kl, mask)
        if check:
            result.mismatch = float(max_diff)
        return result


class ForwardUpdate:
    """Objectives "awm", "nft", "rwr" on the forward process of the final samples (see the module docstring).

    Per sample i of an epoch: noise levels u_ik, k < K = train.forward_timesteps, stratified in (0, 1)
    ("uniform": u_ik = (k + U_ik) / K) or logit-normal ("logit_normal": u = sigmoid(N(0, 1)), SD3's
    training density), and the noise ε_ik drawn from a seed derived from (seed, epoch, process, i, k):
    the same whichever minibatch or inner epoch the sample lands in.
    """

    def __init__(self, ctx: UpdateContext):
        self.ctx = ctx
        self.name = ctx.settings.objective
        self.objective = forward_objective(self.name)

    def prepare(self, epoch: int, rollout: Rollout, advantages: torch.Tensor) -> None:
        """Noise levels and noise seeds of every sample, the sampling policy's weights, the RWR weights."""
        st = self.ctx.settings
        n, k = len(rollout), st.forward_timesteps
        gen = torch.Generator().manual_seed(derive_seed(st.seed, epoch, self.ctx.rank, 4))
        if st.forward_time == "logit_normal":
            u = torch.sigmoid(torch.randn(n, k, generator=gen))  # [n, K]
        else:
            u = (torch.arange(k).float() + torch.rand(n, k, generator=gen)) / k  # [n, K], one per stratum
        self.u = u.clamp(U_EPS, 1 - U_EPS)
        self.seeds = [derive_seed(st.seed, epoch, self.ctx.rank, 5, i) for i in range(n)]
        # the sampling policy: the lagging sampler's weights, else this epoch's weights before any update
        self.old = self.ctx.sampler.shadow if self.ctx.sampler is not None else snapshot(self.ctx.params)
        self.options = {"beta": st.nft_beta, "adv_max": st.adv_clip_max if st.adv_clip_max > 0 else 5.0}
        if self.name == "rwr":
            w = torch.exp(advantages.float() / st.rwr_temperature)  # [n]
            self.rwr_weights = w / w.mean()

    def _noise(self, index: torch.Tensor, k: int, shape, device) -> torch.Tensor:
        noise = [
            torch.randn(shape, generator=torch.Generator().manual_seed(derive_seed(self.seeds[i], k)))
            for i in index.tolist()
        ]
        return torch.stack(noise).to(device)

    def minibatch(
        self, batch: Rollout, adv: torch.Tensor, index: torch.Tensor, *, sync: bool, weight: float, check: bool
    ) -> MinibatchResult:
        """Backward the objective at K noise levels of every sample of one minibatch, scaled by ``weight`` (no
        on-policy check here: ``train/logp_mismatch`` is about stored transitions, which these objectives do not use)."""
        ctx, st = self.ctx, self.ctx.settings
        result = MinibatchResult()
        k_levels = st.forward_timesteps
        scale = aggregation_weight("mean", num_samples=len(batch), num_transitions=k_levels) * (
            weight / st.gradient_accumulation_steps
        )
        kept, result.counts["skipped_samples"] = _kept(adv, self.name, st.beta)
        index, adv = index[kept.cpu()], adv[kept]
        x0 = batch.latents[kept, -1].float()  # [B, ...] the final latents
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
            with contextlib.nullcontext() if last else no_sync(ctx.model, ctx.acc):
                with ctx.autocast():
                    pred = ctx.policy.predict(ctx.model, x_t, timesteps, cond, 1.0)
                term, info = self.objective(
                    pred,
                    noised.target,
                    adv,
                    old_pred=old_pred,
                    scale=noised.scale,
                    dims=dims,
                    clip_range=st.clip_range,
                    options=options,
                )
                loss = term
                if ref_pred is not None:
                    kl = (pred.float() - ref_pred.float()).square().reshape(len(pred), -1).mean(dim=1)  # [B]
                    loss = loss + st.beta * kl
                ctx.acc.backward(loss.sum() * scale)
            result.add("loss", loss, mask)
            result.add("policy_loss", term, mask)
            result.add("matching_loss", info["matching_loss"], mask)
            for key in ("approx_kl", "clipped", "ratio", "drift"):
                if key in info:
                    result.add({"clipped": "clipfrac"}.get(key, key), info[key], mask)
            if ref_pred is not None:
                result.add("kl", kl, mask)
        return result


def make_update(ctx: UpdateContext):
    """The updater of ``train.objective``."""
    return TransitionUpdate(ctx) if ctx.settings.objective == "grpo" else ForwardUpdate(ctx)


__all__ = [
    "ADVANTAGE_LINEAR",
    "ForwardUpdate",
    "TransitionUpdate",
    "UpdateContext",
    "UpdateSettings",
    "make_update",
    "step_weight",
]
