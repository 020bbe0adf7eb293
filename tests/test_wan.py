"""Wan as its checkpoints ship it (issues 32 and 36): the UniPC scheduler's own σ grid, Wan 2.2's second guidance scale
(``sample.guidance_scale_2``), flow_grpo's per-step loss weight (``train.policy_step_weight``), and the two experts
trained on two processes under DDP and FSDP.

The tiny pipelines (``ddpo_grpo.tiny.wan``) ship the Wan 2.1 checkpoint's scheduler configuration as is
(config/model_configs/wan2.1-t2v-1.3b/scheduler); the two-expert one has Wan 2.2 A14B's layout (boundary 0.9).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from ddpo_grpo.policies import build_policy, load_pipeline
from ddpo_grpo.rollout import sample_rollout, transition_inputs
from tests.conftest import REPO

pytestmark = pytest.mark.usefixtures("one_thread")
ROWS = [{"prompt": "a red circle"}, {"prompt": "two blue squares"}]
SETTINGS = dict(resolution=32, num_frames=5, max_sequence_length=16)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Lazily built tiny Wan pipelines, one directory per (builder name, scheduler)."""
    from ddpo_grpo import tiny

    root, done = tmp_path_factory.mktemp("wan"), {}

    def get(name, scheduler="unipc"):
        if (name, scheduler) not in done:
            path = root / f"{name}_{scheduler}"
            tiny.BUILDERS[name](path, scheduler=scheduler)
            done[name, scheduler] = str(path)
        return done[name, scheduler]

    return get


def _i2v_rows(n):
    gen = torch.Generator().manual_seed(0)
    return [{"prompt": f"edit {i}", "source_image": torch.rand(3, 32, 32, generator=gen).numpy()} for i in range(n)]


# ------------------------------------------------------------------------------------------- the checkpoint's σ grid
def test_wan_samples_the_shipped_unipc_grid_and_follows_its_pipeline(built):
    """At the recipe's 20 steps the rollout's σ's are exactly those UniPC's set_timesteps draws (last nonzero σ 0.139,
    where FlowMatchEuler with shift = flow_shift ends at 0.009); noise level 0 follows the plain UniPC pipeline (a
    multistep solver, so not exactly: latent max |Δ| 4.7e-2, 1.6 % of the latent's norm on this random tiny model),
    closer than sampling FlowMatchEuler's grid does (7.1e-2, 2.7 %)."""
    from diffusers import UniPCMultistepScheduler

    from ddpo_grpo.tiny.wan import SHIPPED_SCHEDULER

    steps = 20
    policy = build_policy(load_pipeline(built("wan")), **SETTINGS)
    unipc = UniPCMultistepScheduler.from_config(json.loads(SHIPPED_SCHEDULER.read_text()))
    unipc.set_timesteps(steps)
    rows = ROWS[:1]
    r = sample_rollout(policy, policy.denoiser, rows, seeds=[0], num_steps=steps, guidance_scale=4.5, noise_level=0)
    recorded = torch.cat([r.kernel_args["sigma"][0], r.kernel_args["sigma_next"][0, -1:]])  # [T + 1]
    assert torch.equal(recorded, unipc.sigmas.float())
    assert abs(float(recorded[-2]) - 0.1387) < 1e-4
    assert torch.equal(r.timesteps[0], recorded[:-1] * 1000)

    pipe = policy.pipeline
    assert type(pipe.scheduler) is UniPCMultistepScheduler  # the shipped scheduler, not swapped
    kwargs = policy.pipeline_kwargs(rows, r.latents[:, 0].clone(), 4.5, "")
    plain = pipe(num_inference_steps=steps, output_type="latent", return_dict=False, **kwargs)[0].float()
    euler = build_policy(load_pipeline(built("wan", "euler")), **SETTINGS)  # the same weights, FlowMatchEuler's grid
    e = sample_rollout(euler, euler.denoiser, rows, seeds=[0], num_steps=steps, guidance_scale=4.5, noise_level=0)
    assert float(e.kernel_args["sigma"][0, -1]) < 0.01
    gap = float((r.latents[:, -1] - plain).norm() / plain.norm())
    gap_euler = float((e.latents[:, -1] - plain).norm() / plain.norm())
    assert gap < 0.025 and gap < gap_euler, (gap, gap_euler)


