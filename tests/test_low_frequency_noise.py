"""sample.noise_block: the kernels of ddpo_grpo.sde with noise only in the b × b block-mean subspace."""

import math

import pytest
import torch

from ddpo_grpo.sde import ddim_step, flow_sde_step, low_pass

SHAPE = (3, 4, 8, 8)


def _rand(shape=SHAPE, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _step(kernel, level, block, *, x=None, out=None, seed=0, prev_sample=None):
    """One step of `kernel`; block None = the kernel called without a noise_block argument."""
    x = _rand(seed=1) if x is None else x
    out = _rand(seed=2) if out is None else out
    kwargs = {"generator": torch.Generator().manual_seed(seed), "prev_sample": prev_sample}
    if block is not None:
        kwargs["noise_block"] = block
    if kernel == "ddim":
        return ddim_step(out, x, 0.3, 0.5, eta=level, **kwargs)
    return flow_sde_step(out, x, 0.8, 0.6, noise_level=level, sde_type=kernel, **kwargs)


KERNELS = ["flow_grpo", "dance", "cps", "ddim"]


def test_low_pass_is_an_orthogonal_projection():
    y, z = _rand(seed=3), _rand(seed=4)
    p = low_pass(y, 4)
    assert torch.allclose(low_pass(p, 4), p, atol=1e-6)  # idempotent
    assert torch.allclose((p * z).sum(), (y * low_pass(z, 4)).sum(), atol=1e-4)  # symmetric
    assert torch.allclose(p[..., :4, :4], y[..., :4, :4].mean(dim=(-1, -2), keepdim=True).expand(-1, -1, 4, 4))


@pytest.mark.parametrize("kernel", KERNELS)
def test_block_one_is_the_isotropic_kernel(kernel):
    a, default = _step(kernel, 0.7, 1), _step(kernel, 0.7, None)
    assert torch.equal(a.prev_sample, default.prev_sample) and torch.equal(a.log_prob, default.log_prob)


@pytest.mark.parametrize("kernel", KERNELS)
def test_stochastic_in_block_means_deterministic_elsewhere(kernel):
    block = 4
    low, iso, ode = _step(kernel, 0.7, block), _step(kernel, 0.7, 1), _step(kernel, 0.0, 1)
    # the mean: the stochastic kernel's block means, the deterministic kernel's detail
    assert torch.allclose(low_pass(low.mean, block), low_pass(iso.mean, block), atol=1e-5)
    assert torch.allclose(low.mean - low_pass(low.mean, block), ode.mean - low_pass(ode.mean, block), atol=1e-5)
    # the noise is constant on every block, and the same std as the isotropic kernel's
    noise = low.prev_sample - low.mean
    assert torch.allclose(noise, low_pass(noise, block), atol=1e-6)
    assert noise.abs().max() > 1e-3
    assert torch.equal(low.std, iso.std)


@pytest.mark.parametrize("kernel", ["flow_grpo", "ddim"])
def test_coarse_coordinates_have_the_kernel_std(kernel):
    block, n = 2, 4000
    x, out = _rand((n, 4, 8, 8), seed=5), _rand((n, 4, 8, 8), seed=6)
    step = _step(kernel, 0.9, block, x=x, out=out)
    coords = torch.nn.functional.avg_pool2d(step.prev_sample - step.mean, block) * block  # Pᵀ(x − mean)
    std = float(step.std.flatten()[0])
    assert abs(coords.mean()) < 0.01 * std
    assert coords.std().item() == pytest.approx(std, rel=0.01)
    # per pixel the noise is std / b
    assert (step.prev_sample - step.mean).std().item() == pytest.approx(std / block, rel=0.01)


@pytest.mark.parametrize("kernel", KERNELS)
def test_log_prob_is_the_density_of_the_coarse_coordinates(kernel):
    block = 4
    step = _step(kernel, 0.7, block)
    coords = torch.nn.functional.avg_pool2d(step.prev_sample - step.mean, block) * block  # [B, C, 2, 2]
    std = step.std.reshape(-1, 1, 1, 1)
    expected = torch.distributions.Normal(0.0, std).log_prob(coords).mean(dim=(1, 2, 3))
    assert torch.allclose(step.log_prob, expected, atol=1e-5)
    rescored = _step(kernel, 0.7, block, prev_sample=step.prev_sample)
    assert torch.equal(rescored.log_prob, step.log_prob)


def test_detail_of_a_foreign_sample_does_not_change_the_log_prob():
    """Only the coarse coordinates are random: adding block-zero-mean detail leaves the density alone."""
    block = 4
    step = _step("flow_grpo", 0.7, block)
    detail = _rand(seed=9)
    detail = detail - low_pass(detail, block)
    moved = _step("flow_grpo", 0.7, block, prev_sample=step.prev_sample + detail)
    assert torch.allclose(moved.log_prob, step.log_prob, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_zero_noise_is_the_deterministic_step(kernel):
    low, ode = _step(kernel, 0.0, 4), _step(kernel, 0.0, 1)
    assert torch.allclose(low.prev_sample, ode.prev_sample, atol=1e-6)
    assert torch.equal(low.log_prob, torch.zeros(SHAPE[0]))


def test_reverse_sde_keeps_the_marginal_variance_in_both_subspaces():
    """Gaussian data x0 ~ N(0, I): x_σ ~ N(0, V(σ) I) with V = (1 − σ)² + σ², and the exact velocity is
    v = E[ε − x0 | x] = (σ − (1 − σ)) x / V. One small Flow-GRPO step σ → σ' from the exact marginal must
    land on V(σ') in the block-mean coordinates (the SDE's) and in the detail (the ODE's), up to the
    Euler discretisation; leaving out the subspace's drift correction would overshoot by g²|dσ|."""
    s, sn, block, n = 0.8, 0.75, 4, 2000
    var = lambda t: (1 - t) ** 2 + t**2  # noqa: E731
    x = _rand((n, 4, 8, 8), seed=11) * math.sqrt(var(s))
    v = (s - (1 - s)) * x / var(s)
    step = flow_sde_step(v, x, s, sn, noise_level=0.7, generator=torch.Generator().manual_seed(0), noise_block=block)
    out = step.prev_sample
    coarse = (torch.nn.functional.avg_pool2d(out, block) * block).var().item()
    detail = (out - low_pass(out, block)).square().sum().item() / (out.numel() * (1 - 1 / block**2))
    added = 0.49 * s / (1 - s) * (s - sn)  # g² |dσ|, what a missing drift correction would add
    assert coarse == pytest.approx(var(sn), abs=0.15 * added)
    assert detail == pytest.approx(var(sn), abs=0.15 * added)


def test_bad_block_is_named():
    with pytest.raises(ValueError, match="noise_block"):
        _step("flow_grpo", 0.7, 3)  # 8 is not divisible by 3
    with pytest.raises(ValueError, match="noise_block"):
        _step("ddim", 0.7, 0)


@pytest.mark.parametrize("family", ["sd3", "sd"])
def test_policy_rollout_explores_block_means_only(tiny_dirs, family):
    """Through a real policy adapter: the stochastic step's noise is constant on blocks, the stored
    log-probs rescore exactly, and a block that does not divide the latent is refused by config name."""
    from ddpo_grpo.policies import build_policy, load_pipeline
    from ddpo_grpo.policies.base import NoiseBlockError
    from ddpo_grpo.rollout import StepPlan, sample_rollout, transition_inputs

    pipe = load_pipeline(tiny_dirs[family])
    side = build_policy(pipe, resolution=32).latent_shape()[-1]
    with pytest.raises(NoiseBlockError, match=f"sample.noise_block=3 must be a positive divisor of the latent side {side}"):
        build_policy(pipe, resolution=32, noise_block=3)
    policy = build_policy(pipe, resolution=32, noise_block=2)
    model = policy.denoiser
    rollout = sample_rollout(
        policy, model, [{"prompt": "a red circle"}] * 2, seeds=[0, 1], num_steps=4, guidance_scale=2.0,
        noise_level=0.7 if family == "sd3" else 1.0, plan=StepPlan(window_size=1, window_range=(1, 1)),
        generator=torch.Generator().manual_seed(0),
    )
    x, t, x_next, args, levels, j, valid = transition_inputs(rollout, 0)
    assert bool(valid.all()) and j.tolist() == [1, 1]
    with torch.no_grad():
        cond = rollout.cond
        out = policy.predict(model, x, t, cond, 2.0)
        step = policy.step(out, x, args, levels, prev_sample=x_next)
    noise = x_next - step.mean
    assert torch.allclose(noise, low_pass(noise, 2), atol=1e-5) and noise.abs().max() > 1e-3
    assert torch.allclose(step.log_prob, rollout.log_probs[:, 1], atol=1e-5)
