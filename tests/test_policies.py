"""Component tests of the policy adapters on tiny pipelines built from config dicts."""

import numpy as np
import pytest
import torch

from ddpo_grpo.policies import build_policy, load_pipeline
from ddpo_grpo.rollout import StepPlan, sample_rollout, transition_inputs

ROWS = [{"prompt": "a red circle"}, {"prompt": "a blue square"}, {"prompt": "two green triangles"}]
NOISE = {"sd3": 0.7, "sd": 1.0}


def _policy(tiny_dirs, kind, **kw):
    pipe = load_pipeline(tiny_dirs[kind])
    return build_policy(pipe, resolution=32, max_sequence_length=8, **kw)


def _rollout(policy, kind, guidance, n=6, steps=5, plan=None):
    rows = [ROWS[i % len(ROWS)] for i in range(n)]
    return sample_rollout(
        policy,
        policy.denoiser,
        rows,
        seeds=list(range(n)),
        num_steps=steps,
        guidance_scale=guidance,
        noise_level=NOISE[kind],
        plan=plan,
        generator=torch.Generator().manual_seed(1),
    )


@pytest.mark.parametrize("kind", ["sd3", "sd"])
def test_adapter_chosen_from_pipeline_class(tiny_dirs, kind):
    policy = _policy(tiny_dirs, kind)
    assert type(policy).__name__ == {"sd3": "SD3Policy", "sd": "SDPolicy"}[kind]
    assert policy.latent_shape() == (4, 8, 8)


@pytest.mark.parametrize("kind", ["sd3", "sd"])
@pytest.mark.parametrize("guidance", [1.0, 4.5])
def test_on_policy_logprob_recomputed_with_other_minibatch(tiny_dirs, kind, guidance):
    """Re-scoring stored transitions in minibatches of 4 (sampled in a batch of 6, order shuffled)
    reproduces the stored log-probs to ≤ 1e-4: the ratio is exactly 1 before any update."""
    policy = _policy(tiny_dirs, kind)
    rollout = _rollout(policy, kind, guidance)
    assert rollout.latents.shape == (6, 6, 4, 8, 8)
    assert rollout.log_probs.shape == (6, 5) and torch.isfinite(rollout.log_probs).all()
    mini = rollout.select([5, 0, 3, 2])
    for k in range(mini.train_steps.shape[1]):
        x, t, x_next, args, levels, j, valid = transition_inputs(mini, k)
        out = policy.predict(policy.denoiser, x, t, mini.cond, guidance)
        step = policy.step(out, x, args, levels, prev_sample=x_next)
        stored = mini.log_probs[torch.arange(4), j]
        assert valid.all()
        assert (step.log_prob - stored).abs().max() <= 1e-4


@pytest.mark.parametrize("kind", ["sd3", "sd"])
def test_deterministic_rollout_matches_plain_pipeline(tiny_dirs, kind):
    """With noise 0 the recorded sampler is the pipeline's own ODE / DDIM(η=0) sampler."""
    policy = _policy(tiny_dirs, kind)
    pipe = policy.pipeline
    rollout = sample_rollout(
        policy, policy.denoiser, ROWS[:2], seeds=[3, 4], num_steps=4, guidance_scale=4.5, noise_level=0.0
    )
    extra = {"max_sequence_length": 8} if kind == "sd3" else {}
    plain = pipe(
        [r["prompt"] for r in ROWS[:2]],
        num_inference_steps=4,
        guidance_scale=4.5,
        height=32,
        width=32,
        latents=rollout.latents[:, 0].clone(),
        output_type="pt",
        **extra,
    ).images
    np.testing.assert_allclose(rollout.samples.numpy(), plain.float().numpy(), atol=1e-4)
    assert (rollout.log_probs == 0).all()


