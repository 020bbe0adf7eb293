"""Named experiment configs: they load, validate for any process count, and scale per process.

No model is loaded; configs are only built and checked with ddpo_grpo.config_checks.validate.
"""

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

from ddpo_grpo.config_checks import ConfigError, trained_steps_per_sample, validate

REPO = Path(__file__).resolve().parents[1]
HELPERS = {"get_config", "num_processes"}
EXPECTED = {
    "config.sd": {"compressibility", "incompressibility", "aesthetic"},
    "config.sd3": {"pickscore", "pickscore_fast"},
    "config.quickstart": {"quickstart", "grpo", "tiny"},
    "config.shapes": {"sd3_quick", "sd3_nft", "sd_quick", "sd3_long", "sd_long"},
}
# Global sizes the per-process numbers are derived from (quickstart is a fixed 1-process config).
IMAGES_PER_EPOCH = {"config.sd": 256, "config.sd3": 1152}
SHAPES_SIZES = {
    "sd3_quick": (256, 1),
    "sd3_nft": (256, 8),
    "sd_nft": (256, 8),
    "sd_quick": (256, 1),
    "sd3_long": (512, 1),
    "sd_long": (512, 1),
}
OPTIMIZER_STEPS = {
    ("config.sd", "compressibility"): 4,
    ("config.sd", "incompressibility"): 4,
    ("config.sd", "aesthetic"): 2,
    ("config.sd3", "pickscore"): 2,
    ("config.sd3", "pickscore_fast"): 2,
}


def experiments(module_name):
    """Every experiment function defined in a config module (public, no required arguments)."""
    mod = importlib.import_module(module_name)
    names = []
    for name, fn in vars(mod).items():
        if not inspect.isfunction(fn) or fn.__module__ != mod.__name__ or name.startswith("_") or name in HELPERS:
            continue
        if any(p.default is p.empty for p in inspect.signature(fn).parameters.values()):
            continue  # a helper taking arguments
        names.append(name)
    return mod, names


ALL = [(m, n) for m in EXPECTED for n in sorted(experiments(m)[1])]


def load(module_name, name, monkeypatch, world_size):
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    return importlib.import_module(module_name).get_config(name)


def test_expected_experiments_exist():
    for module_name, expected in EXPECTED.items():
        assert expected <= set(experiments(module_name)[1]), module_name


@pytest.mark.parametrize("world_size", [1, 8])
@pytest.mark.parametrize("module_name,name", ALL)
def test_config_validates(module_name, name, world_size, monkeypatch):
    config = load(module_name, name, monkeypatch, world_size)
    totals = validate(config, num_processes=world_size)
    assert totals["num_processes"] == world_size
    if module_name in IMAGES_PER_EPOCH:
        # global sizes do not depend on the process count
        assert totals["images_per_epoch"] == IMAGES_PER_EPOCH[module_name]
        assert totals["optimizer_steps_per_epoch"] == OPTIMIZER_STEPS[module_name, name]


@pytest.mark.parametrize("module_name,name", [(m, n) for m, n in ALL if m in IMAGES_PER_EPOCH])
def test_batches_scale_inversely_with_processes(module_name, name, monkeypatch):
    one = load(module_name, name, monkeypatch, 1)
    eight = load(module_name, name, monkeypatch, 8)
    assert one.sample.batch_size == eight.sample.batch_size
    assert one.sample.num_batches_per_epoch == 8 * eight.sample.num_batches_per_epoch
    assert one.train.gradient_accumulation_steps == 8 * eight.train.gradient_accumulation_steps


def test_no_world_size_means_one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    config = importlib.import_module("config.sd3").get_config("pickscore")
    assert config.sample.num_batches_per_epoch == 1152 // 9


@pytest.mark.parametrize("module_name,name", [("config.sd3", "pickscore"), ("config.sd", "compressibility")])
@pytest.mark.parametrize("world_size", ["5", "3"])
def test_indivisible_world_size_raises(module_name, name, world_size, monkeypatch):
    with pytest.raises(ValueError, match="sample.num_batches_per_epoch"):
        load(module_name, name, monkeypatch, world_size)


@pytest.mark.parametrize("world_size", ["0", "-2", "eight"])
def test_bad_world_size_raises(world_size, monkeypatch):
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        load("config.sd3", "pickscore", monkeypatch, world_size)


def test_optimizer_batch_indivisible_raises(monkeypatch):
    # 256 images / (64 × 8) does not even make one sampling batch per process
    with pytest.raises(ValueError, match="sample.num_batches_per_epoch"):
        load("config.sd", "aesthetic", monkeypatch, 64)
    # 32 processes: 256 / (32 × 8) = 1 batch per process, but 64 images per optimizer step
    # cannot be split into minibatches of 32 × 4 = 128
    with pytest.raises(ValueError, match="train.gradient_accumulation_steps"):
        load("config.sd", "compressibility", monkeypatch, 32)


