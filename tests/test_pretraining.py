"""The core's pretraining loop (ddpo_grpo/pretraining/) on a tiny MotionWorld recipe (worlds/motion/pretrain.py).

A tiny MDM run through ``python -m worlds.motion pretrain``: checkpoints, bit-exact resume, the resume rules, the
exported DenoiserPipeline and its evaluation (strict judge and physics per test-split task); the loop's
pieces (LR schedule, recipe contract, evaluation leaving the training randomness alone); the word-level
tokenizer; the recipe's text encoding equal to the pipeline's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from ddpo_grpo.checkpoint import list_checkpoints, load_checkpoint
from ddpo_grpo.pretraining import FINAL_EVAL, LOG_FILE, Recipe, Stage, lr_at, start
from ddpo_grpo.pretraining.tokenizer import build_word_tokenizer
from worlds.motion import all_prompts
from worlds.motion.__main__ import main as motion_command
from worlds.motion.pretrain import MDMRecipe, MotionConfig, encode_text, grammar_words

pytestmark = pytest.mark.usefixtures("one_thread")


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]


def _losses(out: Path) -> list[tuple[int, float]]:
    return [(r["global_step"], r["loss"]) for r in _log(out) if "loss" in r]


def test_word_tokenizer_one_token_per_motion_word():
    tok = build_word_tokenizer(grammar_words(), 16)
    for prompt in all_prompts():
        assert len(tok(prompt).input_ids) == len(prompt.split()) + 2, prompt
    words = grammar_words()
    assert len({tok(w).input_ids[1] for w in words}) == len(words)
    assert len(tok("a person dances!").input_ids) > 5  # other text still tokenizes (by characters)
    with pytest.raises(ValueError, match="words must be"):
        build_word_tokenizer(["Walks"], 16)


def test_lr_schedule():
    assert lr_at(0, 100, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert lr_at(9, 100, 1.0, 10, 0.1) == pytest.approx(1.0)
    assert lr_at(100, 100, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert lr_at(55, 100, 1.0, 10, 0.1) == pytest.approx(0.55)  # half way down the cosine


def test_recipe_contract_names_the_missing_method(tmp_path):
    class Bare(Recipe):
        config_class = MotionConfig

        def __init__(self, cfg):
            self.cfg, self.models, self.ema_modules = cfg, {}, ()
            self.stages = [Stage("s", 1, (), 1e-3, warmup=1)]

    with pytest.raises(NotImplementedError, match="make_data"):
        start(Bare, MotionConfig.tiny(), tmp_path, log=lambda s: None)


def test_recipe_encodes_text_as_the_pipeline_does():
    for mode, shape in (("sequence", (2, 16, 16)), ("pooled", (2, 16))):
        recipe = MDMRecipe(MotionConfig.tiny(text_embedding=mode))
        prompts = ["a person jumps twice then waves both hands", "a person turns left"]
        with torch.no_grad():
            ours = encode_text(prompts, recipe.tokenizer, recipe.models["text_encoder"], mode)
            theirs = recipe.pipeline().encode_prompt(prompts)
        assert ours.shape == shape
        assert torch.equal(ours, theirs["text_embeds"]) and (theirs["neg_text_embeds"] == 0).all()


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"frames": 8}, "frames"),
        ({"task_weights": (1.0,)}, "task_weights"),
        ({"width": 18, "heads": 4}, "width"),
        ({"text_embedding": "cls"}, "text_embedding"),
        ({"eval_kernel": "euler"}, "eval_kernel"),
        ({"max_length": 8}, "max_length"),
        ({"cond_dropout": 1.0}, "cond_dropout"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_config_fields_checked(bad, match):
    MotionConfig.tiny().validate()
    with pytest.raises(ValueError, match=match):
        MotionConfig.tiny(**bad).validate()


def test_evaluation_leaves_the_training_trajectory_alone(tmp_path):
    """Evaluating after every step (own RNG) gives the same weights as never evaluating."""
    weights = []
    for i, every in enumerate((1, 0)):
        trainer = start(
            MDMRecipe, MotionConfig.tiny(eval_every=every, final_eval_per_task=0), tmp_path / str(i), log=lambda s: None
        )
        trainer.train()
        weights.append({k: v.clone() for k, v in trainer.recipe.models["denoiser"].state_dict().items()})
    assert sum("eval" in r for r in _log(tmp_path / "0")) == 2 and not any("eval" in r for r in _log(tmp_path / "1"))
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])


def test_tiny_motion_pretraining_resumes_exactly(tmp_path, capsys):
    from ddpo_grpo.denoiser_pipeline import DenoiserPipeline
    from ddpo_grpo.policies import load_pipeline
    from worlds.motion.model import MotionDenoiser, MotionNormalizer

    def pretrain(argv):
        return motion_command(["pretrain", *argv])

    out = tmp_path / "mdm"
    argv = ["--out", str(out), "--tiny", "--steps", "4", "--ckpt_every", "2"]
    pretrain(argv)
    assert [p.name for p in list_checkpoints(out)][-2:] == ["epoch_000002", "epoch_000004"]
    ref = load_checkpoint(out / "checkpoints" / "epoch_000004")
    assert set(ref["tensors"]) == {"text_encoder", "denoiser", "ema_denoiser", "ema_text_encoder"}
    first = _losses(out)
    assert [s for s, _ in first] == [1, 2, 3, 4]
    final_eval = json.loads((out / FINAL_EVAL).read_text())
    assert final_eval["eval/num_samples/simultaneous"] == final_eval["eval/num_samples/sequence"] == 1
    assert {"eval/task_mean/strict", "eval/partial/sequence", "eval/skate/sequence", "eval/physics"} <= set(final_eval)
    assert (out / "samples" / "final.png").is_file()

    # crash after step 2: drop the last checkpoint and the final pipeline, then --resume
    shutil.rmtree(out / "checkpoints" / "epoch_000004")
    shutil.rmtree(out / "final")
    with pytest.raises(FileExistsError):
        pretrain(argv)  # refuses to overwrite a run without --resume
    with pytest.raises(SystemExit, match="saved config"):
        pretrain(argv + ["--resume", "--lr", "0.5"])
    pretrain(argv + ["--resume"])
    assert _losses(out)[4:] == first[2:]  # steps 3 and 4 again, same losses
    again = load_checkpoint(out / "checkpoints" / "epoch_000004")
    for stem, sd in ref["tensors"].items():
        for k, v in sd.items():
            assert torch.equal(v, again["tensors"][stem][k]), (stem, k)

    # a larger --steps extends the finished run; evaluation flags may change on resume
    capsys.readouterr()
    pretrain(argv[:-4] + ["--steps", "5", "--final_eval_per_task", "0", "--eval_guidance", "1.0", "--resume"])
    assert "eval_guidance=1.0 (was 2.5)" in capsys.readouterr().out
    assert list_checkpoints(out)[-1].name == "epoch_000005"

    pipe = load_pipeline(str(out / "final"))
    assert isinstance(pipe, DenoiserPipeline) and isinstance(pipe.denoiser, MotionDenoiser)
    assert isinstance(pipe.normalizer, MotionNormalizer) and list(pipe.config.sample_shape) == [16, 263]
    motion = pipe(
        "a person jumps twice then waves both hands",
        num_inference_steps=2,
        guidance_scale=2.5,
        generator=torch.Generator().manual_seed(0),
    ).samples
    assert motion.shape == (1, 16, 263) and torch.isfinite(motion).all()
