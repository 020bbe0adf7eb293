"""ShapesWorld pretraining (worlds/shapes/pretrain/, ``python -m worlds.shapes pretrain``) at toy sizes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ddpo_grpo.checkpoint import list_checkpoints, load_checkpoint
from ddpo_grpo.pretraining import FINAL_EVAL, LOG_FILE
from ddpo_grpo.weights import EMA
from worlds.shapes.grammar import all_prompts
from worlds.shapes.pretrain import start
from worlds.shapes.pretrain.data import near_miss, scene_specs
from worlds.shapes.pretrain.sd import SDConfig, SDRecipe, encode_prompts
from worlds.shapes.pretrain.sd3 import SD3Config, SD3Recipe, set_null_token_processor, with_null_token
from worlds.shapes.pretrain.tokenizer import build_word_tokenizer, grammar_words

REPO = Path(__file__).resolve().parents[1]


def _script():
    """``python -m worlds.shapes pretrain`` as a ``main(argv)``."""
    from worlds.shapes.__main__ import main

    return SimpleNamespace(main=lambda argv: main(["pretrain", *argv]))


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]


def test_word_tokenizer_one_token_per_word():
    tok = build_word_tokenizer(16)
    for prompt in all_prompts():
        ids = tok(prompt).input_ids
        assert len(ids) == len(prompt.split()) + 2, prompt
    words = grammar_words()
    assert len({tok(w).input_ids[1] for w in words}) == len(words)
    assert len(tok("an unknown word!").input_ids) > 4  # other text still tokenizes (by characters)


def test_null_token_bias_equals_zero_tokens():
    """One zero token + log N attention bias == N zero "T5" tokens, as the pipeline feeds them."""
    from diffusers import SD3Transformer2DModel

    cfg = SD3Config.tiny(tf_layers=2)
    tf = SD3Transformer2DModel.from_config(SD3Recipe(cfg).models["transformer"].config).eval()  # stock processors
    torch.manual_seed(0)
    z = torch.randn(2, 4, cfg.latent_side, cfg.latent_side)
    embeds = torch.randn(2, cfg.max_length, 2 * cfg.text_hidden)
    pooled = torch.randn(2, 2 * cfg.text_proj)
    t = torch.tensor([300.0, 800.0])
    n = 7
    with torch.no_grad():
        zeros = torch.zeros(2, n, embeds.shape[-1])
        full = tf(
            hidden_states=z,
            timestep=t,
            encoder_hidden_states=torch.cat([embeds, zeros], 1),
            pooled_projections=pooled,
            return_dict=False,
        )[0]
        set_null_token_processor(tf)
        ctx, mask = with_null_token(embeds, (cfg.latent_side // 2) ** 2, torch.full((2,), float(n)))
        short = tf(
            hidden_states=z,
            timestep=t,
            encoder_hidden_states=ctx,
            pooled_projections=pooled,
            joint_attention_kwargs={"attention_mask": mask},
            return_dict=False,
        )[0]
    torch.testing.assert_close(short, full, rtol=1e-4, atol=1e-5)


def _fingerprint(modules: dict) -> dict:
    """Per module: [sum, sum of |.|] of its parameters (or EMA tensors), in float64, in parameter order."""
    out = {}
    for name, m in modules.items():
        tensors = list(m.values()) if isinstance(m, dict) else [p.detach() for p in m.parameters()]
        out[name] = [sum(float(t.double().sum()) for t in tensors), sum(float(t.double().abs().sum()) for t in tensors)]
    return out


#: measured with the code of commit ee0f2bd (ddpo_grpo/shapes/pretrain.py and pretrain_sd.py, before the
#: loop was shared) on the tiny configs below, one thread, no evaluation: the SD3 run is
#: tiny_config(caption_noise=0.5) (2 VAE + 3 flow steps), the SD run tiny_config() (3 steps)
OLD_FINGERPRINTS = {
    "sd3": {
        "models": {
            "vae": [247.7202254309086, 1485.1777277736983],
            "text_encoder": [94.01543656646055, 688.6539701251113],
            "text_encoder_2": [60.26759603188417, 692.3657777570118],
            "transformer": [36.037234303050354, 1175.2402179722594],
        },
        "ema": {
            "transformer": [36.00532689446845, 1175.2382260466184],
            "text_encoder": [94.01399137245023, 688.6447120397104],
            "text_encoder_2": [60.26668427283404, 692.3549521015084],
        },
        "scaling_factor": 0.9016724824905396,
    },
    "sd": {
        "models": {
            "text_encoder": [303.5464472072074, 4457.395569841337],
            "unet": [523.5279746509877, 5425.0718575954415],
        },
        "ema": {"unet": [523.6246795400957, 5424.966330606686], "text_encoder": [303.5450592263339, 4457.396743762089]},
        "scaling_factor": 0.4525871617644441,
    },
}


@pytest.mark.parametrize("arch", ["sd3", "sd"])
def test_trajectory_matches_commit_ee0f2bd_with_evaluations(arch, tmp_path):
    """The shared loop reproduces the old pretrainers' weights and EMAs exactly.

    The shipped models are documented as reproducible; this run also evaluates after every step of the
    last stage, which the recorded one did not (evaluation must not touch the training randomness).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if arch == "sd3":
            recipe, cfg = SD3Recipe, SD3Config.tiny(caption_noise=0.5, eval_every=1, final_eval_per_task=0)
        else:
            recipe, cfg = SDRecipe, SDConfig.tiny(eval_every=1, final_eval_per_task=0)
        trainer = start(recipe, cfg, tmp_path, log=lambda s: None)
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    assert sum("eval" in r for r in _log(tmp_path)) == 2  # after steps 1 and 2 of the last stage
    old = OLD_FINGERPRINTS[arch]
    models = {k: trainer.recipe.models[k] for k in old["models"]}
    got = {
        "models": _fingerprint(models),
        "ema": _fingerprint({k: e.shadow for k, e in trainer.ema.items()}),
        "scaling_factor": trainer.recipe.latent_stats["scaling_factor"],
    }
    # equal up to the float rounding of another CPU's kernels (the recording machine matched it bit for bit;
    # another measured 4e-5 relative on the VAE's norm), far below what a changed recipe or random stream moves
    assert _flat(got).keys() == _flat(old).keys()
    assert _flat(got) == pytest.approx(_flat(old), rel=2e-4)


