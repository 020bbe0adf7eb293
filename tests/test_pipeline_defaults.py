"""Defaults that follow the pipeline's own: the text length (``sample.max_sequence_length`` 0 = the family's pipeline
default, one source of truth for the config, the adapter settings and the planner) and the dynamic-shift fallbacks
of ``policies.flow.calculate_shift`` (the FLUX, Kontext, Qwen-Image and Z-Image pipelines' ``max_shift`` 1.15)."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from config.base import get_config as base_config
from ddpo_grpo.config_checks import ConfigError, validate
from ddpo_grpo.planner.geometry import geometry
from ddpo_grpo.policies import build_policy, policy_settings
from ddpo_grpo.policies.base import PolicySettings
from ddpo_grpo.policies.flow import calculate_shift

MODEL_CONFIGS = Path(__file__).resolve().parents[1] / "config" / "model_configs"
#: diffusers 0.42.1's ``max_sequence_length`` defaults (CLIP-only pipelines: 77)
PIPELINE_TEXT_LENGTHS = {
    "FluxPipeline": 512,
    "FluxKontextPipeline": 512,
    "StableDiffusion3Pipeline": 256,
    "QwenImagePipeline": 512,
    "QwenImageEditPipeline": 512,
    "QwenImageEditPlusPipeline": 512,
    "ZImagePipeline": 512,
    "WanPipeline": 512,
    "WanImageToVideoPipeline": 512,
    "StableDiffusionPipeline": 77,
    "StableDiffusionXLPipeline": 77,
    "StableDiffusionInstructPix2PixPipeline": 77,
}


@pytest.mark.parametrize("name,length", sorted(PIPELINE_TEXT_LENGTHS.items()))
def test_pipeline_text_length(name, length):
    from ddpo_grpo.policies.base import pipeline_text_length

    assert pipeline_text_length(name) == length


def test_policy_settings_carry_no_default_of_their_own():
    """Every PolicySettings field is a ``sample`` field whose default config/base.py writes (source_root excepted:
    not a config field); the dataclass states none, so the two cannot disagree (resolution was 512 in the config and
    0 here; the text length once 256 and 77). Built from the base config, each field is the config's value."""
    import dataclasses

    fields = dataclasses.fields(PolicySettings)
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fields)
    sample = base_config().sample
    settings = PolicySettings.from_config(sample)
    for f in fields:
        if f.name in sample:
            assert getattr(settings, f.name) == sample[f.name], f.name
    assert {f.name for f in fields} - set(sample) == {"source_root"}


def test_unset_guidance_is_the_pipelines_own():
    """Without a config, an unset image guidance / distilled guidance is the pipeline's ``__call__`` default (read,
    not copied: InstructPix2Pix's 1.5, FLUX.1's 3.5)."""
    settings = PolicySettings.unset()
    assert settings.image_guidance_scale is None and settings.distilled_guidance is None
    ip2p = settings.with_pipeline_defaults("StableDiffusionInstructPix2PixPipeline")
    assert ip2p.image_guidance_scale == 1.5
    assert settings.with_pipeline_defaults("FluxPipeline").distilled_guidance == 3.5
    assert PolicySettings.unset(distilled_guidance=1.0).with_pipeline_defaults("FluxPipeline").distilled_guidance == 1.0
    with pytest.raises(TypeError, match="no field 'sde_typo'"):
        PolicySettings.unset(sde_typo="cps")


@pytest.fixture(scope="module")
def flux(tmp_path_factory):
    from ddpo_grpo.tiny import BUILDERS

    pipe = BUILDERS["flux"](tmp_path_factory.mktemp("flux") / "flux")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_flux_policy_encodes_the_pipelines_length_by_default(flux):
    """FLUX attends to T5's padding, so the length is part of the model's input: by default the pipeline's 512 (it
    was 256 from the config and 77 from the adapter settings, each disagreeing with FLUX.1's pipeline)."""
    from_config = build_policy(flux, policy_settings(flux, base_config().sample), resolution=32)
    assert from_config.max_sequence_length == 512
    assert build_policy(flux, resolution=32).max_sequence_length == 512
    assert build_policy(flux, resolution=32, max_sequence_length=128).max_sequence_length == 128
    embeds = from_config.encode_prompts(["a red square"])["embeds"]
    assert embeds.shape[1] == 512


def test_sd3_policy_default_is_256(tiny_dirs):
    from ddpo_grpo.policies import load_pipeline

    assert build_policy(load_pipeline(tiny_dirs["sd3"])).max_sequence_length == 256


def test_planner_resolves_the_default_text_length():
    sample = SimpleNamespace(resolution=512, max_sequence_length=0, num_frames=0)
    assert geometry(MODEL_CONFIGS / "flux1-dev", sample).text_tokens == 512
    assert geometry(MODEL_CONFIGS / "sd3.5-medium", sample).text_tokens == 77 + 256
    assert geometry(MODEL_CONFIGS / "wan2.1-t2v-1.3b", sample).text_tokens == 512
    sample.max_sequence_length = 128
    assert geometry(MODEL_CONFIGS / "flux1-dev", sample).text_tokens == 128


def test_negative_text_length_is_refused_naming_the_field(flux):
    config = base_config()
    config.sample.max_sequence_length = -1
    with pytest.raises(ConfigError, match=r"sample\.max_sequence_length=-1"):
        validate(config)
    with pytest.raises(
        ValueError, match=r"sample\.max_sequence_length=-1 must be ≥ 0 \(0 = the pipeline's default, 512"
    ):
        build_policy(flux, resolution=32, max_sequence_length=-1)


@pytest.mark.parametrize(
    "module",
    ["flux.pipeline_flux", "flux.pipeline_flux_kontext", "qwenimage.pipeline_qwenimage", "z_image.pipeline_z_image"],
)
@pytest.mark.parametrize("seq_len", [256, 1024, 4096])
def test_shift_fallback_is_the_pipelines(module, seq_len):
    """A scheduler config without the line's ends gets the pipelines' fallbacks (256, 4096, 0.5, 1.15): μ as the
    pipeline computes it (calculate_shift(seq, config.get("base_image_seq_len", 256), …, config.get("max_shift", 1.15)))."""
    import importlib

    pipeline_shift = importlib.import_module(f"diffusers.pipelines.{module}").calculate_shift
    assert calculate_shift(seq_len, {}) == pytest.approx(pipeline_shift(seq_len, 256, 4096, 0.5, 1.15), abs=1e-12)
    assert calculate_shift(seq_len, {"max_shift": 1.3}) == pytest.approx(pipeline_shift(seq_len, 256, 4096, 0.5, 1.3))


def test_shift_fallback_equals_the_schedulers_defaults():
    from diffusers import FlowMatchEulerDiscreteScheduler

    defaults = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True).config
    assert calculate_shift(1024, {}) == pytest.approx(calculate_shift(1024, defaults), abs=1e-12)
