"""What one minibatch of a language-model epoch back-propagates: GRPO over the stored tokens.

The updater of a causal-LM policy, with the interface of ``updates.py``'s (``prepare`` once per epoch, ``minibatch``
per minibatch, returning the loop's ``MinibatchResult``), so the one update loop (``inner_loop.py``: inner epochs,
shuffling, accumulation, the KL early stop) drives it unchanged. Per minibatch of B stored responses:

1. the reference's log-probs (``train.beta`` > 0, unless the KL is in the reward, ``train.kl_in_reward``: the model with its LoRA switched off, or the frozen copy of the
   trained weights, ``reference.Reference``) under no_grad, BEFORE the policy's forward (see reference.py);
2. one forward of the prompts + responses: log π_θ(y_t) [B, L] (``policy.response_logprobs``, the same forward the
   rollout stored its log-probs from) and the entropy;
3. the per-token loss of ``token_losses``: the clipped surrogate with ε_low = ``train.clip_range``, ε_high =
   ``train.clip_range_high`` (0 = ε_low), + β·KL_t (``train.kl_estimator``: k1 | k2 | k3 | low_var_kl), aggregated by
   ``train.loss_aggregation`` (token-mean | seq-mean-token-mean | seq-mean-token-sum-norm, C =
   ``train.loss_norm_constant`` or ``sample.max_response_length``), scaled by λ_pg / accumulation steps.

``train/loss`` and ``train/policy_loss`` are the minibatch's aggregated values; the other statistics are per response (a
masked mean over its tokens), so the loop's KL early stop and every other ``train/*`` mean read as for images: ``approx_kl`` (½ (log ρ)² per token), ``clipfrac``, ``ratio``, ``kl``, ``entropy``. The on-policy
check (``train/logp_mismatch``) is max |recomputed − stored| over the first minibatch's tokens before any update.
"""

from __future__ import annotations

import contextlib

import torch

from ddpo_grpo.inner_loop import MinibatchResult
from ddpo_grpo.sharding import no_sync
from ddpo_grpo.token_losses import AGGREGATIONS, aggregate, clipped_token_surrogate, token_kl


def check_settings(objective: str, loss_aggregation: str, beta: float, kl_estimator: str) -> None:
    """ValueError naming the ``train.*`` field a language model's update cannot take (``wiring.check_language_run``
    calls it before anything is written)."""
    if objective != "grpo":
        raise ValueError(f"train.objective={objective!r}: a language model trains with 'grpo'")
    if loss_aggregation not in AGGREGATIONS:
        raise ValueError(
            f"train.loss_aggregation={loss_aggregation!r} for a language model must be one of {list(AGGREGATIONS)} "
            "(verl's names)"
        )
    if beta > 0:  # (the estimator is unused without a KL term)
        token_kl(torch.zeros(1), torch.zeros(1), kl_estimator)  # its ValueError names the field


def _per_response(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The masked mean over each response's tokens: [B, L] -> [B]."""
    m = mask.float()
    return (values.detach().float() * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


class TokenUpdate:
    """Objective "grpo" of a causal-LM policy (module docstring)."""

    name = "grpo"

    def __init__(self, ctx, max_response_length: int, clip_range_high: float, kl_loss: bool = True):
        st = ctx.settings
        check_settings(st.objective, st.loss_aggregation, st.beta, st.kl_estimator)
        self.ctx = ctx
        self.clip_low = st.clip_range
        self.clip_high = clip_range_high if clip_range_high > 0 else st.clip_range
        self.norm_constant = st.loss_norm_constant or max_response_length
        self.kl_loss = kl_loss  # False: the KL is in the reward (train.kl_in_reward), the loss has none

    def prepare(self, epoch: int, rollout, advantages: torch.Tensor) -> None:
        """Nothing to prepare: the stored responses and their log-probs are all this objective needs."""

    def minibatch(self, batch, adv: torch.Tensor, index, *, sync: bool, weight: float, check: bool) -> MinibatchResult:
        ctx, st = self.ctx, self.ctx.settings
        result = MinibatchResult()
        mask = batch.response_mask
        p = batch.prompt_length
        ref = None
        if ctx.reference is not None and self.kl_loss:
            with ctx.reference.active(), torch.no_grad(), ctx.autocast():
                ref, _ = ctx.policy.response_logprobs(ctx.reference.model, batch.ids, batch.mask, p)
        with contextlib.nullcontext() if sync else no_sync(ctx.model, ctx.acc):
            with ctx.autocast():
                logp, entropy = ctx.policy.response_logprobs(ctx.model, batch.ids, batch.mask, p, entropy=True)
            terms = clipped_token_surrogate(logp, batch.log_probs, adv, self.clip_low, self.clip_high)
            per_token = terms.loss
            kl = None
            if ref is not None:
                kl = token_kl(logp, ref, st.kl_estimator)
                per_token = per_token + st.beta * kl
            loss = aggregate(per_token, mask, st.loss_aggregation, norm_constant=self.norm_constant)
            ctx.acc.backward(loss * weight / st.gradient_accumulation_steps)
        every = torch.ones(len(batch), device=mask.device)
        result.add("loss", torch.full_like(every, float(loss.detach())), every)
        policy = aggregate(terms.loss.detach(), mask, st.loss_aggregation, norm_constant=self.norm_constant)
        result.add("policy_loss", torch.full_like(every, float(policy)), every)
        result.add("approx_kl", _per_response(terms.approx_kl, mask), every)
        result.add("clipfrac", _per_response(terms.clipped, mask), every)
        result.add("ratio", _per_response(terms.ratio, mask), every)
        result.add("entropy", _per_response(entropy, mask), every)
        if kl is not None:
            result.add("kl", _per_response(kl, mask), every)
        if check:
            gap = ((logp.detach().float() - batch.log_probs.float()).abs() * mask).max()
            result.mismatch = float(gap)
        return result
