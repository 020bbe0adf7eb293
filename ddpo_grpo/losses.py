"""Pure tensor loss functions, organised as small registries.

* :func:`clipped_surrogate` -- the policy-gradient surrogate on stored transitions (PPO's clipped objective).
* :data:`FORWARD_OBJECTIVES` -- objectives on the forward (noising) process of the rollout's final
  samples: advantage-weighted matching, DiffusionNFT, reward-weighted regression.
* :data:`KL_ESTIMATORS`  -- per-sample estimators of ``KL(pi_theta || pi_ref)`` (``kl_estimators.py``, importable
  from here).
* :data:`AGGREGATIONS`   -- reductions of a per-transition loss matrix to a scalar, each with the
  equivalent per-step weight (:class:`Aggregation`).

Convention: log-probabilities in this library are *averaged* over the d latent dimensions of one
denoising transition (not summed), so the KL estimates here are per-dimension KLs and ratios are
``exp`` of per-dimension log-ratios. The trust region is stated *per sample* (the summed log-ratio
``d·δ``, whose meaning does not depend on the resolution): ``clip_range`` ε bounds the per-sample
ratio to ``[1 − ε, 1 + ε]`` to first order, implemented as the per-dimension bound ``1 ± ε/d``, and
``approx_kl`` is reported per sample, ``½ (d·δ)²``. Lookup helpers :func:`forward_objective`,
:func:`kl_estimator`, :func:`aggregation` raise ``ValueError`` listing the valid keys.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch

from ddpo_grpo.kl_estimators import (
    KL_ESTIMATORS,
    check_same_shape,
    flow_grpo_kl,
    gaussian_kl,
    k1,
    k2,
    k3,
)

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "KL_ESTIMATORS",
    "aggregate_mean",
    "aggregate_sum_norm",
    "aggregation",
    "aggregation_weight",
    "FORWARD_OBJECTIVES",
    "awm_surrogate",
    "clipped_surrogate",
    "flow_grpo_kl",
    "forward_objective",
    "nft_loss",
    "rwr_loss",
    "gaussian_kl",
    "k1",
    "k2",
    "k3",
    "kl_estimator",
]


# =========================================================================== #
# Policy losses                                                               #
# =========================================================================== #
def clipped_surrogate(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
    dims: int = 1,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017, eq. 7), negated for minimisation.

    With the per-dimension ratio ``rho = exp(log_prob - old_log_prob)`` (log-probs averaged over the
    ``dims`` latent dimensions) and the per-sample clip range ``eps``:

        L_unclip = -A * rho
        L_clip   = -A * clip(rho, 1 - eps/dims, 1 + eps/dims)
        L        = max(L_unclip, L_clip)        (= -min of the PPO objectives)

    The per-sample ratio is ``rho**dims``; ``rho in 1 ± eps/dims`` is ``rho**dims in 1 ± eps`` to first
    order, so ``eps`` bounds the per-sample ratio at any resolution (``dims = 1``: the classic form).

    Taking the max of the *losses* is the pessimistic bound: clipping only ever
    removes incentive. For ``A > 0`` the loss stops improving once
    ``rho > 1 + eps``; for ``A < 0`` once ``rho < 1 - eps``; in the opposite
    directions (``A > 0, rho < 1 - eps`` etc.) the unclipped term is larger and
    is kept, so the gradient still pushes the ratio back.

    Args:
        log_prob: ``[B]`` log-probs under the current policy (with grad).
        old_log_prob: ``[B]`` log-probs under the sampling policy.
        advantages: ``[B]`` advantages.
        clip_range: ``eps > 0``.

    Returns:
        ``(loss [B], info)`` where ``info`` holds detached ``[B]`` tensors:
        ``ratio`` = ``rho``; ``clipped`` = 1.0 where ``L_clip > L_unclip``
        strictly, i.e. the clipped branch is the one selected *and* differs
        from the unclipped objective -- exactly the samples whose gradient is
        zero; ``approx_kl`` = ``0.5 * (dims * (log_prob - old_log_prob))^2`` (the k2
        estimator of the per-sample KL against the sampling policy).

    Note: ``rho`` is not clamped; a huge log-ratio overflows to ``inf``.
    """
    if not clip_range > 0:
        raise ValueError(f"clip_range={clip_range!r} must be > 0 (the per-sample ratio bound, e.g. 0.2 as in PPO)")
    check_same_shape(log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages)
    log_ratio = log_prob - old_log_prob  # [B]
    ratio = torch.exp(log_ratio)  # [B]
    eps = clip_range / dims
    loss_unclipped = -advantages * ratio  # [B]
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - eps, 1.0 + eps)  # [B]
    loss = torch.maximum(loss_unclipped, loss_clipped)  # [B]
    info = {
        "ratio": ratio.detach(),  # [B]
        "clipped": (loss_clipped > loss_unclipped).detach().to(log_prob.dtype),  # [B]
        "approx_kl": 0.5 * (dims * log_ratio.detach()) ** 2,  # [B]
    }
    return loss, info


