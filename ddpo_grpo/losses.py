"""Pure tensor loss functions, organised as small registries.

* :data:`POLICY_LOSSES`  -- policy-gradient surrogates (PPO clipped objective).
* :data:`KL_ESTIMATORS`  -- per-sample estimators of ``KL(pi_theta || pi_ref)``.
* :data:`AGGREGATIONS`   -- reductions of a per-transition loss matrix to a scalar,
  with :data:`AGGREGATION_WEIGHTS` giving the equivalent per-step weight.

Convention: log-probabilities in this library are *averaged* over the latent
dimensions of one denoising transition (not summed), so every KL estimate here
is a per-dimension KL, and ratios are ``exp`` of per-dimension log-ratios.
Lookup helpers :func:`policy_loss`, :func:`kl_estimator`, :func:`aggregation`
raise ``ValueError`` listing the valid keys.
"""
from __future__ import annotations

from typing import Callable, Dict, Mapping

import torch

__all__ = [
    "AGGREGATIONS",
    "AGGREGATION_WEIGHTS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "aggregate_mean",
    "aggregate_sum_norm",
    "aggregation",
    "aggregation_weight",
    "clipped_surrogate",
    "gaussian_kl",
    "k1",
    "k2",
    "k3",
    "kl_estimator",
    "policy_loss",
]

#: Bounds used by the k3 estimator: log-ratio clamp and result ceiling.
K3_LOG_RATIO_CLAMP = 20.0
K3_MAX = 10.0


def _check_same_shape(**tensors: torch.Tensor) -> None:
    """Raise ValueError unless all named tensors share one shape."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        detail = ", ".join(f"{n} {s}" for n, s in shapes.items())
        raise ValueError(f"shape mismatch: {detail}; pass tensors of identical shape [B]")


# =========================================================================== #
# Policy losses                                                               #
# =========================================================================== #
def clipped_surrogate(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip_range: float,
) -> tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017, eq. 7), negated for minimisation.

    With ``rho = exp(log_prob - old_log_prob)`` and clip range ``eps``:

        L_unclip = -A * rho
        L_clip   = -A * clip(rho, 1 - eps, 1 + eps)
        L        = max(L_unclip, L_clip)        (= -min of the PPO objectives)

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
        zero; ``approx_kl`` = ``0.5 * (log_prob - old_log_prob)^2`` (the k2
        estimator against the sampling policy).

    Note: ``rho`` is not clamped; a huge log-ratio overflows to ``inf``.
    """
    if not clip_range > 0:
        raise ValueError(f"clip_range={clip_range!r} must be > 0 (typical values 1e-4 .. 0.2)")
    _check_same_shape(log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages)
    log_ratio = log_prob - old_log_prob  # [B]
    ratio = torch.exp(log_ratio)  # [B]
    loss_unclipped = -advantages * ratio  # [B]
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)  # [B]
    loss = torch.maximum(loss_unclipped, loss_clipped)  # [B]
    info = {
        "ratio": ratio.detach(),  # [B]
        "clipped": (loss_clipped > loss_unclipped).detach().to(log_prob.dtype),  # [B]
        "approx_kl": 0.5 * log_ratio.detach() ** 2,  # [B]
    }
    return loss, info


#: Policy losses: name -> fn(log_prob, old_log_prob, advantages, clip_range) -> (loss [B], info).
POLICY_LOSSES: Dict[str, Callable] = {
    "clipped": clipped_surrogate,
}


# =========================================================================== #
# KL estimators                                                               #
# =========================================================================== #
# All take (log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None) and
# estimate KL(pi_theta || pi_ref) per sample, from x ~ pi_theta. Let
# log r = ref_log_prob - log_prob = log pi_ref(x) - log pi_theta(x); then
# E_{pi_theta}[r] = 1 and KL = E_{pi_theta}[-log r]. (Schulman, "Approximating
# KL divergence", 2020.) Log-probs are per-dimension averages, so the results
# are per-dimension KLs.
def k1(log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None) -> torch.Tensor:
    """``k1 = -log r = log_prob - ref_log_prob``: unbiased, high variance, can be negative. ``[B]``."""
    _check_same_shape(log_prob=log_prob, ref_log_prob=ref_log_prob)
    return log_prob - ref_log_prob  # [B]


def k2(log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None) -> torch.Tensor:
    """``k2 = 0.5 * (log r)^2``: biased but low variance, always >= 0. ``[B]``.

    ``E[k2]`` is an f-divergence whose second-order expansion around ``r = 1``
    equals that of KL, so the bias is third order in the log-ratio and small
    when the two policies are close.
    """
    _check_same_shape(log_prob=log_prob, ref_log_prob=ref_log_prob)
    log_r = ref_log_prob - log_prob  # [B]
    return 0.5 * log_r**2  # [B]


