"""The real checkpoints' configs shipped under config/model_configs/: each directory's denoisers build on the meta
device with the sizes config/model_configs/README.md says their authors publish and its other components' configs
load (every component built on meta: the slow test), the README names every file (and no file that is not there),
every scheduler and tokenizer config loads, every hub id maps to a directory."""

import json
import re
from pathlib import Path

import pytest

from ddpo_grpo.planner import meta, sources

ROOT = sources.SHIPPED
README = (ROOT / "README.md").read_text()
#: the pipeline directories (the causal LMs' config.json directories: tests/test_planner_lm.py)
DIRS = sorted(p.name for p in ROOT.iterdir() if (p / "model_index.json").is_file())
UNITS = {"M": 1e6, "B": 1e9}


def _published() -> dict[tuple[str, str], str]:
    """(directory, component) -> the README's published figure ("14B", "860M", "—")."""
    table = README.split("## Published sizes", 1)[1]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in DIRS:
            rows[(cells[0], cells[1])] = cells[2]
    return rows


def _bounds(figure: str) -> tuple[float, float]:
    """The figure's value and the tolerance it is checked to: 1 %, or half a unit of its last digit when that is
    coarser ("14B" is 14 ± 0.5 B)."""
    m = re.fullmatch(r"(\d+(?:\.(\d+))?)([MB])", figure)
    assert m, f"README figure {figure!r}: write it as 860M / 2.6B / 11.9014083B"
    unit = UNITS[m.group(3)]
    value = float(m.group(1)) * unit
    half_digit = 0.5 * 10 ** -len(m.group(2) or "") * unit
    return value, max(0.01 * value, half_digit)


def test_bounds_follow_the_published_precision():
    assert _bounds("14B") == (14e9, 0.5e9)
    assert _bounds("2.6B") == (2.6e9, pytest.approx(0.05e9))
    assert _bounds("11.9014083B")[1] == pytest.approx(0.119014083e9)  # 1 % beats the 7th decimal
    assert _bounds("860M") == (860e6, 8.6e6)


DENOISERS = ("unet", "transformer", "transformer_2")


def _check_sizes(name: str, built: dict) -> None:
    rows = {c: f for (d, c), f in _published().items() if d == name}
    assert rows, f"{name}: no row in README's 'Published sizes'"
    for component, figure in rows.items():
        assert component in built, f"{name}/{component}: in README's sizes, not among its denoisers"
        if figure == "—":
            continue
        value, tolerance = _bounds(figure)
        assert abs(built[component] - value) <= tolerance, (name, component, built[component], figure)


_BUILT: dict = {}  # (class, config text) -> elements: identical configs (Wan 2.2's experts, the Qwen edits) built once


def _build(directory: Path, components) -> dict:
    built = {}
    for component, library, cls in components:
        key = (cls, (directory / component / "config.json").read_text())
        if key not in _BUILT:
            module = meta.build(directory, component, library, cls)
            assert all(t.device.type == "meta" for t in list(module.parameters()) + list(module.buffers()))
            _BUILT[key] = meta.numel(module)
            del module
        built[component] = _BUILT[key]
    return built


@pytest.mark.parametrize("name", DIRS)
def test_denoisers_build_on_meta_with_the_published_sizes(name):
    """Fast: the denoiser(s) built on meta; every other component's config read by its config class."""
    from transformers import AutoConfig

    directory = sources.model_dir(name)
    comps = sources.components(directory)
    built = _build(directory, [c for c in comps if c[0] in DENOISERS])
    _check_sizes(name, built)
    for component, library, cls in comps:
        if component in DENOISERS:
            continue
        if library == "diffusers":
            config = getattr(meta.library_module(library), cls).load_config(directory / component)
            assert config["_class_name"] == cls
        else:
            assert AutoConfig.from_pretrained(directory / component).model_type


@pytest.mark.slow
@pytest.mark.parametrize("name", DIRS)
def test_every_component_builds_on_meta(name):
    """Slow (≈ 1 min on a loaded CPU): every component with weights built on meta, as the planner builds it."""
    directory = sources.model_dir(name)
    built = _build(directory, sources.components(directory))
    _check_sizes(name, {c: n for c, n in built.items() if c in DENOISERS})


def test_readme_lists_every_file_and_only_those():
    shipped = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and p.name != "README.md"}
    listed = set(re.findall(r"^\| `([^`]+\.json)` \|", README, flags=re.MULTILINE))
    assert shipped - listed == set(), "files without a README row"
    assert listed - shipped == set(), "README rows without a file"


def test_schedulers_and_tokenizer_configs_load():
    import diffusers

    for path in sorted(ROOT.glob("*/scheduler/scheduler_config.json")):
        config = json.loads(path.read_text())
        scheduler = getattr(diffusers, config["_class_name"]).from_config(config)
        assert scheduler.config.num_train_timesteps == 1000, path
    for path in sorted(ROOT.glob("*/*/tokenizer_config.json")):
        config = json.loads(path.read_text())
        assert isinstance(config.get("model_max_length"), int) and config["model_max_length"] > 0, path
    for path in sorted(ROOT.glob("*/model_index.json")):
        index = json.loads(path.read_text())
        for component, value in index.items():
            if isinstance(value, list) and value[0] is not None:
                assert (path.parent / component).is_dir() or component.startswith(("tokenizer", "processor")), (
                    f"{path}: {component} has no directory"
                )


def test_hub_ids_map_to_directories_named_in_the_readme():
    from ddpo_grpo.policies.family import hub_ids

    assert set(hub_ids().values()) == set(DIRS)
    for hub_id, name in hub_ids().items():
        assert (ROOT / name / "model_index.json").is_file()
        heading = next(line for line in README.splitlines() if line.startswith("### ") and f" {name} " in line + " ")
        assert f"`{hub_id}`" in heading, (hub_id, heading)


def test_a_pipeline_module_library_resolves_as_diffusers_reads_it():
    """SD 1.5's model_index names its safety checker's library "stable_diffusion" (a diffusers pipeline module)."""
    directory = sources.model_dir("runwayml/stable-diffusion-v1-5")
    assert ("safety_checker", "stable_diffusion", "StableDiffusionSafetyChecker") in sources.components(directory)
    module = meta.build(directory, "safety_checker", "stable_diffusion", "StableDiffusionSafetyChecker")
    assert type(module).__name__ == "StableDiffusionSafetyChecker" and meta.numel(module) > 3e8
