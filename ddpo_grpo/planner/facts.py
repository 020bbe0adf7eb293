"""What the estimate needs to know about a model, read off its modules built on the meta device.

``model_facts(directory, config, accelerator)`` builds every component with weights (``meta.py``), finds the
denoiser's blocks (the adapter's ``shard_blocks``, or ``distributed.shard_blocks``), marks the parameters the run
trains — every one for full fine-tuning; for LoRA the weights of the targeted linear layers, which makes autograd
keep exactly what a LoRA adapter on them keeps (the layer's input, for the factor A; the r-wide A output is not
counted) — and counts the blocks' activations (``activations.py``). LoRA parameters: r·(in + out) per targeted
``nn.Linear`` (peft's rule: a module whose name is a target or ends with "." + target).

The denoiser is ``transformer`` (or ``unet``), and with Wan 2.2 A14B's two experts ``transformer`` + ``transformer_2``
(``WanExperts``, ``ddpo_grpo/policies/wan.py``): both are held on the device and sharded, LoRA goes on the experts
``sample.experts`` names ("" = both; full fine-tuning trains both), and the activations are one trained expert's, as
every sample of a training forward runs through one expert (a minibatch straddling the boundary is split between
them). The reward models come from ``rewards.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from ddpo_grpo.memory import store_dtype
from ddpo_grpo.planner import activations, meta, sources
from ddpo_grpo.planner import blocks as blocks_mod
from ddpo_grpo.planner.geometry import geometry
from ddpo_grpo.planner.rewards import RewardFacts, reward_facts
from ddpo_grpo.precision import WEIGHT_DTYPES

#: the second expert of a two-expert denoiser (Wan 2.2 A14B), a denoiser beside ``transformer``
SECOND_EXPERT = "transformer_2"


@dataclass
class ModelFacts:
    pipeline: str
    denoiser_class: str
    denoiser_numel: int  # parameters + buffers
    denoiser_params: int
    denoiser_bytes_weight_dtype: int
    lora_numel: int
    root_numel: int  # denoiser elements outside the blocks
    largest_block: int  # elements of the largest block
    largest_block_trainable: int
    num_blocks: int
    compute_itemsize: int
    weight_itemsize: int
    store_itemsize: int
    on_accelerator: bool
    activations: activations.Activations
    latent_numel: int
    sample_numel: int
    text_tokens: int
    text_width: int
    image_tokens: int
    encoder_bytes: int
    encoders: dict  # name -> (class, elements)
    denoisers: tuple = ("transformer",)  # the denoiser components (two experts: transformer, transformer_2)
    largest_tensor: int = 0  # elements of the denoiser's largest parameter or buffer (the sharded load reads by tensor)
    rewards: RewardFacts = None  # the reward models on each process's device


def _adapter_defaults(pipeline_class: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(shard_blocks, default_lora_targets) of the family's adapter, or empty tuples."""
    from ddpo_grpo.policies import ADAPTERS

    target = ADAPTERS.get(pipeline_class)
    if target is None:
        return (), ()
    import importlib

    module, name = target.split(":")
    cls = getattr(importlib.import_module(module), name)
    return tuple(getattr(cls, "shard_blocks", ())), tuple(getattr(cls, "default_lora_targets", ()))


def _vae_dtype(config, pipeline_class: str, directory: Path) -> torch.dtype:
    """The dtype the run keeps the VAE in (``policies.base.PolicyAdapter.vae_dtype``): sample.vae_dtype when set;
    "auto": float32 for a float16 run whose VAE config says force_upcast in a family that upcasts it (SDXL), else
    the weight dtype."""
    from ddpo_grpo.policies import ADAPTERS
    from ddpo_grpo.policies.base import VAE_DTYPES

    chosen = VAE_DTYPES[config.sample.vae_dtype]
    if chosen is not None:
        return chosen
    weight = WEIGHT_DTYPES[config.mixed_precision]
    target = ADAPTERS.get(pipeline_class)
    upcasts = False
    if target is not None:
        import importlib

        module, name = target.split(":")
        upcasts = bool(getattr(getattr(importlib.import_module(module), name), "upcasts_vae", False))
    vae_config = directory / "vae" / "config.json"
    force = vae_config.is_file() and bool(json.loads(vae_config.read_text()).get("force_upcast", False))
    return torch.float32 if weight == torch.float16 and upcasts and force else weight


