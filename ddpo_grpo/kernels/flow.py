"""Flow-matching (velocity) kernels: Flow-GRPO's SDE, DanceGRPO's and coefficients-preserving sampling."""

from __future__ import annotations

import math
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
# Flow-matching kernels
# ----------------------------------------------------------------------------
#
# Common notation (rectified flow, as in SD3): x_sigma = (1 - sigma) x0 + sigma eps,
# and the network predicts the velocity v ~= dx_sigma/dsigma = eps - x0. From these
# two relations:
#     x0_hat  = x - sigma v
#     eps_hat = x + (1 - sigma) v
#     score   = grad_x log p_sigma(x) = -eps_hat / sigma
# The deterministic Euler ODE step is x_next = x + (sigma_next - sigma) v.


def _reverse_sde_step(
    x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Euler-Maruyama step of ``dx = [v + g^2 / (2 sigma) (x + (1 - sigma) v)] dsigma + g dw``.

    With ``c = g^2 / (2 sigma)`` and ``dsigma = sigma_next - sigma`` the mean
    ``x + dsigma (v + c (x + (1 - sigma) v))`` is regrouped per sample as
    ``(1 + dsigma c) x + dsigma (1 + c (1 - sigma)) v`` (two full-size operations);
    ``std = g sqrt(-dsigma)``. Shared by the flow_grpo and dance kernels, which differ only in g.
    """
    dsigma = sigma_next - sigma  # [B, 1, ..., 1], <= 0
    c = g.square() / (2 * sigma)  # [B, 1, ..., 1]
    coeff_x = 1 + dsigma * c  # [B, 1, ..., 1]
    coeff_v = dsigma * (1 + c * (1 - sigma))  # [B, 1, ..., 1]
    mean = torch.addcmul(coeff_x * x, coeff_v, v)  # [B, ...]
    std = g * torch.sqrt(-dsigma)  # [B, 1, ..., 1]
    return mean, std


def _flow_grpo_coeffs(
    x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Flow-GRPO kernel (Liu et al., 2025): marginal-preserving reverse SDE, Euler-Maruyama.

    Derivation (time ``t`` plays the role of ``sigma``; the data sits at t = 0):

    1. The sampler integrates the probability-flow ODE ``dx = v(x, t) dt`` from
       t = 1 down to t = 0. Its marginals p_t satisfy the continuity equation
       ``d_t p = -div(p v)``.
    2. For any diffusion coefficient g(t), the forward-time SDE
       ``dx = [v + (g^2/2) grad log p_t] dt + g dw`` has the same marginals: its
       Fokker-Planck equation is ``d_t p = -div(p v) - div((g^2/2) p grad log p)
       + (g^2/2) lap p`` and, because ``p grad log p = grad p``, the last two
       terms cancel.
    3. Reversing time (Anderson, 1982), a forward SDE with drift f and
       diffusion g has reverse SDE ``dx = [f - g^2 grad log p_t] dt + g dw_bar``
       run with dt < 0. With f from step 2 the reverse drift is
       ``v - (g^2/2) grad log p_t``, again with marginals p_t.
    4. Substitute the score of the rectified-flow parametrisation,
       ``grad log p_t = -eps_hat / t = -(x + (1 - t) v) / t``:
       ``dx = [v + g^2 / (2 sigma) (x + (1 - sigma) v)] dsigma + g dw``.
    5. Flow-GRPO picks ``g(sigma) = a sqrt(sigma / (1 - sigma))`` with
       ``a = noise_level``, so the injected noise shrinks towards the data end.
    6. One Euler-Maruyama step with ``dsigma = sigma_next - sigma < 0`` gives
       ``mean = x + dsigma [v + g^2 / (2 sigma) (x + (1 - sigma) v)]`` and
       ``std = g sqrt(-dsigma) = g sqrt(sigma - sigma_next)``.
    7. With a = 0, g = 0 and the mean is ``x + dsigma v``: exactly the Euler step.

    Singularity at sigma = 1: g is infinite there. Following Flow-GRPO (which
    replaces sigma by ``sigma_max`` = the schedule's second sigma in the
    denominator) we evaluate the denominator at the step's end point,
    ``g = a sqrt(sigma / (1 - sigma_next))`` whenever ``sigma >= 1``. This needs
    ``sigma_next < 1``.

    Returns:
        (mean ``[B, ...]``, std ``[B, 1, ..., 1]``)
    """
    denom = torch.where(sigma >= 1, 1 - sigma_next, 1 - sigma)  # [B, 1, ..., 1], > 0
    g = noise_level * torch.sqrt(sigma / denom)  # [B, 1, ..., 1]
    return _reverse_sde_step(x, v, sigma, sigma_next, g)


def _dance_coeffs(
    x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""DanceGRPO kernel: the same reverse SDE with a constant diffusion coefficient.

    Derivation:

    1. Steps 1-4 of :func:`_flow_grpo_coeffs` hold for any g(sigma): the reverse
       SDE ``dx = [v + g^2 / (2 sigma) (x + (1 - sigma) v)] dsigma + g dw``
       shares the ODE's marginals.
    2. DanceGRPO takes ``g = eta = noise_level``, constant in sigma (finite at
       sigma = 1, so no special casing there; sigma must be > 0 because the
       score carries 1 / sigma).
    3. Euler-Maruyama with ``dsigma = sigma_next - sigma``:
       ``mean = x + dsigma [v + eta^2 / (2 sigma) (x + (1 - sigma) v)]``,
       ``std = eta sqrt(sigma - sigma_next)``.
    4. eta = 0 leaves ``mean = x + dsigma v``, the Euler step.

    Returns:
        (mean ``[B, ...]``, std ``[B, 1, ..., 1]``)
    """
    return _reverse_sde_step(x, v, sigma, sigma_next, noise_level)


def _cps_coeffs(
    x: torch.Tensor, v: torch.Tensor, sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Coefficients-Preserving Sampling (Wang & Yu, 2025).

    Derivation:

    1. At level sigma_next a clean sample should look like
       ``(1 - sigma_next) x0 + sigma_next eps`` with unit-variance eps: the signal
       coefficient is (1 - sigma_next) and the *total* noise coefficient is
       sigma_next.
    2. Estimate the endpoints from the velocity: ``x0_hat = x - sigma v`` and
       ``eps_hat = x + (1 - sigma) v``.
    3. Split the noise budget sigma_next between the predicted noise eps_hat
       (deterministic direction) and fresh noise z: with
       ``std = sigma_next sin(eta pi / 2)``, set
       ``x_next = (1 - sigma_next) x0_hat + sqrt(sigma_next^2 - std^2) eps_hat + std z``.
       Since ``(sqrt(sigma_next^2 - std^2))^2 + std^2 = sigma_next^2``, the noise
       coefficient is preserved exactly (no over/under-noised latents, unlike an
       Euler-Maruyama step).
    4. Hence ``mean = (1 - sigma_next) x0_hat + sqrt(sigma_next^2 - std^2) eps_hat``.
    5. eta = 0: std = 0 and ``mean = (1 - sigma_next)(x - sigma v) + sigma_next
       (x + (1 - sigma) v) = x + (sigma_next - sigma) v``, the Euler step.
    6. sigma_next = 0 gives std = 0: the last step is deterministic, mean = x0_hat.
    eta = noise_level must lie in [0, 1] (sin(eta pi / 2) is not monotone beyond).

    Returns:
        (mean ``[B, ...]``, std ``[B, 1, ..., 1]``)
    """
    x0_hat = x - sigma * v  # [B, ...]
    eps_hat = x + (1 - sigma) * v  # [B, ...]
    std = sigma_next * torch.sin(noise_level * (math.pi / 2))  # [B, 1, ..., 1]
    eps_coeff = torch.sqrt((sigma_next**2 - std**2).clamp_min(0))  # [B, 1, ..., 1]
    mean = (1 - sigma_next) * x0_hat + eps_coeff * eps_hat  # [B, ...]
    return mean, std


_FlowCoeffs = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], "tuple[torch.Tensor, torch.Tensor]"
]

