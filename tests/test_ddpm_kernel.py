"""Tests for ddpo_grpo.kernels.ddpm_step: DDPM ancestral sampling as a Gaussian transition with exact log-probs."""

import math

import pytest
import torch
from diffusers import DDPMScheduler

from ddpo_grpo.kernels import DDPM_VARIANCES, PREDICTION_TYPES, ddim_step, ddpm_step

SHAPE = (3, 4, 5)  # [B, frames, features]
VARIANCES = list(DDPM_VARIANCES)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _rand(shape=SHAPE, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=_gen(seed), dtype=dtype)


def _closed_form(out, x, a_t, a_prev, prediction_type, variance, eta=1.0):
    """Hand-written posterior (python-float coefficients): x0_hat, then Ho et al. eq. 7."""
    if prediction_type == "epsilon":
        x0 = (x - math.sqrt(1 - a_t) * out) / math.sqrt(a_t)
    elif prediction_type == "v_prediction":
        x0 = math.sqrt(a_t) * x - math.sqrt(1 - a_t) * out
    else:
        x0 = out
    beta = 1 - a_t / a_prev
    mean = math.sqrt(a_prev) * beta / (1 - a_t) * x0 + math.sqrt(1 - beta) * (1 - a_prev) / (1 - a_t) * x
    var = (1 - a_prev) / (1 - a_t) * beta if variance == "fixed_small" else beta
    return mean, (0.0 if a_prev >= 1 else eta * math.sqrt(var))


def _scheduler(beta_schedule, variance, **kw):
    return DDPMScheduler(
        num_train_timesteps=1000, beta_schedule=beta_schedule, variance_type=variance, clip_sample=False, **kw
    )


def _alphas(sched, t):
    prev = int(sched.previous_timestep(t))
    a_t = float(sched.alphas_cumprod[t])
    return a_t, float(sched.alphas_cumprod[prev]) if prev >= 0 else 1.0


# ----------------------------------------------------------------------------- closed form and log-prob


