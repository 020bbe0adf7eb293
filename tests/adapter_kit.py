"""The adapter test kit's builders and measurements, shared by its tests (tests/test_adapter_kit.py), the table of
its figures (experiments/kit_table.py) and its learning check's traces (experiments/kit_learning.py). Two modes per family:

    tiny          the family's tiny pipeline (``FamilySpec.tiny_builder``), float32, ``settings``
    real config   a checkpoint's shipped configs (``FamilySpec.checkpoints``, ``ddpo_grpo.tiny.from_configs``) with the
                  recipe's ``sample`` settings, loaded and autocast in the recipe's dtype (``real_policy``)

Every measurement compares two float tensors as ``gap`` does: in float32 the max |Δ| of the decoded samples; in a
lower dtype the max |Δ| / max |reference| of the final latents in the pipeline's own layout (the decoded samples of a
random VAE in bf16 differ by more than the latents do: the VAE's own rounding, not the sampler's).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import torch

from ddpo_grpo.policies import build_policy, families, load_pipeline
from ddpo_grpo.rollout import sample_rollout, transition_inputs

RESOLUTION = 32
STEPS = 3  # Qwen-Image's shift_terminal needs ≥ 2 steps
PROMPTS = ["a red circle", "two blue squares", "a green cat on a mat"]
#: Qwen-Image-Edit resizes sources to 1024² by default (its pipeline's rule); the kit's cheaper area, except in (2)
SMALL_SOURCE = 32 * 32
EDIT_FAMILIES = ("QwenImageEditPipeline", "QwenImageEditPlusPipeline")
DTYPES = {"no": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: ``gap``'s bound for "equal" per dtype. float32: the same arithmetic up to summation order (decoded samples). bf16
#: and fp16, relative on the final latents: the pipeline rounds its latent to that dtype after every step and runs its
#: norms there, where a run's autocast keeps float32. bf16 (unit roundoff u = 2⁻⁸ ≈ 3.9e-3): measured 0.5–1.2 % over
#: 3 steps; fp16 (u = 2⁻¹¹): the pipeline's DDIM / Euler step also runs in fp16 and its x0 estimate divides by
#: √ᾱ_t (up to 14× on SD's schedule), measured 1.4–2.5 % with CFG 3 (docs/models.md). Both bounded by 3.1 % (8u of
#: bf16), below what a σ-grid or scaling mistake moves (tens of %)
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 8 * 2**-8, torch.float16: 8 * 2**-8}
_built: dict[str, str] = {}


# ---------------------------------------------------------------------------------------------- building
def family_dir(root: Path, family: str) -> str:
    """The family's tiny pipeline directory, built once per process."""
    from ddpo_grpo.tiny import FAMILIES as BUILDERS

    if family not in _built:
        path = Path(root) / family
        BUILDERS[family](path)
        _built[family] = str(path)
    return _built[family]


def settings(family: str, **overrides) -> dict:
    """The PolicySettings fields the kit builds every family's tiny policy with."""
    values = dict(resolution=RESOLUTION, max_sequence_length=256)
    if families()[family].video:
        values["num_frames"] = 5
    if family in EDIT_FAMILIES:
        values["source_pixels"] = SMALL_SOURCE
    return {**values, **overrides}


def make_policy(root, family, **overrides):
    return build_policy(load_pipeline(family_dir(root, family)), **settings(family, **overrides))


def checkpoint_of(family: str, directory: str):
    return next(c for c in families()[family].checkpoints if c.directory == directory)


def real_dir(root: Path, family: str, directory: str) -> str:
    """The checkpoint's real-config pipeline directory (``tiny.from_configs``), built once per process."""
    from ddpo_grpo.tiny.from_configs import build_from_configs

    key = f"real/{directory}"
    if key not in _built:
        path = Path(root) / "real" / directory
        build_from_configs(families()[family], checkpoint_of(family, directory), path)
        _built[key] = str(path)
    return _built[key]


def recipe_dtype(family: str, directory: str) -> torch.dtype:
    """The dtype of the checkpoint's recipe (``mixed_precision``)."""
    return DTYPES[checkpoint_of(family, directory).recipe_config().mixed_precision]


def real_policy(root, family: str, directory: str, dtype: torch.dtype, **overrides):
    """The real-config pipeline loaded in ``dtype`` (as a run casts it), with its recipe's ``sample`` settings at the
    kit's sizes (32 px, 5 frames, small editing sources)."""
    from ddpo_grpo.policies import policy_settings

    recipe = checkpoint_of(family, directory).recipe_config()
    pipe = load_pipeline(real_dir(root, family, directory), torch_dtype=None if dtype == torch.float32 else dtype)
    sizes = dict(resolution=RESOLUTION, num_frames=5 if families()[family].video else 0)
    if family in EDIT_FAMILIES:
        sizes["source_pixels"] = SMALL_SOURCE
    return build_policy(pipe, policy_settings(pipe, recipe.sample), **{**sizes, **overrides})


