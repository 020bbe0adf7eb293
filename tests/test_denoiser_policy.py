"""Component and end-to-end tests of the generic denoiser family: DenoiserPipeline and DenoiserPolicy.

This file is also a user's model file: ``build_user_pipeline`` is the factory that
``pretrained.model = "tests/test_denoiser_policy.py:build_user_pipeline"`` calls, around ``UserDenoiser``,
a denoiser that is not ours (a tiny transformer over [B, frames, D] with f(x_t, t, text_embeds=None)).
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from diffusers import DDIMScheduler, DDPMScheduler, ModelMixin
from diffusers.configuration_utils import ConfigMixin, register_to_config

from ddpo_grpo.denoiser_pipeline import DenoiserPipeline, SampleNormalizer
from ddpo_grpo.policies import FINAL_MANIFEST, build_policy, load_pipeline
from ddpo_grpo.rollout import sample_rollout, transition_inputs

THIS_FILE = Path(__file__).resolve()
REPO = THIS_FILE.parents[1]
ROWS = [{"prompt": "a person walks forward"}, {"prompt": "jump"}, {"prompt": "wave the left hand"}]


# ----------------------------------------------------------------------------- a user's own model file


class UserDenoiser(ModelMixin, ConfigMixin):
    """One pre-norm transformer block over frames (q/k/v/out and MLP as nn.Linear), x₀... or ε prediction."""

    @register_to_config
    def __init__(self, features: int = 6, width: int = 16, text_dim: int = 32, heads: int = 2):
        super().__init__()
        self.embed = torch.nn.Linear(features, width)
        self.cond = torch.nn.Linear(text_dim, width)
        self.time = torch.nn.Linear(1, width)
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.attn_out = torch.nn.Linear(width, width)
        self.ff1, self.ff2 = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)
        self.head = torch.nn.Linear(width, features)

    def forward(self, x_t, t, text_embeds=None):
        b, f, _ = x_t.shape
        h = self.embed(x_t) + self.time((t.float() / 1000.0)[:, None])[:, None]  # [B, F, W]
        if text_embeds is not None:  # sequence embeddings [B, L, D]: mean over tokens
            h = h + self.cond(text_embeds.mean(dim=1))[:, None]
        q, k, v = self.qkv(self.norm1(h)).view(b, f, 3, self.config.heads, -1).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # [B, heads, F, W/heads]
        h = h + self.attn_out(a.transpose(1, 2).reshape(b, f, -1))
        h = h + self.ff2(torch.nn.functional.gelu(self.ff1(self.norm2(h))))
        return self.head(h)  # [B, F, features]


def build_user_pipeline():
    """The factory: a deterministic DenoiserPipeline around UserDenoiser.

    Sequence text embeddings, ε prediction, linear β, fixed-large variance, the negative prompt as CFG's
    unconditional branch.
    """
    from transformers import CLIPTextConfig, CLIPTextModel

    from ddpo_grpo.tiny import TEXT_HIDDEN, TOKENIZER_MAX_LENGTH, _char_vocab, build_tokenizer

    text_config = CLIPTextConfig.from_dict(
        {
            "vocab_size": len(_char_vocab()),
            "hidden_size": TEXT_HIDDEN,
            "intermediate_size": 37,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": TOKENIZER_MAX_LENGTH,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 1,
        }
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        denoiser, text_encoder = UserDenoiser(), CLIPTextModel(text_config)
    scheduler = DDPMScheduler(beta_schedule="linear", variance_type="fixed_large", clip_sample=False)
    return DenoiserPipeline(
        denoiser=denoiser,
        scheduler=scheduler,
        text_encoder=text_encoder,
        tokenizer=build_tokenizer(),
        sample_shape=[10, 6],
        text_embedding="sequence",
        uncond="negative_prompt",
        preview="heatmap",
    )


def not_a_pipeline():
    return 42


# ----------------------------------------------------------------------------- helpers and fixtures


@pytest.fixture(scope="module")
def tiny_denoiser(tmp_path_factory, one_thread):
    """(directory, in-memory pipeline) of ddpo_grpo.tiny's DenoiserPipeline, built once."""
    from ddpo_grpo.tiny import build_tiny_denoiser

    path = tmp_path_factory.mktemp("tiny") / "denoiser"
    return str(path), build_tiny_denoiser(path)