_FLOW_KERNELS: dict[str, _FlowCoeffs] = {
    "flow_grpo": _flow_grpo_coeffs,
    "dance": _dance_coeffs,
    "cps": _cps_coeffs,
}
SDE_TYPES = tuple(_FLOW_KERNELS)


def check_flow_args(sigma: torch.Tensor, sigma_next: torch.Tensor, noise_level: torch.Tensor, sde_type: str) -> None:
    """ValueError unless (sigma, sigma_next, noise_level) are valid for ``sde_type`` (tensors of any shape).

    ``flow_sde_step`` calls it on every step unless ``validate=False``; a caller that steps through a
    schedule it has already checked once (the policy adapters) skips the per-step cost.
    """
    checks = [
        ((sigma > 0) & (sigma <= 1), "`sigma` must be in (0, 1]"),
        (sigma_next >= 0, "`sigma_next` must be >= 0"),
        (sigma_next <= sigma, "`sigma_next` must be <= `sigma` (sampling runs from noise to data)"),
        (noise_level >= 0, "`noise_level` must be >= 0 (and not NaN)"),
    ]
    if sde_type == "flow_grpo":
        checks.append(
            (~((sigma >= 1) & (sigma_next >= 1)), "`sigma_next` must be < 1 when `sigma` == 1 for sde_type='flow_grpo'")
        )
    elif sde_type == "cps":
        checks.append((noise_level <= 1, "`noise_level` must be in [0, 1] for sde_type='cps'"))
    require_all(checks)


