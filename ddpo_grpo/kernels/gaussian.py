"""What every kernel shares: the ``Step`` result, argument checks, and the Gaussian draw / log-density."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

Scalar = float | torch.Tensor

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


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


def compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float64 if any input is float64, float32 otherwise (bf16/fp16 are upcast)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def check_sample(sample: torch.Tensor, model_output: torch.Tensor, prev_sample: torch.Tensor | None) -> None:
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


def per_sample(value: Scalar, name: str, sample: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Turn a python number or a 0-d / [1] / [B] tensor into a [B, 1, ..., 1] tensor."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"`{name}` must be a float or a tensor of shape [B], got {value!r}")
    batch = sample.shape[0]
    t = torch.as_tensor(value, dtype=dtype, device=sample.device)
    if t.ndim > 1 or (t.ndim == 1 and t.shape[0] not in (1, batch)):
        raise ValueError(f"`{name}` must be a float or a tensor of shape [B]=[{batch}], got shape {tuple(t.shape)}")
    t = t.reshape(-1)  # [1] or [B]
    return t.reshape(-1, *([1] * (sample.ndim - 1))).expand(batch, *([1] * (sample.ndim - 1)))  # [B, 1, ..., 1]


def require_all(checks: list[tuple[torch.Tensor, str]]) -> None:
    """Raise ValueError with the first failing message unless every boolean tensor is all-True (NaNs fail).

    All conditions are reduced together, so a call costs one host-device synchronisation, not one per check.
    """
    ok = torch.stack([cond.all() for cond, _ in checks])  # [num_checks] bool
    if not bool(ok.all()):
        raise ValueError(next(message for (_, message), passed in zip(checks, ok.tolist()) if not passed))


# ----------------------------------------------------------------------------
# Shared Gaussian tail: draw or score, log-density, deterministic handling
# ----------------------------------------------------------------------------


def gaussian_step(
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
    return gaussian_tail(sq_err, mean, std, prev_sample)


def gaussian_tail(sq_err: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, prev_sample: torch.Tensor) -> Step:
    """Step with log_prob = mean over coordinates of [-r^2 / (2 s^2) - log s - log(2 pi)/2], sq_err = mean r^2."""
    std_b = std.reshape(-1)  # [B]
    stochastic = std_b > 0  # [B] bool
    safe_std = torch.where(stochastic, std_b, torch.ones_like(std_b))  # [B], never 0
    log_prob = -sq_err / (2 * safe_std.square()) - torch.log(safe_std) - HALF_LOG_2PI  # [B]
    log_prob = torch.where(stochastic, log_prob, torch.zeros_like(log_prob))  # [B]
    return Step(prev_sample=prev_sample, log_prob=log_prob, mean=mean, std=std.contiguous())
