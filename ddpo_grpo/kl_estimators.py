"""Per-sample estimators of ``KL(π_θ ‖ π_ref)`` between the policy and the reference, a small registry.

Log-probabilities in this library are *averaged* over the d latent dimensions of one denoising transition, so
these are per-dimension KLs. ``train.kl_estimator`` picks one (``losses.kl_estimator`` looks it up by name);
``train.beta`` weighs it in the loss (``updates.TransitionUpdate``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = [
    "K3_LOG_RATIO_CLAMP",
    "K3_MAX",
    "KL_ESTIMATORS",
    "check_same_shape",
    "flow_grpo_kl",
    "gaussian_kl",
    "k1",
    "k2",
    "k3",
]

#: Bounds used by the k3 estimator: log-ratio clamp and result ceiling.
K3_LOG_RATIO_CLAMP = 20.0
K3_MAX = 10.0


def check_same_shape(**tensors: torch.Tensor) -> None:
    """Raise ValueError unless all named tensors share one shape."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        detail = ", ".join(f"{n} {s}" for n, s in shapes.items())
        raise ValueError(f"shape mismatch: {detail}; pass tensors of identical shape [B]")


# All take (log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None) and
# estimate KL(pi_theta || pi_ref) per sample, from x ~ pi_theta. Let
# log r = ref_log_prob - log_prob = log pi_ref(x) - log pi_theta(x); then
# E_{pi_theta}[r] = 1 and KL = E_{pi_theta}[-log r]. (Schulman, "Approximating
# KL divergence", 2020.) Log-probs are per-dimension averages, so the results
# are per-dimension KLs.
def k1(log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None, step=None) -> torch.Tensor:
    """``k1 = -log r = log_prob - ref_log_prob``: unbiased, high variance, can be negative. ``[B]``."""
    check_same_shape(log_prob=log_prob, ref_log_prob=ref_log_prob)
    return log_prob - ref_log_prob  # [B]


def k2(log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None, step=None) -> torch.Tensor:
    """``k2 = 0.5 * (log r)^2``: biased but low variance, always >= 0. ``[B]``.

    ``E[k2]`` is an f-divergence whose second-order expansion around ``r = 1``
    equals that of KL, so the bias is third order in the log-ratio and small
    when the two policies are close.
    """
    check_same_shape(log_prob=log_prob, ref_log_prob=ref_log_prob)
    log_r = ref_log_prob - log_prob  # [B]
    return 0.5 * log_r**2  # [B]


def k3(log_prob, ref_log_prob, *, mean=None, ref_mean=None, std=None, step=None) -> torch.Tensor:
    """``k3 = (r - 1) - log r``: unbiased, low variance, always >= 0 (clamped). ``[B]``.

    Unbiased because ``E[r - 1] = 0`` under ``pi_theta``; non-negative because
    ``exp(y) - 1 >= y``. For stability ``log r`` is clamped to ``[-20, 20]``,
    ``expm1`` avoids cancellation, and the result is clamped to ``[0, 10]``
    (beyond 10 the gradient is zero -- the "low-variance, clamped" variant).
    """
    check_same_shape(log_prob=log_prob, ref_log_prob=ref_log_prob)
    log_r = torch.clamp(ref_log_prob - log_prob, -K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)  # [B]
    return torch.clamp(torch.expm1(log_r) - log_r, 0.0, K3_MAX)  # [B]


def gaussian_kl(log_prob=None, ref_log_prob=None, *, mean=None, ref_mean=None, std=None, step=None) -> torch.Tensor:
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
    check_same_shape(mean=mean, ref_mean=ref_mean)
    std = torch.as_tensor(std, dtype=mean.dtype, device=mean.device)
    kl = (mean - ref_mean) ** 2 / (2.0 * std**2)  # [B, ...]
    return kl.reshape(kl.shape[0], -1).mean(dim=1) if kl.ndim > 1 else kl  # [B]


def flow_grpo_kl(log_prob=None, ref_log_prob=None, *, mean=None, ref_mean=None, std=None, step=None) -> torch.Tensor:
    """Flow-GRPO's KL term: ``gaussian_kl × |Δσ|``, i.e. the squared mean difference over ``2 g²``. ``[B]``.

    The flow SDE's transition std is ``std = g·sqrt(|Δσ|)`` (``kernels/flow.py``), so the true
    per-dimension KL ``(m1 − m2)² / (2 std²)`` (``gaussian_kl``) is Flow-GRPO's ``(m1 − m2)² / (2 g²)``
    divided by ``|Δσ|``: ×10 at 10 uniform steps, ×4–28 on SD3.5's shift-3 schedule. With this
    estimator ``train.beta`` means what Flow-GRPO's β means (flow kernels only: ``step`` = σ − σ_next [B]).
    """
    if step is None:
        raise ValueError("the 'flow_grpo' KL estimator needs the step size σ − σ_next (flow-matching policies only)")
    kl = gaussian_kl(mean=mean, ref_mean=ref_mean, std=std)  # [B]
    return kl * step.abs().to(kl.dtype).reshape(-1)  # [B]


#: KL estimators: name -> fn(log_prob, ref_log_prob, *, mean, ref_mean, std) -> [B].
KL_ESTIMATORS: dict[str, Callable] = {
    "k1": k1,
    "k2": k2,
    "k3": k3,
    "gaussian": gaussian_kl,
    "flow_grpo": flow_grpo_kl,
}
