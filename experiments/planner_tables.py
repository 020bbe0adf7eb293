"""The memory planner's tables for each family's recipe on 1, 8 and 16 GPUs of 80 GiB (docs/scaling.md).

    python experiments/planner_tables.py > tables.md

One table per recipe: the parts per process (GiB) for ddp × 1, ddp × 8, fsdp × 8, ddp × 16, fsdp × 16 (fsdp × 1 is
ddp × 1: nothing to shard), the peak, whether it fits 80 GiB, the largest train.batch_size that fits, and the same
two with train.gradient_checkpointing. Each recipe is loaded under WORLD_SIZE = P as train.py would be (its
per-process batch counts follow P); the model is built once on the meta device from the shipped configs. The same
numbers per column: ``python scripts/plan.py --config <recipe> --gpus P --gpu_memory 80``.

    python experiments/planner_tables.py --margins

Every shipped recipe (every experiment of config/flux.py, qwen_image.py, sd3.py, sdxl.py, sd.py, wan.py, zimage.py
but the tiny ones) on the hardware its docstring names ("Hardware: 8 × 80 GiB GPUs"): the per-GPU peak under its own
distributed.strategy, its phase, the margin 1 − peak / memory (≥ ``MARGIN`` = 10 %: tests/test_planner.py checks
it), and the other strategy's peak beside it.
"""

from __future__ import annotations

import importlib
import os
import re
import sys

from ddpo_grpo.planner import GIB, Plan, estimate, model_dir, model_facts, report

RECIPES = (
    (
        "FLUX.1-dev, `config/flux.py:pickscore` (LoRA r 64 with the feed-forwards, 512 px, 128 text tokens, bs 3, EMA)",
        "flux",
        "pickscore",
        {},
    ),
    (
        "SD3.5-Medium, `config/sd3.py:pickscore` (LoRA r 32, 512 px, bs 9, CFG 4.5 in training, KL β 0.01)",
        "sd3",
        "pickscore",
        {},
    ),
    (
        "Qwen-Image, `config/qwen_image.py:pickscore` (LoRA r 64 with both MLPs, 512 px, bs 4, CFG 4)",
        "qwen_image",
        "pickscore",
        {},
    ),
    (
        "Wan 2.1 T2V 14B, `config/wan.py:t2v --config.pretrained.model=Wan-AI/Wan2.1-T2V-14B-Diffusers` (LoRA r 32, "
        "33 frames of 240², bs 8, CFG 4.5)",
        "wan",
        "t2v",
        {"model": "Wan-AI/Wan2.1-T2V-14B-Diffusers"},
    ),
    ("Wan 2.1 T2V 1.3B, `config/wan.py:t2v` as shipped", "wan", "t2v", {}),
    (
        "Wan 2.2 T2V A14B, `config/wan.py:t2v_a14b` (two experts, LoRA r 64 on both, 5 frames of 480², one SDE step "
        "trained, CFG 4 / 3)",
        "wan",
        "t2v_a14b",
        {},
    ),
)
#: the shipped recipes' experiments (config module -> experiment names; the tiny ones left out)
SHIPPED = {
    "flux": ("pickscore", "kontext"),
    "qwen_image": ("pickscore", "edit", "edit_plus"),
    "sd3": ("pickscore", "pickscore_fast"),
    "sdxl": ("aesthetic",),
    "sd": ("compressibility", "incompressibility", "aesthetic"),
    "wan": ("t2v", "t2v_a14b", "i2v"),
    "zimage": ("pickscore",),
}
#: what a recipe's docstring says it runs on: "Hardware: <GPUs> × <GiB> GiB" (the GPU count of the run its source
#: published where docs/recipes.md gives one, 8 otherwise; 80 GiB cards: A100 / H100 / H800 80 GB)
HARDWARE = re.compile(r"Hardware: (\d+) × (\d+) GiB")
#: the margin every shipped recipe keeps under its hardware's memory by the planner (1 − peak / memory)
MARGIN = 0.10


def hardware(module: str, name: str) -> tuple[int, int]:
    """(GPUs, GiB per GPU) of ``config/<module>.py:<name>`` from its docstring; ValueError when it names none."""
    doc = getattr(importlib.import_module(f"config.{module}"), name).__doc__ or ""
    found = HARDWARE.search(doc)
    if not found:
        raise ValueError(f"config/{module}.py:{name}: its docstring names no 'Hardware: <GPUs> × <GiB> GiB'")
    return int(found[1]), int(found[2])


