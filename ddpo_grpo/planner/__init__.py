"""The memory planner: a training run's per-process peak memory, part by part, before anything is loaded.

    plan(config, processes, memory_gib) -> Plan      (both strategies; Plan.estimate(strategy))
    python scripts/plan.py --config config/flux.py:pickscore --gpus 8 --gpu_memory 80

The model is built on the meta device from its configs (a pipeline directory, or a hub id mapped to the shipped
configs under config/model_configs/): no weights are read. A causal language model (a config.json naming a
``*ForCausalLM`` architecture, no model_index.json) is planned from closed formulas instead. Modules, one concern each:

    sources.py      where the configs are (hub id -> shipped directory; model_index.json's components)
    meta.py         components built on meta; their bytes in a dtype
    geometry.py     tokens and latent sizes of one sample per family
    blocks.py       meta inputs of each block class
    activations.py  the saved tensors of each block's forward, counted on meta (with / without checkpointing)
    facts.py        what the estimate needs from the model (sizes, LoRA parameters, blocks, activations)
    estimate.py     the parts per process for a strategy (its docstring derives each one)
    report.py       the table and the one-line summary
    causal_lm.py    a causal LM's parameters, LoRA factors, activations, logits, KV cache from its config.json
    lm_estimate.py  a causal LM's GRPO run, part by part (its docstring derives each one)

Validated on CPU processes against the measured peak resident memory (experiments/planner_validation.py,
docs/scaling.md "Memory planner").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ddpo_grpo.planner import causal_lm
from ddpo_grpo.planner.estimate import GIB, Estimate, estimate
from ddpo_grpo.planner.facts import ModelFacts, model_facts
from ddpo_grpo.planner.lm_estimate import lm_estimate, lm_facts
from ddpo_grpo.planner.sources import model_dir

STRATEGIES = ("ddp", "fsdp")


@dataclass
class Plan:
    model: str
    facts: ModelFacts
    estimates: list  # one Estimate per strategy
    memory: int  # bytes per process (0 = unknown)
    batch: int
    lora: bool

    def estimate(self, strategy: str) -> Estimate:
        return next(e for e in self.estimates if e.strategy == strategy)


def plan(config, processes: int = 1, memory_gib: float = 80.0, *, model: str | None = None, accelerator=True) -> Plan:
    """The plan of ``config``'s run on ``processes`` processes of ``memory_gib`` GiB each (0 = unknown)."""
    spec = model or config.pretrained.model
    memory = int(memory_gib * GIB)
    directory = model_dir(spec)
    lm_config = causal_lm.read_config(directory)
    if lm_config is not None:  # a causal language model: the closed formulas of causal_lm.py
        facts = lm_facts(lm_config, config)
        ests = [lm_estimate(facts, config, processes, s) for s in STRATEGIES]
    else:
        facts = model_facts(directory, config, accelerator=accelerator)
        ests = [estimate(facts, config, processes, s, memory) for s in STRATEGIES]
    return Plan(spec, facts, ests, memory, int(config.train.batch_size), bool(config.train.use_lora))


def startup_line(config, processes: int, model: str, device=None, main: bool = True) -> str | None:
    """The plan's one-line summary for the run's own strategy on ``device`` (what train.py prints at start-up), or
    None when the model cannot be planned (a factory file, a hub id without shipped configs, anything unexpected):
    the planner never fails a run. A CUDA device contributes its total memory (the largest batch that fits). Only
    the main process plans (``main``): the others get None at no cost."""
    if not main:
        return None
    try:
        accelerator = device is not None and torch.device(device).type == "cuda"
        memory_bytes = torch.cuda.get_device_properties(device).total_memory if accelerator else 0
        p = plan(config, processes, memory_bytes / GIB, model=model, accelerator=accelerator)
        from ddpo_grpo.planner.report import summary

        return summary(p, p.estimate(config.distributed.strategy))
    except Exception:  # noqa: BLE001  (a plan is advice: no failure of it may stop a run)
        return None


__all__ = ["GIB", "Plan", "STRATEGIES", "plan", "startup_line"]
