"""The DDIM kernel of DDPM-family models (ε, v or x0 prediction) and their x̂0 parametrisations."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ddpo_grpo.kernels.gaussian import (
    Scalar,
    Step,
    check_sample,
    compute_dtype,
    gaussian_step,
    per_sample,
    require_all,
)

# ----------------------------------------------------------------------------
# DDIM kernel
# ----------------------------------------------------------------------------


def _from_epsilon(x, out, a_t):
    """epsilon prediction: eps_hat = out, x0_hat = (x - sqrt(1 - a_t) eps_hat) / sqrt(a_t)."""
    eps = out  # [B, ...]
    x0 = (x - torch.sqrt(1 - a_t) * eps) / torch.sqrt(a_t)  # [B, ...]
    return x0, eps


def _from_v(x, out, a_t):
    """v prediction (v = sqrt(a_t) eps - sqrt(1 - a_t) x0): invert the rotation."""
    x0 = torch.sqrt(a_t) * x - torch.sqrt(1 - a_t) * out  # [B, ...]
    eps = torch.sqrt(a_t) * out + torch.sqrt(1 - a_t) * x  # [B, ...]
    return x0, eps


def _from_sample(x, out, a_t):
    """x0 prediction: x0_hat = out, eps_hat = (x - sqrt(a_t) x0_hat) / sqrt(1 - a_t)."""
    x0 = out  # [B, ...]
    eps = (x - torch.sqrt(a_t) * x0) / torch.sqrt(1 - a_t)  # [B, ...]
    return x0, eps


PREDICTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]] = {
    "epsilon": _from_epsilon,
    "v_prediction": _from_v,
    "sample": _from_sample,
}
PREDICTION_TYPES = tuple(PREDICTIONS)


def _ddim_coeffs(
    x0_hat: torch.Tensor, eps_hat: torch.Tensor, a_t: torch.Tensor, a_prev: torch.Tensor, eta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Stochastic DDIM update (Song, Meng & Ermon, 2021, eqs. 12 and 16).

    Derivation (``a_t`` = alpha-bar_t, ``a_prev`` = alpha-bar_{t-1}):

    1. The forward marginal is ``x_t = sqrt(a_t) x0 + sqrt(1 - a_t) eps``.
    2. DDIM defines a non-Markovian family of reverse conditionals
       ``q_sigma(x_{t-1} | x_t, x0) = N(sqrt(a_prev) x0 + sqrt(1 - a_prev -
       sigma_t^2) (x_t - sqrt(a_t) x0) / sqrt(1 - a_t), sigma_t^2 I)`` chosen so
       that every marginal ``q(x_{t-1} | x0)`` matches step 1 for any sigma_t
       (signal coefficient sqrt(a_prev), noise variance
       ``(1 - a_prev - sigma_t^2) + sigma_t^2 = 1 - a_prev``).
    3. Replacing x0 and ``(x_t - sqrt(a_t) x0) / sqrt(1 - a_t)`` by the network's
       estimates x0_hat and eps_hat gives eq. (12):
       ``x_{t-1} = sqrt(a_prev) x0_hat + sqrt(1 - a_prev - sigma_t^2) eps_hat + sigma_t z``.
    4. Eq. (16) interpolates between DDIM (eta = 0) and DDPM (eta = 1):
       ``sigma_t = eta sqrt((1 - a_prev) / (1 - a_t)) sqrt(1 - a_t / a_prev)``.
    5. So ``mean = sqrt(a_prev) x0_hat + sqrt(1 - a_prev - sigma_t^2) eps_hat`` and
       ``std = sigma_t``; eta = 0 is the deterministic DDIM step. No x0
       clipping or thresholding is applied. The radicand of the direction
       coefficient is clamped at 0 to absorb round-off at eta = 1.

    Returns:
        (mean ``[B, ...]``, std ``[B, 1, ..., 1]``)
    """
    variance = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev)  # [B, 1, ..., 1]
    std = eta * torch.sqrt(variance.clamp_min(0))  # [B, 1, ..., 1]
    dir_coeff = torch.sqrt((1 - a_prev - std**2).clamp_min(0))  # [B, 1, ..., 1]
    mean = torch.sqrt(a_prev) * x0_hat + dir_coeff * eps_hat  # [B, ...]
    return mean, std


