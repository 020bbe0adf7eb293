"""The token loss (ddpo_grpo/token_losses.py) against hand computations: aggregation modes, clip-higher, KL estimators,
and the sampler's nucleus draw (token_rollout.draw)."""

import math

import pytest
import torch

from ddpo_grpo.token_losses import aggregate, clipped_token_surrogate, token_entropy, token_kl, token_logprobs
from ddpo_grpo.token_rollout import draw

VALUES = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


def test_token_mean_weighs_every_token_alike():
    assert float(aggregate(VALUES, MASK, "token-mean")) == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert float(aggregate(VALUES, MASK, "token-mean", num_tokens=8)) == pytest.approx(10 / 8)


def test_seq_mean_token_mean_weighs_every_response_alike():
    assert float(aggregate(VALUES, MASK, "seq-mean-token-mean")) == pytest.approx((6 / 3 + 4 / 1) / 2)


def test_seq_mean_token_sum_norm_divides_by_a_constant():
    assert float(aggregate(VALUES, MASK, "seq-mean-token-sum-norm")) == pytest.approx((6 / 4 + 4 / 4) / 2)
    assert float(aggregate(VALUES, MASK, "seq-mean-token-sum-norm", norm_constant=10)) == pytest.approx(0.5)


def test_padding_never_counts():
    poisoned = VALUES.clone()
    poisoned[MASK == 0] = 1e6
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert float(aggregate(poisoned, MASK, mode)) == pytest.approx(float(aggregate(VALUES, MASK, mode)))


def test_unknown_mode_names_the_field():
    with pytest.raises(ValueError, match="train.loss_aggregation='mean'.*token-mean"):
        aggregate(VALUES, MASK, "mean")


def test_clip_higher_bounds_the_ratio_asymmetrically():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[0.5, 0.9, 1.2, 1.5]]))  # ratios 0.5, 0.9, 1.2, 1.5
    pos = clipped_token_surrogate(logp, old, torch.tensor([1.0]), clip_low=0.2, clip_high=0.28)
    # A > 0: min(ρA, clip(ρ)A): ρ above 1.28 is capped, ρ below 0.8 is not (the min takes ρ itself)
    assert pos.loss.tolist()[0] == pytest.approx([-0.5, -0.9, -1.2, -1.28])
    assert pos.clipped.tolist()[0] == [0.0, 0.0, 0.0, 1.0]
    neg = clipped_token_surrogate(logp, old, torch.tensor([-1.0]), clip_low=0.2, clip_high=0.28)
    # A < 0: ρ below 0.8 is floored at 0.8, ρ above 1.28 is not
    assert neg.loss.tolist()[0] == pytest.approx([0.8, 0.9, 1.2, 1.5])
    assert neg.clipped.tolist()[0] == [1.0, 0.0, 0.0, 0.0]


def test_clipped_tokens_carry_no_gradient():
    logp = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_(True)
    terms = clipped_token_surrogate(logp, torch.zeros(1, 2), torch.tensor([1.0]), 0.2, 0.2)
    terms.loss.sum().backward()
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -1.1])  # d(−ρ)/d log π = −ρ where unclipped


def test_kl_estimators_match_their_formulas():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    log_r = ref - logp  # log π_ref − log π_θ
    assert token_kl(logp, ref, "k1").tolist() == pytest.approx((-log_r).tolist())
    assert token_kl(logp, ref, "k2").tolist() == pytest.approx((0.5 * log_r**2).tolist())
    k3 = [math.exp(v) - 1 - v for v in log_r.tolist()]
    assert token_kl(logp, ref, "k3").tolist() == pytest.approx(k3)
    assert token_kl(logp, ref, "low_var_kl").tolist() == pytest.approx(k3)  # inside the clamp they agree


def test_low_var_kl_is_clamped_as_verl_clamps_it():
    far = token_kl(torch.tensor([-30.0]), torch.tensor([0.0]), "low_var_kl")  # log r = 30: clamped to 20, then 10
    assert float(far) == 10.0
    assert float(token_kl(torch.tensor([-30.0]), torch.tensor([0.0]), "k3")) > 1e12


def test_logprobs_and_entropy_use_the_temperature():
    logits = torch.tensor([[[2.0, 0.0, -1.0]]])
    for t in (1.0, 0.5):
        p = torch.softmax(logits / t, dim=-1)
        assert float(token_logprobs(logits, torch.tensor([[1]]), t)) == pytest.approx(float(p[0, 0, 1].log()))
        assert float(token_entropy(logits, t)) == pytest.approx(float(-(p * p.log()).sum()))


def test_draw_inverts_the_cdf_and_keeps_to_the_nucleus():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))  # sorted: token 1 (0.6), token 2 (0.3), token 0 (0.1)
    picks = [int(draw(logits, 1.0, 1.0, torch.tensor([u]))) for u in (0.0, 0.59, 0.61, 0.89, 0.91, 0.999)]
    assert picks == [1, 1, 2, 2, 0, 0]
    # top_p 0.8: the nucleus is {1, 2} (0.6 < 0.8 ≤ 0.9), renormalised: token 1 below u = 2/3
    nucleus = [int(draw(logits, 1.0, 0.8, torch.tensor([u]))) for u in (0.0, 0.66, 0.67, 0.999)]
    assert nucleus == [1, 1, 2, 2]
    assert int(draw(logits, 1.0, 0.5, torch.tensor([0.999]))) == 1  # the most likely token alone


def test_verl_and_trl_std_rules_match_their_formulas():
    import numpy as np

    from ddpo_grpo.stat_tracker import PerPromptStatTracker

    rewards = np.array([1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 0.0])
    prompts = ["a"] * 4 + ["b"] * 4
    t = torch.tensor(rewards).view(2, 4)
    centred = t - t.mean(dim=1, keepdim=True)
    for rule, eps in (("verl", 1e-6), ("trl", 1e-4)):
        adv, _ = PerPromptStatTracker("zscore", std_rule=rule).update(prompts, rewards)
        expected = centred / (t.std(dim=1, keepdim=True) + eps)  # torch.std: ddof 1, as verl and TRL use it
        assert adv.tolist() == pytest.approx(expected.flatten().tolist(), abs=1e-6)
    house, _ = PerPromptStatTracker("zscore").update(prompts, rewards)
    population = centred / t.std(dim=1, unbiased=False, keepdim=True)
    assert house.tolist() == pytest.approx(population.flatten().tolist(), abs=1e-6)


def test_a_uniform_rounded_up_stays_inside_the_nucleus():
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    assert int(draw(logits, 1.0, 0.8, torch.tensor([1.0]))) == 2  # not token 0, outside the nucleus {1, 2}
    assert int(draw(logits, 1.0, 1.0, torch.tensor([1.0]))) == 0
