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

One module per kernel beside this one (``gaussian.py`` the shared Gaussian step, ``flow.py``, ``ddim.py``,
``ddpm.py``, ``forward.py`` the noising processes); this package is their public face and the registry of
``sample.kernel``'s names. ``ddpo_grpo.kernels`` is the same module under its contract name (DESIGN.md, "Contracts"). All return a :class:`Step`. Conventions shared by every kernel:

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

from ddpo_grpo.kernels.ddim import PREDICTION_TYPES, check_ddim_args, ddim_step, predicted_x0
from ddpo_grpo.kernels.ddpm import DDPM_VARIANCES, check_ddpm_args, ddpm_step
from ddpo_grpo.kernels.flow import SDE_TYPES, check_flow_args, flow_sde_step
from ddpo_grpo.kernels.forward import Noised, ddpm_forward, flow_forward
from ddpo_grpo.kernels.gaussian import Step

__all__ = [
    "BOUNDED_NOISE",
    "DDPM_VARIANCES",
    "DEFAULT_NOISE_LEVELS",
    "DIFFUSION_KERNELS",
    "FLOW_KERNELS",
    "KERNELS",
    "PREDICTION_TYPES",
    "SDE_TYPES",
    "Noised",
    "Step",
    "check_ddim_args",
    "check_ddpm_args",
    "check_flow_args",
    "ddim_step",
    "ddpm_forward",
    "ddpm_step",
    "flow_forward",
    "flow_sde_step",
    "predicted_x0",
]

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