def check_ddim_args(alpha_prod_t: torch.Tensor, alpha_prod_t_prev: torch.Tensor, eta: torch.Tensor) -> None:
    """ValueError unless the DDIM arguments are valid (tensors of any shape); see ``check_flow_args``."""
    require_all(
        [
            ((alpha_prod_t > 0) & (alpha_prod_t < 1), "`alpha_prod_t` must be in (0, 1)"),
            ((alpha_prod_t_prev > 0) & (alpha_prod_t_prev <= 1), "`alpha_prod_t_prev` must be in (0, 1]"),
            (
                alpha_prod_t_prev >= alpha_prod_t,
                "`alpha_prod_t_prev` must be >= `alpha_prod_t` (sampling runs from noise to data)",
            ),
            ((eta >= 0) & (eta <= 1), "`eta` must be in [0, 1] (and not NaN)"),
        ]
    )


def ddim_step(
    model_output: torch.Tensor,
    sample: torch.Tensor,
    alpha_prod_t: Scalar,
    alpha_prod_t_prev: Scalar,
    *,
    eta: Scalar,
    prev_sample: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    prediction_type: str = "epsilon",
    validate: bool = True,
) -> Step:
    """One stochastic DDIM step ``t -> t_prev``.

    Args:
        model_output: ``[B, ...]`` network output (epsilon, v or x0, see ``prediction_type``).
        sample: ``[B, ...]`` current latent ``x_t``.
        alpha_prod_t: alpha-bar at t, in (0, 1); float or tensor ``[B]``.
        alpha_prod_t_prev: alpha-bar at t_prev, in [alpha_prod_t, 1]; float or tensor ``[B]``.
        eta: DDIM stochasticity in [0, 1] (0 = deterministic DDIM, 1 = DDPM
            posterior variance); float or tensor ``[B]``.
        prev_sample: if given, score this ``[B, ...]`` tensor instead of drawing one.
        generator: torch generator for the unit noise (ignored when scoring).
        prediction_type: one of :data:`PREDICTION_TYPES` (``"epsilon"``,
            ``"v_prediction"``, ``"sample"``).
        validate: check the arguments' ranges (one host sync); see :func:`check_ddim_args`.

    Returns:
        :class:`Step`.
    """
    if prediction_type not in PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(PREDICTIONS)}")
    check_sample(sample, model_output, prev_sample)
    dtype = compute_dtype(sample, model_output)

    a_t = per_sample(alpha_prod_t, "alpha_prod_t", sample, dtype)  # [B, 1, ..., 1]
    a_prev = per_sample(alpha_prod_t_prev, "alpha_prod_t_prev", sample, dtype)  # [B, 1, ..., 1]
    eta_t = per_sample(eta, "eta", sample, dtype)  # [B, 1, ..., 1]
    if validate:
        check_ddim_args(a_t, a_prev, eta_t)

    x = sample.to(dtype)  # [B, ...]
    out = model_output.to(dtype)  # [B, ...]
    x0_hat, eps_hat = PREDICTIONS[prediction_type](x, out, a_t)  # [B, ...], [B, ...]
    mean, std = _ddim_coeffs(x0_hat, eps_hat, a_t, a_prev, eta_t)  # [B, ...], [B, 1, ..., 1]
    return gaussian_step(mean, std, sample, prev_sample, generator)


def predicted_x0(
    model_output: torch.Tensor, sample: torch.Tensor, alpha_prod_t: torch.Tensor, prediction_type: str
) -> torch.Tensor:
    """x̂0 of a DDPM-family model output at (x_t, ᾱ_t), in float32 and differentiable: the parametrisations of
    :func:`ddim_step` (ε, v or x0 prediction). alpha_prod_t: [B] or broadcastable; returns [B, ...]."""
    if prediction_type not in PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(PREDICTIONS)}")
    a_t = alpha_prod_t.to(torch.float32).reshape(-1, *([1] * (sample.ndim - 1)))  # [B, 1, ..., 1]
    x0, _ = PREDICTIONS[prediction_type](sample.float(), model_output.float(), a_t)
    return x0