def test_recipe_values(monkeypatch):
    sd3 = load("config.sd3", "pickscore", monkeypatch, 1)
    assert sd3.pretrained.model == "stabilityai/stable-diffusion-3.5-medium"
    assert (sd3.sample.num_steps, sd3.sample.eval_num_steps, sd3.sample.group_size) == (10, 40, 24)
    assert (sd3.train.lora_rank, sd3.train.lora_alpha, sd3.train.beta) == (32, 64.0, 0.01)
    assert sd3.train.kl_estimator == "flow_grpo"  # so that β is Flow-GRPO's β
    assert trained_steps_per_sample(sd3) == 9
    fast = load("config.sd3", "pickscore_fast", monkeypatch, 1)
    assert fast.sample.sde_window_size in (2, 3)
    lo, hi = fast.sample.sde_window_range
    assert hi + fast.sample.sde_window_size <= fast.sample.num_steps // 2  # early half of the schedule
    assert trained_steps_per_sample(fast) == fast.sample.sde_window_size < trained_steps_per_sample(sd3)
    sd = load("config.sd", "compressibility", monkeypatch, 1)
    assert (sd.sample.num_steps, sd.sample.kernel, sd.sample.noise_level, sd.sample.guidance_scale) == (
        50,
        "ddim",
        1.0,
        5.0,
    )
    # DDPO's 1e-4 per latent dimension, as a per-sample clip over the 4×64×64 latent of 512 px
    assert (sd.train.adv_mode, sd.train.clip_range, sd.train.timestep_fraction) == ("buffer", 1e-4 * 16384, 1.0)
    incompressibility = load("config.sd", "incompressibility", monkeypatch, 1)
    assert incompressibility.reward.fns.to_dict() == {"jpeg_incompressibility": 1.0}
    assert load("config.sd", "aesthetic", monkeypatch, 1).reward.fns.to_dict() == {"aesthetic": 1.0}


# ---- validate catches bad edits, naming the field ------------------------------------------------


@pytest.fixture
def flow_grpo(monkeypatch):
    """The Flow-GRPO recipe (1152 images per epoch in groups of 24), edited by the tests below."""
    return load("config.sd3", "pickscore", monkeypatch, 1)


def _rejects(config, field):
    with pytest.raises(ConfigError) as info:
        validate(config, num_processes=1)
    assert field in str(info.value), str(info.value)


def test_validate_rejects_group_of_one(flow_grpo):
    flow_grpo.sample.group_size = 1
    _rejects(flow_grpo, "sample.group_size")


def test_validate_rejects_images_not_divisible_by_group(flow_grpo):
    flow_grpo.sample.group_size = 25  # 1152 images are not whole groups of 25
    _rejects(flow_grpo, "sample.group_size")


def test_validate_rejects_train_batch_not_dividing_samples(flow_grpo):
    flow_grpo.train.batch_size = 7  # 1152 samples per process / 7
    _rejects(flow_grpo, "train.batch_size")


def test_validate_rejects_accumulation_not_dividing_minibatches(flow_grpo):
    flow_grpo.train.gradient_accumulation_steps = 5  # 128 minibatches / 5
    _rejects(flow_grpo, "train.gradient_accumulation_steps")


def test_validate_rejects_window_outside_schedule(monkeypatch):
    fast = load("config.sd3", "pickscore_fast", monkeypatch, 1)
    validate(fast)
    fast.sample.sde_window_range = (0, fast.sample.num_steps - fast.sample.sde_window_size + 1)
    _rejects(fast, "sample.sde_window_range")
    fast.sample.sde_window_range = (0, 2)
    fast.sample.sde_window_size = fast.sample.num_steps + 1
    _rejects(fast, "sample.sde_window_size")


def test_validate_rejects_unbalanced_eval_without_group(flow_grpo):
    flow_grpo.eval.per_group = 8
    _rejects(flow_grpo, "eval.group_by")


def test_validate_rejects_unknown_kernels(flow_grpo):
    flow_grpo.sample.kernel = "euler"
    _rejects(flow_grpo, "sample.kernel")
    flow_grpo.sample.kernel = ""
    flow_grpo.sample.sde_type = "ddpm"  # the deprecated name took flow kernels only
    _rejects(flow_grpo, "sample.sde_type")


@pytest.mark.parametrize("level", [-0.1, 0.0, 0.7, 1.0, 1.2, float("nan")])
def test_noise_level_range_is_one_rule(flow_grpo, level):
    """``sample.noise_level``'s range is written once (``policies.settings.noise_level_in_range``): validate refuses
    exactly the values it refuses, for every kernel the config names; the kernels whose level is a fraction are
    the registry's BOUNDED_NOISE."""
    from ddpo_grpo.kernels import BOUNDED_NOISE, KERNELS
    from ddpo_grpo.policies.settings import noise_level_in_range

    for kernel in KERNELS:
        flow_grpo.sample.kernel, flow_grpo.sample.noise_level = kernel, level
        if noise_level_in_range(level, kernel):
            validate(flow_grpo)
        else:
            _rejects(flow_grpo, "sample.noise_level")
        expected = level >= 0 and (kernel not in BOUNDED_NOISE or level <= 1)
        assert noise_level_in_range(level, kernel) == expected


