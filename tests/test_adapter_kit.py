"""The adapter test kit: every registered model family (``ddpo_grpo.policies.family``: one ``FamilySpec`` beside each
adapter) passes these checks by being registered, twice: on its tiny pipeline (``FamilySpec.tiny``) and on each of its
real checkpoints' configs (``FamilySpec.checkpoints``, built by ``ddpo_grpo.tiny.from_configs``). Adding a family =
its adapter file with its spec; this module then runs on it (docs/adapters.md).

Tiny mode (float32):
1. registration: a tiny builder exists, the adapter is chosen from the pipeline's class, the shard blocks exist;
2. the deterministic rollout (noise level 0) equals the plain diffusers pipeline's output for the same initial noise
   and steps (≤ 1e-5), CFG on and off;
3. on-policy: stored log-probs are recomputed ≤ 1e-4 in another minibatch, CFG on and off;
4. the LoRA export loads in plain diffusers (``from_pretrained`` + ``load_lora_weights``) and reproduces the policy
   (≤ 1e-4), and the LoRA changes the output;
5. the forward-process objectives' targets (NFT / AWM) are those the family's kernel and time convention read;
6. bf16 autocast stays finite (sampling with CFG, a training forward + backward);
7. bad settings and rows are refused with a line naming the field;
8. exact resume through the trainer (2 epochs straight = 1 + resume 1; slow-marked but for one family) and, slow, the
   dense ``redness`` reward rising by ≥ 3 epoch-0 standard deviations in 10 small epochs (an expected failure on the
   families whose random tiny AutoencoderKL hides a mean colour from the latent, ``LEARNS``).

Real-config mode (the checkpoint's scheduler, VAE, text lengths and transformer config as shipped but for depth and
width; in the recipe's dtype, ``Checkpoint.recipe``'s ``mixed_precision``, as a run casts and autocasts):
9. the build keeps the shipped configs (scheduler verbatim, the VAE's latent rules, the denoiser but for the cut);
10. the σ grid (timesteps for the DDPM kernels) is the one the plain pipeline sets on its shipped scheduler, at the
    recipe's training and evaluation step counts;
11. the deterministic rollout equals the plain pipeline: ≤ 1e-5 in float32, and in the recipe's dtype the final
    latents agree to that dtype's rounding (``LATENT_TOLERANCE``), CFG on and off;
12. the VAE decodes in the dtype the plain pipeline decodes in (its ``force_upcast`` rule);
13. on-policy log-probs in the recipe's dtype; 14. the LoRA export loads there and reproduces the policy.
Known departures are strict expected failures (``EXPECTED_FAILURES``): they turn into failures when fixed.
Slow checks run with ``pytest -m slow``; ``-m "slow or not slow"`` runs everything (the issue's done-when).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from ddpo_grpo.kernels import FLOW_KERNELS
from ddpo_grpo.policies import ADAPTERS, build_policy, families, load_pipeline, policy_class
from ddpo_grpo.rollout import transition_inputs
from tests.adapter_kit import (
    EDIT_FAMILIES,
    LEARNING_RUN,
    STEPS,
    TOLERANCE,
    checkpoint_of,
    decoder_dtypes,
    family_dir,
    grid_gap,
    kit_config,
    logp_mismatch,
    lora_reload,
    make_policy,
    metrics,
    pipeline_sources_as,
    policy_class_of,
    randomise_lora,
    real_dir,
    real_policy,
    recipe_dtype,
    rollout,
    rollout_gap,
    rows,
    run_trainer,
    settings,
)

FAMILIES = sorted(ADAPTERS)  # pipeline class names (the registry's keys)


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory):
    return tmp_path_factory.mktemp("kit")


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """(tiny models: one intra-op thread is fastest, see tests/conftest.py)"""


# ----------------------------------------------------------------------------------------------- 1. registration
@pytest.mark.parametrize("family", FAMILIES)
def test_registered_with_a_tiny_builder(tiny_root, family):
    from ddpo_grpo.policies.base import Policy

    spec = families()[family]
    assert callable(spec.tiny_builder()), f"{family}: its spec's tiny builder {spec.tiny!r} is not a function"
    assert spec.adapter_target == ADAPTERS[family] and spec.pipeline == family
    policy = make_policy(tiny_root, family)
    assert type(policy.pipeline).__name__ == family and type(policy) is policy_class(policy.pipeline)
    assert isinstance(policy, Policy) and policy.kernels and policy.kernel in policy.kernels
    assert policy.sample_kind in ("image", "video", "array")
    blocks = {type(m).__name__ for d in policy.denoiser_modules() for m in d.modules()}
    assert set(policy.shard_blocks) <= blocks, f"shard_blocks {policy.shard_blocks} not all in the denoiser"
    assert policy.shard_blocks or family == "DenoiserPipeline"
    assert not any(m is d for m in policy.frozen_modules() for d in policy.denoiser_modules())


# ----------------------------------------------------------------------------------------------- 2. = diffusers
@pytest.mark.parametrize(
    "family",
    # (Qwen-Image-Edit with -m slow: Edit-Plus runs the same adapter file at the same 1024² sources by default)
    [pytest.param(f, marks=pytest.mark.slow) if f == "QwenImageEditPipeline" else f for f in FAMILIES],
)
def test_deterministic_rollout_is_the_plain_pipeline(tiny_root, family):
    """Noise level 0: the recorded sampler is the diffusers pipeline's own (with the policy's scheduler kind), CFG off
    and on. The editing families run at their pipeline's source size (1024²) here, as the pipeline does."""
    overrides = {"source_pixels": 0} if family in EDIT_FAMILIES else {}
    policy = make_policy(tiny_root, family, **overrides)
    n = 1 if family in EDIT_FAMILIES else 2
    for guidance in (1.0, 3.0) if family not in EDIT_FAMILIES else (3.0,):
        err = rollout_gap(policy, n, guidance)
        assert err <= 1e-5, f"{family}, guidance {guidance}: max |rollout − pipeline| = {err:.2e}"