def recipe_peak(module: str, name: str):
    """(GPUs, GiB, the recipe's distributed.strategy, its Estimate, the other strategy's Estimate) on its hardware."""
    gpus, gib = hardware(module, name)
    config = load(module, name, gpus, {})
    facts = model_facts(model_dir(config.pretrained.model), config)
    strategy = config.distributed.strategy
    other = "ddp" if strategy == "fsdp" else "fsdp"
    return gpus, gib, strategy, *(estimate(facts, config, gpus, s, gib * GIB) for s in (strategy, other))


COLUMNS = (("ddp", 1), ("ddp", 8), ("fsdp", 8), ("ddp", 16), ("fsdp", 16))
MEMORY = 80 * GIB


def load(module: str, name: str, processes: int, overrides: dict):
    os.environ["WORLD_SIZE"] = str(processes)
    config = importlib.import_module(f"config.{module}").get_config(name)
    if "model" in overrides:
        config.pretrained.model = overrides["model"]
    return config


def table(title, module, name, overrides) -> str:
    base = load(module, name, 1, overrides)
    facts = model_facts(model_dir(base.pretrained.model), base)
    ests, ckpts = [], []
    for strategy, p in COLUMNS:
        config = load(module, name, p, overrides)
        ests.append(estimate(facts, config, p, strategy, MEMORY))
        config.train.gradient_checkpointing = True
        ckpts.append(estimate(facts, config, p, strategy, MEMORY))
    plan = Plan(base.pretrained.model, facts, ests, MEMORY, int(base.train.batch_size), bool(base.train.use_lora))
    lines = [f"**{title}**", "", *(f"- {line}" for line in report.header(plan).splitlines()), ""]
    lines.append("| GiB per process | " + " | ".join(f"{s} × {p}" for s, p in COLUMNS) + " |")
    lines.append("|---" * (len(COLUMNS) + 1) + "|")
    for part in report.ORDER:
        if any(e.parts.get(part) for e in ests):
            lines.append(f"| {part} | " + " | ".join(report.gib(e.parts.get(part, 0)) for e in ests) + " |")
    lines.append("| training phase | " + " | ".join(report.gib(e.training_phase) for e in ests) + " |")
    for phase, label in report.PHASES:
        if any(e.phases[phase] for e in ests):
            lines.append(f"| {label} | " + " | ".join(report.gib(e.phases[phase]) for e in ests) + " |")
    lines.append("| **peak** | " + " | ".join(f"**{report.gib(e.peak)}**" for e in ests) + " |")
    lines.append("| fits 80 GiB | " + " | ".join("yes" if e.peak <= MEMORY else "no" for e in ests) + " |")
    lines.append("| largest train.batch_size | " + " | ".join(report.largest(plan, e) for e in ests) + " |")
    lines.append("| peak, checkpointing | " + " | ".join(report.gib(e.peak) for e in ckpts) + " |")
    lines.append("| largest batch, checkpointing | " + " | ".join(report.largest(plan, e) for e in ckpts) + " |")
    return "\n".join(lines)


def margins() -> str:
    """The markdown table of every shipped recipe's peak and margin on the hardware its docstring names."""
    lines = [
        "| recipe | hardware | model | strategy | peak GiB (phase) | margin | the other strategy's peak |",
        "|---|---|---|---|---|---|---|",
    ]
    for module, names in SHIPPED.items():
        for name in names:
            gpus, gib, strategy, e, other = recipe_peak(module, name)
            model = load(module, name, gpus, {}).pretrained.model
            lines.append(
                f"| `config/{module}.py:{name}` | {gpus} × {gib} GiB | {model} | {strategy} | {report.gib(e.peak)} "
                f"({e.peak_phase}) | {100 * (1 - e.peak / (gib * GIB)):+.0f} % | {other.strategy}: "
                f"{report.gib(other.peak)} ({other.peak_phase}) |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def main() -> None:
    if "--margins" in sys.argv[1:]:
        print(margins())
        return
    for recipe in RECIPES:
        print(table(*recipe))
        print()


if __name__ == "__main__":
    main()