def _flat(tree, prefix="") -> dict:
    """{"models/vae/0": 247.7, ...}: a nested dict of numbers and lists as one flat dict."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat(sub, f"{prefix}{key}/").items()}
    if isinstance(tree, list):
        return {k: v for i, sub in enumerate(tree) for k, v in _flat(sub, f"{prefix}{i}/").items()}
    return {prefix.rstrip("/"): tree}


def test_ema_warmup_schedule():
    p = {"w": torch.nn.Parameter(torch.zeros(3))}
    ema = EMA(p, 0.9, warmup=True)
    assert [ema.decay_at(n) for n in (0, 10, 1000)] == [0.1, 0.55, 0.9]
    p["w"].data.fill_(1.0)
    ema.update(0)
    torch.testing.assert_close(ema.shadow["w"], torch.full((3,), 0.9))
    with pytest.raises(ValueError, match="update"):
        ema.update()
    plain = EMA(p, 0.9)
    plain.update()  # the RL trainer's constant decay: 0.9·1 + 0.1·1
    assert plain.decay_at(0) == 0.9 and torch.equal(plain.shadow["w"], torch.ones(3))


def test_pretrain_checkpoint_resume_and_pipeline(tmp_path, capsys):
    from diffusers import StableDiffusion3Pipeline

    script = _script()
    out = tmp_path / "run"
    # 2 VAE steps + 3 flow steps, a checkpoint every 2 global steps (2, 4) and at the end (5)
    argv = ["--out", str(out), "--tiny", "--vae_steps", "2", "--flow_steps", "3", "--ckpt_every", "2"]
    script.main(argv)
    names = [p.name for p in list_checkpoints(out)]
    assert names[-1] == "epoch_000005" and "epoch_000004" in names
    ref = load_checkpoint(out / "checkpoints" / "epoch_000005")
    assert ref["state"]["global_step"] == 5 and ref["state"]["latent_stats"]["scaling_factor"] > 0
    final_eval = json.loads((out / FINAL_EVAL).read_text())
    assert final_eval["eval"] == "final" and final_eval["eval/num_samples"] == 4  # one per task
    assert {"eval/strict/position", "eval/task_mean/strict", "eval/partial"} <= set(final_eval)

    # simulate a crash after step 4: drop the last checkpoint and the final pipeline, then --resume
    shutil.rmtree(out / "checkpoints" / "epoch_000005")
    shutil.rmtree(out / "final")
    with pytest.raises(FileExistsError):
        script.main(argv)  # refuses to overwrite a run without --resume
    with pytest.raises(SystemExit):
        script.main(argv + ["--resume", "--lr", "1.0"])  # a resumed run keeps its config
    script.main(argv + ["--resume"])
    again = load_checkpoint(out / "checkpoints" / "epoch_000005")
    assert again["state"]["global_step"] == 5
    for stem, sd in ref["tensors"].items():  # bit-exact continuation
        for k, v in sd.items():
            assert torch.equal(v, again["tensors"][stem][k]), (stem, k)
    log = _log(out)
    assert any(r.get("eval") == "final" for r in log) and any("flow_step" in r and "loss" in r for r in log)

    # a larger --flow_steps extends a finished run (evaluation flags and caption_noise may change too),
    # also from a checkpoint written before caption_noise existed (its config lacks the field)
    state_file = out / "checkpoints" / "epoch_000005" / "state.json"
    state = json.loads(state_file.read_text())
    del state["config"]["caption_noise"]
    state_file.write_text(json.dumps(state))
    capsys.readouterr()
    script.main(argv[:-4] + ["--flow_steps", "4", "--final_eval_per_task", "0", "--caption_noise", "0.5", "--resume"])
    assert "caption_noise=0.5 (was 0.0)" in capsys.readouterr().out  # the field's default, not "unset"
    assert list_checkpoints(out)[-1].name == "epoch_000006"
    assert load_checkpoint(out / "checkpoints" / "epoch_000006")["state"]["config"]["caption_noise"] == 0.5

    pipe = StableDiffusion3Pipeline.from_pretrained(out / "final", text_encoder_3=None, tokenizer_3=None)
    assert pipe.vae.config.scaling_factor == pytest.approx(ref["state"]["latent_stats"]["scaling_factor"])
    img = pipe(
        "a red circle to the left of a blue square",
        num_inference_steps=2,
        guidance_scale=4.5,
        output_type="np",
        generator=torch.Generator().manual_seed(0),
    ).images
    assert img.shape == (1, 64, 64, 3) and np.isfinite(img).all()


def test_pretrain_sd_resume_and_pipeline(tmp_path):
    """--arch sd: a StableDiffusionPipeline on the shipped SD3 model's VAE/tokenizer/text encoder."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline

    script = _script()
    out = tmp_path / "sd"
    # 4 steps, a checkpoint every 2 (2, 4); log every step so the losses can be compared
    argv = ["--arch", "sd", "--out", str(out), "--tiny", "--steps", "4", "--ckpt_every", "2"]
    script.main(argv)
    ref = load_checkpoint(out / "checkpoints" / "epoch_000004")

    def losses():
        return [(r["global_step"], r["loss"]) for r in _log(out) if "loss" in r]

    first = losses()
    assert [s for s, _ in first] == [1, 2, 3, 4]

    # crash after step 2: drop the last checkpoint and the final pipeline, then --resume
    shutil.rmtree(out / "checkpoints" / "epoch_000004")
    shutil.rmtree(out / "final")
    with pytest.raises(SystemExit, match="another architecture"):
        script.main(["--out", str(out), "--tiny", "--resume"])  # an sd run cannot be resumed as --arch sd3
    script.main(argv + ["--resume"])
    assert losses()[4:] == first[2:]  # steps 3 and 4 again, same losses
    again = load_checkpoint(out / "checkpoints" / "epoch_000004")
    for stem, sd in ref["tensors"].items():  # bit-exact continuation
        for k, v in sd.items():
            assert torch.equal(v, again["tensors"][stem][k]), (stem, k)
    assert json.loads((out / FINAL_EVAL).read_text())["eval"] == "final"
    # continue one more step on noisy captions (caption_noise may change on --resume)
    script.main(argv[:-4] + ["--steps", "5", "--caption_noise", "0.5", "--final_eval_per_task", "0", "--resume"])
    assert load_checkpoint(out / "checkpoints" / "epoch_000005")["state"]["config"]["caption_noise"] == 0.5

    pipe = StableDiffusionPipeline.from_pretrained(out / "final")
    stats = ref["state"]["latent_stats"]
    assert pipe.vae.config.scaling_factor == pytest.approx(stats["scaling_factor"])
    assert pipe.vae.config.shift_factor is None  # the SD pipeline decodes latents / scaling_factor, no shift
    assert isinstance(pipe.scheduler, DDIMScheduler) and pipe.scheduler.config.prediction_type == "epsilon"
    assert pipe.scheduler.config.clip_sample is False
    # the frozen VAE is the base model's, weight for weight
    for k, v in ref["tensors"]["vae"].items():
        assert torch.equal(v, pipe.vae.state_dict()[k]), k
    img = pipe(
        "two red circles",
        num_inference_steps=2,
        guidance_scale=4.5,
        output_type="np",
        generator=torch.Generator().manual_seed(0),
    ).images
    assert img.shape == (1, 64, 64, 3) and np.isfinite(img).all()