# ----------------------------------------------------------------------------------------------- 3. on-policy
@pytest.mark.parametrize("family", FAMILIES)
def test_stored_log_probs_are_recomputed(tiny_root, family):
    policy = make_policy(tiny_root, family)
    for guidance in (1.0, 3.0):
        worst = logp_mismatch(policy, 3, guidance)
        assert worst <= 1e-4, f"{family}, guidance {guidance}: logp mismatch {worst:.2e}"


# ----------------------------------------------------------------------------------------------- 4. LoRA export
@pytest.mark.parametrize("family", FAMILIES)
def test_lora_export_loads_in_plain_diffusers(tiny_root, family, tmp_path):
    policy = make_policy(tiny_root, family)
    fresh = lambda: build_policy(load_pipeline(family_dir(tiny_root, family)), **settings(family))
    change, err = lora_reload(policy, fresh, tmp_path, 2)
    assert change > 1e-3, "the LoRA does not change the output"
    assert err <= 1e-4, f"{family}: the loaded LoRA reproduces the policy to {err:.2e}"


# ----------------------------------------------------------------------------------------------- 5. forward process
@pytest.mark.parametrize("family", FAMILIES)
def test_forward_process_targets_match_the_kernel(tiny_root, family):
    """x0 → (t, x_t, target) of ``forward_process``: the family's kernel, given the target as the model output, steps
    x_t straight to x0; and at the noise level of each sampling step the timestep is the schedule's own."""
    policy = make_policy(tiny_root, family)
    gen = torch.Generator().manual_seed(0)
    shape = (4, *policy.latent_shape())
    x0, noise = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    schedule = policy.schedule(STEPS)
    if policy.kernel in FLOW_KERNELS:
        sigma = schedule.kernel_args["sigma"][:3]
        cfg = policy.scheduler.config
        shift = 1.0 if cfg.get("use_dynamic_shifting", False) else float(cfg.get("shift", 1.0))
        u = torch.cat([sigma / (shift - (shift - 1) * sigma), torch.tensor([0.3])])  # σ = shift·u / (1 + (shift−1)·u)
        t, noised = policy.forward_process(x0, u, noise)
        torch.testing.assert_close(t[:3], schedule.timesteps[:3].float(), rtol=1e-4, atol=1e-3)
        s = (t / 1000).view(-1, *[1] * (x0.ndim - 1))
        args = {"sigma": t / 1000, "sigma_next": torch.zeros(4)}
    else:
        n = len(policy.scheduler.alphas_cumprod)
        u = torch.cat([schedule.timesteps[:3].float() / (n - 1), torch.tensor([0.3])])
        t, noised = policy.forward_process(x0, u, noise)
        assert torch.equal(t[:3], schedule.timesteps[:3].long())
        a = policy.scheduler.alphas_cumprod[t].view(-1, *[1] * (x0.ndim - 1))
        s = None
        args = {"alpha_prod_t": policy.scheduler.alphas_cumprod[t], "alpha_prod_t_prev": torch.ones(4)}
    step = policy.step(noised.target, noised.x_t, args, torch.zeros(4))
    torch.testing.assert_close(step.prev_sample, x0, atol=1e-4, rtol=1e-4)
    if s is not None:
        torch.testing.assert_close(noised.x_t, (1 - s) * x0 + s * noise, atol=1e-5, rtol=1e-5)
    else:
        torch.testing.assert_close(noised.x_t, a.sqrt() * x0 + (1 - a).sqrt() * noise, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------- 6. bf16
@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_autocast_stays_finite(tiny_root, family):
    policy = make_policy(tiny_root, family)
    policy.add_lora(rank=4, alpha=4.0, target_modules=())
    randomise_lora(policy.denoiser)

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    r = rollout(policy, 2, 3.0, policy.noise_level, steps=2, autocast=autocast)
    assert torch.isfinite(r.samples).all() and torch.isfinite(r.log_probs).all()
    x, t, x_next, args, levels, _, _ = transition_inputs(r, 0)
    with autocast():
        out = policy.predict(policy.denoiser, x, t, r.cond, 3.0)
    step = policy.step(out, x, args, levels, prev_sample=x_next)
    step.log_prob.mean().backward()
    # (a LoRA whose output never reaches the image, e.g. the last joint block's text projection, gets no gradient)
    grads = [p.grad for p in policy.denoiser.parameters() if p.requires_grad and p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads) and any(g.abs().sum() > 0 for g in grads)


# ----------------------------------------------------------------------------------------------- 7. bad input
@pytest.mark.parametrize("family", FAMILIES)
def test_bad_settings_and_rows_are_named(tiny_root, family):
    cls = policy_class_of(family)
    pipe = load_pipeline(family_dir(tiny_root, family))
    policy = build_policy(pipe, **settings(family))
    if family != "DenoiserPipeline":
        bad = policy.resolution_multiple * 2 + policy.resolution_multiple // 2
        with pytest.raises(ValueError, match=rf"sample.resolution={bad} must be a multiple of .*nearest"):
            build_policy(pipe, **settings(family, resolution=bad))
    if cls.sample_kind == "video":
        with pytest.raises(ValueError, match=r"sample.num_frames=6: .* 4k \+ 1 frames \(nearest: 5 or 9\)"):
            build_policy(pipe, **settings(family, num_frames=6))
    if cls.image_conditioned:
        with pytest.raises(ValueError, match=r"row 1 \(prompt 'b'\) has no 'source_image'"):
            policy.encode_rows([{"prompt": "a", "source_image": np.zeros((3, 32, 32))}, {"prompt": "b"}])


# ----------------------------------------------------------------------------------------------- 8. the trainer
#: families whose exact resume runs in the default suite (the two-expert, image-conditioned video adapter: the
#: trainer sees the most family-specific state there); the others are slow-marked (three trainer runs each)
RESUME_DEFAULT = ("WanImageToVideoPipeline",)


@pytest.mark.parametrize(
    "family", [f if f in RESUME_DEFAULT else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES]
)
def test_exact_resume(tiny_root, family, tmp_path):
    """2 epochs straight == 1 epoch + resume for 1 more: the same trainable weights and metrics."""
    straight = run_trainer(kit_config(tiny_root, tmp_path / "a", family))
    first = run_trainer(kit_config(tiny_root, tmp_path / "b", family, num_epochs=1))
    resumed = run_trainer(kit_config(tiny_root, tmp_path / "b", family, resume_from=str(first.run_dir)))
    assert resumed.start_epoch == 1
    for name, p in straight.params.items():
        assert torch.equal(p, resumed.params[name]), name
    a, b = metrics(straight.run_dir), metrics(resumed.run_dir)
    for key in ("reward/mean", "train/loss", "train/grad_norm", "train/logp_mismatch"):
        assert a[1][key] == b[1][key], key
    assert all(math.isfinite(r["train/loss"]) and r["train/logp_mismatch"] <= 1e-4 for r in a)


#: the families whose tiny pipeline the learning check moves by ≥ 3 σ in 10 epochs (measured, seeded, deterministic on
#: CPU); on the others the random AutoencoderKL decoders hide a mean colour from the latent: an expected failure
#: (docs/experiments/2026-11-25-model-families.md), which any other exception than the assertion still fails. Z-Image
#: (an AutoencoderKL too) is one: its run climbs towards +8 σ and collapses, ending at +0.5 σ with seed 42 and between
#: −1.6 and +7.7 σ over seeds 0–7 (docs/models.md). Wan I2V learned on FlowMatchEuler's shifted grid (+8.6 / +5.3 /
#: +1.8 σ, seeds 42 / 0 / 1) and does not on the checkpoint's UniPC grid it samples since issue 32 (+0.1 / +0.2 / +0.2
#: σ; +0.2 at 8 and 12 steps; +0.1 with the last step deterministic): not understood yet, an open question (docs/models.md)
LEARNS = (
    "DenoiserPipeline",  # (its reward: the mean of the decoded features, tests/kit_rewards.py)
    "QwenImagePipeline",
    "QwenImageEditPipeline",
    "QwenImageEditPlusPipeline",
)
NOT_LEARNED = pytest.mark.xfail(
    raises=AssertionError,
    strict=False,
    reason="below 3 epoch-0 standard deviations in 10 epochs on this random-weight tiny pipeline (the same for the "
    "pre-existing SD / SD3 adapters); docs/experiments/2026-11-25-model-families.md",
)


@pytest.mark.slow
@pytest.mark.parametrize("family", [f if f in LEARNS else pytest.param(f, marks=NOT_LEARNED) for f in FAMILIES])
def test_dense_reward_rises(tiny_root, family, tmp_path):
    """``redness`` (a denoiser's: the mean of its features) rises by ≥ 3 of its epoch-0 standard deviations within 10
    small epochs (the mean of the last two epochs against epoch 0)."""
    rows_ = metrics(run_trainer(kit_config(tiny_root, tmp_path, family, **LEARNING_RUN)).run_dir)
    start, std = rows_[0]["reward/mean"], rows_[0]["reward/std"]
    end = float(np.mean([r["reward/mean"] for r in rows_[-2:]]))
    print(f"{family}: reward {start:.4f} (std {std:.4f}) -> {end:.4f}: {(end - start) / std:+.1f} std")
    assert all(math.isfinite(r["train/loss"]) for r in rows_)
    assert end - start >= 3 * std


# =============================================================================================== real-config mode
#: the real checkpoint whose checks run in the default suite (the cheapest in its recipe's dtype on a CPU)
FAST_REAL = "sd1.5"
#: (pipeline class, check) -> why it fails today. Strict: the fix turns it into a failure, and the line goes. (Empty
#: since issue 32's fixes: Wan samples the shipped UniPC σ grid, SDXL's VAE follows force_upcast.)
EXPECTED_FAILURES: dict[tuple[str, str], str] = {}


def real_cases(check: str) -> list:
    """(pipeline class, checkpoint directory) of every registered checkpoint; slow but for ``FAST_REAL``; a strict
    expected failure where ``EXPECTED_FAILURES`` names the check."""
    cases = []
    for pipeline, spec in families().items():
        for checkpoint in spec.checkpoints:
            marks = [] if checkpoint.directory == FAST_REAL else [pytest.mark.slow]
            if (pipeline, check) in EXPECTED_FAILURES:
                reason = EXPECTED_FAILURES[(pipeline, check)]
                marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))
            cases.append(
                pytest.param(pipeline, checkpoint.directory, marks=marks, id=f"{spec.name}-{checkpoint.directory}")
            )
    return cases