def _policy(model, **kw):
    return build_policy(load_pipeline(model), resolution=512, max_sequence_length=8, sde_type="flow_grpo", **kw)


def _rollout(policy, guidance, n=6, steps=4, noise=1.0, seed=1):
    rows = [ROWS[i % len(ROWS)] for i in range(n)]
    return sample_rollout(
        policy,
        policy.denoiser,
        rows,
        seeds=list(range(n)),
        num_steps=steps,
        guidance_scale=guidance,
        noise_level=noise,
        generator=torch.Generator().manual_seed(seed),
    )


def _max_rescoring_error(policy, rollout, guidance, index=(5, 0, 3, 2)):
    """Re-score every stored transition of a shuffled minibatch: max |recomputed − stored log-prob|."""
    mini = rollout.select(list(index))
    worst = 0.0
    for k in range(mini.train_steps.shape[1]):
        x, t, x_next, args, levels, j, valid = transition_inputs(mini, k)
        with torch.no_grad():
            out = policy.predict(policy.denoiser, x, t, mini.cond, guidance)
        step = policy.step(out, x, args, levels, prev_sample=x_next)
        assert valid.all()
        worst = max(worst, float((step.log_prob - mini.log_probs[torch.arange(len(index)), j]).abs().max()))
    return worst


def _outputs(policy, cond_prompts=("jump", "walk"), guidance=3.0):
    x = torch.randn(2, *policy.latent_shape(), generator=torch.Generator().manual_seed(0))
    t = policy.schedule(4).timesteps[1:2].expand(2)
    with torch.no_grad():
        return policy.predict(policy.denoiser, x, t, policy.encode_prompts(list(cond_prompts)), guidance)


def _perturb_lora(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2, generator=torch.Generator().manual_seed(len(name)))


def _write_lora_final(policy, out_dir: Path, base: str) -> None:
    """A run's final/ as the trainer writes it for a LoRA run."""
    out_dir.mkdir(parents=True)
    policy.save_lora(out_dir, policy.denoiser)
    (out_dir / FINAL_MANIFEST).write_text(json.dumps({"kind": "lora", "base_model": base}))


# ----------------------------------------------------------------------------- the pipeline


def test_save_load_round_trip(tiny_denoiser):
    path, built = tiny_denoiser
    index = json.loads((Path(path) / "model_index.json").read_text())
    assert index["_class_name"] == "DenoiserPipeline" and index["denoiser"] == ["ddpo_grpo.tiny", "TinyDenoiser"]
    assert index["normalizer"] == ["ddpo_grpo.denoiser_pipeline", "SampleNormalizer"] and index["sample_shape"] == [
        16,
        8,
    ]
    assert (Path(path) / "denoiser" / "diffusion_pytorch_model.safetensors").is_file()
    loaded = load_pipeline(path)
    assert isinstance(loaded, DenoiserPipeline) and isinstance(loaded.scheduler, DDPMScheduler)
    assert loaded.prediction_type == "sample" and loaded.variance == "fixed_small"
    for a, b in zip(built.denoiser.state_dict().values(), loaded.denoiser.state_dict().values()):
        assert torch.equal(a, b)
    torch.testing.assert_close(loaded.normalizer.mean, 0.5 * torch.arange(8.0))
    cond_built, cond_loaded = built.encode_prompt(["jump"]), loaded.encode_prompt(["jump"])
    assert cond_loaded["text_embeds"].shape == (1, 32)
    assert torch.equal(cond_built["text_embeds"], cond_loaded["text_embeds"])
    assert (cond_loaded["neg_text_embeds"] == 0).all()  # MDM's unconditional branch: the condition dropped
    x = torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(loaded.decode(x), x * 2.0 + 0.5 * torch.arange(8.0))