def test_sd3_schedule_uses_scheduler_shift(tiny_dirs):
    """σ's are the pipeline scheduler's own (shift applied), t = 1000·σ, and the last σ_next is 0."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    policy = _policy(tiny_dirs, "sd3")
    sched = policy.schedule(10)
    sigma = sched.kernel_args["sigma"]
    assert policy.scheduler.config.shift == 3.0
    reference = FlowMatchEulerDiscreteScheduler(shift=3.0)
    reference.set_timesteps(10)
    np.testing.assert_allclose(sigma.numpy(), reference.sigmas[:-1].numpy(), atol=1e-6)
    unshifted = FlowMatchEulerDiscreteScheduler(shift=1.0)
    unshifted.set_timesteps(10)
    assert (sigma[1:-1] - unshifted.sigmas[1:-2]).abs().min() > 5e-2  # the shift matters
    np.testing.assert_allclose(sched.timesteps.numpy(), 1000 * sigma.numpy(), rtol=1e-5)
    assert sched.kernel_args["sigma_next"][-1] == 0
    torch.testing.assert_close(sched.kernel_args["sigma_next"][:-1], sigma[1:])


def test_sd_schedule_alphas(tiny_dirs):
    policy = _policy(tiny_dirs, "sd")
    sched = policy.schedule(5)
    ac = policy.scheduler.alphas_cumprod
    t = sched.timesteps
    np.testing.assert_allclose(sched.kernel_args["alpha_prod_t"].numpy(), ac[t].numpy(), rtol=1e-6)
    prev = t - 1000 // 5
    expected_prev = [ac[p].item() if p >= 0 else policy.scheduler.final_alpha_cumprod.item() for p in prev]
    np.testing.assert_allclose(sched.kernel_args["alpha_prod_t_prev"].numpy(), expected_prev, rtol=1e-6)


@pytest.mark.parametrize("kind", ["sd3", "sd"])
def test_lora_reference_is_base_output(tiny_dirs, kind):
    """The reference of a LoRA policy (adapters disabled) gives exactly the base model's output."""
    from ddpo_grpo.reference import Reference

    policy = _policy(tiny_dirs, kind)
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    t = policy.schedule(4).timesteps[:1].expand(2)
    cond = policy.encode_prompts(["a red circle", "a cat"])
    with torch.no_grad():
        base = policy.predict(policy.denoiser, x, t, cond, 4.5)
    policy.add_lora(rank=4, alpha=4.0, target_modules=())
    with torch.no_grad():
        for name, p in policy.denoiser.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
        tuned = policy.predict(policy.denoiser, x, t, cond, 4.5)
    assert (tuned - base).abs().max() > 1e-3  # the adapter changes the output
    ref = Reference(policy, policy.denoiser, lora=True, update="fixed")
    ref_out = ref.predict(x, t, cond, 4.5)
    assert torch.equal(ref_out, base)
    # adapters are back on and trainable afterwards
    assert torch.equal(policy.predict(policy.denoiser, x, t, cond, 4.5).detach(), tuned)
    assert any(p.requires_grad for n, p in policy.denoiser.named_parameters() if "lora" in n)


def test_reference_hard_and_soft_updates(tiny_dirs):
    from ddpo_grpo.reference import Reference

    policy = _policy(tiny_dirs, "sd3")
    policy.add_lora(rank=4, alpha=4.0, target_modules=())
    params = {n: p for n, p in policy.denoiser.named_parameters() if p.requires_grad}
    hard = Reference(policy, policy.denoiser, lora=True, update="hard", freq=2)
    soft = Reference(policy, policy.denoiser, lora=True, update="soft", freq=1, alpha=0.75)
    before = {n: w.clone() for n, w in soft.weights.items()}
    with torch.no_grad():
        for p in params.values():
            p.add_(1.0)
    assert not hard.after_epoch(0)  # freq 2: no update after epoch 0
    assert hard.after_epoch(1)
    assert soft.after_epoch(0)
    for n, p in params.items():
        torch.testing.assert_close(hard.weights[n], p.detach().float())
        torch.testing.assert_close(soft.weights[n], 0.75 * before[n] + 0.25 * p.detach().float())