def real_rows(family: str) -> int:
    """Rows per real-config rollout: 1 where the plain pipeline takes one prompt per call, else 2."""
    return 1 if families()[family].image_conditioned else 2


# ----------------------------------------------------------------------------------------------- 9. the build
@pytest.mark.parametrize("family,directory", real_cases("build"))
def test_real_build_keeps_the_shipped_configs(tiny_root, family, directory):
    """The scheduler's config is the shipped one; the VAE keeps its latent rules and levels; the denoiser differs from
    its shipped config only in the keys of the spec's ``real_cut``."""
    from ddpo_grpo.tiny.from_configs import component_config, encoder_configs, read_json

    spec, shipped_dir = families()[family], checkpoint_of(family, directory).path
    built = Path(real_dir(tiny_root, family, directory))
    index = read_json(shipped_dir / "model_index.json")
    assert read_json(built / "model_index.json")["_class_name"] == index["_class_name"] == family
    for name, value in index.items():
        if not isinstance(value, list) or value[0] != "diffusers":
            continue
        shipped, ours = component_config(shipped_dir, name), component_config(built, name)
        if name == "scheduler":
            changed = {k for k in shipped if not k.startswith("_") and ours.get(k) != shipped[k]}
            assert not changed, f"{directory}: the scheduler's {sorted(changed)} differ from the shipped config"
        elif name == "vae":
            rules = ("scaling_factor", "shift_factor", "latents_mean", "latents_std", "force_upcast", "z_dim")
            rules += ("latent_channels", "temperal_downsample")
            changed = {k for k in rules if k in shipped and ours.get(k) != shipped[k]}
            assert not changed, f"{directory}: the VAE's {sorted(changed)} differ from the shipped config"
            levels = ("block_out_channels", "dim_mult")
            assert all(len(ours[k]) == len(shipped[k]) for k in levels if k in shipped), "the VAE's factor changed"
        else:  # a denoiser: as shipped but for the spec's cut
            cut = set(spec.real_cut(shipped, encoder_configs(built)))
            changed = {k for k in shipped if not k.startswith("_") and ours.get(k) != shipped[k]}
            assert changed <= cut, f"{directory}: {name}'s {sorted(changed - cut)} changed beyond the spec's cut"


