"""Stochastic one-step transition kernels with exact Gaussian log-densities.

GRPO/DDPO-style policy-gradient training treats every denoising step as a
Gaussian policy ``pi(x_prev | x_t) = N(mean, std^2)``. This module provides the
entry points used by the samplers and the trainer:

* :func:`flow_sde_step` for rectified-flow / flow-matching models (SD3, Flux,
  ...) whose network predicts the velocity ``v ~= eps - x0``. Three stochastic
  kernels are available through ``sde_type``: ``"flow_grpo"``, ``"dance"`` and
  ``"cps"``.
* :func:`ddim_step` for DDPM-style models (epsilon / v / sample prediction),
  implementing the stochastic DDIM update of Song et al. (2021), eq. (12).
* :func:`ddpm_step` for the same models sampled ancestrally (Ho et al. 2020,
  Algorithm 2; respaced as in Nichol & Dhariwal 2021): the forward-process
  posterior at the predicted x0, with the fixed-small or fixed-large variance
  (the sampler of MDM and other guided-diffusion descendants).

All return a :class:`Step`. Conventions shared by every kernel:

* All arithmetic runs in float32, or float64 when ``sample`` (or
  ``model_output``) is float64; bf16/fp16 inputs are upcast.
* When ``prev_sample`` is ``None`` a new sample is drawn as
  ``mean + std * noise`` with ``noise = torch.randn(sample.shape,
  generator=generator, dtype=float32)``, cast to ``sample.dtype``, and the
  log-density is computed for that *cast* tensor. Passing it back as
  ``prev_sample`` therefore reproduces ``log_prob`` bit for bit.
* When ``prev_sample`` is given it is scored (no noise drawn) and returned
  unchanged.
* ``log_prob`` is the Gaussian log-density averaged (not summed) over every
  non-batch dimension. ``prev_sample`` is detached when scoring, so gradients
  flow to ``model_output`` only through ``mean`` and ``std``.
* A sample whose ``std`` is exactly zero is deterministic: its
  ``prev_sample`` equals ``mean`` and its ``log_prob`` is exactly 0 (a batch
  may mix deterministic and stochastic samples, e.g. via a per-sample
  ``noise_level`` tensor).

Shape notation in comments: ``[B, ...]`` is the full sample shape and
``[B, 1, ..., 1]`` is a per-sample scalar broadcastable against it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

__all__ = [
    "Noised",
    "ddpm_forward",
    "flow_forward",
    "Step",
    "flow_sde_step",
    "ddim_step",
    "ddpm_step",
    "check_flow_args",
    "check_ddim_args",
    "check_ddpm_args",
    "SDE_TYPES",
    "PREDICTION_TYPES",
    "DDPM_VARIANCES",
    "FLOW_KERNELS",
    "DIFFUSION_KERNELS",
    "KERNELS",
    "DEFAULT_NOISE_LEVELS",
    "predicted_x0",
]

Scalar = float | torch.Tensor

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class Step(NamedTuple):
    """Result of one stochastic transition ``x_t -> x_prev``.

    Attributes:
        prev_sample: ``[B, ...]``, dtype of ``sample``. The drawn (or scored) next state.
        log_prob: ``[B]``, float32 (float64 for float64 inputs). Gaussian log-density
            of ``prev_sample`` averaged over every non-batch dimension; exactly 0
            for deterministic (``std == 0``) samples.
        mean: ``[B, ...]``, float32/float64. Mean of the Gaussian transition.
        std: ``[B, 1, ..., 1]``, float32/float64. Standard deviation multiplying the unit noise.
    """

    prev_sample: torch.Tensor
    log_prob: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor


# ----------------------------------------------------------------------------
# Argument helpers
# ----------------------------------------------------------------------------


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 if any input is float64, float32 otherwise (bf16/fp16 are upcast)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _check_sample(sample: torch.Tensor, model_output: torch.Tensor, prev_sample: torch.Tensor | None) -> None:
    if not isinstance(sample, torch.Tensor) or not sample.is_floating_point():
        raise ValueError("`sample` must be a floating-point torch.Tensor")
    if sample.ndim < 2:
        raise ValueError(f"`sample` must have a batch dim plus at least one more dim, got shape {tuple(sample.shape)}")
    if not isinstance(model_output, torch.Tensor) or not model_output.is_floating_point():
        raise ValueError("`model_output` must be a floating-point torch.Tensor")
    if model_output.shape != sample.shape:
        raise ValueError(
            f"`model_output` shape {tuple(model_output.shape)} must equal `sample` shape {tuple(sample.shape)}"
        )
    if prev_sample is not None:
        if not isinstance(prev_sample, torch.Tensor) or not prev_sample.is_floating_point():
            raise ValueError("`prev_sample` must be a floating-point torch.Tensor or None")
        if prev_sample.shape != sample.shape:
            raise ValueError(
                f"`prev_sample` shape {tuple(prev_sample.shape)} must equal `sample` shape {tuple(sample.shape)}"
            )


def _per_sample(value: Scalar, name: str, sample: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Turn a python number or a 0-d / [1] / [B] tensor into a [B, 1, ..., 1] tensor."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"`{name}` must be a float or a tensor of shape [B], got {value!r}")
    batch = sample.shape[0]
    t = torch.as_tensor(value, dtype=dtype, device=sample.device)
    if t.ndim > 1 or (t.ndim == 1 and t.shape[0] not in (1, batch)):
        raise ValueError(f"`{name}` must be a float or a tensor of shape [B]=[{batch}], got shape {tuple(t.shape)}")
    t = t.reshape(-1)  # [1] or [B]
    return t.reshape(-1, *([1] * (sample.ndim - 1))).expand(batch, *([1] * (sample.ndim - 1)))  # [B, 1, ..., 1]


def _require_all(checks: list[tuple[torch.Tensor, str]]) -> None:
    """Raise ValueError with the first failing message unless every boolean tensor is all-True (NaNs fail).

    All conditions are reduced together, so a call costs one host-device synchronisation, not one per check.
    """
    ok = torch.stack([cond.all() for cond, _ in checks])  # [num_checks] bool
    if not bool(ok.all()):
        raise ValueError(next(message for (_, message), passed in zip(checks, ok.tolist()) if not passed))


# ----------------------------------------------------------------------------
# Shared Gaussian tail: draw or score, log-density, deterministic handling
# ----------------------------------------------------------------------------


def _gaussian_step(
    mean: torch.Tensor,
    std: torch.Tensor,
    sample: torch.Tensor,
    prev_sample: torch.Tensor | None,
    generator: torch.Generator | None,
) -> Step:
    """Sample (or score) ``N(mean, std^2)``; std == 0 rows are deterministic with log_prob 0."""
    if prev_sample is None:
        noise = torch.randn(sample.shape, generator=generator, device=sample.device, dtype=torch.float32)  # [B, ...]
        drawn = torch.addcmul(mean, std, noise.to(mean.dtype))  # [B, ...]; std = 0 rows give mean exactly
        prev_sample = drawn.to(sample.dtype).detach()  # [B, ...] stored dtype
    x = prev_sample.detach().to(mean.dtype)  # [B, ...] scored in compute dtype
    sq_err = (x - mean).square().mean(dim=tuple(range(1, sample.ndim)))  # [B]
    return _gaussian_tail(sq_err, mean, std, prev_sample)


def _gaussian_tail(sq_err: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, prev_sample: torch.Tensor) -> Step:
    """Step with log_prob = mean over coordinates of [-r^2 / (2 s^2) - log s - log(2 pi)/2], sq_err = mean r^2."""
    std_b = std.reshape(-1)  # [B]
    stochastic = std_b > 0  # [B] bool
    safe_std = torch.where(stochastic, std_b, torch.ones_like(std_b))  # [B], never 0
    log_prob = -sq_err / (2 * safe_std.square()) - torch.log(safe_std) - _HALF_LOG_2PI  # [B]
    log_prob = torch.where(stochastic, log_prob, torch.zeros_like(log_prob))  # [B]
    return Step(prev_sample=prev_sample, log_prob=log_prob, mean=mean, std=std.contiguous())


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
    _require_all(checks)


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
    _check_sample(sample, model_output, prev_sample)
    dtype = _compute_dtype(sample, model_output)

    sig = _per_sample(sigma, "sigma", sample, dtype)  # [B, 1, ..., 1]
    sig_next = _per_sample(sigma_next, "sigma_next", sample, dtype)  # [B, 1, ..., 1]
    level = _per_sample(noise_level, "noise_level", sample, dtype)  # [B, 1, ..., 1]
    if validate:
        check_flow_args(sig, sig_next, level, sde_type)

    x = sample.to(dtype)  # [B, ...]
    v = model_output.to(dtype)  # [B, ...]
    mean, std = _FLOW_KERNELS[sde_type](x, v, sig, sig_next, level)  # [B, ...], [B, 1, ..., 1]
    return _gaussian_step(mean, std, sample, prev_sample, generator)


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


_DDIM_PREDICTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple]] = {
    "epsilon": _from_epsilon,
    "v_prediction": _from_v,
    "sample": _from_sample,
}
PREDICTION_TYPES = tuple(_DDIM_PREDICTIONS)


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
    _require_all(
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
    if prediction_type not in _DDIM_PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(_DDIM_PREDICTIONS)}")
    _check_sample(sample, model_output, prev_sample)
    dtype = _compute_dtype(sample, model_output)

    a_t = _per_sample(alpha_prod_t, "alpha_prod_t", sample, dtype)  # [B, 1, ..., 1]
    a_prev = _per_sample(alpha_prod_t_prev, "alpha_prod_t_prev", sample, dtype)  # [B, 1, ..., 1]
    eta_t = _per_sample(eta, "eta", sample, dtype)  # [B, 1, ..., 1]
    if validate:
        check_ddim_args(a_t, a_prev, eta_t)

    x = sample.to(dtype)  # [B, ...]
    out = model_output.to(dtype)  # [B, ...]
    x0_hat, eps_hat = _DDIM_PREDICTIONS[prediction_type](x, out, a_t)  # [B, ...], [B, ...]
    mean, std = _ddim_coeffs(x0_hat, eps_hat, a_t, a_prev, eta_t)  # [B, ...], [B, 1, ..., 1]
    return _gaussian_step(mean, std, sample, prev_sample, generator)


# ----------------------------------------------------------------------------
# DDPM ancestral kernel
# ----------------------------------------------------------------------------

#: posterior variances of :func:`ddpm_step` (Ho et al. 2020, Sec. 3.2: sigma_t^2 = beta-tilde_t or beta_t)
DDPM_VARIANCES = ("fixed_small", "fixed_large")


def _ddpm_coeffs(
    x0_hat: torch.Tensor, x: torch.Tensor, a_t: torch.Tensor, a_prev: torch.Tensor, eta: torch.Tensor, variance: str
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""DDPM ancestral step: the forward-process posterior at the predicted x0 (Ho et al. 2020; Nichol & Dhariwal 2021).

    Derivation (``a_t`` = alpha-bar_t, ``a_prev`` = alpha-bar of the next, less noisy, timestep of the
    sampling schedule; the data sits at ``a_prev = 1``):

    1. Forward process (Ho et al. eq. 2, 4): ``q(x_t | x_{t-1}) = N(sqrt(1 - beta_t) x_{t-1}, beta_t I)``
       with marginals ``q(x_t | x0) = N(sqrt(a_t) x0, (1 - a_t) I)``, ``a_t = prod_{s <= t} (1 - beta_s)``.
    2. Respacing (Nichol & Dhariwal 2021, Sec. 4): sampling on a subsequence of the training
       timesteps keeps the marginals of step 1 if each retained step uses
       ``beta'_t = 1 - a_t / a_prev`` (then ``a_t = a_prev (1 - beta'_t)``). With the full
       schedule ``a_t / a_prev = alpha_t`` and ``beta'_t = beta_t``, so steps 3-6 cover both.
    3. Posterior (Ho et al. eqs. 6-7; Nichol & Dhariwal eqs. 9-11):
       ``q(x_{t-1} | x_t, x0) = N(mu-tilde_t, beta-tilde_t I)`` with
       ``mu-tilde_t = sqrt(a_prev) beta'_t / (1 - a_t) x0 + sqrt(1 - beta'_t) (1 - a_prev) / (1 - a_t) x_t``
       and ``beta-tilde_t = (1 - a_prev) / (1 - a_t) beta'_t``.
    4. The reverse model ``p(x_{t-1} | x_t) = N(mu_theta, sigma_t^2 I)`` (Ho et al. eq. 1) plugs the
       network's x0 estimate into mu-tilde (for epsilon prediction, x0_hat = (x_t - sqrt(1 - a_t)
       eps_theta) / sqrt(a_t), eq. 15, which turns mu-tilde into eq. 11). Any prediction type is
       first converted to x0_hat (:data:`PREDICTION_TYPES`); no clipping or thresholding is applied.
    5. Variance (Ho et al. Sec. 3.2): ``"fixed_small"`` = beta-tilde_t (optimal for a deterministic
       x0), ``"fixed_large"`` = beta'_t (optimal for x0 ~ N(0, I)); guided-diffusion / IDDPM /
       MDM's ``FIXED_SMALL`` / ``FIXED_LARGE``.
    6. The last step into the data (``a_prev = 1``) is noise-free: mu-tilde = x0_hat there
       (coefficients 1 and 0) and Algorithm 2 of Ho et al. sets z = 0 at t = 1. beta-tilde is 0
       there anyway; for fixed_large, MDM's ``p_mean_variance`` reports the variance
       ``posterior_variance[1]`` at t = 0 (for the VLB's decoder term), but its ``p_sample``
       multiplies the noise by ``nonzero_mask = (t != 0)``, so the transition is deterministic; so
       is diffusers' DDPMScheduler (noise only for t > 0). Here std = 0 whenever ``a_prev >= 1``.
    7. ``std = eta sqrt(variance)``: eta = 1 is exact DDPM ancestral sampling, eta = 0 the
       deterministic posterior-mean chain (NOT DDIM: the mean does not depend on eta, so eta < 1
       under-disperses the marginals; use :func:`ddim_step` for a marginal-preserving family).
       With fixed_small and eta = 1 this step equals :func:`ddim_step` at eta = 1 (Song et al.
       2021, eq. 16 with eta = 1 gives sigma_t^2 = beta-tilde_t and the Markovian DDPM posterior).

    Returns:
        (mean ``[B, ...]``, std ``[B, 1, ..., 1]``)
    """
    beta = 1 - a_t / a_prev  # [B, 1, ..., 1] beta'_t of the (respaced) step
    coeff_x0 = torch.sqrt(a_prev) * beta / (1 - a_t)  # [B, 1, ..., 1]
    coeff_x = torch.sqrt(1 - beta) * (1 - a_prev) / (1 - a_t)  # [B, 1, ..., 1]
    mean = torch.addcmul(coeff_x * x, coeff_x0, x0_hat)  # [B, ...]
    var = (1 - a_prev) / (1 - a_t) * beta if variance == "fixed_small" else beta  # [B, 1, ..., 1]
    var = torch.where(a_prev >= 1, torch.zeros_like(var), var.clamp_min(0))  # [B, 1, ..., 1]; last step noise-free
    std = eta * torch.sqrt(var)  # [B, 1, ..., 1]
    return mean, std


