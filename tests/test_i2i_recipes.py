"""The image-to-image recipes: config/restore.py, config/edit.py, and the pretraining recipe on the core loop."""

import importlib

import pytest
import torch

from ddpo_grpo.config_checks import validate
from ddpo_grpo.schedules import check, loss_weights
from worlds.shapes_i2i import SHAPES_IP2P


@pytest.mark.parametrize(
    ("module", "name"),
    [("config.restore", "quick"), ("config.restore", "long"), ("config.edit", "quick_grpo")],
)
def test_staged_recipes_validate(module, name, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    config = importlib.import_module(module).get_config(name)
    totals = validate(config)
    assert totals["optimizer_steps_per_epoch"] == 1 and config.pretrained.model == SHAPES_IP2P
    assert check(config) == [] and config.sample.image_guidance_scale >= 1 and config.train.objective == "grpo"
    assert loss_weights(0, config)[1] == 0.0 and loss_weights(config.num_epochs - 1, config)[1] == 1.0
    world = module.split(".")[1]
    assert config.prompts.source == f"shapes_{world}_train" and config.eval.prompts == f"shapes_{world}_test"
    assert (config.train.degradation == "row") == (world == "restore")
    with pytest.raises(ValueError, match="choose one of quick"):
        importlib.import_module(module).get_config("tiny")


@pytest.mark.parametrize("name", ["quick", "long"])
def test_edit_recipes_are_nft_on_the_graded_score(name, monkeypatch):
    """DiffusionNFT on deterministic rollouts, 16 updates per epoch, no supervised term, the "graded" edit score."""
    from config import edit

    monkeypatch.setenv("WORLD_SIZE", "1")
    config = edit.get_config(name)
    totals = validate(config)
    assert totals["optimizer_steps_per_epoch"] == 16 and config.train.objective == "nft"
    assert (
        config.sample.noise_level == 0.0 and config.sample.sde_window_size == 0 and not config.sample.share_group_noise
    )
    assert all(loss_weights(e, config) == (0.0, 1.0) for e in range(config.num_epochs)) and check(config) == []
    assert config.reward.kwargs["edit"]["score"] == "graded" and config.eval.reward_kwargs["score"] == "success"
    assert (config.prompts.source, config.eval.prompts) == ("shapes_edit_train", "shapes_edit_test")


def test_restoration_baselines(monkeypatch):
    """quick_grpo: no supervised or consistency term; quick_supervised: supervised-only epochs (λ_pg = 0 throughout)."""
    from config import restore

    monkeypatch.setenv("WORLD_SIZE", "1")
    grpo, sup = restore.get_config("quick_grpo"), restore.get_config("quick_supervised")
    validate(grpo), validate(sup)
    assert all(loss_weights(e, grpo) == (0.0, 1.0) for e in range(grpo.num_epochs))
    assert grpo.train.consistency_weight == 0.0 and grpo.num_epochs == restore.quick().num_epochs
    assert all(loss_weights(e, sup)[1] == 0.0 for e in range(sup.num_epochs)) and sup.eval.freq == sup.num_epochs


def test_pretraining_recipe_runs_on_the_core_loop(tmp_path):
    """Two steps of the tiny recipe.

    The widened UNet starts as the base SD UNet (zero source kernels); the export loads back as an IP2P policy.
    """
    from ddpo_grpo.policies import build_policy, load_pipeline
    from ddpo_grpo.pretraining import start
    from worlds.shapes_i2i.pretrain import IP2PConfig, IP2PRecipe

    cfg = IP2PConfig.tiny(final_eval_per_task=0)
    trainer = start(IP2PRecipe, cfg, tmp_path, log=lambda s: None)
    unet = trainer.recipe.models["unet"]
    assert unet.config.in_channels == 8 and unet.conv_in.weight[:, 4:].abs().max() == 0
    final = trainer.train()
    policy = build_policy(load_pipeline(str(final)), resolution=64)
    assert type(policy).__name__ == "IP2PPolicy" and len(policy.pipeline.tokenizer) == 216
    assert torch.isfinite(policy.denoiser.conv_in.weight).all()


def test_shipped_model_loads_small_and_on_policy():
    """The shipped InstructPix2Pix model: ≤ 15 MB, an IP2P policy, exact re-scoring on shipped rows."""
    from pathlib import Path

    from ddpo_grpo.policies import build_policy, load_pipeline
    from ddpo_grpo.rollout import sample_rollout, transition_inputs
    from worlds.shapes_i2i.data import edit_test, restore_test

    size = sum(p.stat().st_size for p in Path(SHAPES_IP2P).rglob("*") if p.is_file())
    assert size <= 15e6
    policy = build_policy(load_pipeline(SHAPES_IP2P), resolution=64, image_guidance_scale=2.5)
    rows = [restore_test()[0], edit_test()[0]]
    rollout = sample_rollout(
        policy,
        policy.denoiser,
        rows,
        seeds=[0, 1],
        num_steps=4,
        guidance_scale=4.5,
        noise_level=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    for k in range(rollout.train_steps.shape[1]):
        x, t, x_next, args, levels, j, _ = transition_inputs(rollout, k)
        step = policy.step(
            policy.predict(policy.denoiser, x, t, rollout.cond, 4.5), x, args, levels, prev_sample=x_next
        )
        assert (step.log_prob - rollout.log_probs[torch.arange(2), j]).abs().max() <= 1e-5