# ----------------------------------------------------------------------------------------------- 10. σ grid
@pytest.mark.parametrize("family,directory", real_cases("sigma_grid"))
def test_real_sigma_grid_is_the_shipped_schedulers(tiny_root, family, directory):
    """At the recipe's training and evaluation step counts, the rollout's σ's (flow kernels) or timesteps (DDPM kernels)
    are those the plain pipeline sets on the checkpoint's own scheduler (a different kind included: UniPC, Euler)."""
    policy = real_policy(tiny_root, family, directory, torch.float32)
    sample = checkpoint_of(family, directory).recipe_config().sample
    for steps in sorted({int(sample.num_steps), int(sample.eval_num_steps)}):
        err = grid_gap(policy, rows(real_rows(family)), steps)
        assert err <= 1e-4, f"{directory}, {steps} steps: the grid departs from the shipped scheduler's by {err:.3g}"


# ----------------------------------------------------------------------------------------------- 11. = diffusers
@pytest.mark.parametrize("family,directory", real_cases("rollout"))
def test_real_rollout_is_the_plain_pipeline(tiny_root, family, directory):
    """Noise level 0, CFG off and on: the decoded samples equal the plain pipeline's to ≤ 1e-5 in float32; in the
    recipe's dtype (cast and autocast as a run does) the final latents agree to its rounding (``TOLERANCE``). The
    editing families' sources are sized by the pipeline's rule at the kit's small area (``pipeline_sources_as``)."""
    for dtype in dict.fromkeys((torch.float32, recipe_dtype(family, directory))):
        policy = real_policy(tiny_root, family, directory, dtype)
        for guidance in (1.0, 3.0) if family not in EDIT_FAMILIES else (3.0,):
            err = rollout_gap(policy, real_rows(family), guidance)
            assert err <= TOLERANCE[dtype], f"{directory}, {dtype}, guidance {guidance}: rollout vs pipeline {err:.2e}"