def test_names_that_moved_out_stay_importable_from_the_pipeline_module():
    """Saved pipelines, worlds and user code import these from ddpo_grpo.denoiser_pipeline (and its old path)."""
    import ddpo_grpo.denoiser_components as components
    import ddpo_grpo.denoiser_pipeline as module
    import ddpo_grpo.heatmaps as heatmaps
    import ddpo_grpo.pipelines as old_path

    for name in ("VARIANCE_TYPES", "with_peft_adapters"):
        assert getattr(module, name) is getattr(components, name) is getattr(old_path, name)
    assert module.heatmap is heatmaps.heatmap and old_path.SampleNormalizer is SampleNormalizer
    assert SampleNormalizer.__module__ == "ddpo_grpo.denoiser_pipeline"  # what model_index.json files name


def test_adapter_kernel_choice_and_shape(tiny_denoiser):
    from ddpo_grpo.policies.sd import SDPolicy

    path, _ = tiny_denoiser
    policy = _policy(path)
    assert type(policy).__name__ == "DenoiserPolicy" and policy.noise_level == 1.0  # the kernel's default
    assert policy.latent_shape() == (16, 8) and policy.kernel == "ddpm"  # the scheduler's kind; flow sde_type ignored
    assert _policy(path, kernel="ddim").kernel == "ddim"
    with pytest.raises(ValueError, match="sample.kernel='euler' is not a kernel"):
        _policy(path, kernel="euler")
    with pytest.raises(ValueError, match="sample.kernel='cps' is not one of \\['ddim', 'ddpm'\\] for DenoiserPolicy"):
        _policy(path, kernel="cps")
    with pytest.raises(ValueError, match="sample.noise_level=1.5 must be \\[0, 1\\] for sample.kernel='ddpm'"):
        _policy(path, noise_level=1.5)
    with pytest.raises(ValueError, match="sample.kernel='flow_grpo' is not one of \\['ddim', 'ddpm'\\] for SDPolicy"):
        SDPolicy(None, resolution=32, kernel="flow_grpo")


def test_schedule_follows_the_scheduler(tiny_denoiser):
    path, built = tiny_denoiser
    policy = _policy(path)
    sched = policy.schedule(4)
    assert sched.timesteps.tolist() == [999, 666, 333, 0]  # "linspace" spacing (IDDPM's respacing)
    ac = built.scheduler.alphas_cumprod
    torch.testing.assert_close(sched.kernel_args["alpha_prod_t"], ac[[999, 666, 333, 0]])
    torch.testing.assert_close(sched.kernel_args["alpha_prod_t_prev"], torch.cat([ac[[666, 333, 0]], torch.ones(1)]))
    ddim = DDIMScheduler.from_config(built.scheduler.config, set_alpha_to_one=False, timestep_spacing="leading")
    pipe = load_pipeline(path)
    pipe.scheduler = ddim
    ddim_sched = build_policy(pipe, resolution=0).schedule(4)
    assert ddim_sched.timesteps.tolist() == [750, 500, 250, 0]
    assert float(ddim_sched.kernel_args["alpha_prod_t_prev"][-1]) == pytest.approx(float(ac[0]))


@pytest.mark.parametrize("kernel", ["ddpm", "ddim"])
@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_on_policy_logprobs_are_reproduced(tiny_denoiser, kernel, guidance):
    """Re-scoring the stored transitions in another minibatch reproduces the stored log-probs to ≤ 1e-5."""
    path, _ = tiny_denoiser
    policy = _policy(path, kernel=kernel)
    rollout = _rollout(policy, guidance)
    assert rollout.latents.shape == (6, 5, 16, 8) and rollout.samples.shape == (6, 16, 8)
    # DDPM's last step (into the data) is noise-free and untrained; DDIM (ᾱ_prev = 1 there too) likewise
    assert rollout.train_steps.tolist() == [[0, 1, 2]] * 6 and (rollout.log_probs[:, -1] == 0).all()
    assert _max_rescoring_error(policy, rollout, guidance) <= 1e-5


