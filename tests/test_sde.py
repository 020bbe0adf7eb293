"""Tests for ddpo_grpo.sde: stochastic flow-matching / DDIM kernels with Gaussian log-probs."""

import math

import pytest
import torch
from diffusers import DDIMScheduler, FlowMatchEulerDiscreteScheduler

from ddpo_grpo.sde import PREDICTION_TYPES, SDE_TYPES, Step, ddim_step, flow_sde_step

FLOW_TYPES = ["flow_grpo", "dance", "cps"]
SHAPE = (2, 4, 3, 3)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _rand(shape=SHAPE, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=_gen(seed), dtype=dtype)


def _flow_closed_form(sde_type, x, v, s, sn, lvl):
    """Hand-written reference (python-float coefficients) for each flow kernel."""
    x0 = x - s * v
    eps = x + (1 - s) * v
    if sde_type == "flow_grpo":
        g = lvl * math.sqrt(s / (1 - (sn if s >= 1 else s)))
        return x + (sn - s) * (v + g**2 / (2 * s) * eps), g * math.sqrt(s - sn)
    if sde_type == "dance":
        return x + (sn - s) * (v + lvl**2 / (2 * s) * eps), lvl * math.sqrt(s - sn)
    std = sn * math.sin(lvl * math.pi / 2)
    return (1 - sn) * x0 + math.sqrt(sn**2 - std**2) * eps, std


def _ddim_alphas(sched, t):
    prev_t = t - sched.config.num_train_timesteps // sched.num_inference_steps
    a_t = sched.alphas_cumprod[t]
    a_prev = sched.alphas_cumprod[prev_t] if prev_t >= 0 else sched.final_alpha_cumprod
    return a_t, a_prev, prev_t


# ----------------------------------------------------------------------------- contract


def test_public_registries():
    assert set(SDE_TYPES) == set(FLOW_TYPES)
    assert set(PREDICTION_TYPES) == {"epsilon", "v_prediction", "sample"}
    assert Step._fields == ("prev_sample", "log_prob", "mean", "std")


@pytest.mark.parametrize("sde_type", FLOW_TYPES)
def test_flow_output_shapes_and_dtypes(sde_type):
    x, v = _rand(seed=1), _rand(seed=2)
    step = flow_sde_step(v, x, 0.8, 0.6, noise_level=0.5, sde_type=sde_type, generator=_gen())
    assert step.prev_sample.shape == x.shape and step.prev_sample.dtype == x.dtype
    assert step.mean.shape == x.shape and step.mean.dtype == torch.float32
    assert step.std.shape == (2, 1, 1, 1) and step.std.dtype == torch.float32
    assert step.log_prob.shape == (2,) and step.log_prob.dtype == torch.float32


def test_float64_is_kept():
    x, v = _rand(dtype=torch.float64), _rand(seed=3, dtype=torch.float64)
    step = flow_sde_step(v, x, 0.8, 0.6, noise_level=0.5, generator=_gen())
    assert step.prev_sample.dtype == step.mean.dtype == step.std.dtype == step.log_prob.dtype == torch.float64
    step = ddim_step(v, x, 0.5, 0.7, eta=1.0, generator=_gen())
    assert step.prev_sample.dtype == step.mean.dtype == step.std.dtype == step.log_prob.dtype == torch.float64


# ----------------------------------------------------------------------------- deterministic limits


