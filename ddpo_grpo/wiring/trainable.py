"""The trained weights of a run: on the device, LoRA or the whole denoiser, init_from, gradient checkpointing and
FSDP2 sharding, the EMA, lagging sampler and reference; the model to differentiate and its optimizer."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ddpo_grpo.precision import WEIGHT_DTYPES
from ddpo_grpo.wiring.process import main_print, sharded
from foundation.errors import ConfigError


@dataclass
class Weights:
    """The trainable weights and the other values of them a run keeps (each None when not configured)."""

    params: dict  # name -> trainable parameter (LoRA factors, or the whole denoiser), float32
    ema: object | None  # weights.EMA (train.ema)
    sampler: object | None  # weights.LaggingSampler (train.sampler_decay_rate > 0)
    reference: object | None  # reference.Reference (train.beta > 0)


def build_weights(config, policy, acc) -> Weights:
    """Put the model on the device (frozen parts in the mixed-precision dtype), attach LoRA or unfreeze the
    denoiser, load pretrained.init_from; make the EMA, lagging sampler and reference the config asks for.

    A denoiser built empty (``empty_denoisers``: FSDP) is LoRA-wrapped, checkpointed and sharded while empty, then
    each process reads its own shards (``sharded_loading.materialize``), and init_from comes after."""
    from ddpo_grpo import sharded_loading
    from ddpo_grpo.reference import Reference
    from ddpo_grpo.weights import EMA, LaggingSampler, trainable_parameters

    t = config.train
    weight_dtype = WEIGHT_DTYPES[config.mixed_precision]
    denoiser = policy.denoiser
    empty = sharded_loading.is_empty(denoiser)
    if empty:  # the frozen parts only: FSDP puts the denoiser's shards on the device
        for module in policy.frozen_modules():
            module.to(acc.device)
    else:
        policy.pipeline.to(acc.device)
    for module in policy.frozen_modules():
        module.requires_grad_(False)
        module.eval()
        dtype = policy.frozen_dtype(module, weight_dtype)  # the VAE's: sample.vae_dtype ("auto": the checkpoint's)
        if dtype != torch.float32 or weight_dtype != torch.float32:
            module.to(dtype=dtype)
        if config.sample.offload_encoders:  # on the device only while they run (memory.resident)
            module.to("cpu")
    if t.use_lora:
        if weight_dtype != torch.float32:
            denoiser.to(dtype=weight_dtype)
        with sharded_loading.cpu_stand_ins(denoiser) if empty else contextlib.nullcontext():
            policy.add_lora(
                rank=t.lora_rank, alpha=t.lora_alpha, target_modules=t.lora_target_modules, dropout=t.lora_dropout
            )
    else:
        denoiser.requires_grad_(True)
    if config.pretrained.init_from and not empty:
        init_from(config, denoiser, log=main_print(acc))
    for p in trainable_parameters(denoiser).values():
        p.data = p.data.float()  # trainable weights (and their optimizer state) in float32
    scale_out(config, policy, acc)
    if empty:
        sharded_loading.materialize(denoiser, "cpu" if config.distributed.cpu_offload else acc.device)
        if config.pretrained.init_from:
            init_from(config, denoiser, log=main_print(acc))
    params = trainable_parameters(denoiser)  # (FSDP's sharded parameters when sharded)
    ema = EMA(params, t.ema_decay) if t.ema else None
    sampler = None  # the forward objectives' lagging sampling policy (train.sampler_decay_*)
    if t.sampler_decay_rate > 0:
        sampler = LaggingSampler(
            params, rate=t.sampler_decay_rate, max_decay=t.sampler_decay_max, flat=t.sampler_decay_flat
        )
    reference = None
    if t.beta > 0:
        reference = Reference(
            policy,
            denoiser,
            lora=t.use_lora,
            update=t.reference_update,
            freq=t.reference_update_freq,
            alpha=t.reference_mix_alpha,
        )
    return Weights(params, ema, sampler, reference)


def scale_out(config, policy, acc) -> None:
    """Gradient checkpointing of the denoiser's blocks (train.gradient_checkpointing), then FSDP2 sharding
    (distributed.strategy "fsdp"; with one process there is nothing to shard and the run says so)."""
    from ddpo_grpo import sharding

    d = config.distributed
    if not (config.train.gradient_checkpointing or d.strategy == "fsdp"):
        return
    names = sharding.block_names(policy, d.shard_blocks)
    if config.train.gradient_checkpointing:
        sharding.checkpoint_blocks(policy.denoiser, names)
    if d.strategy != "fsdp":
        return
    if not sharded(config, acc):
        main_print(acc)("distributed.strategy='fsdp' with one process: nothing to shard, the model stays whole")
        return
    sharding.shard(
        policy.denoiser,
        names,
        reshard_after_forward=d.reshard_after_forward,
        cpu_offload=d.cpu_offload,
        mixed_precision=fsdp_compute_dtype(config),
    )


def fsdp_compute_dtype(config):
    """The dtype FSDP gathers the parameters in and casts every unit's inputs to (its mixed-precision policy):
    bfloat16 under mixed_precision "bf16" on GPUs, else None (the parameters' own)."""
    return torch.bfloat16 if config.mixed_precision == "bf16" and torch.cuda.is_available() else None


def prepare(config, acc, policy, params):
    """(the model to differentiate, the optimizer): accelerate's DDP wrapping, or the FSDP-sharded denoiser itself.
    The optimizer stays ours under both strategies (``optim.OptimizerStep`` steps it, with the loss scale)."""
    from ddpo_grpo.optim import build_optimizer

    optimizer = build_optimizer(params, config.train)
    if sharded(config, acc):
        return policy.denoiser, optimizer
    return acc.prepare(policy.denoiser), optimizer


def init_from(config, denoiser, log=print) -> None:
    """Start from a checkpoint's trainable weights (another run's, e.g. of a supervised warm-up), reporting
    missing and unexpected keys; a mismatch is refused unless pretrained.init_strict is False."""
    from ddpo_grpo import checkpoint as ckpt
    from ddpo_grpo import sharding

    loaded = ckpt.load_latest(config.pretrained.init_from, log=log)
    try:
        report = ckpt.load_state_dict_checked(
            denoiser,
            sharding.sharded_like(denoiser, loaded["tensors"]["model"]),
            strict=config.pretrained.init_strict,
            source=f"pretrained.init_from checkpoint {loaded['path']}",
        )
    except ValueError as exc:
        raise ConfigError(f"{exc} (set pretrained.init_strict=False)") from exc
    log(
        f"initialised from {loaded['path']}: {len(report['loaded'])} tensors loaded, {len(report['missing'])} "
        f"missing, {len(report['unexpected'])} unexpected, {len(report['mismatched'])} of another shape"
    )