def test_rollout_is_the_plain_pipeline_sampler(tiny_denoiser):
    """The recorded DDPM (η = 1) and DDIM (η = 0) samplers are diffusers' scheduler.step samplers, CFG included."""
    path, _ = tiny_denoiser
    policy = _policy(path)
    rollout = _rollout(policy, 2.5, n=2, steps=5, seed=7)
    plain = policy.pipeline(
        [r["prompt"] for r in ROWS[:2]],
        num_inference_steps=5,
        guidance_scale=2.5,
        latents=rollout.latents[:, 0].clone(),
        generator=torch.Generator().manual_seed(7),
    )
    torch.testing.assert_close(rollout.samples, plain.samples, atol=1e-5, rtol=1e-5)
    pipe = load_pipeline(path)
    pipe.scheduler = DDIMScheduler.from_config(pipe.scheduler.config)
    ddim = build_policy(pipe, resolution=0)
    assert ddim.kernel == "ddim"
    deterministic = _rollout(ddim, 2.5, n=2, steps=5, noise=0.0)
    plain = pipe(
        [r["prompt"] for r in ROWS[:2]],
        num_inference_steps=5,
        guidance_scale=2.5,
        eta=0.0,
        latents=deterministic.latents[:, 0].clone(),
    )
    torch.testing.assert_close(deterministic.samples, plain.samples, atol=1e-5, rtol=1e-5)
    assert (deterministic.log_probs == 0).all()


def test_lora_add_save_and_load_as_final(tiny_denoiser, tmp_path):
    """add_lora → save_lora → load_pipeline(final/) gives the LoRA'd outputs; the reference is the base model."""
    from ddpo_grpo.reference import Reference

    path, _ = tiny_denoiser
    policy = _policy(path)
    base = _outputs(policy)
    policy.add_lora(rank=4, alpha=8.0, target_modules=())
    assert {n.split(".")[0] for n, p in policy.denoiser.named_parameters() if p.requires_grad} == {
        "proj_in",
        "time_proj",
        "text_proj",
        "mix",
        "proj_out",
    }
    _perturb_lora(policy.denoiser)
    tuned = _outputs(policy)
    assert (tuned - base).abs().max() > 1e-3
    ref = Reference(policy, policy.denoiser, lora=True, update="fixed")
    x = torch.randn(2, 16, 8, generator=torch.Generator().manual_seed(0))
    t = policy.schedule(4).timesteps[1:2].expand(2)
    assert torch.equal(ref.predict(x, t, policy.encode_prompts(["jump", "walk"]), 3.0), base)
    _write_lora_final(policy, tmp_path / "final", path)
    reloaded = _policy(str(tmp_path))  # a run directory holding final/
    torch.testing.assert_close(_outputs(reloaded), tuned, atol=1e-5, rtol=1e-5)
    assert any("lora" in n for n, _ in reloaded.denoiser.named_parameters())


def test_full_export_is_a_pipeline_directory(tiny_denoiser, tmp_path):
    path, _ = tiny_denoiser
    policy = _policy(path)
    with torch.no_grad():
        policy.denoiser.proj_out.bias.add_(0.5)
    policy.save_pipeline(tmp_path / "full")
    torch.testing.assert_close(_outputs(_policy(str(tmp_path / "full"))), _outputs(policy))


def test_frozen_modules_keep_the_normalizer_float32(tiny_denoiser):
    path, _ = tiny_denoiser
    policy = _policy(path)
    frozen = policy.frozen_modules()
    assert policy.pipeline.text_encoder in frozen and policy.pipeline.normalizer not in frozen
    images = policy.preview(torch.arange(3 * 16 * 8.0).reshape(3, 16, 8))  # heatmaps, 8× so that 8 px -> 64
    assert images.shape == (3, 3, 128, 64) and images.min() == 0 and images.max() == 1