#: the modules of the editing pipelines whose ``calculate_dimensions`` size the sources (at a fixed 1024² area)
EDIT_PIPELINE_MODULES = (
    "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit",
    "diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus",
)
PIPELINE_SOURCE_AREA = 1024 * 1024


@contextlib.contextmanager
def pipeline_sources_as(policy):
    """While the plain pipeline runs: the Qwen-Image-Edit pipelines' source rule (``calculate_dimensions`` of a fixed
    1024² area, for the latent's source) at the policy's ``sample.source_pixels`` when that is set, so that the
    rollout and the pipeline size sources alike at a cost a CPU can pay (a 1024² source through the video VAE takes
    minutes there in bf16); unchanged otherwise."""
    import importlib

    area = int(getattr(policy.settings, "source_pixels", 0) or 0)
    if type(policy.pipeline).__name__ not in EDIT_FAMILIES or not area:
        yield
        return
    modules = [importlib.import_module(m) for m in EDIT_PIPELINE_MODULES]
    originals = [m.calculate_dimensions for m in modules]
    for module, original in zip(modules, originals):
        module.calculate_dimensions = lambda a, ratio, f=original: f(area if a == PIPELINE_SOURCE_AREA else a, ratio)
    try:
        yield
    finally:
        for module, original in zip(modules, originals):
            module.calculate_dimensions = original


def autocast_for(dtype: torch.dtype):
    """A run's autocast in ``dtype`` (accelerate's for ``mixed_precision`` on a CPU; none in float32)."""
    if dtype == torch.float32:
        return contextlib.nullcontext
    return lambda: torch.autocast("cpu", dtype=dtype)


def policy_dtype(policy) -> torch.dtype:
    """The dtype the policy's denoiser was cast to (diffusers' rule: modules kept in float32 do not count)."""
    return policy.denoiser_modules()[0].dtype


# ---------------------------------------------------------------------------------------------- sampling
def rows(n: int, seed: int = 0) -> list[dict]:
    """n prompt rows, each with a 32-pixel source image (read by image-conditioned families only)."""
    rng = np.random.default_rng(seed)
    return [{"prompt": PROMPTS[i % len(PROMPTS)], "source_image": rng.random((3, 32, 32))} for i in range(n)]


def rollout(policy, n, guidance, noise, steps=STEPS, seed=0, autocast=None, **kw):
    """A rollout of ``rows(n)`` (seeds seed…), under the autocast of the policy's dtype unless ``autocast`` is given."""
    return sample_rollout(
        policy,
        policy.denoiser,
        rows(n),
        seeds=[seed + i for i in range(n)],
        num_steps=steps,
        guidance_scale=guidance,
        noise_level=noise,
        generator=torch.Generator().manual_seed(seed),
        autocast=autocast or autocast_for(policy_dtype(policy)),
        **kw,
    )


def plain_latents(policy, rows_, latents, steps: int, guidance: float) -> torch.Tensor:
    """The plain pipeline's final latents (``output_type="latent"``, its own layout) from the initial noise
    ``latents`` (given in the policy's dtype), with the policy's reference scheduler swapped in as ``reference_sample``
    does."""
    pipe = policy.pipeline
    # (in the pipeline's dtype, as its user passes them: SD's pipelines feed given latents to the UNet uncast)
    kwargs = policy.pipeline_kwargs(rows_, latents.to(policy_dtype(policy)), guidance, "")
    shipped, pipe.scheduler = pipe.scheduler, policy.reference_scheduler()
    try:
        with pipeline_sources_as(policy):
            out = pipe(num_inference_steps=steps, output_type="latent", return_dict=False, **kwargs)[0]
    finally:
        pipe.scheduler = shipped
    return out.float()


def in_pipeline_layout(policy, rows_, latents) -> torch.Tensor:
    """``latents`` [B, *latent_shape] in the pipeline's own layout (the adapter's ``pipeline_kwargs`` mapping)."""
    return policy.pipeline_kwargs(rows_, latents, 1.0, "")["latents"].float()


def outcome(policy, r, n: int) -> torch.Tensor:
    """What ``gap`` compares of rollout ``r``: its decoded samples in float32, else its final latents (pipeline layout)."""
    if policy_dtype(policy) == torch.float32:
        return r.samples
    return in_pipeline_layout(policy, rows(n), r.latents[:, -1].float())