def check_ddpm_args(alpha_prod_t: torch.Tensor, alpha_prod_t_prev: torch.Tensor, eta: torch.Tensor) -> None:
    """ValueError unless the DDPM arguments are valid (tensors of any shape); the same ranges as DDIM's."""
    check_ddim_args(alpha_prod_t, alpha_prod_t_prev, eta)


def ddpm_step(
    model_output: torch.Tensor,
    sample: torch.Tensor,
    alpha_prod_t: Scalar,
    alpha_prod_t_prev: Scalar,
    *,
    eta: Scalar = 1.0,
    variance: str = "fixed_small",
    prev_sample: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    prediction_type: str = "epsilon",
    validate: bool = True,
) -> Step:
    """One DDPM ancestral step ``t -> t_prev`` (possibly respaced): the Gaussian posterior at the predicted x0.

    Args:
        model_output: ``[B, ...]`` network output (epsilon, v or x0, see ``prediction_type``).
        sample: ``[B, ...]`` current sample ``x_t``.
        alpha_prod_t: alpha-bar at t, in (0, 1); float or tensor ``[B]``.
        alpha_prod_t_prev: alpha-bar at the next timestep of the sampling schedule, in
            [alpha_prod_t, 1] (1 = the step into the data); float or tensor ``[B]``.
        eta: multiplies the transition std, in [0, 1] (1 = exact DDPM, 0 = deterministic
            posterior mean); float or tensor ``[B]``.
        variance: ``"fixed_small"`` (beta-tilde, the posterior variance) or ``"fixed_large"`` (beta');
            see :data:`DDPM_VARIANCES`. The step into the data (alpha_prod_t_prev = 1) is
            deterministic for both, as in MDM / guided-diffusion and diffusers.
        prev_sample: if given, score this ``[B, ...]`` tensor instead of drawing one.
        generator: torch generator for the unit noise (ignored when scoring).
        prediction_type: one of :data:`PREDICTION_TYPES` (``"epsilon"``, ``"v_prediction"``, ``"sample"``).
        validate: check the arguments' ranges (one host sync); see :func:`check_ddpm_args`.

    Returns:
        :class:`Step`.
    """
    if prediction_type not in _DDIM_PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(_DDIM_PREDICTIONS)}")
    if variance not in DDPM_VARIANCES:
        raise ValueError(f"Unknown `variance` {variance!r}; expected one of {list(DDPM_VARIANCES)}")
    _check_sample(sample, model_output, prev_sample)
    dtype = _compute_dtype(sample, model_output)

    a_t = _per_sample(alpha_prod_t, "alpha_prod_t", sample, dtype)  # [B, 1, ..., 1]
    a_prev = _per_sample(alpha_prod_t_prev, "alpha_prod_t_prev", sample, dtype)  # [B, 1, ..., 1]
    eta_t = _per_sample(eta, "eta", sample, dtype)  # [B, 1, ..., 1]
    if validate:
        check_ddpm_args(a_t, a_prev, eta_t)

    x = sample.to(dtype)  # [B, ...]
    out = model_output.to(dtype)  # [B, ...]
    x0_hat, _ = _DDIM_PREDICTIONS[prediction_type](x, out, a_t)  # [B, ...]
    mean, std = _ddpm_coeffs(x0_hat, x, a_t, a_prev, eta_t, variance)  # [B, ...], [B, 1, ..., 1]
    return _gaussian_step(mean, std, sample, prev_sample, generator)


