"""Two-process checks of tests/test_sharded_loading.py, run under ``torchrun --nproc_per_node 2`` (gloo).

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/sharded_checks.py MODEL TINY OUT RUN...

runs ``loading`` once per RUN, config overrides ``section.field=value`` (Python literals) joined by ";": MODEL is a
FluxPipeline directory (``write_model``), TINY the tiny FLUX (``ddpo_grpo.tiny``); each process writes
``OUT/<i>/rank<r>.json`` for the i-th RUN. Memory is the process's
peak resident-set growth: /proc/self/status VmHWM at the end of the step minus VmRSS before it (the high-water mark
reset through /proc/self/clear_refs), with every library imported before; run with MALLOC_MMAP_THRESHOLD_=65536 so
freed tensors leave the resident set.

Only names every version of the trainer has are used (``Trainer``, ``wiring.build_policy_for`` /
``build_weights`` / ``training_sampler``; ``wiring`` was ``components`` before 2026-11-27), so a check run against
older code fails on what it measures, not on a missing name.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the small FLUX-architecture transformer of the fast checks (d = 384; experiments/planner_validation.py's is 1024)
SMALL = dict(num_layers=4, num_single_layers=8, attention_head_dim=128, num_attention_heads=3)


def write_model(directory, width=None) -> None:
    """experiments/planner_validation.py's FLUX-architecture pipeline (``width``: the transformer's sizes), saved."""
    from experiments.planner_validation import build

    build(width).save_pretrained(str(directory))


def status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


class Peak:
    """Peak resident-set growth of a block of code (module docstring)."""

    def __enter__(self):
        Path("/proc/self/clear_refs").write_text("5")
        self.base = status("VmRSS")
        return self

    def __exit__(self, *exc):
        self.growth = status("VmHWM") - self.base


def config_for(model: str, logdir: str, fields: list[str]):
    from config.flux import tiny

    c = tiny()
    c.pretrained.model, c.logdir, c.run_name, c.num_epochs, c.save_freq = model, logdir, "check", 1, 0
    c.sample.resolution, c.sample.max_sequence_length, c.sample.num_steps = 32, 8, 2
    c.sample.num_batches_per_epoch = 2
    c.distributed.strategy, c.logging.progress = "fsdp", False
    for field in fields:
        key, value = field.split("=", 1)
        section, name = key.split(".") if "." in key else (None, key)
        (c[section] if section else c)[name] = ast.literal_eval(value)
    return c


def _wiring():
    """The run-wiring module (``ddpo_grpo.wiring``; ``ddpo_grpo.components`` in code before 2026-11-27)."""
    try:
        from ddpo_grpo import wiring
    except ImportError:
        from ddpo_grpo import components as wiring
    return wiring


def _imports() -> None:
    """Every library module the set-up uses (diffusers and transformers import their model classes on first use)."""
    import accelerate  # noqa: F401
    import diffusers
    import peft  # noqa: F401
    import peft.tuners.lora  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import transformers

    _wiring()
    import ddpo_grpo.policies.flux  # noqa: F401
    import ddpo_grpo.reference  # noqa: F401
    import ddpo_grpo.weights  # noqa: F401

    for name in ("FluxPipeline", "FluxTransformer2DModel", "AutoencoderKL", "FlowMatchEulerDiscreteScheduler"):
        getattr(diffusers, name)
    for name in ("CLIPTextModel", "CLIPTokenizer", "T5EncoderModel", "T5TokenizerFast"):
        getattr(transformers, name)


def _whole(tensor):
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _state(model) -> dict:
    """name -> whole tensor of every parameter and buffer (a collective for the sharded ones)."""
    tensors = dict(model.named_parameters())
    tensors.update(model.named_buffers())
    return {n: _whole(t).detach().cpu() for n, t in tensors.items()}


def _same(a, b) -> bool:
    import torch

    return a is not None and a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))


ROWS = [{"prompt": "a red circle"}, {"prompt": "a blue square"}]


def _sample(sampler, device):
    """One rollout batch of two fixed prompts and seeds: its decoded samples."""
    import numpy as np
    import torch

    gen = torch.Generator(device).manual_seed(1)
    return sampler(ROWS, [11, 12], gen, np.random.default_rng(0)).samples.cpu()


def _setup_growth(model: str, tiny: str, out: str, fields: list[str]):
    """(the Trainer of ``model``, its set-up's growth minus the same set-up's of the tiny FLUX ``tiny``): the tiny
    one (0.05 MiB of weights) is built once to warm up, then measured, so the difference is what the model's size
    costs, not the tokenizers, encoder objects and bookkeeping every set-up has."""
    import gc

    from ddpo_grpo.trainer import Trainer

    _imports()
    for i in range(2):
        with Peak() as fixed:
            trainer = Trainer(config_for(tiny, out, [*fields, f"run_name='tiny{i}'"]))
        del trainer
        gc.collect()
    with Peak() as peak:
        trainer = Trainer(config_for(model, out, fields))
    return trainer, {"growth": peak.growth - fixed.growth, "fixed": fixed.growth, "raw": peak.growth}


def loading(model, tiny, out, fields, rank) -> dict:
    """A Trainer's set-up under FSDP: its memory; its denoiser's weights, buffers and LoRA factors against the same
    set-up unsharded and against diffusers' own load; its samples against the unsharded ones, and the all-gathers of a
    rollout batch with distributed.gather_for_sampling on and off, and of an epoch's sampling phase (two batches);
    then final/ written (its memory)."""
    import torch
    from diffusers import FluxTransformer2DModel
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group

    wiring = _wiring()

    trainer, result = _setup_growth(model, tiny, out, fields)
    config, policy, acc = trainer.config, trainer.policy, trainer.acc
    sharded = _state(policy.denoiser)
    result["dtensor"] = any(type(p).__name__ == "DTensor" for p in policy.denoiser.parameters())
    result["units"] = sum(isinstance(m, FSDPModule) for m in policy.denoiser.modules())
    result["steps"] = config.sample.num_steps

    counted, gather = [], _fsdp_param_group.foreach_all_gather

    def counting(*args, **kwargs):
        counted.append(1)
        return gather(*args, **kwargs)

    _fsdp_param_group.foreach_all_gather = counting
    samples = {}
    for on in (True, False):
        config.distributed.gather_for_sampling = on
        counted.clear()
        samples[on] = _sample(wiring.training_sampler(config, policy, acc.autocast), acc.device)
        result[f"all_gathers_{on}"] = len(counted)
    counted.clear()
    trainer.sample_phase(0)  # (distributed.gather_for_sampling as the config has it: True)
    result["phase_all_gathers"], result["batches"] = len(counted), config.sample.num_batches_per_epoch
    _fsdp_param_group.foreach_all_gather = gather

    config.distributed.strategy = "ddp"  # the same set-up, whole in each process
    torch.manual_seed(config.seed)
    whole_policy, _ = wiring.build_policy_for(config, acc)
    wiring.build_weights(config, whole_policy, acc)
    whole = _state(whole_policy.denoiser)
    whole_samples = _sample(wiring.training_sampler(config, whole_policy, acc.autocast), acc.device)
    config.distributed.strategy = "fsdp"

    dtype = (
        {"no": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[config.mixed_precision]
        if config.train.use_lora
        else torch.float32
    )
    plain = FluxTransformer2DModel.from_pretrained(model, subfolder="transformer").to(dtype)  # today's load and cast
    plain_state = dict(plain.named_parameters())
    plain_state.update(plain.named_buffers())
    base = {n.replace(".base_layer.", "."): t for n, t in sharded.items()}
    result.update(
        same_names=sorted(sharded) == sorted(whole),
        unequal=sorted(n for n in whole if not (n in sharded and _same(sharded[n], whole[n]))),
        unequal_to_diffusers=sorted(n for n, t in plain_state.items() if not _same(base.get(n), t.detach())),
        lora=sum(".lora_A." in n or ".lora_B." in n for n in sharded),
        samples_equal=bool(torch.equal(samples[True], whole_samples) and torch.equal(samples[False], whole_samples)),
        samples_max_diff=float((samples[True] - whole_samples).abs().max()),
    )
    del whole_policy, plain, plain_state, whole, base, sharded
    with Peak() as peak:
        result["final"] = str(trainer.export_final())
    result["export_growth"] = peak.growth
    result["trainable_bytes"] = sum(p.numel() * 4 for p in trainer.params.values())  # float32, whole
    return result


def main() -> None:
    """Each RUN (config overrides joined by ";") in turn, in the same two processes: OUT/<i>/rank<r>.json."""
    import gc

    model, tiny, out, *runs = sys.argv[1:]
    rank = int(os.environ.get("RANK", "0"))
    for i, run in enumerate(runs):
        directory = Path(out, str(i))
        directory.mkdir(parents=True, exist_ok=True)
        result = loading(model, tiny, str(directory), run.split(";"), rank)
        (directory / f"rank{rank}.json").write_text(json.dumps(result))
        gc.collect()


if __name__ == "__main__":
    main()