def test_sd_text_encoder_keeps_sd3_penultimate_features():
    """The SD text encoder's last_hidden_state = final LayerNorm of the SD3 encoder's penultimate states."""
    from transformers import CLIPTextModelWithProjection

    cfg = SDConfig.tiny()
    recipe = SDRecipe(cfg)
    src = CLIPTextModelWithProjection.from_pretrained(cfg.base, subfolder="text_encoder")
    prompts = ["a red circle to the left of a blue square", ""]
    ids = recipe.tokenizer(prompts, padding="max_length", max_length=16, return_tensors="pt").input_ids
    with torch.no_grad():
        h = src(ids, output_hidden_states=True).hidden_states[-2]  # what the SD3 transformer was trained on
        torch.testing.assert_close(
            encode_prompts(prompts, recipe.tokenizer, recipe.models["text_encoder"]), src.text_model.final_layer_norm(h)
        )


def test_near_miss_breaks_the_caption_with_its_own_objects():
    """Every near miss is a valid scene that fails its caption, drawn from the caption's colour–shape pairs."""
    from worlds.shapes.grammar import constraints_of, load_split
    from worlds.shapes.world import Constraints, sample_scene, scene_satisfies

    rng = np.random.default_rng(0)
    seen = set()
    for row in load_split("train"):
        spec = near_miss(row, rng)
        scene = sample_scene(spec, rng)
        caption = constraints_of(row)
        assert not scene_satisfies(scene, caption), (row["prompt"], spec)
        assert {(o.color, o.shape) for o in scene} <= {o.pair for o in caption.objects}, row["prompt"]
        got = Constraints.from_row(spec)
        seen.add((row["task"], got.task, got.num_objects if got.relation is None else got.relation == row["relation"]))
    assert {
        ("single_object", "counting", 2),
        ("counting", "single_object", 1),
        ("counting", "counting", 3),
        ("two_object", "single_object", 1),
        ("two_object", "counting", 2),
        ("position", "position", False),
    } <= seen


def test_scene_specs_rate_and_clean_default():
    rows = [{"task": "counting", "objects": [{"color": "red", "shape": "circle", "count": 3}], "relation": None}] * 4000
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    assert scene_specs(rows, rng, 0.0) == rows and rng.bit_generator.state == before  # draws nothing
    specs = scene_specs(rows, rng, 0.3)
    missed = sum(s is not r for s, r in zip(specs, rows)) / len(rows)
    assert 0.27 < missed < 0.33  # binomial SE 0.007


@pytest.mark.parametrize("config", [SD3Config, SDConfig])
@pytest.mark.parametrize(
    "bad, match",
    [
        ({"caption_noise": 1.0}, "caption_noise"),
        ({"caption_noise": -0.1}, "caption_noise"),
        ({"task_weights": (1.0, 1.0)}, "task_weights"),
        ({"batch_size": 5, "noise_per_image": 2}, "noise_per_image"),
        ({"cond_dropout": 1.0}, "cond_dropout"),
        ({"log_every": 0}, "log_every"),
    ],
)
def test_config_data_fields_checked(config, bad, match):
    config.tiny().validate()
    with pytest.raises(ValueError, match=match):
        config.tiny(**bad).validate()
