"""The memory planner's tables for each family's recipe on 1, 8 and 16 GPUs of 80 GiB (docs/scaling.md).

    python experiments/planner_tables.py > tables.md

One table per recipe: the parts per process (GiB) for ddp × 1, ddp × 8, fsdp × 8, ddp × 16, fsdp × 16 (fsdp × 1 is
ddp × 1: nothing to shard), the peak, whether it fits 80 GiB, the largest train.batch_size that fits, and the same
two with train.gradient_checkpointing. Each recipe is loaded under WORLD_SIZE = P as train.py would be (its
per-process batch counts follow P); the model is built once on the meta device from the shipped configs. The same
numbers per column: ``python scripts/plan.py --config <recipe> --gpus P --gpu-memory 80``.

    python experiments/planner_tables.py --margins

Every shipped recipe (every experiment of config/flux.py, qwen_image.py, sd3.py, sdxl.py, sd.py, wan.py, zimage.py
but the tiny ones) on the hardware ``HARDWARE`` names for it (GPUs of a given memory): the per-GPU peak under DDP
and FSDP, its phase, and the margin 1 − peak / memory (≥ 10 % is what the recipes promise).
"""

from __future__ import annotations

import importlib
import os

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
#: (GPUs, GiB per GPU) each recipe is checked on: the GPU count of the run its source published where
#: docs/recipes.md gives one, 8 otherwise; 80 GiB cards (A100 / H100 / H800 80 GB)
HARDWARE = {
    ("sd", "compressibility"): (8, 80),
    ("sd", "incompressibility"): (8, 80),
    ("sd", "aesthetic"): (8, 80),
    ("sdxl", "aesthetic"): (8, 80),
    ("sd3", "pickscore"): (32, 80),
    ("sd3", "pickscore_fast"): (32, 80),
    ("flux", "pickscore"): (32, 80),
    ("flux", "kontext"): (28, 80),
    ("qwen_image", "pickscore"): (32, 80),
    ("qwen_image", "edit"): (32, 80),
    ("qwen_image", "edit_plus"): (2, 80),
    ("zimage", "pickscore"): (8, 80),
    ("wan", "t2v"): (1, 80),
    ("wan", "t2v_a14b"): (8, 80),
    ("wan", "i2v"): (8, 80),
}

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
    """The markdown table of every shipped recipe's peak and margin on ``HARDWARE`` (module docstring)."""
    lines = [
        "| recipe | hardware | model | ddp peak (phase) | fsdp peak (phase) | margin ddp | margin fsdp |",
        "|---|---|---|---|---|---|---|",
    ]
    for module, names in SHIPPED.items():
        for name in names:
            gpus, gib = HARDWARE[(module, name)]
            config = load(module, name, gpus, {})
            facts = model_facts(model_dir(config.pretrained.model), config)
            cells = []
            for strategy in ("ddp", "fsdp"):
                e = estimate(facts, config, gpus, strategy, gib * GIB)
                cells.append((e.peak, e.peak_phase))
            peaks = " | ".join(f"{report.gib(peak)} ({phase})" for peak, phase in cells)
            margin = " | ".join(f"{100 * (1 - peak / (gib * GIB)):+.0f} %" for peak, _ in cells)
            lines.append(
                f"| `config/{module}.py:{name}` | {gpus} × {gib} GiB | {config.pretrained.model} | {peaks} | {margin} |"
            )
            print(lines[-1], flush=True)
    return "\n".join(lines)


def main() -> None:
    import sys

    if "--margins" in sys.argv[1:]:
        print(margins())
        return
    for recipe in RECIPES:
        print(table(*recipe))
        print()


if __name__ == "__main__":
    main()
