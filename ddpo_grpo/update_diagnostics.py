"""Why an update does (not) learn: the gradient's noise scale, the KL anchor's pull and whether a step generalises.

Measured at the run's current weights (the base, or a checkpoint's with ``resume_from``) on E epochs sampled
without any update in between, so that every epoch is an independent draw from the same policy
(``scripts/diagnose_updates.py`` runs it; one process).

1. **Noise scale.** Split each epoch into minibatches of b samples made of whole groups (a group's advantages
   are centred on its own mean, so members of one group are not independent of each other) and take each
   minibatch's gradient g_m of the objective (the updater of ``train.objective``, exactly what training
   back-propagates). With per-sample gradients of mean G and covariance Σ, a minibatch of b independent
   samples has E[g_m] = G and Cov(g_m) = Σ / b, so
       E |g_m|² = |G|² + tr Σ / b        and, for two different minibatches,  E g_m·g_m' = |G|².
   From the Gram matrix K_mm' = g_m·g_m' of M minibatches:
       |G|² ≈ mean_{m≠m'} K_mm'            tr Σ ≈ b · (mean_m K_mm − mean_{m≠m'} K_mm')
   and the noise scale B_noise = tr Σ / |G|² (McCandlish et al. 2018, "An Empirical Model of Large-Batch
   Training", B_simple): a step over B samples is 1 / (1 + B_noise / B) signal by expected squared norm, so a
   step of B ≪ B_noise samples points mostly in a random direction. ``signal_fraction`` is that share at the
   run's samples per optimizer step, and ``cosine`` = mean_{m≠m'} K_mm' / mean_m K_mm = 1 / (1 + B_noise / b) the
   cosine two minibatches' gradients have on average (when their norms are alike). Adam's step has about the
   same length whatever the gradient's signal, so a noise-dominated gradient moves the weights as far as a clean
   one: the drift a random reward causes.
   Intervals: a delete-one jackknife over the minibatches. When |G|² is within noise of 0 (B_noise infinite or
   meaningless), ``b_noise_lower`` = tr Σ / (|G|² + 2 SE) still bounds it from below.
2. **The KL anchor** (``train.beta`` > 0): each minibatch's gradient once more with every advantage set to 0
   (the objectives' policy terms are linear in A, so this is the KL term's gradient alone) gives g = g_pol + g_kl;
   the report gives |mean g_pol|, |mean g_kl| and their cosine (< 0: the anchor pulls against the advantage
   term). At the base weights (no optimizer step yet) the policy is the reference and g_kl = 0: measured only at a
   checkpoint.
3. **Does a step generalise.** The objective's policy loss is measured on every epoch, then the run's own update
   phase trains on epoch 0 (the optimizer steps of one training epoch), then the loss is measured again with the
   same sampling policy. Its fall on epoch 0 is what the step fitted; its fall on epochs 1 … E−1 (fresh samples
   of the same prompts' distribution, never trained on) is what carries over. A step that lowers the in-sample
   loss and leaves the fresh one where it was fitted the samples' noise, not the reward.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ddpo_grpo.inner_loop import Stats
from ddpo_grpo.weights import snapshot


def _flat_grad(params: dict) -> torch.Tensor:
    return torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().flatten() for p in params.values()]
    )


def _zero_grad(params: dict) -> None:
    for p in params.values():
        p.grad = None


def group_minibatches(items: list, batch_size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Indices of an epoch's minibatches of ``batch_size`` items made of whole groups, the groups in random order.

    ``items`` are the epoch's (group, member) pairs; a minibatch never splits a group, and groups that do not fill
    a last minibatch are left out. Refused when ``batch_size`` is not a multiple of the group size."""
    groups: dict[int, list[int]] = {}
    for i, (g, _) in enumerate(items):
        groups.setdefault(g, []).append(i)
    size = len(next(iter(groups.values())))
    if batch_size % size:
        raise ValueError(f"train.batch_size={batch_size} must be a multiple of sample.group_size={size} here")
    order = [list(groups)[k] for k in torch.randperm(len(groups), generator=generator).tolist()]
    per = batch_size // size
    return [
        torch.tensor([i for g in order[s : s + per] for i in groups[g]]) for s in range(0, len(order) - per + 1, per)
    ]


def _backward(update, rollout, advantages: torch.Tensor, index: torch.Tensor, params: dict):
    """The updater's own backward over ``rollout[index]`` from zeroed grads; its ``MinibatchResult``."""
    _zero_grad(params)
    return update.minibatch(
        rollout.select(index), advantages[index.to(advantages.device)], index, sync=True, weight=1.0, check=False
    )


