"""The GRPO loss over tokens: pure tensor math, no model and no tokenizer.

A language model's response is a trajectory whose steps are tokens: step t draws token y_t from π_θ(· | x, y_<t),
and its log-probability log π_θ(y_t | x, y_<t) is one entry of a [B, L] matrix (B responses, L the longest
response; ``mask`` [B, L] is 1 on a response's own tokens and 0 on the padding after its end). Everything here
works on such matrices.

Per token (Schulman et al. 2017; DAPO's decoupled clip, Yu et al. 2025):
    ρ_t   = exp(log π_θ(y_t) − log π_old(y_t))                               the ratio to the sampling policy
    L_t   = −min(ρ_t·A, clip(ρ_t, 1 − ε_low, 1 + ε_high)·A)                  A: the response's advantage
          (+ β·KL_t, the estimate of KL(π_θ ‖ π_ref) at token t, ``token_kl``)
Entropy, clip fraction and approx-KL are reported per token.

Aggregation, by verl's names (``verl/trainer/ppo/core_algos.py``, ``agg_loss``), m_bt the mask:
    "token-mean"               Σ_bt m·L / Σ_bt m                       every token of the batch weighs the same
    "seq-mean-token-mean"      (1/B) Σ_b [Σ_t m·L / Σ_t m]             every response weighs the same (GRPO's paper)
    "seq-mean-token-sum-norm"  (1/B) Σ_b [Σ_t m·L / C]                 Dr. GRPO: C a constant (the maximum
                                                                       response length), no length bias
TRL 1.16's ``loss_type`` values map onto them (per micro-batch; tests/test_trl_equivalence.py checks loss and
gradient within 1e-5): "grpo" = seq-mean-token-mean, "bnpo" = token-mean, "dr_grpo" = seq-mean-token-sum-norm with
C = max_completion_length, "luspo" = seq-mean-token-sum-norm with C = 1 (token-level ratios; its paper's sequence-level
ratio is not expressed); TRL divides these by the accumulation steps, i.e. averages the micro-batches. Its "dapo" is
token-mean over the tokens of the whole generation batch, all ranks (``num_tokens`` = that count divided by the world
size, as DDP averages the ranks' gradients). Not expressed: "cispo" (−sg(min(ρ, ε_high))·A·log π, a stopped weight on a
REINFORCE term), "sapo" (a sigmoid gate in place of the clip), "vespo" (gamma weights of the sequence ratio).
TRL's KL term is k3; with its default use_bias_correction_kl=True it is k3·ρ_t with ρ_t differentiable (not ours).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "AGGREGATIONS",
    "KL_CLAMP",
    "TOKEN_KL_ESTIMATORS",
    "TokenTerms",
    "aggregate",
    "clipped_token_surrogate",
    "token_entropy",
    "token_kl",
    "token_logprobs",
]

#: loss aggregation modes (``train.loss_aggregation`` for a language model), verl's names
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")

#: verl's bounds for "low_var_kl": the log-ratio is clamped to ±20 before exp, the estimate to ±10
KL_CLAMP = (20.0, 10.0)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / T)[y] per position, in float32: logits [B, L, V], tokens [B, L] -> [B, L].

    The sampler draws from softmax(logits / T) (top-p only restricts which tokens can be drawn; like verl and TRL the
    log-probability is the tempered softmax's), so the same T must divide the logits when re-scoring."""
    scaled = logits.float() / float(temperature)
    return torch.log_softmax(scaled, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """H(softmax(logits / T)) per position, float32: [B, L, V] -> [B, L]."""
    logp = torch.log_softmax(logits.float() / float(temperature), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def _k1(log_ratio: torch.Tensor) -> torch.Tensor:
    return -log_ratio


def _k2(log_ratio: torch.Tensor) -> torch.Tensor:
    return 0.5 * log_ratio.square()


def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    # (r − 1) − log r with r = π_ref / π_θ: unbiased, ≥ 0 (e^y − 1 ≥ y); TRL's per-token KL, unclamped
    return torch.expm1(log_ratio) - log_ratio


def _low_var_kl(log_ratio: torch.Tensor) -> torch.Tensor:
    # verl's "low_var_kl": k3 with the log-ratio clamped to ±20 and the estimate to ±10 (a bounded gradient)
    bound, ceiling = KL_CLAMP
    y = log_ratio.clamp(-bound, bound)
    return (torch.expm1(y) - y).clamp(-ceiling, ceiling)


#: KL(π_θ ‖ π_ref) per token from log r = log π_ref(y) − log π_θ(y), y ~ π_θ (Schulman, "Approximating KL
#: divergence", 2020): k1 = −log r (unbiased, signed), k2 = ½ (log r)² (verl's "mse"), k3 = r − 1 − log r, and
#: low_var_kl = k3 clamped as verl clamps it
TOKEN_KL_ESTIMATORS = {"k1": _k1, "k2": _k2, "k3": _k3, "low_var_kl": _low_var_kl}


def token_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL estimate [B, L] of ``estimator`` (``TOKEN_KL_ESTIMATORS``)."""
    if estimator not in TOKEN_KL_ESTIMATORS:
        raise ValueError(
            f"train.kl_estimator={estimator!r} for a language model must be one of {list(TOKEN_KL_ESTIMATORS)}"
        )
    return TOKEN_KL_ESTIMATORS[estimator](ref_log_probs.float() - log_probs.float())


class TokenTerms(NamedTuple):
    """The clipped surrogate per token and its diagnostics, each [B, L]."""

    loss: torch.Tensor  # −min(ρA, clip(ρ)A)
    ratio: torch.Tensor  # ρ
    clipped: torch.Tensor  # 1.0 where the clipped branch is the one taken (its gradient is 0)
    approx_kl: torch.Tensor  # ½ (log ρ)², the per-token KL to the sampling policy to second order


def clipped_token_surrogate(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> TokenTerms:
    """PPO's clipped surrogate per token with DAPO's separate ranges: [B, L] log-probs, advantages [B] (one per
    response, broadcast over its tokens) or [B, L]."""
    adv = advantages.float()
    adv = adv.unsqueeze(-1) if adv.ndim == 1 else adv
    log_ratio = log_probs.float() - old_log_probs.float()
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    taken = (clipped < unclipped).float()
    return TokenTerms(loss, ratio.detach(), taken, 0.5 * log_ratio.detach().square())


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, mode: str, *, norm_constant: float = 0.0, num_tokens: float = 0.0
) -> torch.Tensor:
    """The scalar of ``mode`` (module docstring) over [B, L] ``values`` under ``mask``.

    ``norm_constant``: C of "seq-mean-token-sum-norm" (0 = L, the padded length). ``num_tokens``: the token count
    "token-mean" divides by (0 = this batch's Σ m; a caller accumulating several micro-batches into one step passes the
    count over all of them, so that their sum is the token mean of the whole). A response without tokens counts as
    one token in "seq-mean-token-mean" (its sum is 0 anyway)."""
    m = mask.to(values.dtype)
    total = values * m
    if mode == "token-mean":
        return total.sum() / (float(num_tokens) if num_tokens > 0 else m.sum().clamp_min(1.0))
    if mode == "seq-mean-token-mean":
        return (total.sum(dim=-1) / m.sum(dim=-1).clamp_min(1.0)).mean()
    if mode == "seq-mean-token-sum-norm":
        constant = float(norm_constant) if norm_constant > 0 else values.shape[-1]
        return (total.sum(dim=-1) / constant).mean()
    raise ValueError(f"train.loss_aggregation={mode!r} for a language model must be one of {list(AGGREGATIONS)}")
