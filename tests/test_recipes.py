"""docs/recipes.md holds every shipped real-model recipe to its source, number by number: this test parses its tables
and checks each config against its row.

A recipe's section is headed ``### `config/<file>.py:<name>` ``; its table has the columns ``field | ours | source |
departure``. For every field the test computes the config's value (``FIELDS`` below: the value the run uses, e.g.
the text length a 0 resolves to, the images per epoch the batch arithmetic gives) and requires it to equal the "ours"
cell; where "ours" and "source" differ (or the source gives no value, "—"), the departure cell must say why, and where
they agree it must be empty. A cell's value is its text before a parenthesised note. No model is loaded.
"""

from __future__ import annotations

import ast
import importlib
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ddpo_grpo.config_checks import trained_steps_per_sample, validate
from ddpo_grpo.kernels import DEFAULT_NOISE_LEVELS
from ddpo_grpo.policies import ADAPTERS
from ddpo_grpo.policies.base import VAE_DTYPES, pipeline_text_length
from tests.test_configs import experiments

DOC = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"
#: the config modules of the real-model families (their experiments not named tiny* are the shipped recipes)
FAMILY_MODULES = (
    "config.sd",
    "config.sdxl",
    "config.sd3",
    "config.flux",
    "config.qwen_image",
    "config.zimage",
    "config.wan",
)
WEIGHT_DTYPES = {"no": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
#: the area Qwen-Image-Edit(-Plus) pipelines size a source's latent to when sample.source_pixels is 0
QWEN_EDIT_SOURCE_AREA = 1024 * 1024
NO_VALUE = "—"


# ---- cells ------------------------------------------------------------------------------------------------------


def value_text(cell: str) -> str:
    """The cell's value: its text before a parenthesised note."""
    return cell.split(" (", 1)[0].strip()


def parse_number(cell: str) -> float:
    return float(value_text(cell).split()[0])


def parse_product(cell: str) -> int:
    return math.prod(int(x) for x in value_text(cell).split("·"))


def parse_string(cell: str) -> str:
    text = value_text(cell)
    return ast.literal_eval(text) if text[:1] in "\"'" else text


def parse_list(cell: str) -> tuple:
    text = value_text(cell)
    return () if text == "adapter default" else tuple(x.strip() for x in text.split(","))


def parse_reward(cell: str) -> dict:
    return {name: float(weight) for name, weight in (part.rsplit(" ", 1) for part in value_text(cell).split(", "))}


def parse_window(cell: str):
    text = value_text(cell)
    if text == "none":
        return None
    match = re.fullmatch(r"(\d+) at (\d+)–(\d+)", text)
    assert match, f"SDE window cell {cell!r}: write 'none' or '<size> at <first start>–<last start>'"
    return tuple(int(g) for g in match.groups())


def parse_ema(cell: str):
    text = value_text(cell)
    return None if text == "no" else float(text.split()[0])


# ---- the config's value of each field ------------------------------------------------------------------------------


def _vae_dtype(config, pipeline: str) -> str:
    """The VAE dtype a run of ``config`` uses: ``Policy.vae_dtype`` of the family's adapter (the checkpoint's
    AutoencoderKL says force_upcast; the other VAE classes have no such flag)."""
    module, name = ADAPTERS[pipeline].split(":")
    cls = getattr(importlib.import_module(module), name)
    fake = SimpleNamespace(
        settings=SimpleNamespace(vae_dtype=config.sample.vae_dtype),
        pipeline=SimpleNamespace(vae=SimpleNamespace(config={"force_upcast": True})),
        upcasts_vae=cls.upcasts_vae,
    )
    return DTYPE_NAMES[cls.vae_dtype(fake, WEIGHT_DTYPES[config.mixed_precision])]


def _window(config):
    s = config.sample
    if not s.sde_window_size:
        return None
    lo, hi = tuple(s.sde_window_range) if s.sde_window_range is not None else (0, s.num_steps - s.sde_window_size)
    return (s.sde_window_size, lo, hi)


def _latent_dims_consistent(config, dims_cell: str) -> bool:
    """The latent dims cell C·F'·h·w (or C·h·w) agrees with the resolution and frames: product = C·F'·(r/8)²."""
    dims = [int(x) for x in value_text(dims_cell).split("·")]
    frames = config.sample.num_frames
    latent_frames = (frames - 1) // 4 + 1 if frames else 1
    return math.prod(dims) == dims[0] * latent_frames * (config.sample.resolution // 8) ** 2


#: field -> (parse a cell, the config's value given (config, the recipe's table as {field: ours cell}))
FIELDS = {
    "model": (parse_string, lambda c, row: c.pretrained.model),
    "pipeline": (parse_string, None),  # the checkpoint's model_index class: checked against ADAPTERS below
    "precision": (parse_string, lambda c, row: c.mixed_precision),
    "resolution": (parse_number, lambda c, row: c.sample.resolution),
    "frames": (parse_number, lambda c, row: c.sample.num_frames),
    "steps": (parse_number, lambda c, row: c.sample.num_steps),
    "eval steps": (parse_number, lambda c, row: c.sample.eval_num_steps),
    "guidance": (parse_number, lambda c, row: c.sample.guidance_scale),
    "guidance 2": (parse_number, lambda c, row: c.sample.guidance_scale_2),  # "pending" until the knob exists
    "distilled guidance": (parse_number, lambda c, row: c.sample.distilled_guidance),
    "negative prompt": (parse_string, lambda c, row: c.sample.negative_prompt),
    "kernel": (parse_string, lambda c, row: c.sample.kernel),
    "noise level": (
        parse_number,
        lambda c, row: DEFAULT_NOISE_LEVELS[c.sample.kernel] if c.sample.noise_level is None else c.sample.noise_level,
    ),
    "group size": (parse_number, lambda c, row: c.sample.group_size),
    "images per epoch": (parse_number, lambda c, row: validate(c)["images_per_epoch"]),
    "optimizer steps per epoch": (parse_number, lambda c, row: validate(c)["optimizer_steps_per_epoch"]),
    "SDE window": (parse_window, lambda c, row: _window(c)),
    "trained steps": (parse_number, lambda c, row: trained_steps_per_sample(c)),
    "β": (parse_number, lambda c, row: c.train.beta),
    "latent dims": (parse_product, lambda c, row: parse_product(row["latent dims"])),
    "clip range": (parse_number, lambda c, row: c.train.clip_range / parse_product(row["latent dims"])),
    "adv clip": (parse_number, lambda c, row: c.train.adv_clip_max),
    "advantages": (parse_string, lambda c, row: c.train.adv_mode),
    "lr": (parse_number, lambda c, row: c.train.learning_rate),
    "LoRA rank": (parse_number, lambda c, row: c.train.lora_rank),
    "LoRA alpha": (parse_number, lambda c, row: c.train.lora_alpha),
    "LoRA targets": (parse_list, lambda c, row: tuple(c.train.lora_target_modules)),
    "LoRA experts": (parse_string, lambda c, row: c.sample.experts or "both"),
    "text length": (
        parse_number,
        lambda c, row: c.sample.max_sequence_length or pipeline_text_length(parse_string(row["pipeline"])),
    ),
    "source pixels": (parse_product, lambda c, row: c.sample.source_pixels or QWEN_EDIT_SOURCE_AREA),
    "VAE dtype": (parse_string, lambda c, row: _vae_dtype(c, parse_string(row["pipeline"]))),
    "EMA": (parse_ema, lambda c, row: c.train.ema_decay if c.train.ema else None),
    "epochs": (parse_number, lambda c, row: c.num_epochs),
    "reward": (parse_reward, lambda c, row: dict(c.reward.fns)),
}
#: fields every recipe's table states (video families add "frames")
REQUIRED_FIELDS = (
    "model",
    "pipeline",
    "precision",
    "resolution",
    "steps",
    "eval steps",
    "guidance",
    "kernel",
    "noise level",
    "group size",
    "images per epoch",
    "optimizer steps per epoch",
    "SDE window",
    "trained steps",
    "β",
    "latent dims",
    "clip range",
    "adv clip",
    "advantages",
    "lr",
    "LoRA rank",
    "LoRA alpha",
    "LoRA targets",
    "text length",
    "VAE dtype",
    "EMA",
    "epochs",
    "reward",
)


# ---- the document --------------------------------------------------------------------------------------------------


def read_tables(text: str) -> dict[str, dict[str, tuple[str, str, str]]]:
    """``{"config/<file>.py:<name>": {field: (ours, source, departure)}}`` of every recipe section."""
    tables: dict[str, dict] = {}
    current = None
    for line in text.splitlines():
        heading = re.fullmatch(r"### `(config/\w+\.py:\w+)`", line.strip())
        if heading:
            current = tables.setdefault(heading.group(1), {})
            continue
        if line.startswith("## "):
            current = None
        if current is None or not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("field", "") or set(cells[0]) <= set("-:"):
            continue
        assert len(cells) == 4, f"{line!r}: a recipe row has 4 cells (field | ours | source | departure)"
        assert cells[0] not in current, f"field {cells[0]!r} appears twice in one recipe's table"
        current[cells[0]] = (cells[1], cells[2], cells[3])
    return tables


TABLES = read_tables(DOC.read_text())


def shipped_recipes() -> list[str]:
    names = []
    for module in FAMILY_MODULES:
        _, functions = experiments(module)
        names += [f"{module.replace('.', '/')}.py:{n}" for n in sorted(functions) if not n.startswith("tiny")]
    return names


def load(recipe: str, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    path, name = recipe.split(":")
    return importlib.import_module(path.removesuffix(".py").replace("/", ".")).get_config(name)


def test_every_shipped_recipe_has_a_table_and_no_other():
    assert sorted(TABLES) == sorted(shipped_recipes())


@pytest.mark.parametrize("recipe", shipped_recipes())
def test_config_matches_its_row(recipe, monkeypatch):
    config = load(recipe, monkeypatch)
    table = TABLES[recipe]
    ours = {field: cells[0] for field, cells in table.items()}
    unknown = sorted(set(table) - set(FIELDS))
    assert not unknown, f"{recipe}: fields without a check: {unknown} (add them to FIELDS)"
    required = REQUIRED_FIELDS + (("frames",) if config.sample.num_frames else ())
    assert not [f for f in required if f not in table], f"{recipe}: missing fields"
    assert parse_string(ours["pipeline"]) in ADAPTERS, f"{recipe}: pipeline {ours['pipeline']!r} has no adapter"
    assert _latent_dims_consistent(config, ours["latent dims"]), f"{recipe}: latent dims vs resolution / frames"
    mismatches = []
    for field, (cell, _, _) in table.items():
        parse, value_of = FIELDS[field]
        if value_of is None:
            continue
        if value_text(cell) == "pending":  # a knob that does not exist yet: the row must say so, until it lands
            assert field == "guidance 2" and "guidance_scale_2" not in config.sample, (
                f"{recipe}: {field} is written 'pending' but the knob exists: set the source's value in the config "
                "and write it in docs/recipes.md"
            )
            continue
        expected = value_of(config, ours)
        got = parse(cell)
        same = math.isclose(got, expected, rel_tol=1e-9) if isinstance(got, float) else got == expected
        if not same:
            mismatches.append(f"{field}: table says {cell!r}, the config gives {expected!r}")
    assert not mismatches, f"{recipe} drifted from docs/recipes.md:\n" + "\n".join(mismatches)


@pytest.mark.parametrize("recipe", shipped_recipes())
def test_a_departure_is_written_exactly_where_ours_differs(recipe):
    problems = []
    for field, (ours, source, departure) in TABLES[recipe].items():
        parse = FIELDS[field][0]
        try:
            differs = value_text(source) == NO_VALUE or value_text(ours) == "pending" or parse(ours) != parse(source)
        except (ValueError, SyntaxError, AssertionError):  # a source cell in the source's own terms
            differs = True
        if differs and not departure:
            problems.append(f"{field}: ours {ours!r} vs source {source!r} with no departure written")
        if not differs and departure:
            problems.append(f"{field}: ours equals the source but a departure is written ({departure!r})")
    assert not problems, f"{recipe}:\n" + "\n".join(problems)


@pytest.mark.parametrize("recipe", shipped_recipes())
def test_the_config_docstring_cites_the_recipes_source(recipe):
    path, name = recipe.split(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    source_line = next(line for line in DOC.read_text().split(f"### `{recipe}`", 1)[1].splitlines() if line.strip())
    assert source_line.startswith("Source: "), f"{recipe}: the line under the heading names the source"
    repository = re.search(r"\b([\w-]+/[\w.-]+)\b", source_line).group(1)
    assert repository.split("/")[-1].lower() in (module.__doc__ or "").lower(), (
        f"{path}'s docstring does not cite {repository}"
    )


def test_vae_dtype_names_are_the_knobs():
    assert set(DTYPE_NAMES.values()) | {"auto"} == set(VAE_DTYPES)
