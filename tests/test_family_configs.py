"""The model-family configs (config/flux.py, qwen_image.py, wan.py, sdxl.py, zimage.py): every experiment validates for
1 and 8 processes, the cited recipe values are what the files set, and each tiny variant names a tiny builder whose
pipeline class has an adapter."""

import importlib

import pytest

from ddpo_grpo.config_checks import validate
from tests.test_configs import experiments

FAMILY_CONFIGS = {
    "config.flux": {"pickscore", "kontext", "tiny", "tiny_kontext"},
    "config.qwen_image": {"pickscore", "edit", "edit_plus", "tiny", "tiny_edit", "tiny_edit_plus"},
    "config.wan": {"t2v", "t2v_a14b", "i2v", "tiny", "tiny_i2v"},
    "config.sdxl": {"aesthetic", "tiny"},
    "config.zimage": {"pickscore", "tiny"},
}
ALL = [(m, n) for m in FAMILY_CONFIGS for n in sorted(experiments(m)[1])]


def load(module_name, name, monkeypatch, world_size=1):
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    return importlib.import_module(module_name).get_config(name)


def test_expected_experiments_exist():
    for module_name, expected in FAMILY_CONFIGS.items():
        assert set(experiments(module_name)[1]) == expected, module_name


@pytest.mark.parametrize("world_size", [1, 8])
@pytest.mark.parametrize("module_name,name", [(m, n) for m, n in ALL if not n.startswith("tiny")])
def test_recipes_validate(module_name, name, world_size, monkeypatch):
    config = load(module_name, name, monkeypatch, world_size)
    totals = validate(config, num_processes=world_size)
    assert totals["num_processes"] == world_size


@pytest.mark.parametrize("module_name,name", [(m, n) for m, n in ALL if n.startswith("tiny")])
def test_tiny_variants_name_a_registered_family(module_name, name, monkeypatch):
    from ddpo_grpo.policies import ADAPTERS
    from ddpo_grpo.tiny import BUILDERS, FAMILIES

    config = load(module_name, name, monkeypatch)
    validate(config, num_processes=1)
    builder = BUILDERS[config.pretrained.tiny]
    family = next(f for f, b in FAMILIES.items() if b is builder)
    assert family in ADAPTERS and config.reward.fns.to_dict() == {"redness": 1.0}
    assert config.sample.resolution == 32 and config.sample.batch_size == 2


def test_recipe_values(monkeypatch):
    flux = load("config.flux", "pickscore", monkeypatch)
    assert flux.pretrained.model == "black-forest-labs/FLUX.1-dev"
    assert (flux.sample.num_steps, flux.sample.eval_num_steps, flux.sample.noise_level) == (6, 28, 0.9)
    assert (flux.sample.distilled_guidance, flux.sample.guidance_scale, flux.sample.group_size) == (3.5, 1.0, 24)
    assert validate(flux)["images_per_epoch"] == 1152 and validate(flux)["optimizer_steps_per_epoch"] == 2
    kontext = load("config.flux", "kontext", monkeypatch)
    assert (kontext.sample.distilled_guidance, kontext.sample.group_size) == (2.5, 21)
    qwen = load("config.qwen_image", "pickscore", monkeypatch)
    assert (qwen.sample.guidance_scale, qwen.sample.num_steps, qwen.sample.noise_level) == (4.0, 10, 1.2)
    assert (qwen.sample.sde_window_size, tuple(qwen.sample.sde_window_range)) == (2, (0, 3))
    assert validate(qwen)["images_per_epoch"] == 512
    edit_plus = load("config.qwen_image", "edit_plus", monkeypatch)
    assert edit_plus.pretrained.model == "Qwen/Qwen-Image-Edit-2509" and edit_plus.sample.sde_window_size == 4
    wan = load("config.wan", "t2v", monkeypatch)
    assert (wan.sample.num_frames, wan.sample.num_steps, wan.sample.guidance_scale) == (33, 20, 4.5)
    assert (wan.train.beta, wan.train.learning_rate) == (0.004, 1e-4)
    assert wan.train.clip_range == pytest.approx(1e-3 * 16 * 9 * 30 * 30)
    assert load("config.wan", "i2v", monkeypatch).pretrained.model == "Wan-AI/Wan2.2-I2V-A14B-Diffusers"
    sdxl = load("config.sdxl", "aesthetic", monkeypatch)
    assert (sdxl.sample.kernel, sdxl.sample.noise_level, sdxl.sample.num_steps, sdxl.sample.resolution) == (
        "ddim",
        1.0,
        50,
        1024,
    )
    zimage = load("config.zimage", "pickscore", monkeypatch)
    assert zimage.pretrained.model == "Tongyi-MAI/Z-Image-Turbo" and zimage.sample.guidance_scale == 1.0