def _cast(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """``module.to(dtype)`` without diffusers' advice on keeping some modules in float32 (meta tensors, no weights)."""
    from diffusers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        module.to(dtype)
    finally:
        logging.set_verbosity(level)


def _targeted(name: str, targets) -> bool:
    return any(name == t or name.endswith("." + t) for t in targets)


def _trainable(block: torch.nn.Module, targets, rank: int, lora: bool) -> int:
    """Trainable elements of one block: r·(in + out) per targeted linear layer (LoRA), or all its parameters."""
    if not lora:
        return sum(p.numel() for p in block.parameters())
    linears = (m for n, m in block.named_modules() if isinstance(m, torch.nn.Linear) and _targeted(n, targets))
    return rank * sum(m.in_features + m.out_features for m in linears)


def denoiser_names(names) -> tuple[str, ...]:
    """The denoiser components among a pipeline's component ``names``: ``transformer`` (with ``transformer_2``, a
    second expert, when present) or ``unet``."""
    if "transformer" in names:
        return ("transformer", SECOND_EXPERT) if SECOND_EXPERT in names else ("transformer",)
    return ("unet",) if "unet" in names else ()


def trained_denoisers(config, names: tuple[str, ...]) -> tuple[str, ...]:
    """The denoisers the run trains: for LoRA on two experts the one ``sample.experts`` names ("" = both)."""
    experts = str(getattr(config.sample, "experts", "") or "")
    if config.train.use_lora and len(names) > 1 and experts in names:
        return (experts,)
    return names


def model_facts(directory, config, accelerator: bool = True) -> ModelFacts:

    from ddpo_grpo.sharding import blocks_of

    directory = Path(directory)
    index = json.loads((directory / "model_index.json").read_text())
    pipeline = index.get("_class_name", "")
    shard_blocks, lora_defaults = _adapter_defaults(pipeline)
    shard_blocks = tuple(config.distributed.shard_blocks) or shard_blocks
    t = config.train
    weight_dtype = WEIGHT_DTYPES[config.mixed_precision]
    comps = sources.components(directory)
    names = denoiser_names([c[0] for c in comps])
    if not names:
        raise sources.ConfigError(f"{directory}: no transformer or unet in model_index.json")
    trained = trained_denoisers(config, names)
    encoders, encoder_bytes, denoisers = {}, 0, {}
    for name, library, cls in comps:
        module = meta.build(directory, name, library, cls)
        if name in names:
            denoisers[name] = module
            continue
        encoders[name] = (cls, meta.numel(module))
        encoder_bytes += meta.nbytes(module, _vae_dtype(config, pipeline, directory) if name == "vae" else weight_dtype)
        del module
    targets = tuple(t.lora_target_modules) or lora_defaults
    lora, blocks, counted, trainable_sizes = 0, [], [], []
    for name, denoiser in denoisers.items():
        own = blocks_of(denoiser, shard_blocks) if shard_blocks else []
        blocks += own
        train = name in trained
        trainable_sizes += [_trainable(b, targets, t.lora_rank, t.use_lora) if train else 0 for b in own]
        denoiser.requires_grad_(train and not t.use_lora)
        if t.use_lora and train:
            for module_name, module in denoiser.named_modules():
                if isinstance(module, torch.nn.Linear) and _targeted(module_name, targets):
                    lora += t.lora_rank * (module.in_features + module.out_features)
                    module.weight.requires_grad_(True)
        if train and not counted:
            counted = own  # the activations: one trained expert's blocks (module docstring)
    block_ids = {id(p) for b in blocks for p in b.parameters()}
    numel = sum(meta.numel(d) for d in denoisers.values())
    params = sum(sum(p.numel() for p in d.parameters()) for d in denoisers.values())
    weights_bytes = sum(meta.nbytes(d, weight_dtype) for d in denoisers.values())
    first = denoisers[trained[0]]
    geo = geometry(directory, config.sample)
    compute = weight_dtype  # the dtype the blocks compute in (autocast / FSDP's bf16 policy; fp32 without)
    for denoiser in denoisers.values():
        _cast(denoiser, compute)  # on meta: the blocks' linear layers then compute (and keep their inputs) in it
    acts = activations.count(counted, first.config, geo.image_tokens, geo.text_tokens, compute)
    if acts.unmodelled and blocks_mod.unet_inputs(first, 1, geo.latent_side, compute) is not None:
        acts = activations.count_whole(
            first, counted, lambda b: blocks_mod.unet_inputs(first, b, geo.latent_side, compute), compute
        )
    sizes = [meta.numel(b) for b in blocks] or [0]
    root = numel - sum(p.numel() for d in denoisers.values() for p in d.parameters() if id(p) in block_ids)
    return ModelFacts(
        pipeline=pipeline,
        denoiser_class=type(first).__name__,
        denoiser_numel=numel,
        denoiser_params=params,
        denoiser_bytes_weight_dtype=weights_bytes,
        lora_numel=lora,
        root_numel=root,
        largest_block=max(sizes),
        largest_block_trainable=max(trainable_sizes or [0]),
        num_blocks=len(blocks),
        compute_itemsize=compute.itemsize,
        weight_itemsize=weight_dtype.itemsize,
        store_itemsize=store_dtype(config.sample.store_dtype).itemsize,
        on_accelerator=accelerator,
        activations=acts,
        latent_numel=geo.latent_numel,
        sample_numel=geo.sample_numel,
        text_tokens=geo.text_tokens,
        text_width=geo.text_width,
        image_tokens=geo.image_tokens,
        encoder_bytes=encoder_bytes,
        encoders=encoders,
        denoisers=tuple(denoisers),
        largest_tensor=max(t.numel() for d in denoisers.values() for t in list(d.parameters()) + list(d.buffers())),
        rewards=reward_facts(config),
    )