# ----------------------------------------------------------------------------- a user's factory file


def test_factory_file_pipeline(tmp_path):
    """pretrained.model = "<file>.py:build_user_pipeline".

    On-policy with CFG (negative-prompt branch, sequence embeddings, fixed-large DDPM on ε), LoRA through the
    factory, full save / load of the user's class.
    """
    spec = f"{THIS_FILE}:build_user_pipeline"
    policy = _policy(spec)
    assert type(policy.denoiser).__name__ == "UserDenoiser" and policy.variance == "fixed_large"
    assert policy.encode_prompts(["jump"])["text_embeds"].shape == (1, 64, 32)
    rollout = _rollout(policy, 3.0)
    assert _max_rescoring_error(policy, rollout, 3.0) <= 1e-5
    assert set(policy.default_lora_targets) == {"embed", "cond", "time", "qkv", "attn_out", "ff1", "ff2", "head"}
    policy.add_lora(rank=2, alpha=2.0, target_modules=("qkv", "ff1"))
    _perturb_lora(policy.denoiser)
    _write_lora_final(policy, tmp_path / "final", spec)
    torch.testing.assert_close(_outputs(_policy(str(tmp_path / "final"))), _outputs(policy), atol=1e-5, rtol=1e-5)

    fresh = load_pipeline(spec)
    fresh.save_pretrained(tmp_path / "saved")
    index = json.loads((tmp_path / "saved" / "model_index.json").read_text())
    module = index["denoiser"][0]
    assert module.startswith("_ddpo_user_test_denoiser_policy_") and index["user_modules"][module] == str(THIS_FILE)
    del sys.modules[module]  # as in a new process: the module is imported again from user_modules
    again = load_pipeline(str(tmp_path / "saved"))
    assert type(again.denoiser).__name__ == "UserDenoiser" and type(again.denoiser).__module__ == module
    for a, b in zip(fresh.denoiser.state_dict().values(), again.denoiser.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "spec,match",
    [
        ("no/such/model_file.py:build", "model_file.py"),
        (f"{THIS_FILE}:no_such_factory", "no function 'no_such_factory'"),
        (f"{THIS_FILE}:not_a_pipeline", "returned a int"),
    ],
)
def test_factory_file_errors_name_the_file_and_attribute(spec, match):
    with pytest.raises(ValueError, match=match):
        load_pipeline(spec)


# ----------------------------------------------------------------------------- unconditional pipelines, checks


class _AttentionDenoiser(ModelMixin, ConfigMixin):
    @register_to_config
    def __init__(self, features: int = 4):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(features, 2, batch_first=True)
        self.out = torch.nn.Linear(features, features)

    def forward(self, x, t):
        return self.out(self.attn(x, x, x, need_weights=False)[0]) * torch.cos(t.float() / 1000)[:, None, None]


def test_unconditional_pipeline():
    """No text encoder: no condition, one pass whatever the guidance; LoRA skips nn.MultiheadAttention's out_proj."""
    pipe = DenoiserPipeline(
        denoiser=_AttentionDenoiser(),
        scheduler=DDIMScheduler(clip_sample=False, prediction_type="v_prediction"),
        sample_shape=[5, 4],
    )
    policy = build_policy(pipe, resolution=0)
    assert policy.encode_prompts(["anything", "else"]) == {} and policy.kernel == "ddim"
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))
    t = policy.schedule(3).timesteps[:1].expand(2)
    assert torch.equal(policy.predict(pipe.denoiser, x, t, {}, 7.0), policy.predict(pipe.denoiser, x, t, {}, 1.0))
    assert policy.default_lora_targets == ("out",)
    rollout = sample_rollout(
        policy,
        pipe.denoiser,
        ROWS[:2],
        seeds=[0, 1],
        num_steps=3,
        guidance_scale=7.0,
        noise_level=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    assert rollout.cond == {} and torch.isfinite(rollout.log_probs).all()
    with pytest.raises(ValueError, match="preview='heatmap'"):
        policy.preview(rollout.samples)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"scheduler": DDPMScheduler()}, "clip_sample=False"),
        ({"scheduler": DDPMScheduler(clip_sample=False, variance_type="learned_range")}, "variance_type"),
        ({"sample_shape": None}, "sample_shape"),
        ({"tokenizer": object()}, "both text_encoder and tokenizer"),
        ({"uncond": "learned"}, "uncond"),
        ({"normalizer": torch.nn.Identity()}, "decode"),
    ],
)
def test_pipeline_rejects_bad_components(kwargs, match):
    args = {"denoiser": _AttentionDenoiser(), "scheduler": DDPMScheduler(clip_sample=False), "sample_shape": [5, 4]}
    with pytest.raises(ValueError, match=match):
        DenoiserPipeline(**{**args, **kwargs})


