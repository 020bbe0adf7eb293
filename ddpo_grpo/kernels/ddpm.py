"""The DDPM ancestral kernel (the forward-process posterior at the predicted x0)."""

from __future__ import annotations

import torch

from ddpo_grpo.kernels.ddim import PREDICTIONS, check_ddim_args
from ddpo_grpo.kernels.gaussian import (
    Scalar,
    Step,
    check_sample,
    compute_dtype,
    gaussian_step,
    per_sample,
)

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
    if prediction_type not in PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(PREDICTIONS)}")
    if variance not in DDPM_VARIANCES:
        raise ValueError(f"Unknown `variance` {variance!r}; expected one of {list(DDPM_VARIANCES)}")
    check_sample(sample, model_output, prev_sample)
    dtype = compute_dtype(sample, model_output)

    a_t = per_sample(alpha_prod_t, "alpha_prod_t", sample, dtype)  # [B, 1, ..., 1]
    a_prev = per_sample(alpha_prod_t_prev, "alpha_prod_t_prev", sample, dtype)  # [B, 1, ..., 1]
    eta_t = per_sample(eta, "eta", sample, dtype)  # [B, 1, ..., 1]
    if validate:
        check_ddpm_args(a_t, a_prev, eta_t)

    x = sample.to(dtype)  # [B, ...]
    out = model_output.to(dtype)  # [B, ...]
    x0_hat, _ = PREDICTIONS[prediction_type](x, out, a_t)  # [B, ...]
    mean, std = _ddpm_coeffs(x0_hat, x, a_t, a_prev, eta_t, variance)  # [B, ...], [B, 1, ..., 1]
    return gaussian_step(mean, std, sample, prev_sample, generator)