def minibatch_gradient(update, rollout, advantages: torch.Tensor, index: torch.Tensor, params: dict) -> torch.Tensor:
    """The flat gradient of the objective over ``rollout[index]`` (the updater's own backward), grads left at zero."""
    _backward(update, rollout, advantages, index, params)
    grad = _flat_grad(params)
    _zero_grad(params)
    return grad


def noise_scale(grads: list[torch.Tensor], batch_size: int, step_samples: int) -> dict:
    """|G|², tr Σ, B_noise and the signal fraction of a step of ``step_samples`` (module docstring, 1), each with
    its jackknife standard error over the M minibatch gradients."""
    gram = torch.stack(grads).double() @ torch.stack(grads).double().T  # [M, M]

    def estimate(keep: np.ndarray) -> dict:
        k = gram[keep][:, keep]
        m = len(keep)
        diag = float(k.diagonal().mean())
        pair = float((k.sum() - k.diagonal().sum()) / (m * (m - 1)))
        trace = batch_size * (diag - pair)
        b_noise = trace / pair if pair > 0 else math.inf
        return {
            "signal_sq": pair,
            "trace_sigma": trace,
            "b_noise": b_noise,
            "cosine": pair / diag if diag > 0 else math.nan,
            "signal_fraction": 1.0 / (1.0 + b_noise / step_samples) if pair > 0 else 0.0,
        }

    m = len(grads)
    if m < 3:
        raise ValueError(f"{m} minibatch gradients: the noise scale needs at least 3 (more epochs or smaller batches)")
    full = estimate(np.arange(m))
    drops = [estimate(np.delete(np.arange(m), j)) for j in range(m)]
    out = dict(full)
    for key in full:
        values = np.array([d[key] for d in drops], dtype=np.float64)
        finite = values[np.isfinite(values)]
        out[f"{key}_se"] = (
            float(math.sqrt((len(finite) - 1) / len(finite) * ((finite - finite.mean()) ** 2).sum()))
            if len(finite) == m
            else math.inf
        )
    upper = full["signal_sq"] + 2 * out["signal_sq_se"]  # |G|² at most this (two standard errors)
    out["b_noise_lower"] = full["trace_sigma"] / upper if upper > 0 else math.inf
    out["minibatches"] = m
    return out


def anchor_pull(total: list[torch.Tensor], kl_only: list[torch.Tensor]) -> dict:
    """|mean g_pol|, |mean g_kl| and their cosine (module docstring, 2)."""
    g_kl = torch.stack(kl_only).mean(0)
    g_pol = torch.stack(total).mean(0) - g_kl
    norm_pol, norm_kl = float(g_pol.norm()), float(g_kl.norm())
    cos = float(g_pol @ g_kl) / (norm_pol * norm_kl) if norm_pol > 0 and norm_kl > 0 else math.nan
    return {"policy_grad_norm": norm_pol, "kl_grad_norm": norm_kl, "policy_kl_cosine": cos}


def policy_loss(update, ep, advantages: torch.Tensor, params: dict, batch_size: int, old=None) -> float:
    """The objective's mean policy loss over the epoch ``ep``'s rollout (its gradients discarded). ``old``: the
    sampling policy's weights for a forward objective measured after an update (else ``prepare`` would take the
    updated ones)."""
    rollout = ep.rollout
    update.prepare(ep.index, rollout, advantages)
    if old is not None:
        update.old = old
    stats = Stats()
    for start in range(0, len(rollout), batch_size):
        index = torch.arange(start, min(start + batch_size, len(rollout)))
        stats.add(_backward(update, rollout, advantages, index, params))
    _zero_grad(params)
    return stats.mean("policy_loss")


