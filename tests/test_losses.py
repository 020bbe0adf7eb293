"""Hand-computed and Monte-Carlo checks for ddpo_grpo.losses."""

import math

import pytest
import torch

from ddpo_grpo.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    aggregation,
    aggregation_weight,
    clipped_surrogate,
    kl_estimator,
)


# --------------------------------------------------------------------------- #
# Clipped surrogate                                                           #
# --------------------------------------------------------------------------- #
def test_ratio_one_gives_minus_mean_advantage():
    torch.manual_seed(0)
    lp = torch.randn(8, dtype=torch.float64)
    adv = torch.randn(8, dtype=torch.float64)
    loss, info = clipped_surrogate(lp, lp.clone(), adv, 0.2)
    assert loss.shape == (8,)
    assert loss.mean().item() == pytest.approx(-adv.mean().item())
    assert torch.all(info["ratio"] == 1.0)
    assert torch.all(info["clipped"] == 0.0)
    assert torch.all(info["approx_kl"] == 0.0)


def _clip_cases():
    #            A,   ratio, loss,  clipped, d loss / d log_prob
    return [
        (2.0, 1.5, -2.4, 1.0, 0.0),  # A>0, ratio>1+eps: capped at (1+eps)A
        (2.0, 0.5, -1.0, 0.0, -1.0),  # A>0, ratio<1-eps: NOT clipped (pessimistic)
        (-1.0, 0.5, 0.8, 1.0, 0.0),  # A<0, ratio<1-eps: capped at (1-eps)A
        (-1.0, 1.5, 1.5, 0.0, 1.5),  # A<0, ratio>1+eps: NOT clipped
        (1.0, 1.1, -1.1, 0.0, -1.1),  # inside the trust region
        (0.0, 1.5, 0.0, 0.0, 0.0),  # zero advantage
    ]


def test_clipping_both_sides_values_flags_and_gradients():
    cases = _clip_cases()
    adv = torch.tensor([c[0] for c in cases], dtype=torch.float64)
    ratio = torch.tensor([c[1] for c in cases], dtype=torch.float64)
    old = torch.zeros_like(ratio)
    lp = torch.log(ratio).requires_grad_(True)
    loss, info = clipped_surrogate(lp, old, adv, 0.2)
    torch.testing.assert_close(loss.detach(), torch.tensor([c[2] for c in cases], dtype=torch.float64))
    torch.testing.assert_close(info["clipped"], torch.tensor([c[3] for c in cases], dtype=torch.float64))
    torch.testing.assert_close(info["ratio"], ratio)
    torch.testing.assert_close(info["approx_kl"], 0.5 * torch.log(ratio) ** 2)
    loss.sum().backward()
    torch.testing.assert_close(lp.grad, torch.tensor([c[4] for c in cases], dtype=torch.float64))
    # Gradient is zero exactly where flagged as clipped.
    assert torch.all(lp.grad[info["clipped"] == 1.0] == 0.0)
    assert not info["ratio"].requires_grad


def test_clipped_surrogate_validation():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="clip_range"):
        clipped_surrogate(x, x, x, 0.0)
    with pytest.raises(ValueError, match="shape mismatch"):
        clipped_surrogate(x, torch.zeros(4), x, 0.2)


# --------------------------------------------------------------------------- #
# KL estimators                                                               #
# --------------------------------------------------------------------------- #
def _gauss_logp(x, mu, s):
    return -((x - mu) ** 2) / (2 * s**2) - math.log(s) - 0.5 * math.log(2 * math.pi)


@pytest.fixture(scope="module")
def gaussian_samples():
    mu1, mu2, s = 0.0, 0.3, 1.0
    gen = torch.Generator().manual_seed(1234)
    x = mu1 + s * torch.randn(200_000, 1, generator=gen, dtype=torch.float64)  # [N, 1]
    # Log-probs averaged over the (single) latent dim -> [N].
    lp = _gauss_logp(x, mu1, s).mean(dim=1)
    ref_lp = _gauss_logp(x, mu2, s).mean(dim=1)
    true_kl = (mu1 - mu2) ** 2 / (2 * s**2)  # 0.045
    return lp, ref_lp, true_kl


@pytest.mark.parametrize("name", ["k1", "k3"])
def test_unbiased_kl_estimators_match_closed_form(gaussian_samples, name):
    lp, ref_lp, true_kl = gaussian_samples
    est = kl_estimator(name)(lp, ref_lp)
    assert est.shape == lp.shape
    se = est.std().item() / math.sqrt(est.numel())
    assert abs(est.mean().item() - true_kl) < 5 * se


def test_k2_close_for_small_kl(gaussian_samples):
    lp, ref_lp, true_kl = gaussian_samples
    est = KL_ESTIMATORS["k2"](lp, ref_lp)
    # E[k2] = 0.5 E[(0.3 x - 0.045)^2] = 0.045 + 0.5 * 0.045^2: small bias.
    assert est.mean().item() == pytest.approx(true_kl, rel=0.1)
    assert torch.all(est >= 0)