# ----------------------------------------------------------------------------
# Forward (noising) process: what the forward-process objectives train on
# ----------------------------------------------------------------------------


class Noised(NamedTuple):
    """A clean sample noised by the forward process, with what the denoiser should predict there.

    x_t: ``[B, ...]`` the noised sample; target: ``[B, ...]`` the pretraining loss's regression target at
    (x_t, t); scale: ``[B]`` the factor turning a prediction error into an x0 error,
    ``x̂0 − x0 = ±scale · (prediction − target)``.
    """

    x_t: torch.Tensor
    target: torch.Tensor
    scale: torch.Tensor


def flow_forward(x0: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> Noised:
    """Rectified flow (SD3, Esser et al. 2024, eqs. 1–3): ``x_σ = (1 − σ) x0 + σ ε``; the velocity target
    ``ε − x0``; since ``x̂0 = x_σ − σ v̂``, an error in v is σ times that error in x0. sigma: [B] in [0, 1]."""
    s = sigma.to(torch.float32).reshape(-1, *([1] * (x0.ndim - 1)))  # [B, 1, ..., 1]
    x0f, eps = x0.float(), noise.float()
    return Noised(x_t=(1 - s) * x0f + s * eps, target=eps - x0f, scale=sigma.to(torch.float32).reshape(-1))


def ddpm_forward(x0: torch.Tensor, alpha_prod: torch.Tensor, noise: torch.Tensor, prediction_type: str) -> Noised:
    """DDPM's q(x_t | x0) (Ho et al. 2020, eq. 4): ``x_t = sqrt(ᾱ) x0 + sqrt(1 − ᾱ) ε``, and the target of
    each parametrisation with its x0-error scale:

    * ``epsilon``: target ε; ``x̂0 = (x_t − sqrt(1 − ᾱ) ε̂) / sqrt(ᾱ)``, scale ``sqrt((1 − ᾱ) / ᾱ)``;
    * ``v_prediction`` (Salimans & Ho 2022): target ``v = sqrt(ᾱ) ε − sqrt(1 − ᾱ) x0``;
      ``x̂0 = sqrt(ᾱ) x_t − sqrt(1 − ᾱ) v̂``, scale ``sqrt(1 − ᾱ)``;
    * ``sample``: target x0, scale 1.
    alpha_prod: [B] ᾱ_t in (0, 1).
    """
    if prediction_type not in _DDIM_PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(_DDIM_PREDICTIONS)}")
    a = alpha_prod.to(torch.float32).reshape(-1, *([1] * (x0.ndim - 1)))  # [B, 1, ..., 1]
    x0f, eps = x0.float(), noise.float()
    x_t = torch.sqrt(a) * x0f + torch.sqrt(1 - a) * eps  # [B, ...]
    a_b = alpha_prod.to(torch.float32).reshape(-1)  # [B]
    if prediction_type == "epsilon":
        return Noised(x_t, eps, torch.sqrt((1 - a_b) / a_b))
    if prediction_type == "v_prediction":
        return Noised(x_t, torch.sqrt(a) * eps - torch.sqrt(1 - a) * x0f, torch.sqrt(1 - a_b))
    return Noised(x_t, x0f, torch.ones_like(a_b))