@pytest.mark.parametrize("shift", [1.0, 3.0])
@pytest.mark.parametrize("sde_type", FLOW_TYPES)
def test_zero_noise_matches_diffusers_euler(sde_type, shift):
    sched = FlowMatchEulerDiscreteScheduler(shift=shift)
    sched.set_timesteps(6)
    sigmas = sched.sigmas
    x = _rand(seed=10)
    for i, t in enumerate(sched.timesteps):
        v = _rand(seed=100 + i)
        expected = sched.step(v, t, x).prev_sample
        step = flow_sde_step(v, x, sigmas[i], sigmas[i + 1], noise_level=0.0, sde_type=sde_type, generator=_gen(i))
        torch.testing.assert_close(step.prev_sample, expected, atol=1e-5, rtol=1e-5)
        assert torch.equal(step.prev_sample, step.mean)
        assert torch.equal(step.log_prob, torch.zeros(2)) and torch.equal(step.std, torch.zeros(2, 1, 1, 1))
        x = expected


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction", "sample"])
def test_eta_zero_matches_diffusers_ddim(prediction_type):
    sched = DDIMScheduler(clip_sample=False, prediction_type=prediction_type)
    sched.set_timesteps(8)
    x = _rand(seed=20)
    for i, t in enumerate(sched.timesteps):
        out = _rand(seed=200 + i)
        if prediction_type == "sample":
            out = out * 0.5
        expected = sched.step(out, t, x, eta=0.0).prev_sample
        a_t, a_prev, _ = _ddim_alphas(sched, int(t))
        step = ddim_step(out, x, a_t, a_prev, eta=0.0, prediction_type=prediction_type, generator=_gen(i))
        torch.testing.assert_close(step.prev_sample, expected, atol=1e-5, rtol=1e-5)
        assert torch.equal(step.log_prob, torch.zeros(2))
        x = expected


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction"])
def test_ddim_eta_mean_and_std_match_diffusers(prediction_type):
    sched = DDIMScheduler(clip_sample=False, prediction_type=prediction_type)
    sched.set_timesteps(10)
    eta = 0.8
    x = _rand(seed=30)
    for t in sched.timesteps[[0, 4, 9]]:
        t = int(t)
        out = _rand(seed=300 + t)
        a_t, a_prev, prev_t = _ddim_alphas(sched, t)
        expected_mean = sched.step(out, t, x, eta=eta, variance_noise=torch.zeros_like(x)).prev_sample
        step = ddim_step(out, x, a_t, a_prev, eta=eta, prediction_type=prediction_type, generator=_gen())
        torch.testing.assert_close(step.mean, expected_mean, atol=1e-5, rtol=1e-5)
        expected_std = eta * sched._get_variance(t, prev_t).sqrt()
        torch.testing.assert_close(step.std, expected_std.expand(2, 1, 1, 1).float(), atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("sde_type", FLOW_TYPES)
@pytest.mark.parametrize("s,sn,lvl", [(1.0, 0.9, 0.7), (0.6, 0.45, 0.5), (0.3, 0.0, 0.9)])
def test_flow_closed_form(sde_type, s, sn, lvl):
    x, v = _rand(seed=40, dtype=torch.float64), _rand(seed=41, dtype=torch.float64)
    step = flow_sde_step(v, x, s, sn, noise_level=lvl, sde_type=sde_type, generator=_gen())
    mean, std = _flow_closed_form(sde_type, x, v, s, sn, lvl)
    torch.testing.assert_close(step.mean, mean, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(step.std, torch.full((2, 1, 1, 1), std, dtype=torch.float64), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("prediction_type", ["epsilon", "v_prediction", "sample"])
def test_ddim_closed_form(prediction_type):
    x, out = _rand(seed=50, dtype=torch.float64), _rand(seed=51, dtype=torch.float64)
    a_t, a_prev, eta = 0.3, 0.55, 0.6
    if prediction_type == "epsilon":
        eps = out
        x0 = (x - math.sqrt(1 - a_t) * eps) / math.sqrt(a_t)
    elif prediction_type == "v_prediction":
        x0 = math.sqrt(a_t) * x - math.sqrt(1 - a_t) * out
        eps = math.sqrt(a_t) * out + math.sqrt(1 - a_t) * x
    else:
        x0 = out
        eps = (x - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)
    std = eta * math.sqrt((1 - a_prev) / (1 - a_t)) * math.sqrt(1 - a_t / a_prev)
    mean = math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev - std**2) * eps
    step = ddim_step(out, x, a_t, a_prev, eta=eta, prediction_type=prediction_type, generator=_gen())
    torch.testing.assert_close(step.mean, mean, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(step.std, torch.full((2, 1, 1, 1), std, dtype=torch.float64))


def test_cps_preserves_noise_coefficient():
    # (1 - sn) x0 + sqrt(sn^2 - std^2) eps + std z: noise coefficients square-sum to sn^2.
    x, v = _rand(seed=60, dtype=torch.float64), _rand(seed=61, dtype=torch.float64)
    s, sn = 0.7, 0.5
    step = flow_sde_step(v, x, s, sn, noise_level=0.4, sde_type="cps", generator=_gen())
    x0, eps = x - s * v, x + (1 - s) * v
    eps_coeff = (step.mean - (1 - sn) * x0) / eps
    torch.testing.assert_close(eps_coeff**2 + step.std**2, torch.full_like(eps_coeff, sn**2))


# ----------------------------------------------------------------------------- sampling statistics


N = 20000


def _flow_kernel(sde_type):
    def call(v, x, **kw):
        return flow_sde_step(v, x, 0.8, 0.5, noise_level=0.8, sde_type=sde_type, **kw)

    return call


def _ddim(out, x, **kw):
    return ddim_step(out, x, 0.4, 0.6, eta=1.0, **kw)


KERNELS = {**{name: _flow_kernel(name) for name in FLOW_TYPES}, "ddim": _ddim}


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_empirical_moments_batch_layout(kernel):
    # [N, 1]: N independent draws of the same 1-d state.
    x = torch.full((N, 1), 0.3)
    v = torch.full((N, 1), -0.7)
    step = KERNELS[kernel](v, x, generator=_gen(7))
    prev = step.prev_sample[:, 0]
    mean, std = step.mean[0, 0].item(), step.std[0, 0].item()
    assert std > 0.05
    assert abs(prev.mean().item() - mean) < 5 * std / math.sqrt(N)
    assert abs(prev.std().item() / std - 1) < 0.03


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_empirical_moments_feature_layout(kernel):
    # [1, N]: one sample with N features, each with its own mean and a shared std.
    x, v = _rand((1, N), seed=70), _rand((1, N), seed=71)
    step = KERNELS[kernel](v, x, generator=_gen(8))
    z = (step.prev_sample - step.mean) / step.std
    assert abs(z.mean().item()) < 5 / math.sqrt(N)
    assert abs(z.std().item() - 1) < 0.03


# ----------------------------------------------------------------------------- log-prob and rescoring


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_log_prob_matches_torch_normal(kernel):
    x, v = _rand(seed=80), _rand(seed=81)
    step = KERNELS[kernel](v, x, generator=_gen(9))
    ref = torch.distributions.Normal(step.mean, step.std.expand_as(step.mean)).log_prob(step.prev_sample)
    torch.testing.assert_close(step.log_prob, ref.mean(dim=(1, 2, 3)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_rescoring_is_exact(kernel):
    x, v = _rand(seed=90), _rand(seed=91)
    step = KERNELS[kernel](v, x, generator=_gen(10))
    again = KERNELS[kernel](v, x, prev_sample=step.prev_sample)
    assert again.prev_sample is step.prev_sample
    assert torch.equal(again.log_prob, step.log_prob)
    assert torch.equal(again.mean, step.mean) and torch.equal(again.std, step.std)


def test_scoring_a_foreign_sample_and_seed_reproducibility():
    x, v = _rand(seed=92), _rand(seed=93)
    a = flow_sde_step(v, x, 0.8, 0.5, noise_level=0.7, generator=_gen(3))
    b = flow_sde_step(v, x, 0.8, 0.5, noise_level=0.7, generator=_gen(3))
    assert torch.equal(a.prev_sample, b.prev_sample)
    # The mean is the mode: it scores higher than the drawn sample.
    at_mean = flow_sde_step(v, x, 0.8, 0.5, noise_level=0.7, prev_sample=a.mean)
    assert (at_mean.log_prob > a.log_prob).all()


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_bf16_inputs(kernel):
    x, v = _rand(seed=94).bfloat16(), _rand(seed=95).bfloat16()
    step = KERNELS[kernel](v, x, generator=_gen(11))
    assert step.prev_sample.dtype == torch.bfloat16
    assert step.log_prob.dtype == step.mean.dtype == step.std.dtype == torch.float32
    again = KERNELS[kernel](v, x, prev_sample=step.prev_sample)
    assert torch.equal(again.log_prob, step.log_prob)
    # The log-prob is that of the stored (rounded) bf16 sample, not of the float32 draw.
    ref = torch.distributions.Normal(step.mean, step.std.expand_as(step.mean)).log_prob(step.prev_sample.float())
    torch.testing.assert_close(step.log_prob, ref.mean(dim=(1, 2, 3)), atol=1e-5, rtol=1e-5)


def test_log_prob_is_differentiable():
    x = _rand(seed=96)
    v = _rand(seed=97).requires_grad_(True)
    with torch.no_grad():
        prev = flow_sde_step(v, x, 0.8, 0.5, noise_level=torch.tensor([0.0, 0.7]), generator=_gen()).prev_sample
    step = flow_sde_step(v, x, 0.8, 0.5, noise_level=torch.tensor([0.0, 0.7]), prev_sample=prev)
    step.log_prob.sum().backward()
    assert torch.isfinite(v.grad).all()
    assert torch.equal(v.grad[0], torch.zeros_like(v.grad[0]))  # deterministic sample: no gradient
    assert v.grad[1].abs().sum() > 0


# ----------------------------------------------------------------------------- deterministic samples


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_mixed_batch_noise_level(kernel):
    x, v = _rand(seed=98), _rand(seed=99)
    lvl = torch.tensor([0.0, 0.7])
    if kernel == "ddim":
        step = ddim_step(v, x, 0.4, 0.6, eta=lvl, generator=_gen(12))
    else:
        step = flow_sde_step(v, x, 0.8, 0.5, noise_level=lvl, sde_type=kernel, generator=_gen(12))
    assert torch.isfinite(step.log_prob).all() and torch.isfinite(step.prev_sample).all()
    assert step.std[0].item() == 0 and step.std[1].item() > 0
    assert step.log_prob[0].item() == 0.0
    assert torch.equal(step.prev_sample[0], step.mean[0])
    assert not torch.equal(step.prev_sample[1], step.mean[1])
    assert step.log_prob[1].item() != 0.0


def test_cps_last_step_is_deterministic():
    x, v = _rand(seed=100), _rand(seed=101)
    step = flow_sde_step(v, x, 0.2, 0.0, noise_level=0.9, sde_type="cps", generator=_gen())
    assert torch.equal(step.log_prob, torch.zeros(2))
    assert torch.equal(step.prev_sample, step.mean)
    torch.testing.assert_close(step.mean, x - 0.2 * v)  # x0_hat


@pytest.mark.parametrize("sde_type", FLOW_TYPES)
def test_zero_noise_scoring_gives_zero_log_prob(sde_type):
    x, v = _rand(seed=102), _rand(seed=103)
    step = flow_sde_step(v, x, 0.5, 0.4, noise_level=0.0, sde_type=sde_type, prev_sample=x)
    assert torch.equal(step.log_prob, torch.zeros(2))


# ----------------------------------------------------------------------------- sigma handling


def test_flow_grpo_sigma_one_is_finite():
    x, v = _rand(seed=110), _rand(seed=111)
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0)
    sched.set_timesteps(10)
    s, sn = sched.sigmas[0], sched.sigmas[1]
    assert s.item() == 1.0
    step = flow_sde_step(v, x, s, sn, noise_level=0.7, generator=_gen())
    assert torch.isfinite(step.std).all() and (step.std > 0).all()
    assert torch.isfinite(step.mean).all() and torch.isfinite(step.log_prob).all()
    sn = sn.item()
    g = 0.7 * math.sqrt(1.0 / (1.0 - sn))  # denominator evaluated at sigma_next
    torch.testing.assert_close(step.std, torch.full((2, 1, 1, 1), g * math.sqrt(1.0 - sn)))


@pytest.mark.parametrize("kernel", FLOW_TYPES)
def test_per_sample_sigma_tensor(kernel):
    x, v = _rand(seed=120), _rand(seed=121)
    sig, sig_next, lvl = torch.tensor([1.0, 0.6]), torch.tensor([0.9, 0.3]), torch.tensor([0.5, 0.8])
    step = flow_sde_step(v, x, sig, sig_next, noise_level=lvl, sde_type=kernel, generator=_gen())
    for b in range(2):
        single = flow_sde_step(
            v[b : b + 1],
            x[b : b + 1],
            sig[b].item(),
            sig_next[b].item(),
            noise_level=lvl[b].item(),
            sde_type=kernel,
            prev_sample=step.prev_sample[b : b + 1],
        )
        torch.testing.assert_close(single.mean[0], step.mean[b])
        torch.testing.assert_close(single.std[0], step.std[b])
        torch.testing.assert_close(single.log_prob[0], step.log_prob[b])


def test_per_sample_alpha_tensor():
    x, v = _rand(seed=122), _rand(seed=123)
    a_t, a_prev = torch.tensor([0.2, 0.5]), torch.tensor([0.3, 0.9])
    step = ddim_step(v, x, a_t, a_prev, eta=0.5, generator=_gen())
    for b in range(2):
        single = ddim_step(
            v[b : b + 1],
            x[b : b + 1],
            a_t[b].item(),
            a_prev[b].item(),
            eta=0.5,
            prev_sample=step.prev_sample[b : b + 1],
        )
        torch.testing.assert_close(single.mean[0], step.mean[b])
        torch.testing.assert_close(single.log_prob[0], step.log_prob[b])


# ----------------------------------------------------------------------------- validation


FLOW_BAD = [
    (dict(sde_type="sde"), "sde_type"),
    (dict(sigma=0.0), "sigma"),
    (dict(sigma=1.2), "sigma"),
    (dict(sigma_next=-0.1), "sigma_next"),
    (dict(sigma=0.5, sigma_next=0.6), "sigma_next"),
    (dict(noise_level=-0.1), "noise_level"),
    (dict(noise_level=float("nan")), "noise_level"),
    (dict(noise_level=torch.tensor([0.5, -0.5])), "noise_level"),
    (dict(noise_level=torch.tensor([0.1, 0.2, 0.3])), "noise_level"),
    (dict(sigma=torch.ones(2, 2)), "sigma"),
    (dict(sde_type="cps", noise_level=1.5), "noise_level"),
    (dict(sigma=1.0, sigma_next=1.0), "sigma_next"),
    (dict(model_output=torch.zeros(2, 3)), "model_output"),
    (dict(prev_sample=torch.zeros(3, 4, 3, 3)), "prev_sample"),
]


@pytest.mark.parametrize("override,name", FLOW_BAD)
def test_flow_bad_arguments(override, name):
    kw = dict(model_output=_rand(), sample=_rand(seed=1), sigma=0.8, sigma_next=0.5, noise_level=0.5)
    kw.update(override)
    with pytest.raises(ValueError, match=name):
        flow_sde_step(kw.pop("model_output"), kw.pop("sample"), kw.pop("sigma"), kw.pop("sigma_next"), **kw)


def test_unknown_sde_type_lists_allowed():
    with pytest.raises(ValueError, match="flow_grpo.*dance.*cps"):
        flow_sde_step(_rand(), _rand(seed=1), 0.8, 0.5, noise_level=0.5, sde_type="ode")


DDIM_BAD = [
    (dict(prediction_type="x0"), "prediction_type"),
    (dict(alpha_prod_t=0.0), "alpha_prod_t"),
    (dict(alpha_prod_t=1.0, alpha_prod_t_prev=1.0), "alpha_prod_t"),
    (dict(alpha_prod_t_prev=1.5), "alpha_prod_t_prev"),
    (dict(alpha_prod_t=0.6, alpha_prod_t_prev=0.4), "alpha_prod_t_prev"),
    (dict(eta=-1.0), "eta"),
    (dict(eta=1.5), "eta"),
    (dict(sample=torch.zeros(4)), "sample"),
]


@pytest.mark.parametrize("override,name", DDIM_BAD)
def test_ddim_bad_arguments(override, name):
    kw = dict(alpha_prod_t=0.4, alpha_prod_t_prev=0.6, eta=0.5)
    kw.update(override)
    sample = kw.pop("sample", _rand(seed=1))
    model_output = _rand() if sample.ndim > 1 else torch.zeros(4)
    with pytest.raises(ValueError, match=name):
        ddim_step(model_output, sample, kw.pop("alpha_prod_t"), kw.pop("alpha_prod_t_prev"), **kw)


# ---- forward process (what the forward-process objectives and supervised losses train on) -------------------


@pytest.mark.parametrize("kind", ["flow", "epsilon", "v_prediction", "sample"])
def test_forward_process_target_and_x0_error_scale(kind):
    """x_t matches the closed form, and a prediction error d maps to an x0 error of scale·|d| exactly."""
    from ddpo_grpo.sde import ddpm_forward, flow_forward

    gen = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(3, 4, 8, 8, generator=gen), torch.randn(3, 4, 8, 8, generator=gen)
    d = 0.1 * torch.randn(3, 4, 8, 8, generator=gen)
    level = torch.tensor([0.9, 0.5, 0.1])
    col = level.view(-1, 1, 1, 1)
    if kind == "flow":
        n = flow_forward(x0, level, eps)
        torch.testing.assert_close(n.x_t, (1 - col) * x0 + col * eps)
        x0_hat = n.x_t - col * (n.target + d)  # x̂0 = x_σ − σ v̂
    else:
        n = ddpm_forward(x0, level, eps, kind)
        torch.testing.assert_close(n.x_t, col.sqrt() * x0 + (1 - col).sqrt() * eps)
        pred = n.target + d
        x0_hat = {
            "epsilon": (n.x_t - (1 - col).sqrt() * pred) / col.sqrt(),
            "v_prediction": col.sqrt() * n.x_t - (1 - col).sqrt() * pred,
            "sample": pred,
        }[kind]
    torch.testing.assert_close((x0_hat - x0).abs(), n.scale.view(-1, 1, 1, 1) * d.abs(), atol=2e-6, rtol=1e-5)