# =========================================================================== #
# Forward-process objectives                                                  #
# =========================================================================== #
# Each trains on the rollout's FINAL samples x0 (never on its transitions), noised again:
#     x_u = forward(x0, u, eps),  eps ~ N(0, I),  u in (0, 1) a noise level
# (flow matching: x_u = (1 − σ) x0 + σ eps with σ = σ(u); DDPM: sqrt(ᾱ) x0 + sqrt(1 − ᾱ) eps), and compare
# the model's prediction f = f_θ(x_u, u, c) (conditional branch: CFG-free training) with the target y*
# of the family's pretraining loss (flow: the velocity eps − x0; DDPM: eps or v). `scale` s(u) converts a
# prediction error into an x0 error: x̂0 − x0 = s·(f − y*) (flow: s = σ). `old` is the sampling policy's
# prediction at the same (x_u, u) (the weights the rollout was drawn with). Nothing here needs a
# log-density of a transition, so these objectives allow deterministic (ODE / DDIM η = 0) rollouts,
# any number of sampling steps and any sampler.
# Signature: fn(pred, target, advantages, *, old_pred, scale, dims, clip_range, options) -> (loss [B], info).


def _sq_err(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample mean squared error over the non-batch dims, in float32. ``[B]``."""
    err = (pred.float() - target.float()) ** 2  # [B, ...]
    return err.reshape(err.shape[0], -1).mean(dim=1)  # [B]


def awm_surrogate(pred, target, advantages, *, old_pred, scale=None, dims=1, clip_range=0.2, options=None):
    """Advantage-weighted matching (AWM; Xue et al. 2025, "Advantage Weighted Matching").

    1. The pretraining loss on a sample, ℓ_θ = −mean_d (f_θ − y*)², is (up to the time weighting and
       constants) the ELBO of log p_θ(x0), the quantity DDPO's per-step log-likelihoods sum to.
    2. The policy gradient E[A ∇ log p_θ(x0)] with the ELBO in place of log p_θ is E[A ∇ℓ_θ]: the
       score-function estimator over whole samples, with the noise of the forward process instead of
       the sampler's noise (lower variance: no dependence on the sampled trajectory).
    3. As in PPO the update reuses samples through the ratio ρ = exp(ℓ_θ − ℓ_old) (ℓ_old: the sampling
       policy at the same x_u and ε), clipped like :func:`clipped_surrogate` (per-sample ``clip_range``,
       ``dims`` the latent dimensions): L = max(−A ρ, −A clip(ρ, 1 ± ε/d)). At ρ = 1 its gradient is
       A ∇ mean (f_θ − y*)²: towards samples of positive advantage, away from the negative ones.
    """
    log_prob = -_sq_err(pred, target)  # [B]
    old_log_prob = -_sq_err(old_pred, target).detach()  # [B]
    loss, info = clipped_surrogate(log_prob, old_log_prob, advantages, clip_range, dims)
    info["matching_loss"] = -log_prob.detach()
    return loss, info


def nft_loss(pred, target, advantages, *, old_pred, scale, dims=1, clip_range=None, options=None):
    """DiffusionNFT (Zheng et al. 2025, "DiffusionNFT: Online Diffusion Reinforcement with Forward Process").

    1. Optimality probability of a sample from its advantage: r = ½ + ½·clip(A / A_max, −1, 1) ∈ [0, 1]
       (``options["adv_max"]``, the advantage clip).
    2. Implicit positive and negative policies around the sampling policy v_old, with strength β
       (``options["beta"]``): v⁺ = (1 − β) v_old + β f_θ and v⁻ = (1 + β) v_old − β f_θ, so that
       v_old = (v⁺ + v⁻)/2 and the update f_θ − v_old moves v⁺ and v⁻ in opposite directions.
    3. Each is fitted by the pretraining loss, v⁺ on the samples in proportion r and v⁻ in proportion
       1 − r: L = (A_max / β)·[r ℓ(v⁺) + (1 − r) ℓ(v⁻)]. At the optimum f_θ − v_old points from what the
       negative samples' data would need to what the positive ones' would: a policy-improvement
       direction without any likelihood, any sampler, and no CFG in training.
    4. ℓ is the x0-space error with the paper's adaptive weight: ℓ(v) = mean (x̂0 − x0)² / sg(mean |x̂0 − x0|),
       x̂0 − x0 = s·(v − y*) (``scale`` s, [B]), which evens out the noise levels' loss scales.
    With r = ½ (A = 0) the two terms cancel in the improvement direction and leave the pull towards
    v_old: samples without advantage regularise, they are never skipped.
    """
    opts = options or {}
    beta, adv_max = float(opts.get("beta", 1.0)), float(opts.get("adv_max", 5.0))
    r = (0.5 + 0.5 * torch.clamp(advantages.float() / adv_max, -1.0, 1.0)).detach()  # [B]
    old = old_pred.detach().float()
    f = pred.float()
    s = scale.float().reshape(-1, *([1] * (f.ndim - 1)))  # [B, 1, ..., 1]

    def weighted(v):  # [B, ...] -> [B]
        err = s * (v - target.float())  # x̂0 − x0
        flat = err.reshape(err.shape[0], -1)
        weight = flat.abs().mean(dim=1).clamp_min(1e-5).detach()  # [B]
        return flat.square().mean(dim=1) / weight

    positive = weighted((1.0 - beta) * old + beta * f)  # [B]
    negative = weighted((1.0 + beta) * old - beta * f)  # [B]
    loss = adv_max / beta * (r * positive + (1.0 - r) * negative)  # [B]
    drift = _sq_err(pred, old_pred).detach()  # [B] how far the policy moved from the sampler
    return loss, {"matching_loss": _sq_err(pred, target).detach(), "drift": drift, "r": r}


def rwr_loss(pred, target, advantages, *, old_pred=None, scale=None, dims=1, clip_range=None, options=None):
    """Reward-weighted regression: the pretraining loss with non-negative per-sample weights.

    w = exp(A / τ) normalised to mean 1 over the epoch (``options["weights"]`` [B], computed by the
    trainer; τ = ``train.rwr_temperature``): the model fits its own samples in proportion to how good
    they were, never pushing away from bad ones. τ → 0 approaches best-of-group regression.
    L = w · mean (f_θ − y*)².
    """
    weights = (options or {})["weights"].float()  # [B]
    matching = _sq_err(pred, target)  # [B]
    return weights * matching, {"matching_loss": matching.detach()}


#: Forward-process objectives: name -> fn(pred, target, advantages, *, old_pred, scale, dims, clip_range,
#: options) -> (loss [B], info).
FORWARD_OBJECTIVES: dict[str, Callable] = {
    "awm": awm_surrogate,
    "nft": nft_loss,
    "rwr": rwr_loss,
}


# =========================================================================== #
# Aggregations                                                                #
# =========================================================================== #
# L is a per-transition loss matrix [B, K] (B samples, K trained steps), mask a
# bool [B, K] of valid transitions (all valid when None). Both aggregations are
# *linear* in L:  agg(L) = sum_{b,k} w * mask[b,k] * L[b,k] with one constant w.
# Hence the gradient of the aggregate is sum_k grad(w * sum_b mask[b,k] L[b,k]),
# so the trainer may back-propagate one denoising step k at a time with the
# weight from aggregation_weight() and accumulate gradients exactly.
def _masked(loss: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(loss with invalid entries set to 0, number of valid entries)``."""
    if loss.ndim != 2:
        raise ValueError(f"loss must be a [B, K] matrix, got shape {tuple(loss.shape)}; add a K axis")
    if mask is None:
        return loss, torch.tensor(float(loss.numel()), dtype=loss.dtype, device=loss.device)
    if mask.shape != loss.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} must equal loss shape {tuple(loss.shape)}")
    mask = mask.to(torch.bool)
    # where() (not multiply) so NaN/inf in invalid entries cannot leak into the sum.
    return torch.where(mask, loss, torch.zeros_like(loss)), mask.sum().to(loss.dtype)