# ----------------------------------------------------------------------------------------------- 12. VAE dtype
@pytest.mark.parametrize("family,directory", real_cases("vae_dtype"))
def test_real_vae_decodes_in_the_pipelines_dtype(tiny_root, family, directory):
    """In the recipe's dtype, with ``sample.vae_dtype = "auto"`` (the checkpoint's rule) the policy decodes in the
    dtype the plain pipeline decodes in (e.g. float32 for an fp16 VAE whose config says ``force_upcast``), and with
    the recipe's own ``sample.vae_dtype`` in that one: the VAE cast to ``Policy.vae_dtype`` as
    ``wiring.build_weights`` casts it, decoding outside autocast as the rollout does; the plain pipeline with the
    VAE as loaded (it applies its own rule)."""
    from ddpo_grpo.policies.base import VAE_DTYPES

    dtype = recipe_dtype(family, directory)
    chosen = VAE_DTYPES[checkpoint_of(family, directory).recipe_config().sample.vae_dtype]
    policy = real_policy(tiny_root, family, directory, dtype, vae_dtype="auto")
    n = real_rows(family)
    x = torch.randn(n, *policy.latent_shape(), generator=torch.Generator().manual_seed(0))
    vae = policy.pipeline.vae
    loaded = vae.dtype

    def decoded_in(vae_dtype) -> list:
        vae.to(vae_dtype)
        with torch.no_grad():
            return decoder_dtypes(vae, lambda: policy.decode(x))

    ours = decoded_in(policy.vae_dtype(dtype))
    if chosen is not None:  # the recipe's explicit choice (e.g. flow_grpo's float32 VAE) is what decodes
        assert set(decoded_in(chosen)) == {chosen}, f"{directory}: sample.vae_dtype {chosen} is not what decodes"
    vae.to(loaded)
    with pipeline_sources_as(policy):
        plain = lambda: policy.reference_sample(rows(n), x.to(dtype), 1, 1.0)  # (latents in the pipeline's dtype)
        theirs = decoder_dtypes(policy.pipeline.vae, plain)
    assert ours and theirs and set(ours) == set(theirs), (
        f"{directory}: the policy decodes in {ours[0]}, the pipeline in {theirs[0]}"
    )


