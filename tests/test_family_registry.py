"""The family registry (ddpo_grpo/policies/family.py): every table of the house is a view of the specs, a family
registered once joins all of them, and ``import ddpo_grpo.policies`` imports no adapter."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ddpo_grpo.policies import ADAPTERS, PIPELINES, families
from ddpo_grpo.policies import family as registry
from tests.conftest import REPO, load_script


def tables(pipeline: str, name: str) -> dict:
    """Where the house looks a family up: the adapter, the tiny pipelines, the planner, the benchmark."""
    from ddpo_grpo import tiny
    from ddpo_grpo.planner.geometry import family_of

    return {
        "adapter": ADAPTERS.get(pipeline),
        "pipeline class": PIPELINES.get(pipeline),
        "pretrained.tiny": tiny.BUILDERS.get(name),
        "kit builder": tiny.FAMILIES.get(pipeline),
        "planner": family_of(pipeline),
        "benchmark": name in load_script("benchmark").all_models(),
    }


def test_every_table_is_a_view_of_the_specs():
    from ddpo_grpo import tiny

    specs = families()
    assert len(specs) >= 13 and set(ADAPTERS) == set(specs) == set(tiny.FAMILIES)
    assert set(tiny.BUILDERS) == {s.name for s in specs.values()}
    for pipeline, spec in specs.items():
        found = tables(pipeline, spec.name)
        assert found["adapter"] == spec.adapter_target and found["pretrained.tiny"] is spec.tiny_builder()
        assert found["planner"] == (spec.geometry, spec.source_tokens, spec.video)
        assert found["benchmark"] == spec.benchmark and found["pipeline class"] == (spec.pipeline_target or None)
    assert PIPELINES["DenoiserPipeline"] == "ddpo_grpo.denoiser_pipeline:DenoiserPipeline"


def test_a_family_registered_once_joins_every_table(monkeypatch):
    """A spec declared outside the package (``register``) is found by the adapter lookup, ``pretrained.tiny``, the
    kit, the planner and the benchmark; the real-config build is its tiny pipeline when it names no tiny builder."""
    from ddpo_grpo.policies.sd3 import SD3Policy, real_cut

    monkeypatch.setattr(registry, "_REGISTERED", [])
    monkeypatch.setattr(registry, "_CACHE", None)
    checkpoint = registry.Checkpoint("sd3.5-medium", recipe="config.sd3:pickscore")
    spec = registry.FamilySpec(
        name="my_sd3",
        pipeline="MySD3Pipeline",
        adapter=SD3Policy,
        checkpoints=(checkpoint,),
        real_cut=real_cut,
        geometry="sd3",
        pipeline_target="my_package.pipelines:MySD3Pipeline",
    )
    assert tables("MySD3Pipeline", "my_sd3")["adapter"] is None
    registry.register(spec)
    found = tables("MySD3Pipeline", "my_sd3")
    assert found["adapter"] == "ddpo_grpo.policies.sd3:SD3Policy"
    assert found["pipeline class"] == "my_package.pipelines:MySD3Pipeline"
    assert found["planner"] == ("sd3", False, False) and found["benchmark"]
    builder = found["pretrained.tiny"]
    assert builder.func.__name__ == "build_from_configs" and builder.args == (spec, checkpoint)


def test_specs_are_checked():
    from ddpo_grpo.policies.sd3 import SD3Policy

    with pytest.raises(ValueError, match="needs a tiny builder or a checkpoint"):
        registry.FamilySpec(name="x", pipeline="X", adapter=SD3Policy)
    with pytest.raises(ValueError, match="checkpoints need a real_cut"):
        registry.FamilySpec(name="x", pipeline="X", adapter=SD3Policy, checkpoints=(registry.Checkpoint("d", "r:x"),))


def test_two_specs_cannot_claim_one_pipeline(monkeypatch):
    twin = families()["FluxPipeline"]
    monkeypatch.setattr(registry, "_REGISTERED", [twin])
    monkeypatch.setattr(registry, "_CACHE", None)
    with pytest.raises(ValueError, match="two family specs claim 'FluxPipeline'"):
        families()


def test_importing_the_policies_package_imports_no_adapter():
    """The registry is assembled on first use: ``import ddpo_grpo.policies`` imports neither an adapter, nor the
    registry module, nor torch."""
    code = (
        "import sys, ddpo_grpo.policies\n"
        "print(sorted(m for m in sys.modules if m.startswith('ddpo_grpo.policies.')), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["[]", "False"], out.stdout