@pytest.mark.parametrize("prediction_type", PREDICTION_TYPES)
@pytest.mark.parametrize("variance", VARIANCES)
def test_log_prob_matches_torch_normal(prediction_type, variance):
    x, out = _rand(seed=1), _rand(seed=2)
    a_t, a_prev = 0.3, 0.55
    step = ddpm_step(out, x, a_t, a_prev, variance=variance, prediction_type=prediction_type, generator=_gen(3))
    mean, std = _closed_form(out, x, a_t, a_prev, prediction_type, variance)
    torch.testing.assert_close(step.mean, mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(step.std.flatten(), torch.full((3,), std), atol=1e-7, rtol=1e-6)
    expected = torch.distributions.Normal(mean, std).log_prob(step.prev_sample).mean(dim=(1, 2))
    torch.testing.assert_close(step.log_prob, expected, atol=1e-5, rtol=1e-5)
    assert step.log_prob.shape == (3,) and step.log_prob.dtype == torch.float32
    assert step.std.shape == (3, 1, 1) and step.prev_sample.dtype == x.dtype


@pytest.mark.parametrize("prediction_type", PREDICTION_TYPES)
@pytest.mark.parametrize("a_t,a_prev", [(0.02, 0.2), (0.5, 0.6), (0.9, 0.9995), (0.97, 1.0)])
def test_fixed_small_is_ddim_with_eta_one(prediction_type, a_t, a_prev):
    """Song et al. eq. 16 with η = 1: σ² = β̃ and the DDIM mean is the DDPM posterior mean."""
    x, out = _rand(seed=4), _rand(seed=5)
    ddpm = ddpm_step(out, x, a_t, a_prev, eta=1.0, prediction_type=prediction_type, generator=_gen(6))
    ddim = ddim_step(out, x, a_t, a_prev, eta=1.0, prediction_type=prediction_type, generator=_gen(6))
    torch.testing.assert_close(ddpm.mean, ddim.mean, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(ddpm.std, ddim.std, atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(ddpm.log_prob, ddim.log_prob, atol=1e-4, rtol=1e-5)


# ----------------------------------------------------------------------------- diffusers' DDPMScheduler


def _check_against_diffusers(sched, timesteps, variance, prediction_type="epsilon"):
    x, out = _rand(seed=7), _rand(seed=8)
    for t in timesteps:
        t = int(t)
        a_t, a_prev = _alphas(sched, t)
        ref = sched.step(out, t, x, generator=_gen(9)).prev_sample
        step = ddpm_step(out, x, a_t, a_prev, variance=variance, prediction_type=prediction_type, generator=_gen(9))
        if t > 0:
            ref_std = float(sched._get_variance(t)) ** 0.5
            ref_mean = ref - ref_std * torch.randn(SHAPE, generator=_gen(9))
        else:  # diffusers adds no noise at t = 0
            ref_std, ref_mean = 0.0, ref
        torch.testing.assert_close(step.mean, ref_mean, atol=2e-5, rtol=1e-5, msg=f"mean at t={t}")
        torch.testing.assert_close(step.std.flatten(), torch.full((3,), ref_std), atol=1e-7, rtol=2e-5)
        torch.testing.assert_close(step.prev_sample, ref, atol=2e-5, rtol=1e-5)  # same noise, same draw


@pytest.mark.parametrize("beta_schedule", ["squaredcos_cap_v2", "linear"])
@pytest.mark.parametrize("variance", VARIANCES)
def test_full_schedule_matches_diffusers(beta_schedule, variance):
    sched = _scheduler(beta_schedule, variance)
    _check_against_diffusers(sched, [999, 700, 250, 31, 1, 0], variance)


@pytest.mark.parametrize("beta_schedule", ["squaredcos_cap_v2", "linear"])
@pytest.mark.parametrize("variance", VARIANCES)
@pytest.mark.parametrize("spacing", ["leading", "linspace"])
def test_respaced_schedule_matches_diffusers(beta_schedule, variance, spacing):
    """set_timesteps(10): β'_t = 1 − ᾱ_t / ᾱ_prev between retained timesteps (Nichol & Dhariwal, Sec. 4)."""
    sched = _scheduler(beta_schedule, variance, timestep_spacing=spacing)
    sched.set_timesteps(10)
    assert int(sched.timesteps[-1]) == 0
    _check_against_diffusers(sched, sched.timesteps, variance)


@pytest.mark.parametrize("prediction_type", ["sample", "v_prediction"])
def test_other_predictions_match_diffusers(prediction_type):
    sched = _scheduler("squaredcos_cap_v2", "fixed_small", prediction_type=prediction_type)
    sched.set_timesteps(5)
    _check_against_diffusers(sched, sched.timesteps, "fixed_small", prediction_type)


# ----------------------------------------------------------------------------- conventions


@pytest.mark.parametrize("variance", VARIANCES)
def test_prev_sample_scoring_round_trip(variance):
    x, out = _rand(seed=10, dtype=torch.bfloat16), _rand(seed=11, dtype=torch.bfloat16)
    drawn = ddpm_step(out, x, 0.4, 0.7, eta=0.8, variance=variance, generator=_gen(12))
    assert drawn.prev_sample.dtype == torch.bfloat16 and drawn.log_prob.dtype == torch.float32
    scored = ddpm_step(out, x, 0.4, 0.7, eta=0.8, variance=variance, prev_sample=drawn.prev_sample)
    assert scored.prev_sample is drawn.prev_sample
    assert torch.equal(scored.log_prob, drawn.log_prob)  # the log-prob of the cast sample, bit for bit
    other = ddpm_step(out, x, 0.4, 0.7, eta=0.8, variance=variance, prev_sample=_rand(seed=13))
    assert (other.log_prob < drawn.log_prob).all()  # a foreign sample is far less likely


def test_float64_is_kept():
    x, out = _rand(seed=14, dtype=torch.float64), _rand(seed=15, dtype=torch.float64)
    step = ddpm_step(out, x, 0.4, 0.7, generator=_gen(0))
    assert step.mean.dtype == step.log_prob.dtype == torch.float64


@pytest.mark.parametrize("variance", VARIANCES)
def test_deterministic_rows(variance):
    """η = 0 rows are the posterior mean with log-prob 0, next to stochastic rows of the same batch."""
    x, out = _rand(seed=16), _rand(seed=17)
    eta = torch.tensor([0.0, 1.0, 0.0])
    step = ddpm_step(out, x, 0.3, 0.6, eta=eta, variance=variance, generator=_gen(18))
    assert torch.equal(step.prev_sample[[0, 2]], step.mean[[0, 2]])
    assert (step.log_prob[[0, 2]] == 0).all() and step.log_prob[1] != 0
    assert (step.std.flatten() == torch.tensor([0.0, 1.0, 0.0]) * step.std.flatten()[1]).all()
    scored = ddpm_step(out, x, 0.3, 0.6, eta=eta, variance=variance, prev_sample=step.prev_sample)
    assert torch.equal(scored.log_prob, step.log_prob)


@pytest.mark.parametrize("variance", VARIANCES)
@pytest.mark.parametrize("prediction_type", PREDICTION_TYPES)
def test_last_step_is_noise_free_and_returns_x0(variance, prediction_type):
    """ᾱ_prev = 1: MDM's p_sample masks the noise at t = 0 (fixed_large too); the mean is x̂₀ itself."""
    x, out = _rand(seed=19), _rand(seed=20)
    a_t = 0.98
    step = ddpm_step(out, x, a_t, 1.0, variance=variance, prediction_type=prediction_type, generator=_gen(21))
    assert (step.std == 0).all() and (step.log_prob == 0).all()
    assert torch.equal(step.prev_sample, step.mean)
    expected_x0 = {
        "epsilon": (x - math.sqrt(1 - a_t) * out) / math.sqrt(a_t),
        "v_prediction": math.sqrt(a_t) * x - math.sqrt(1 - a_t) * out,
        "sample": out,
    }[prediction_type]
    torch.testing.assert_close(step.mean, expected_x0, atol=1e-5, rtol=1e-5)


def test_fixed_large_is_wider_and_eta_scales_std():
    x, out = _rand(seed=22), _rand(seed=23)
    small = ddpm_step(out, x, 0.3, 0.6, variance="fixed_small", generator=_gen(0))
    large = ddpm_step(out, x, 0.3, 0.6, variance="fixed_large", generator=_gen(0))
    half = ddpm_step(out, x, 0.3, 0.6, eta=0.5, variance="fixed_small", generator=_gen(0))
    assert (large.std > small.std).all()
    torch.testing.assert_close(large.mean, small.mean)
    torch.testing.assert_close(half.std, 0.5 * small.std)
    torch.testing.assert_close(half.mean, small.mean)  # η changes the spread only, not the mean


def test_log_prob_is_differentiable():
    x, out = _rand(seed=24), _rand(seed=25).requires_grad_(True)
    drawn = ddpm_step(out.detach(), x, 0.3, 0.6, generator=_gen(0))
    step = ddpm_step(out, x, 0.3, 0.6, prev_sample=drawn.prev_sample)
    step.log_prob.sum().backward()
    assert out.grad is not None and torch.isfinite(out.grad).all() and out.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "override,name",
    [
        ({"alpha_prod_t": 0.0}, "alpha_prod_t"),
        ({"alpha_prod_t_prev": 0.1}, "alpha_prod_t_prev"),
        ({"eta": 1.5}, "eta"),
        ({"eta": -0.1}, "eta"),
        ({"variance": "learned_range"}, "variance"),
        ({"prediction_type": "x0"}, "prediction_type"),
    ],
)
def test_bad_arguments(override, name):
    args = {
        "alpha_prod_t": 0.3,
        "alpha_prod_t_prev": 0.6,
        "eta": 1.0,
        "variance": "fixed_small",
        "prediction_type": "epsilon",
        **override,
    }
    x = _rand(seed=26)
    with pytest.raises(ValueError, match=name):
        ddpm_step(x, x, args.pop("alpha_prod_t"), args.pop("alpha_prod_t_prev"), **args)