# ---- the CLI's path syntax -----------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:the load_module:DeprecationWarning")  # inside ml_collections
@pytest.mark.parametrize("world_size", [1, 8])
def test_config_flags_path_syntax(world_size, monkeypatch):
    """``--config config/sd3.py:pickscore --config.x=y``, parsed exactly as scripts/train.py does."""
    from absl import flags
    from ml_collections import config_flags

    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    argv = ["train.py", f"--config={REPO / 'config' / 'sd3.py'}:pickscore", "--config.train.learning_rate=1e-4"]
    values = flags.FlagValues()
    # config_flags registers the --config.a.b override flags from the argv it is given
    config_flags.DEFINE_config_file("config", None, "experiment", flag_values=values, sys_argv=argv)
    values(argv)
    config = values.config
    assert config.reward.fns.to_dict() == {"pickscore": 1.0}
    assert config.train.learning_rate == 1e-4
    assert config.sample.num_batches_per_epoch == 128 // world_size
    validate(config, num_processes=world_size)

    argv = ["train.py", f"--config={REPO / 'config' / 'sd.py'}:aesthetic"]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "experiment", flag_values=values, sys_argv=argv)
    values(argv)
    assert values.config.reward.fns.to_dict() == {"aesthetic": 1.0}

    # a field whose default is None (sample.sde_window_range) is still overridable from the command line
    argv = [
        "train.py",
        f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
        "--config.sample.sde_window_size=2",
        "--config.sample.sde_window_range=(0, 3)",
    ]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "experiment", flag_values=values, sys_argv=argv)
    values(argv)
    assert tuple(values.config.sample.sde_window_range) == (0, 3)
    validate(values.config, num_processes=1)


def test_importlib_file_load(monkeypatch):
    """Loading config/sd3.py by file path (as config_flags does), outside the ``config`` package."""
    monkeypatch.setenv("WORLD_SIZE", "1")
    spec = importlib.util.spec_from_file_location("sd3_by_path", REPO / "config" / "sd3.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    validate(mod.get_config("pickscore"))


@pytest.mark.parametrize("world_size", [1, 2, 8])
@pytest.mark.parametrize("name", sorted(SHAPES_SIZES))
def test_shapes_recipes(name, world_size, monkeypatch):
    """ShapesWorld recipes: shipped model, judge reward on train prompts, balanced held-out eval, global sizes."""
    from worlds.shapes import SHAPES_SD, SHAPES_SD3

    config = load("config.shapes", name, monkeypatch, world_size)
    totals = validate(config, num_processes=world_size)
    assert (totals["images_per_epoch"], totals["optimizer_steps_per_epoch"]) == SHAPES_SIZES[name]
    assert config.pretrained.model == (SHAPES_SD3 if name.startswith("sd3") else SHAPES_SD)
    assert config.prompts.source == "shapes_train" and config.eval.prompts == "shapes_test"
    assert config.reward.fns.to_dict() == {"shapes": 1.0} and config.eval.per_group > 0 and config.eval.freq > 0
    if name == "sd_nft":  # the quickstart: held out by the judge and by the independent detector
        strict = {"score": "strict"}
        assert config.eval.reward == "shapes,shapes_detector"
        assert config.eval.reward_kwargs.to_dict() == {"shapes": strict, "shapes_detector": strict}
    else:
        assert (config.eval.reward, config.eval.reward_kwargs.to_dict()) == ("shapes", {"score": "strict"})
    assert config.eval.group_by == "task"
    assert config.sample.resolution == 64 and config.train.use_lora


def test_quickstart_is_the_shapes_recipe(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    quickstart, shapes = importlib.import_module("config.quickstart"), importlib.import_module("config.shapes")
    assert quickstart.get_config().to_dict() == shapes.get_config("sd_nft").to_dict()
    assert quickstart.get_config("sd3_nft").to_dict() == shapes.get_config("sd3_nft").to_dict()
    assert quickstart.get_config("grpo").to_dict() == shapes.get_config("sd_quick").to_dict()
    with pytest.raises(ValueError, match="no experiment 'nope'"):
        importlib.import_module("config.quickstart").get_config("nope")


def test_the_deprecated_eta_says_flow_models_ignore_it():
    """sample.eta reaches only the DDIM / DDPM kernels; the line must not claim it works on SD3 (issue 33)."""
    from config.base import get_config
    from ddpo_grpo.config_checks import deprecations

    config = get_config()
    config.sample.eta = 1.0
    (line,) = deprecations(config)
    assert "sample.eta=1.0" in line and "flow-matching models ignore it" in line and "sample.noise_level" in line
    assert "still works" not in line