def test_sample_normalizer_round_trip(tmp_path):
    norm = SampleNormalizer.from_stats([[[1.0]], [[2.0]]], [[[0.5]], [[4.0]]])  # [2, 1, 1]: MDM's [263, 1, frames]
    x = torch.randn(3, 2, 1, 7)
    torch.testing.assert_close(norm.decode(x)[:, 1], x[:, 1] * 4.0 + 2.0)
    torch.testing.assert_close(norm.normalize(norm.decode(x)), x)
    norm.save_pretrained(tmp_path)
    assert torch.equal(SampleNormalizer.from_pretrained(tmp_path).std, norm.std)
    with pytest.raises(ValueError, match="std"):
        SampleNormalizer.from_stats([0.0], [0.0])


def test_config_kernel_field_and_canonical_model(tmp_path, monkeypatch):
    from config.base import get_config
    from ddpo_grpo.config_checks import validate
    from ddpo_grpo.policies import canonical_model

    config = get_config()
    config.sample.kernel = "ddim"
    validate(config)
    config.sample.kernel = "euler"
    with pytest.raises(ValueError, match="sample.kernel='euler' is not one of"):
        validate(config)
    monkeypatch.chdir(tmp_path)
    assert canonical_model("models/my_model.py:build") == f"{tmp_path}/models/my_model.py:build"
    assert canonical_model("org/hub-model") == "org/hub-model"


# ----------------------------------------------------------------------------- end to end


@pytest.mark.slow  # the default suite runs a DenoiserPipeline through train.py in tests/test_motion_model.py
def test_train_script_end_to_end(tmp_path):
    """scripts/train.py for 2 epochs on the tiny DenoiserPipeline (pretrained.tiny="denoiser"), a reward file.

    The on-policy check holds and final/ loads.
    """
    reward = tmp_path / "toy_reward.py"
    reward.write_text(
        "def score(samples, prompts, metadata):\n    return (-samples.abs().flatten(1).mean(1)).tolist(), {}\n"
    )
    logdir = tmp_path / "logs"
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
        "--config.pretrained.tiny=denoiser",
        f"--config.logdir={logdir}",
        "--config.run_name=motion",
        "--config.num_epochs=2",
        "--config.sample.num_steps=4",
        "--config.sample.eval_num_steps=4",
        "--config.sample.guidance_scale=2.5",
        "--config.logging.image_freq=1",
        "--config.logging.progress=False",
        "--config.logging.num_images=2",
        f"--config.reward.sources={{'toy': '{reward}:score'}}",
        "--config.reward.fns={'toy': 1.0}",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = logdir / "motion"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1]
    for row in rows:
        assert row["train/logp_mismatch"] <= 1e-4 and math.isfinite(row["reward/mean"])
    manifest = json.loads((run / "final" / FINAL_MANIFEST).read_text())
    assert manifest["kind"] == "lora" and manifest["pipeline_class"] == "DenoiserPipeline"
    final = load_pipeline(str(run / "final"))
    assert isinstance(final, DenoiserPipeline) and any("lora" in n for n, _ in final.denoiser.named_parameters())