def predicted_x0(
    model_output: torch.Tensor, sample: torch.Tensor, alpha_prod_t: torch.Tensor, prediction_type: str
) -> torch.Tensor:
    """x̂0 of a DDPM-family model output at (x_t, ᾱ_t), in float32 and differentiable: the parametrisations of
    :func:`ddim_step` (ε, v or x0 prediction). alpha_prod_t: [B] or broadcastable; returns [B, ...]."""
    if prediction_type not in _DDIM_PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(_DDIM_PREDICTIONS)}")
    a_t = alpha_prod_t.to(torch.float32).reshape(-1, *([1] * (sample.ndim - 1)))  # [B, 1, ..., 1]
    x0, _ = _DDIM_PREDICTIONS[prediction_type](sample.float(), model_output.float(), a_t)
    return x0


# ----------------------------------------------------------------------------
# The kernel registry: what ``sample.kernel`` names
# ----------------------------------------------------------------------------

#: kernels of flow-matching (velocity) models: :func:`flow_sde_step`'s ``sde_type``
FLOW_KERNELS = SDE_TYPES
#: kernels of DDPM-family (ε / v / x0-prediction) models: :func:`ddim_step` and :func:`ddpm_step`
DIFFUSION_KERNELS = ("ddim", "ddpm")
#: every value of ``sample.kernel`` ("" = the family's default)
KERNELS = FLOW_KERNELS + DIFFUSION_KERNELS
#: ``sample.noise_level`` when the config leaves it unset: Flow-GRPO's a = 0.7 for the flow kernels (the
#: paper's setting), DDPO's η = 1 for DDIM and the full ancestral variance for DDPM
DEFAULT_NOISE_LEVELS = {"flow_grpo": 0.7, "dance": 0.7, "cps": 0.7, "ddim": 1.0, "ddpm": 1.0}
#: kernels whose noise level is a fraction in [0, 1]
BOUNDED_NOISE = ("cps", "ddim", "ddpm")
