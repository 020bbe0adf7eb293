"""The forward (noising) processes the forward-process objectives and supervised losses train on."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ddpo_grpo.kernels.ddim import PREDICTIONS

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
    if prediction_type not in PREDICTIONS:
        raise ValueError(f"Unknown `prediction_type` {prediction_type!r}; expected one of {list(PREDICTIONS)}")
    a = alpha_prod.to(torch.float32).reshape(-1, *([1] * (x0.ndim - 1)))  # [B, 1, ..., 1]
    x0f, eps = x0.float(), noise.float()
    x_t = torch.sqrt(a) * x0f + torch.sqrt(1 - a) * eps  # [B, ...]
    a_b = alpha_prod.to(torch.float32).reshape(-1)  # [B]
    if prediction_type == "epsilon":
        return Noised(x_t, eps, torch.sqrt((1 - a_b) / a_b))
    if prediction_type == "v_prediction":
        return Noised(x_t, torch.sqrt(a) * eps - torch.sqrt(1 - a) * x0f, torch.sqrt(1 - a_b))
    return Noised(x_t, x0f, torch.ones_like(a_b))