def gap(ours: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> float:
    """max |ours − reference| in float32; divided by max |reference| in a lower dtype (module docstring)."""
    assert ours.shape == reference.shape, f"{tuple(ours.shape)} vs {tuple(reference.shape)}"
    diff = (ours.float() - reference.float()).abs().max().item()
    return diff if dtype == torch.float32 else diff / reference.float().abs().max().item()


# ---------------------------------------------------------------------------------------------- measurements
def rollout_gap(policy, n: int, guidance: float, steps: int = STEPS) -> float:
    """Noise level 0 from the same initial noise: ``gap`` between the rollout and the plain pipeline (float32: the
    decoded samples, ``reference_sample``; a lower dtype: the final latents, ``plain_latents``)."""
    r = rollout(policy, n, guidance, 0.0, steps=steps)
    assert (r.log_probs == 0).all()
    dtype = policy_dtype(policy)
    x_T = r.latents[:, 0].float().clone()
    if dtype == torch.float32:
        with pipeline_sources_as(policy):
            return gap(r.samples, policy.reference_sample(rows(n), x_T, steps, guidance), dtype)
    return gap(outcome(policy, r, n), plain_latents(policy, rows(n), x_T, steps, guidance), dtype)


def logp_mismatch(policy, n: int, guidance: float) -> float:
    """Max |recomputed − stored log-prob| of an SDE rollout of n rows, recomputed on rows (n−1, 0) as another
    minibatch, under the policy's dtype's autocast."""
    autocast = autocast_for(policy_dtype(policy))
    r = rollout(policy, n, guidance, policy.noise_level)
    assert torch.isfinite(r.log_probs).all() and (r.log_probs != 0).any()
    mini = r.select([n - 1, 0])
    worst = 0.0
    for k in range(mini.train_steps.shape[1]):
        x, t, x_next, args, levels, j, valid = transition_inputs(mini, k)
        with torch.no_grad(), autocast():
            out = policy.predict(policy.denoiser, x, t, mini.cond, guidance)
        step = policy.step(out, x, args, levels, prev_sample=x_next)
        worst = max(worst, (step.log_prob - mini.log_probs[torch.arange(2), j])[valid].abs().max().item())
    return worst


def randomise_lora(module: torch.nn.Module, seed: int = 0, scale: float = 0.1) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "lora_B" in name:
                p.copy_(scale * torch.randn(p.shape, generator=gen))


def lora_reload(policy, fresh, out_dir, n: int, scale: float = 0.1) -> tuple[float, float]:
    """(how far a random LoRA moves the policy, how far its export reloaded is from the policy), both as ``gap``.

    The LoRA is attached as a run attaches it (its weights float32 on the cast denoiser), saved by ``save_lora`` and
    loaded by ``fresh()`` — a new policy — through the adapter's ``load_lora`` (plain diffusers' ``load_lora_weights``).
    Noise level 0, 2 steps, guidance 3."""
    from ddpo_grpo.policies.base import Policy

    dtype = policy_dtype(policy)
    base = outcome(policy, rollout(policy, n, 3.0, 0.0, steps=2), n)
    policy.add_lora(rank=4, alpha=4.0, target_modules=())
    assert any(p.requires_grad for p in policy.denoiser.parameters())
    for p in policy.denoiser.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    randomise_lora(policy.denoiser, scale=scale)
    tuned = outcome(policy, rollout(policy, n, 3.0, 0.0, steps=2), n)
    policy.save_lora(out_dir, policy.denoiser)
    loaded = fresh()
    cls = type(loaded)
    if cls.load_lora.__func__ is Policy.load_lora.__func__:
        loaded.pipeline.load_lora_weights(str(out_dir))  # plain diffusers
    else:  # a family whose export spans files (Wan 2.2's experts): its load_lora makes the plain diffusers calls
        cls.load_lora(loaded.pipeline, str(out_dir))
    again = outcome(loaded, rollout(loaded, n, 3.0, 0.0, steps=2), n)
    return gap(tuned, base, dtype), gap(again, tuned, dtype)


class FirstStep(Exception):
    """Raised by ``shipped_grid``'s callback after the plain pipeline's first step (the grid is set by then)."""


def shipped_grid(policy, rows_, steps: int) -> dict:
    """The σ's (``scheduler.sigmas``) and timesteps the plain pipeline sets on its SHIPPED scheduler for ``steps``."""
    seen = {}

    def stop(pipe, i, t, kwargs):
        sigmas = getattr(pipe.scheduler, "sigmas", None)  # (a DDPM-family scheduler may have none: PNDM)
        seen.update(sigmas=None if sigmas is None else sigmas.float().clone())
        seen.update(timesteps=pipe.scheduler.timesteps.float().clone())
        raise FirstStep

    kwargs = policy.pipeline_kwargs(rows_, torch.randn(len(rows_), *policy.latent_shape()), 1.0, "")
    try:
        with pipeline_sources_as(policy):
            policy.pipeline(num_inference_steps=steps, output_type="latent", callback_on_step_end=stop, **kwargs)
    except FirstStep:
        return seen
    raise AssertionError("the pipeline never called callback_on_step_end")


def grid_gap(policy, rows_, steps: int) -> float:
    """Max |rollout − shipped| of the grid at ``steps``, relative to its largest value: the σ's for the flow kernels;
    for the DDPM kernels the timesteps the shipped scheduler visits (each once: PNDM's warm-up repeats one), whatever
    its solver (``shipped_grid``: the plain pipeline's call on its shipped scheduler)."""
    from ddpo_grpo.kernels import FLOW_KERNELS

    grid, schedule = shipped_grid(policy, rows_, steps), policy.schedule(steps)
    if policy.kernel in FLOW_KERNELS:
        ours, theirs = schedule.kernel_args["sigma"].float(), grid["sigmas"][:steps]
    else:
        ours, theirs = schedule.timesteps.float(), grid["timesteps"].unique().flip(0)
    assert ours.shape == theirs.shape, f"{steps} steps: {ours.shape[0]} vs the pipeline's {theirs.shape[0]}"
    return (ours - theirs).abs().max().item() / max(1.0, theirs.abs().max().item())


def decoder_dtypes(vae, run) -> list[torch.dtype]:
    """The dtypes the VAE decoder's output comes out in while ``run()`` runs (its compute dtype, autocast included)."""
    seen = []
    handle = vae.decoder.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    try:
        run()
    finally:
        handle.remove()
    return seen


# ---- the trainer runs of the kit (tests/test_adapter_kit.py, section 8; experiments/kit_learning.py) -----------
def policy_class_of(family: str):
    return families()[family].adapter


def kit_config(root: Path, tmp_path: Path, family: str, **overrides):
    """A two-epoch LoRA run of the family's tiny pipeline on ``redness`` (images and videos): config/tiny.py's tiny
    variant, on the kit's pipeline directory and prompt rows (with source-image files), 2 steps."""
    from config.tiny import tiny_family

    cls = policy_class_of(family)
    cfg = tiny_family(family, image_conditioned=cls.image_conditioned, video=cls.sample_kind == "video")
    cfg.logdir, cfg.run_name = str(tmp_path / "logs"), "run"
    cfg.pretrained.model = family_dir(root, family)
    cfg.sample.num_steps, cfg.sample.max_sequence_length = 2, 256
    cfg.sample.source_pixels = SMALL_SOURCE if family in EDIT_FAMILIES else 0
    cfg.reward.num_workers, cfg.logging.progress = 0, False
    if cls.sample_kind == "array":  # neither images nor videos: a dense mean of the decoded values
        cfg.reward.sources = {"redness": f"{Path(__file__).parent / 'kit_rewards.py'}:feature_mean"}
    cfg.prompts.source = write_prompts(tmp_path)
    for key, value in overrides.items():
        node = cfg
        *path, leaf = key.split(".")
        for part in path:
            node = node[part]
        node[leaf] = value
    return cfg


def write_prompts(tmp_path: Path, n: int = 4) -> str:
    """A .jsonl of n rows, each with a source image file (read by image-conditioned families only)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "prompts.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            image = tmp_path / f"source_{i}.png"
            Image.fromarray((rng.random((32, 32, 3)) * 255).astype(np.uint8)).save(image)
            f.write(json.dumps({"prompt": PROMPTS[i % len(PROMPTS)], "source_image": str(image)}) + "\n")
    return str(path)


def run_trainer(cfg):
    from ddpo_grpo.trainer import Trainer

    trainer = Trainer(cfg)
    trainer.run()
    return trainer


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


#: the learning check's run: the best of the settings tried on tiny random-weight pipelines
#: (docs/experiments/2026-11-25-model-families.md): full fine-tuning, AdamW 3e-2, no effective PPO clip, groups of 8
#: sharing their initial noise, 64 samples and 4 optimizer steps per epoch
LEARNING_RUN = {
    "num_epochs": 10,
    "save_freq": 0,
    "sample.num_steps": 4,
    "sample.batch_size": 16,
    "sample.num_batches_per_epoch": 4,
    "sample.group_size": 8,
    "sample.share_group_noise": True,
    "train.batch_size": 16,
    "train.use_lora": False,
    "train.learning_rate": 3e-2,
    "train.clip_range": 100.0,
}