def test_step_plan_window_and_fraction():
    rng = np.random.default_rng(0)
    plan = StepPlan(window_size=3, window_range=(1, 2))
    for _ in range(20):
        levels = plan.noise_levels(8, 0.7, rng)
        on = torch.nonzero(levels).flatten().tolist()
        assert len(on) == 3 and on[0] in (1, 2) and on == list(range(on[0], on[0] + 3))
    stochastic = torch.tensor([[True] * 6 + [False] * 2] * 3)
    steps, mask = StepPlan(fraction=0.5).train_steps(stochastic, rng)
    assert steps.tolist() == [[0, 1, 2]] * 3 and mask.all()
    steps, mask = StepPlan(fraction=0.5, selection="random").train_steps(stochastic, rng)
    assert steps.shape == (3, 3) and (steps < 6).all()
    assert all(len(set(r)) == 3 for r in steps.tolist())


def test_window_rollout_trains_only_window(tiny_dirs):
    policy = _policy(tiny_dirs, "sd3")
    rollout = _rollout(policy, "sd3", 1.0, n=2, steps=6, plan=StepPlan(window_size=2, window_range=(2, 2)))
    assert rollout.train_steps.tolist() == [[2, 3], [2, 3]]
    assert (rollout.log_probs[:, [0, 1, 4, 5]] == 0).all() and (rollout.log_probs[:, 2:4] != 0).all()


def test_cps_last_step_is_not_trained(tiny_dirs):
    policy = _policy(tiny_dirs, "sd3", kernel="cps")
    rollout = sample_rollout(
        policy, policy.denoiser, ROWS[:2], seeds=[0, 1], num_steps=4, guidance_scale=1.0, noise_level=0.5
    )
    assert rollout.train_steps.tolist() == [[0, 1, 2], [0, 1, 2]]
    assert (rollout.log_probs[:, 3] == 0).all()


def test_rollout_select_and_cat_roundtrip(tiny_dirs):
    policy = _policy(tiny_dirs, "sd3")
    rollout = _rollout(policy, "sd3", 1.0, n=4, steps=3)
    from ddpo_grpo.rollout import Rollout

    joined = Rollout.cat([rollout.select([0, 1]), rollout.select([2, 3])])
    assert torch.equal(joined.latents, rollout.latents) and joined.prompts == rollout.prompts
    assert torch.equal(joined.cond["pooled"], rollout.cond["pooled"])


def test_group_noise_sharing_via_seeds(tiny_dirs):
    from ddpo_grpo.rollout import initial_noise

    a = initial_noise((4, 8, 8), [7, 7, 8], "cpu")
    assert torch.equal(a[0], a[1]) and not torch.equal(a[0], a[2])


@pytest.mark.parametrize("kind", ["sd3", "sd"])
def test_saved_lora_reloads_exactly_in_plain_diffusers(tiny_dirs, tmp_path, kind):
    """save_lora → Pipeline.from_pretrained(base).load_lora_weights(dir) reproduces the policy's output."""
    import warnings

    policy = _policy(tiny_dirs, kind)
    policy.add_lora(rank=4, alpha=8.0, target_modules=())
    with torch.no_grad():
        for name, p in policy.denoiser.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    policy.save_lora(tmp_path, policy.denoiser)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # peft warns when saved keys do not match targets
        plain = load_pipeline(tiny_dirs[kind])
        plain.load_lora_weights(str(tmp_path))
    reloaded = build_policy(plain, resolution=32, max_sequence_length=8)
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    t = policy.schedule(4).timesteps[1:2].expand(2)
    cond = policy.encode_prompts(["a red circle", "a cat"])
    with torch.no_grad():
        expected = policy.predict(policy.denoiser, x, t, cond, 4.5)
        got = reloaded.predict(reloaded.denoiser, x, t, cond, 4.5)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind,bad", [("sd3", -0.1), ("sd", 1.5)])
def test_rollout_rejects_invalid_noise_level(tiny_dirs, kind, bad):
    policy = _policy(tiny_dirs, kind)
    with pytest.raises(ValueError, match="noise_level|eta"):
        sample_rollout(policy, policy.denoiser, ROWS[:1], seeds=[0], num_steps=3, guidance_scale=1.0, noise_level=bad)
