"""Model families from installed packages: a ``FamilySpec`` under the ``ddpo_grpo.families`` entry point joins the
registry (``ddpo_grpo/policies/family.py``, ``foundation/plugins.py``), as rewards and prompt sources do."""

import json
import sys

import pytest
import torch

from ddpo_grpo.policies import family
from tests.entry_points_kit import dist_info, first_on_path

#: an example package: a pipeline class the core does not know, its adapter and tiny builder, and its spec
PACKAGE = '''
"""An example plug-in family: the generic denoiser pipeline under another class, with its own adapter."""
import json
from pathlib import Path

from ddpo_grpo.denoiser_pipeline import DenoiserPipeline
from ddpo_grpo.policies.denoiser import DenoiserPolicy
from ddpo_grpo.policies.family import FamilySpec


class ExamplePipeline(DenoiserPipeline):
    """A pipeline class of the example package."""


class ExamplePolicy(DenoiserPolicy):
    """Its adapter."""


def build_tiny(path, seed=0, **kwargs):
    from ddpo_grpo.tiny import build_tiny_denoiser

    build_tiny_denoiser(path, seed, **kwargs)
    index = Path(path) / "model_index.json"
    config = json.loads(index.read_text())
    index.write_text(json.dumps({**config, "_class_name": "ExamplePipeline"}))
    return ExamplePipeline.from_pretrained(path)


SPEC = FamilySpec(
    name="example_denoiser",
    pipeline="ExamplePipeline",
    adapter=ExamplePolicy,
    tiny="ddpo_example_family:build_tiny",
    pipeline_target="ddpo_example_family:ExamplePipeline",
    benchmark=False,
)
NOT_A_SPEC = "a string"
'''


@pytest.fixture
def example_package(tmp_path):
    """The example package installed (its module and dist-info first on sys.path), the registry rebuilt around it."""
    (tmp_path / "ddpo_example_family.py").write_text(PACKAGE)

    def install(groups):
        dist_info(tmp_path, "ddpo_example_family", groups)
        return first_on_path(tmp_path)

    family._CACHE = None
    try:
        yield install
    finally:
        family._CACHE = None
        sys.modules.pop("ddpo_example_family", None)


def test_an_installed_package_registers_a_family(example_package, tmp_path):
    from ddpo_grpo.policies import ADAPTERS, build_policy, by_name, load_pipeline

    with example_package({"ddpo_grpo.families": {"example_denoiser": "ddpo_example_family:SPEC"}}):
        specs = family.families()
        assert specs["ExamplePipeline"].name == "example_denoiser" and "DenoiserPipeline" in specs
        assert ADAPTERS["ExamplePipeline"] == "ddpo_example_family:ExamplePolicy"
        by_name("example_denoiser").tiny_builder()(tmp_path / "model", feature_dim=4)
        assert json.loads((tmp_path / "model" / "model_index.json").read_text())["_class_name"] == "ExamplePipeline"
        pipeline = load_pipeline(str(tmp_path / "model"))  # chosen from model_index.json's class, as any family
        assert type(pipeline).__name__ == "ExamplePipeline"
        policy = build_policy(pipeline, resolution=0)
        assert type(policy).__name__ == "ExamplePolicy"
        from ddpo_grpo.evaluation import evaluate

        _, samples, _ = evaluate(policy, [{"prompt": "a walk"}], None, num_steps=2, guidance_scale=1.0)
        assert samples.shape == (1, 16, 4) and torch.isfinite(samples).all()
    family._CACHE = None
    assert "ExamplePipeline" not in family.families()  # uninstalled: gone


def test_an_entry_point_of_the_wrong_type_is_one_line(example_package):
    with example_package({"ddpo_grpo.families": {"example_denoiser": "ddpo_example_family:NOT_A_SPEC"}}):
        with pytest.raises(ValueError, match=r"families plug-in 'example_denoiser' is 'a string'; it must be a "):
            family.families()
    with example_package({"ddpo_grpo.families": {"another_name": "ddpo_example_family:SPEC"}}):
        family._CACHE = None
        with pytest.raises(ValueError, match=r"FamilySpec named 'another_name'"):
            family.families()
