"""The processes of a run: the config checked, the accelerator and its process group, the fp16 loss scale."""

from __future__ import annotations

import torch


def check_config(config) -> dict:
    """Every field and constraint, then everything on disk (before any model is loaded or anything written); the
    deprecated fields' lines; return the derived totals (config/base.py's batch arithmetic)."""
    from ddpo_grpo import distributed
    from ddpo_grpo.config_checks import check_inputs, deprecations, validate

    totals = validate(config, distributed.world_size())
    check_inputs(config)
    if distributed.rank() == 0:
        for line in deprecations(config):
            print(line, flush=True)
    return totals


def accelerator(config, given=None):
    """``given`` or a new Accelerator; on a machine without GPUs, several processes run on CPU (gloo). The host-side
    process group is made here (``distributed.setup``), and under ``mixed_precision="fp16"`` the loss scale."""
    from accelerate import Accelerator

    from ddpo_grpo import distributed

    world = distributed.world_size()
    cpu = world > 1 and not torch.cuda.is_available()
    acc = given or Accelerator(mixed_precision=config.mixed_precision, cpu=cpu)
    if acc.num_processes != world:
        raise RuntimeError(
            f"launched as {world} processes (WORLD_SIZE) but accelerate set up {acc.num_processes}; "
            "on CPU-only machines launch with ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu ..."
        )
    distributed.setup()  # every process is here: the gloo group beside NCCL, when there is one
    if config.mixed_precision == "fp16":
        loss_scaling(acc)
    if config.allow_tf32 and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cuda.enable_cudnn_sdp(bool(config.cudnn_attention))  # (a flag: harmless where there is no GPU)
    return acc


def loss_scaling(acc) -> None:
    """fp16: the one loss-scaling path, a ``torch.amp.GradScaler`` in ``acc.scaler`` (accelerate's own on GPUs).

    accelerate's ``backward`` multiplies the loss by its scale; ``optim.OptimizerStep`` does all the rest (unscale
    before the norm, the clip and the log, skip and halve on overflow, grow, state saved with the run) — so the
    optimizer is never handed to accelerate (``prepare``), which would step and update the scaler itself. On CPU
    accelerate neither autocasts nor scales under fp16 (its ``native_amp`` stays off and fp16 weights then meet
    float32 inputs); here it autocasts to float16 (``torch.autocast("cpu", float16)``) with a GradScaler, so CPU
    processes run the GPU's fp16 path."""
    if acc.device.type == "cpu":
        acc.native_amp = True
    if acc.scaler is None:
        acc.scaler = torch.amp.GradScaler(acc.device.type)


def sharded(config, acc) -> bool:
    """True when the run shards the denoiser: distributed.strategy "fsdp" with more than one process."""
    return config.distributed.strategy == "fsdp" and acc.num_processes > 1


def main_print(acc):
    """print(line) on the main process only."""
    return lambda line: print(line, flush=True) if acc.is_main_process else None