def k3(log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None) -> torch.Tensor:
    """``k3 = (r - 1) - log r``: unbiased, low variance, always >= 0 (clamped). ``[B]``.

    Unbiased because ``E[r - 1] = 0`` under ``pi_theta``; non-negative because
    ``exp(y) - 1 >= y``. For stability ``log r`` is clamped to ``[-20, 20]``,
    ``expm1`` avoids cancellation, and the result is clamped to ``[0, 10]``
    (beyond 10 the gradient is zero -- the "low-variance, clamped" variant).
    """
    _check_same_shape(log_prob=log_prob, ref_log_prob=ref_log_prob)
    log_r = torch.clamp(ref_log_prob - log_prob, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)  # [B]
    return torch.clamp(torch.expm1(log_r) - log_r, 0.0, K3_MAX)  # [B]


def gaussian_kl(log_prob=None, ref_log_prob=None, *, mean=None, ref_mean=None, std=None) -> torch.Tensor:
    """Closed-form KL between two Gaussians sharing one std, averaged over non-batch dims. ``[B]``.

    For ``N(m1, s^2)`` and ``N(m2, s^2)`` per dimension,
    ``KL = (m1 - m2)^2 / (2 s^2)`` (the log-det and trace terms cancel), and

        KL_b = mean_{d} (mean[b, d] - ref_mean[b, d])^2 / (2 * std[b, d]^2).

    The log-prob arguments are ignored (kept for a uniform signature).

    Args:
        mean: ``[B, ...]`` policy mean of the transition.
        ref_mean: ``[B, ...]`` reference-policy mean.
        std: std broadcastable to ``mean`` (e.g. ``[B, 1, 1, 1]`` or a scalar), > 0.
    """
    missing = [n for n, v in (("mean", mean), ("ref_mean", ref_mean), ("std", std)) if v is None]
    if missing:
        raise ValueError(f"the 'gaussian' KL estimator needs {missing}; pass the transition means and std")
    _check_same_shape(mean=mean, ref_mean=ref_mean)
    std = torch.as_tensor(std, dtype=mean.dtype, device=mean.device)
    kl = (mean - ref_mean) ** 2 / (2.0 * std**2)  # [B, ...]
    return kl.reshape(kl.shape[0], -1).mean(dim=1) if kl.ndim > 1 else kl  # [B]


#: KL estimators: name -> fn(log_prob, ref_log_prob, *, mean, ref_mean, std) -> [B].
KL_ESTIMATORS: Dict[str, Callable] = {
    "k1": k1,
    "k2": k2,
    "k3": k3,
    "gaussian": gaussian_kl,
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


#: Aggregations: name -> fn(loss [B, K], mask [B, K] | None, *, constant) -> scalar.
AGGREGATIONS: Dict[str, Callable] = {
    "mean": aggregate_mean,
    "sum_norm": aggregate_sum_norm,
}


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


#: Per-step weights: name -> fn(*, num_samples, num_transitions, constant, num_valid) -> float.
AGGREGATION_WEIGHTS: Dict[str, Callable] = {
    "mean": _weight_mean,
    "sum_norm": _weight_sum_norm,
}


def aggregation_weight(
    name: str,
    *,
    num_samples: int,
    num_transitions: int,
    constant: float | None = None,
    num_valid: int | None = None,
) -> float:
    """Weight ``w`` such that ``sum_k w * sum_b m[b,k] L[b,k] == AGGREGATIONS[name](L, m)``.

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
    fn = _lookup(AGGREGATION_WEIGHTS, "aggregation", name)
    if num_samples < 1 or num_transitions < 1:
        raise ValueError(
            f"num_samples={num_samples!r} and num_transitions={num_transitions!r} must both be >= 1"
        )
    return fn(num_samples=num_samples, num_transitions=num_transitions, constant=constant, num_valid=num_valid)


# =========================================================================== #
# Lookup helpers                                                              #
# =========================================================================== #
def _lookup(registry: Mapping[str, Callable], kind: str, key: str) -> Callable:
    """Return ``registry[key]`` or raise ValueError listing the valid keys."""
    try:
        return registry[key]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {kind} {key!r}; valid choices are {sorted(registry)}") from None


def policy_loss(name: str) -> Callable:
    """Look up :data:`POLICY_LOSSES` by name."""
    return _lookup(POLICY_LOSSES, "policy loss", name)


def kl_estimator(name: str) -> Callable:
    """Look up :data:`KL_ESTIMATORS` by name."""
    return _lookup(KL_ESTIMATORS, "KL estimator", name)


def aggregation(name: str) -> Callable:
    """Look up :data:`AGGREGATIONS` by name."""
    return _lookup(AGGREGATIONS, "aggregation", name)