def diagnose(trainer, *, epochs: int, first_epoch: int, seed: int) -> dict:
    """The three measurements of the module docstring at ``trainer``'s current weights (one process)."""
    if trainer.acc.num_processes > 1:
        raise ValueError("the update diagnostics run in one process: launch without accelerate / torchrun")
    if epochs < 2:
        raise ValueError(f"--epochs={epochs}: at least 2 (one to train on, one fresh)")
    cfg, params, update = trainer.config, trainer.params, trainer.update
    b = cfg.train.batch_size
    step_samples = b * cfg.train.gradient_accumulation_steps
    generator = torch.Generator().manual_seed(seed)
    drawn, totals, kl_only, rewards, spreads = [], [], [], [], []
    anchored = cfg.train.beta > 0 and trainer.global_step > 0  # before any step the policy is the reference
    trainer.model.train(cfg.train.objective != "grpo")
    for e in range(first_epoch, first_epoch + epochs):
        ep, scores, _, _ = trainer.sampled_epoch(e)
        adv, stats = trainer.advantage_phase(ep, scores)
        drawn.append((ep, adv))
        rewards.append(stats.get("reward/mean", math.nan))
        spreads.append(stats.get("reward/group_std", math.nan))
        update.prepare(e, ep.rollout, adv)
        for index in group_minibatches(ep.items, b, generator):
            totals.append(minibatch_gradient(update, ep.rollout, adv, index, params))
            if anchored:
                kl_only.append(minibatch_gradient(update, ep.rollout, torch.zeros_like(adv), index, params))
    policy = [t - k for t, k in zip(totals, kl_only)] if kl_only else totals
    out = {"objective": cfg.train.objective, "batch_size": b, "step_samples": step_samples, "epochs": epochs}
    out["reward_mean"] = float(np.nanmean(rewards))
    out["reward_group_std"] = float(np.nanmean(spreads))
    out["noise"] = noise_scale(policy, b, step_samples)
    out["grad_norm_minibatch"] = float(torch.stack(policy).norm(dim=1).mean())
    if kl_only:
        out["anchor"] = anchor_pull(totals, kl_only)

    old = snapshot(params)
    before = [policy_loss(update, ep, adv, params, b) for ep, adv in drawn]
    sampling_policy = getattr(update, "old", None)  # a forward objective's (the lagging sampler's when configured)
    steps_before = trainer.global_step
    metrics = trainer.update_phase(*drawn[0])
    trainer.model.train(cfg.train.objective != "grpo")  # update_phase leaves eval mode: measure as before it
    after = [policy_loss(update, ep, adv, params, b, old=sampling_policy) for ep, adv in drawn]
    step = math.sqrt(sum(float((p.detach().float() - old[n].float()).square().sum()) for n, p in params.items()))
    weight = math.sqrt(sum(float(v.float().square().sum()) for v in old.values()))
    fresh = [before[i] - after[i] for i in range(1, epochs)]
    out["step"] = {
        "in_sample_gain": before[0] - after[0],
        "fresh_gain": float(np.mean(fresh)),
        "fresh_gain_se": float(np.std(fresh, ddof=1) / math.sqrt(len(fresh))) if len(fresh) > 1 else math.nan,
        "step_norm": step,
        "weight_norm": weight,
        "optimizer_steps": trainer.global_step - steps_before,
        "approx_kl": metrics.get("train/approx_kl", math.nan),
        "clipfrac": metrics.get("train/clipfrac", math.nan),
    }
    trainer.model.eval()
    return out


def report_lines(result: dict) -> list[str]:
    """The diagnosis as printed lines."""
    n, s, steps = result["noise"], result["step"], result["step_samples"]
    lines = [
        f"objective {result['objective']}: {result['epochs']} epochs drawn at the same weights, minibatches of "
        f"{result['batch_size']} samples, whole groups ({n['minibatches']} of them), {steps} samples per optimizer "
        f"step, training reward {result['reward_mean']:.4f} (within-group std {result['reward_group_std']:.4f})",
        f"noise scale B_noise = {n['b_noise']:.4g} ± {n['b_noise_se']:.2g} samples (≥ {n['b_noise_lower']:.3g}); "
        f"cosine between minibatch gradients {n['cosine']:.4f} ± {n['cosine_se']:.2g}; signal share of a "
        f"{steps}-sample step {n['signal_fraction']:.3f} ± {n['signal_fraction_se']:.2g}",
        f"|G|² = {n['signal_sq']:.4g} ± {n['signal_sq_se']:.2g}, tr Σ = {n['trace_sigma']:.4g}; mean minibatch "
        f"gradient norm {result['grad_norm_minibatch']:.4g}",
    ]
    if "anchor" in result:
        a = result["anchor"]
        lines.append(
            f"KL anchor: |mean policy gradient| {a['policy_grad_norm']:.4g}, |mean KL gradient| "
            f"{a['kl_grad_norm']:.4g}, cosine {a['policy_kl_cosine']:.4f}"
        )
    lines.append(
        f"one training epoch's update: policy loss fell {s['in_sample_gain']:.4g} on its own samples and "
        f"{s['fresh_gain']:.4g} ± {s['fresh_gain_se']:.2g} on fresh ones; |Δθ| {s['step_norm']:.4g} (|θ| "
        f"{s['weight_norm']:.4g}), {s['optimizer_steps']} optimizer steps, approx KL {s['approx_kl']:.3g}, "
        f"clip fraction {s['clipfrac']:.3g}"
    )
    return lines


__all__ = [
    "anchor_pull",
    "diagnose",
    "group_minibatches",
    "minibatch_gradient",
    "noise_scale",
    "policy_loss",
    "report_lines",
]