def aggregate_mean(loss: torch.Tensor, mask: torch.Tensor | None = None, *, constant=None) -> torch.Tensor:
    """Mean over all valid transitions: ``sum_{b,k} m L / sum_{b,k} m`` (scalar).

    ``constant`` is ignored. With no valid entry the result is 0 (still attached
    to the graph).
    """
    masked, count = _masked(loss, mask)
    return masked.sum() / count.clamp_min(1.0)


def aggregate_sum_norm(loss: torch.Tensor, mask: torch.Tensor | None = None, *, constant=None) -> torch.Tensor:
    """Dr. GRPO normalisation (Liu et al. 2025): ``(1/B) sum_b sum_k m L / C`` (scalar).

    A fixed constant ``C`` (typically the maximum number of trained steps)
    replaces the per-sample valid count so samples with fewer valid
    transitions are not up-weighted.
    """
    if constant is None or not constant > 0:
        raise ValueError(f"constant={constant!r}: 'sum_norm' needs constant > 0 (e.g. the max number of trained steps)")
    masked, _ = _masked(loss, mask)
    return masked.sum() / (loss.shape[0] * float(constant))


def _weight_mean(*, num_samples: int, num_transitions: int, constant=None, num_valid=None) -> float:
    """``w = 1 / (B K)``, or ``1 / num_valid`` when a mask leaves ``num_valid`` transitions."""
    n = num_samples * num_transitions if num_valid is None else num_valid
    if not n > 0:
        raise ValueError(f"'mean' aggregation needs at least one valid transition, got {n}")
    return 1.0 / n