# ----------------------------------------------------------------------------------------------- 13. on-policy
@pytest.mark.parametrize("family,directory", real_cases("log_probs"))
def test_real_log_probs_are_recomputed(tiny_root, family, directory):
    """In the recipe's dtype (cast and autocast), stored log-probs are recomputed in another minibatch to ≤ 1e-4."""
    dtype = recipe_dtype(family, directory)
    policy = real_policy(tiny_root, family, directory, dtype)
    worst = logp_mismatch(policy, real_rows(family) + 1, 3.0)
    assert worst <= 1e-4, f"{directory}, {dtype}: logp mismatch {worst:.2e}"


# ----------------------------------------------------------------------------------------------- 14. LoRA export
@pytest.mark.parametrize("family,directory", real_cases("lora"))
def test_real_lora_export_loads(tiny_root, family, directory, tmp_path):
    """In the recipe's dtype: a LoRA (float32 weights on the cast denoiser, as a run trains it) moves the final latents
    well beyond the dtype's rounding, and its export loaded in plain diffusers reproduces them to ``TOLERANCE``."""
    dtype = recipe_dtype(family, directory)
    policy = real_policy(tiny_root, family, directory, dtype)
    fresh = lambda: real_policy(tiny_root, family, directory, dtype)
    change, err = lora_reload(policy, fresh, tmp_path, real_rows(family), scale=0.5)
    assert change > 4 * TOLERANCE[dtype], f"{directory}: the LoRA moves the latents by {change:.2e} only"
    assert err <= TOLERANCE[dtype], f"{directory}, {dtype}: the loaded LoRA reproduces the policy to {err:.2e}"


def test_every_shipped_config_directory_has_a_spec():
    """Each directory of config/model_configs/ is a checkpoint of some family's spec (so the kit runs on it)."""
    from ddpo_grpo.policies.family import MODEL_CONFIGS

    claimed = {c.directory for spec in families().values() for c in spec.checkpoints}
    shipped = {p.name for p in MODEL_CONFIGS.iterdir() if (p / "model_index.json").is_file()}
    assert shipped <= claimed, f"config/model_configs/ {sorted(shipped - claimed)}: add a Checkpoint to the spec"
    assert claimed <= shipped, f"specs name checkpoints without configs: {sorted(claimed - shipped)}"
    assert {family for family, _ in EXPECTED_FAILURES} <= set(families()), "EXPECTED_FAILURES names no family"