def test_wan_forward_process_keeps_the_flow_shift(built):
    """The forward-process objectives' σ(u) = s·u / (1 + (s − 1)·u) with s = flow_shift (as the UniPC grid's)."""
    policy = build_policy(load_pipeline(built("wan")), **SETTINGS)
    u = torch.tensor([0.25, 0.5, 0.75])
    t, _ = policy.forward_process(torch.zeros(3, *policy.latent_shape()), u, torch.zeros(3, *policy.latent_shape()))
    torch.testing.assert_close(t, 1000 * 3 * u / (1 + 2 * u))


def test_wan_refuses_a_scheduler_without_flow_sigmas(built, tmp_path):
    from diffusers import UniPCMultistepScheduler

    pipe = load_pipeline(built("wan"))
    pipe.scheduler = UniPCMultistepScheduler()  # the DDPM-style default: no flow sigmas
    with pytest.raises(ValueError, match="UniPCMultistepScheduler without flow sigmas"):
        build_policy(pipe, **SETTINGS)


# ------------------------------------------------------------------------------------------- guidance_scale_2
def test_guidance_scale_2_samples_as_the_pipeline_and_stays_on_policy(built):
    """w = 3.0 on the high-noise expert, 1.5 on the low-noise one: the deterministic rollout is the pipeline's
    ``guidance_scale_2`` call, the second scale changes the samples, and stored log-probs are recomputed on
    minibatches whose samples sit on both sides of the boundary (a per-sample w)."""
    pipe = load_pipeline(built("wan_i2v"))
    policy = build_policy(pipe, **SETTINGS, guidance_scale_2=1.5)
    one_scale = build_policy(pipe, **SETTINGS)
    rows = _i2v_rows(2)
    steps = 4  # σ's 1, 0.9, 0.75, 0.5: steps 0-1 high noise, 2-3 low
    r = sample_rollout(policy, policy.denoiser, rows, seeds=[0, 1], num_steps=steps, guidance_scale=3.0, noise_level=0)
    plain = policy.reference_sample(rows, r.latents[:, 0].clone(), steps, 3.0)
    assert (r.samples - plain).abs().max() <= 1e-5
    single = sample_rollout(
        one_scale, one_scale.denoiser, rows, seeds=[0, 1], num_steps=steps, guidance_scale=3.0, noise_level=0
    )
    assert (single.samples - r.samples).abs().max() > 1e-3

    noisy = sample_rollout(
        policy, policy.denoiser, _i2v_rows(3), seeds=[0, 1, 2], num_steps=steps, guidance_scale=3.0, noise_level=0.7,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    noisy.shuffle_steps(torch.Generator().manual_seed(3))
    mixed, worst = False, 0.0
    for k in range(noisy.train_steps.shape[1]):
        x, t, x_next, args, levels, j, valid = transition_inputs(noisy, k)
        low = t < policy.denoiser.boundary
        mixed |= bool(low.any() and (~low).any())
        with torch.no_grad():
            out = policy.predict(policy.denoiser, x, t, noisy.cond, 3.0)
        step = policy.step(out, x, args, levels, prev_sample=x_next)
        worst = max(worst, float((step.log_prob - noisy.log_probs[torch.arange(3), j])[valid].abs().max()))
    assert mixed and worst <= 1e-4, (mixed, worst)


def test_guidance_scale_2_is_refused_on_one_transformer(built):
    with pytest.raises(ValueError, match=r"sample.guidance_scale_2=2.0: WanPipeline has one transformer"):
        build_policy(load_pipeline(built("wan")), **SETTINGS, guidance_scale_2=2.0)
    with pytest.raises(ValueError, match=r"sample.guidance_scale_2=-1.0 must be ≥ 0"):
        build_policy(load_pipeline(built("wan_i2v")), **SETTINGS, guidance_scale_2=-1.0)
    assert build_policy(load_pipeline(built("wan")), **SETTINGS, guidance_scale_2=0.0).guidance_scale_2 is None


# ------------------------------------------------------------------------------------------- train.policy_step_weight
class _Acc:
    """What an updater needs of accelerate on one process."""

    def backward(self, loss):
        loss.backward()

    def no_sync(self, model):
        import contextlib

        return contextlib.nullcontext()


def _update_settings(**changes):
    """The updaters' settings of the base config (the one source of their defaults), with ``changes``."""
    import dataclasses

    from config.base import get_config
    from ddpo_grpo.updates import UpdateSettings

    return dataclasses.replace(UpdateSettings.from_config(get_config()), **changes)


def _grads(policy, batch, adv, weight):
    from ddpo_grpo.updates import TransitionUpdate, UpdateContext

    params = {n: p for n, p in policy.denoiser.named_parameters() if p.requires_grad}
    for p in params.values():
        p.grad = None
    import contextlib

    ctx = UpdateContext(
        _update_settings(guidance_scale=1.0, policy_step_weight=weight, clip_range=100.0),
        policy, policy.denoiser, _Acc(), params, None, contextlib.nullcontext, 0,
    )  # fmt: skip
    TransitionUpdate(ctx).minibatch(batch, adv, torch.arange(len(adv)), sync=True, weight=1.0, check=False)
    return torch.cat([p.grad.flatten() for p in params.values()])


def test_std_over_dt_weighs_each_steps_policy_gradient_by_its_std_over_dsigma(tiny_dirs):
    """Two samples trained at different steps: the weighted gradient is Σ_i w_i·(sample i's unweighted gradient), with
    w_i = s_i / Δσ_i = a·√(σ/(1 − σ)) / √Δσ for the flow_grpo kernel (flow_grpo's std_dev_t / √Δσ)."""
    from ddpo_grpo.updates import step_weight

    policy = build_policy(load_pipeline(tiny_dirs["sd3"]), resolution=32)
    policy.add_lora(rank=2, alpha=2.0, target_modules=())
    r = sample_rollout(
        policy, policy.denoiser, ROWS, seeds=[0, 1], num_steps=4, guidance_scale=1.0, noise_level=0.7,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    r.train_steps, r.train_mask = torch.tensor([[1], [2]]), torch.ones(2, 1, dtype=torch.bool)
    sigma = r.kernel_args["sigma"][[0, 1], [1, 2]]
    dsigma = sigma - r.kernel_args["sigma_next"][[0, 1], [1, 2]]
    w = 0.7 * torch.sqrt(sigma / (1 - sigma)) / torch.sqrt(dsigma)
    std = 0.7 * torch.sqrt(sigma / (1 - sigma)) * torch.sqrt(dsigma)
    args = {"sigma": sigma, "sigma_next": sigma - dsigma}
    torch.testing.assert_close(step_weight(std.view(2, 1, 1, 1), args), w)
    g_a = _grads(policy, r, torch.tensor([1.0, 0.0]), "none")
    g_b = _grads(policy, r, torch.tensor([0.0, 1.0]), "none")
    weighted = _grads(policy, r, torch.tensor([1.0, 1.0]), "std_over_dt")
    assert g_a.abs().max() > 0 and g_b.abs().max() > 0 and not torch.allclose(w[0], w[1])
    expected = w[0] * g_a + w[1] * g_b
    tol = 1e-5 * float(expected.abs().max())  # float32 summation order: relative to the gradient's scale
    torch.testing.assert_close(weighted, expected, rtol=1e-4, atol=tol)
    torch.testing.assert_close(_grads(policy, r, torch.tensor([1.0, 1.0]), "none"), g_a + g_b, rtol=1e-4, atol=tol)


def test_std_over_dt_is_refused_for_ddpm_kernels_and_unknown_values(tiny_dirs):
    import contextlib

    from ddpo_grpo.updates import TransitionUpdate, UpdateContext

    def update(path, weight):
        policy = build_policy(load_pipeline(path), resolution=32)
        settings = _update_settings(policy_step_weight=weight)
        return TransitionUpdate(UpdateContext(settings, policy, None, _Acc(), {}, None, contextlib.nullcontext, 0))

    with pytest.raises(ValueError, match=r"train.policy_step_weight='std_over_dt' .* sample.kernel='ddim' has no σ"):
        update(tiny_dirs["sd"], "std_over_dt")
    with pytest.raises(ValueError, match=r"train.policy_step_weight='std' must be one of"):
        update(tiny_dirs["sd3"], "std")


# ------------------------------------------------------------------------------------------- two experts, two processes
def test_a_replicated_training_call_gives_every_expert_a_gradient(built, monkeypatch):
    """With several processes (DDP), a training call whose samples all route to one expert still gives the other
    expert's trainable parameters a (zero) gradient, which DDP's synchronised backward needs; without gradients, or
    with one process, the other expert is left alone."""
    from ddpo_grpo.policies import wan_experts

    policy = build_policy(load_pipeline(built("wan_i2v")), **SETTINGS)
    policy.add_lora(rank=2, alpha=2.0, target_modules=())
    experts, cond = policy.denoiser, policy.encode_rows(_i2v_rows(2))
    x = torch.randn(2, *policy.latent_shape(), generator=torch.Generator().manual_seed(0))
    t = torch.tensor([950.0, 920.0])  # both samples: the high-noise expert
    alone = policy.forward(experts, x, t, cond)
    monkeypatch.setattr(wan_experts.distributed, "group_size", lambda: 2)
    assert experts.calls(t >= experts.boundary) == ("run", "touch")
    with torch.no_grad():
        assert experts.calls(t >= experts.boundary) == ("run", "")
    out = policy.forward(experts, x, t, cond)
    assert torch.equal(out, alone)
    out.square().mean().backward()
    low = [p.grad for n, p in experts.named_parameters() if p.requires_grad and n.startswith("transformer_2.")]
    high = [p.grad for n, p in experts.named_parameters() if p.requires_grad and n.startswith("transformer.")]
    assert low and all(g is not None and not g.any() for g in low)
    assert any(g is not None and g.any() for g in high)


@pytest.mark.slow  # two processes: ≈ 50 s on this loaded 2-core machine
def test_experts_keep_two_processes_collectives_in_step():
    """``WanExperts`` under DDP and FSDP2 on two processes whose samples route to different experts
    (tests/wan_two_ranks.py): no collective mismatch, the same LoRA gradients on both, both experts' nonzero."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*cmd, str(REPO / "tests" / "wan_two_ranks.py")], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.count("OK ddp") == 2 and proc.stdout.count("OK fsdp") == 2, (
        proc.stdout[-2000:] + proc.stderr[-3000:]
    )


def _train_two_processes(tmp_path, strategy):
    args = [
        str(REPO / "scripts" / "train.py"),
        f"--config={REPO / 'config' / 'wan.py'}:tiny_i2v",
        f"--config.logdir={tmp_path / 'logs'}",
        f"--config.run_name={strategy}",
        "--config.num_epochs=1",
        f"--config.distributed.strategy={strategy}",
        "--config.sample.guidance_scale=3.0",
        "--config.sample.guidance_scale_2=1.5",
        "--config.logging.progress=False",
    ]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path / "logs" / strategy


@pytest.mark.slow  # two trainer processes: ≈ 70 s each on this loaded 2-core machine
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_both_experts_train_on_two_processes(tmp_path, strategy):
    """Each process shuffles its own steps, so their minibatches route to different experts (steps 0-1 high noise,
    2-3 low): the collectives stay in step (``WanExperts.calls``), both experts' LoRA layers move away from
    their zero initialisation, and the on-policy check holds with the per-sample guidance of guidance_scale_2."""
    from ddpo_grpo.policies.wan import EXPERT_2_WEIGHTS

    run = _train_two_processes(tmp_path, strategy)
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert row["train/logp_mismatch"] <= 1e-4
    for name in ("pytorch_lora_weights.safetensors", EXPERT_2_WEIGHTS):
        up = [v for k, v in load_file(run / "final" / name).items() if "lora_B" in k]  # zero at initialisation
        assert up and all(torch.isfinite(v).all() for v in up) and max(float(v.abs().max()) for v in up) > 1e-4, name