def _weight_sum_norm(*, num_samples: int, num_transitions: int, constant=None, num_valid=None) -> float:
    """``w = 1 / (B C)`` independent of the mask."""
    if constant is None or not constant > 0:
        raise ValueError(f"constant={constant!r}: 'sum_norm' needs constant > 0 (e.g. the max number of trained steps)")
    return 1.0 / (num_samples * float(constant))


class Aggregation(NamedTuple):
    """A reduction of the loss matrix and its equivalent per-step weight.

    reduce: fn(loss [B, K], mask [B, K] | None, *, constant) -> scalar
    weight: fn(*, num_samples, num_transitions, constant, num_valid) -> w (see :func:`aggregation_weight`)
    """

    reduce: Callable
    weight: Callable


#: Aggregations (``train.loss_aggregation``): name -> its reduction and per-step weight.
AGGREGATIONS: dict[str, Aggregation] = {
    "mean": Aggregation(aggregate_mean, _weight_mean),
    "sum_norm": Aggregation(aggregate_sum_norm, _weight_sum_norm),
}


def aggregation_weight(
    name: str,
    *,
    num_samples: int,
    num_transitions: int,
    constant: float | None = None,
    num_valid: int | None = None,
) -> float:
    """Weight ``w`` such that ``sum_k w * sum_b m[b,k] L[b,k] == aggregation(name)(L, m)``.

    By linearity (see the module notes) the trainer can call
    ``(w * loss_k.sum()).backward()`` for each step ``k`` separately and obtain
    the gradient of the aggregated loss. Holds exactly with every transition
    valid; with a mask, pass ``num_valid = mask.sum()`` for ``"mean"`` (and zero
    the invalid entries of ``loss_k``); ``"sum_norm"`` needs no adjustment.

    Args:
        name: key of :data:`AGGREGATIONS`.
        num_samples: ``B``.
        num_transitions: ``K``, trained steps per sample.
        constant: ``C`` for ``"sum_norm"``.
        num_valid: number of valid transitions under the mask (``"mean"`` only).
    """
    fn = _lookup(AGGREGATIONS, "aggregation", name).weight
    if num_samples < 1 or num_transitions < 1:
        raise ValueError(f"num_samples={num_samples!r} and num_transitions={num_transitions!r} must both be >= 1")
    return fn(num_samples=num_samples, num_transitions=num_transitions, constant=constant, num_valid=num_valid)


# =========================================================================== #
# Lookup helpers                                                              #
# =========================================================================== #
def _lookup(registry: Mapping, kind: str, key: str):
    """Return ``registry[key]`` or raise ValueError listing the valid keys."""
    try:
        return registry[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {kind} {key!r}; valid choices are {sorted(registry)}") from None


def forward_objective(name: str) -> Callable:
    """Look up :data:`FORWARD_OBJECTIVES` by name."""
    return _lookup(FORWARD_OBJECTIVES, "forward-process objective", name)


def kl_estimator(name: str) -> Callable:
    """Look up :data:`KL_ESTIMATORS` by name."""
    return _lookup(KL_ESTIMATORS, "KL estimator", name)


def aggregation(name: str) -> Callable:
    """The reduction of :data:`AGGREGATIONS` ``name``."""
    return _lookup(AGGREGATIONS, "aggregation", name).reduce