def flow_sde_step(
    model_output: torch.Tensor,
    sample: torch.Tensor,
    sigma: Scalar,
    sigma_next: Scalar,
    *,
    noise_level: Scalar,
    sde_type: str = "flow_grpo",
    prev_sample: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    validate: bool = True,
) -> Step:
    """One stochastic step ``sigma -> sigma_next`` of a flow-matching (velocity) model.

    Args:
        model_output: ``[B, ...]`` predicted velocity ``v ~= eps - x0``.
        sample: ``[B, ...]`` current latent ``x_sigma``.
        sigma: current noise level in (0, 1]; float or tensor ``[B]``.
        sigma_next: next noise level in [0, sigma]; float or tensor ``[B]``.
        noise_level: stochasticity (>= 0; ``a`` for flow_grpo, ``eta`` for dance
            and cps, where it must also be <= 1). Float or tensor ``[B]``;
            0 gives the deterministic Euler step.
        sde_type: one of :data:`SDE_TYPES` (``"flow_grpo"``, ``"dance"``, ``"cps"``).
        prev_sample: if given, score this ``[B, ...]`` tensor instead of drawing one.
        generator: torch generator for the unit noise (ignored when scoring).
        validate: check the arguments' ranges (one host sync); see :func:`check_flow_args`.

    Returns:
        :class:`Step`.
    """
    if sde_type not in _FLOW_KERNELS:
        raise ValueError(f"Unknown `sde_type` {sde_type!r}; expected one of {list(_FLOW_KERNELS)}")
    check_sample(sample, model_output, prev_sample)
    dtype = compute_dtype(sample, model_output)

    sig = per_sample(sigma, "sigma", sample, dtype)  # [B, 1, ..., 1]
    sig_next = per_sample(sigma_next, "sigma_next", sample, dtype)  # [B, 1, ..., 1]
    level = per_sample(noise_level, "noise_level", sample, dtype)  # [B, 1, ..., 1]
    if validate:
        check_flow_args(sig, sig_next, level, sde_type)

    x = sample.to(dtype)  # [B, ...]
    v = model_output.to(dtype)  # [B, ...]
    mean, std = _FLOW_KERNELS[sde_type](x, v, sig, sig_next, level)  # [B, ...], [B, 1, ..., 1]
    return gaussian_step(mean, std, sample, prev_sample, generator)