def test_k1_sign_and_k3_values():
    lp = torch.tensor([0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    ref = torch.tensor([1.0, -1.0, 30.0, -100.0], dtype=torch.float64)  # log r
    torch.testing.assert_close(KL_ESTIMATORS["k1"](lp, ref), -ref)
    torch.testing.assert_close(KL_ESTIMATORS["k2"](lp, ref), 0.5 * ref**2)
    k3 = KL_ESTIMATORS["k3"](lp, ref)
    expected = torch.tensor([math.e - 2, math.exp(-1) - 1 + 1, 10.0, 10.0], dtype=torch.float64)
    torch.testing.assert_close(k3, expected)


def test_k3_nonnegative_clamped_and_zero_grad_when_clamped():
    torch.manual_seed(0)
    lp = (torch.randn(10_000, dtype=torch.float64) * 30).requires_grad_(True)
    ref = torch.randn(10_000, dtype=torch.float64) * 30
    k3 = KL_ESTIMATORS["k3"](lp, ref)
    assert torch.all(torch.isfinite(k3))
    assert torch.all(k3 >= 0) and torch.all(k3 <= 10)
    k3.sum().backward()
    assert torch.all(lp.grad[k3 == 10.0] == 0.0)
    # Near-identical policies: tiny but non-negative.
    tiny = KL_ESTIMATORS["k3"](torch.zeros(5), torch.full((5,), 1e-8))
    assert torch.all(tiny >= 0)


def test_gaussian_exact_closed_form():
    mu1, mu2, s = torch.tensor([[0.0], [1.0]]), torch.tensor([[0.3], [-1.0]]), 0.5
    kl = KL_ESTIMATORS["gaussian"](None, None, mean=mu1, ref_mean=mu2, std=s)
    torch.testing.assert_close(kl, torch.tensor([0.09 / 0.5, 4.0 / 0.5]))


def test_gaussian_image_shaped_broadcast_std():
    torch.manual_seed(0)
    mean = torch.randn(3, 4, 2, 2, dtype=torch.float64)
    ref_mean = torch.randn(3, 4, 2, 2, dtype=torch.float64)
    std = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64).view(3, 1, 1, 1)
    lp = torch.zeros(3, dtype=torch.float64)
    kl = KL_ESTIMATORS["gaussian"](lp, lp, mean=mean, ref_mean=ref_mean, std=std)
    assert kl.shape == (3,)
    for b in range(3):
        want = ((mean[b] - ref_mean[b]) ** 2).mean() / (2 * std[b, 0, 0, 0] ** 2)
        torch.testing.assert_close(kl[b], want)


def test_gaussian_requires_means_and_std():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="ref_mean"):
        KL_ESTIMATORS["gaussian"](x, x, mean=x, std=1.0)


# --------------------------------------------------------------------------- #
# Aggregations                                                                #
# --------------------------------------------------------------------------- #
L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True, False], [True, False, False]])


def test_aggregations_hand_example():
    assert AGGREGATIONS["mean"].reduce(L).item() == pytest.approx(3.5)
    assert AGGREGATIONS["mean"].reduce(L, MASK).item() == pytest.approx(7 / 3)
    assert AGGREGATIONS["sum_norm"].reduce(L, constant=4).item() == pytest.approx(21 / 8)
    assert AGGREGATIONS["sum_norm"].reduce(L, MASK, constant=3).item() == pytest.approx(7 / 6)


def test_masked_entries_cannot_leak_nan():
    bad = L.clone()
    bad[0, 2] = float("nan")
    assert aggregation("mean")(bad, MASK).item() == pytest.approx(7 / 3)
    assert aggregation("sum_norm")(bad, MASK, constant=3).item() == pytest.approx(7 / 6)


def test_aggregation_validation():
    with pytest.raises(ValueError, match="constant"):
        AGGREGATIONS["sum_norm"].reduce(L)
    with pytest.raises(ValueError, match="mask shape"):
        AGGREGATIONS["mean"].reduce(L, MASK[:, :2])
    with pytest.raises(ValueError, match=r"\[B, K\]"):
        AGGREGATIONS["mean"].reduce(L[0])
    with pytest.raises(ValueError, match="constant"):
        aggregation_weight("sum_norm", num_samples=2, num_transitions=3)


@pytest.mark.parametrize("name, constant", [("mean", None), ("sum_norm", 5.0)])
def test_per_step_weights_reproduce_aggregation(name, constant):
    B, K = L.shape
    w = aggregation_weight(name, num_samples=B, num_transitions=K, constant=constant)
    per_step = sum(w * L[:, k].sum() for k in range(K))
    assert per_step.item() == pytest.approx(aggregation(name)(L, constant=constant).item())
    # With a mask: zero invalid entries per step ('mean' also needs num_valid).
    w = aggregation_weight(name, num_samples=B, num_transitions=K, constant=constant, num_valid=int(MASK.sum()))
    per_step = sum(w * (L[:, k] * MASK[:, k]).sum() for k in range(K))
    assert per_step.item() == pytest.approx(aggregation(name)(L, MASK, constant=constant).item())


@pytest.mark.parametrize("name, constant", [("mean", None), ("sum_norm", 3.0)])
def test_per_step_backward_matches_full_gradient(name, constant):
    torch.manual_seed(0)
    theta = torch.randn(3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 3, 3, dtype=torch.float64)  # [B, K, D]

    def step_loss(k):  # [B]
        return (x[:, k] * theta).sum(-1) ** 2

    full = aggregation(name)(torch.stack([step_loss(k) for k in range(3)], dim=1), constant=constant)
    (g_full,) = torch.autograd.grad(full, theta)
    w = aggregation_weight(name, num_samples=4, num_transitions=3, constant=constant)
    for k in range(3):  # one backward per denoising step, gradients accumulate
        (w * step_loss(k).sum()).backward()
    torch.testing.assert_close(theta.grad, g_full)


# --------------------------------------------------------------------------- #
# Lookups                                                                     #
# --------------------------------------------------------------------------- #
def test_lookup_helpers():
    assert kl_estimator("k3") is KL_ESTIMATORS["k3"]
    assert aggregation("sum_norm") is AGGREGATIONS["sum_norm"].reduce
    with pytest.raises(ValueError, match="k1"):
        kl_estimator("k4")
    with pytest.raises(ValueError, match="sum_norm"):
        aggregation("median")
    with pytest.raises(ValueError, match="mean"):
        aggregation_weight("median", num_samples=1, num_transitions=1)
