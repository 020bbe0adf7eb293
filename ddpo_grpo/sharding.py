"""Sharding and activation checkpointing of the denoiser, applied from outside the model (torchtitan's way).

``shard(model, blocks, …)`` calls PyTorch FSDP2's ``fully_shard`` on every submodule whose class is named in
``blocks`` (the adapter's ``shard_blocks``, or ``distributed.shard_blocks``), then on the model itself: each block is
one FSDP unit whose parameters are all-gathered just before its forward (and backward) and freed after, and the
root holds the rest (embeddings, norms, projections). Parameters become ``DTensor`` shards (dim 0 over the P
processes); gradients are reduce-scattered after every backward pass (also inside gradient accumulation:
``no_sync``), so each process keeps 1/P of the parameters, gradients and optimizer state. On GPUs the
mixed-precision policy computes in bfloat16 and reduces gradients in float32 (``MixedPrecisionPolicy``);
``cpu_offload`` keeps the sharded state on the CPU (``CPUOffloadPolicy``). The same code runs on CPU processes with
gloo, so the CPU tests exercise the path GPUs run.

``checkpoint_blocks(model, blocks)`` makes each such block recompute its activations in the backward pass
(``torch.utils.checkpoint``, non-reentrant): the activation memory of one block instead of all, for one more
forward. Applied before sharding, as the blocks' forward is what FSDP wraps.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from ddpo_grpo.errors import ConfigError


def blocks_of(model: torch.nn.Module, names) -> list[torch.nn.Module]:
    """The submodules of ``model`` whose class name is one of ``names`` (outermost only: no block inside a block)."""
    names, found = set(names), []
    for module in model.modules():
        if type(module).__name__ in names and not any(_contains(b, module) for b in found):
            found.append(module)
    return found


def _contains(outer: torch.nn.Module, inner: torch.nn.Module) -> bool:
    return any(m is inner for m in outer.modules())


def block_names(policy, configured) -> tuple[str, ...]:
    """``distributed.shard_blocks`` when set, else the adapter's ``shard_blocks``; ConfigError naming the field when
    neither names a block of the denoiser."""
    names = tuple(configured) or tuple(getattr(policy, "shard_blocks", ()))
    present = sorted({type(m).__name__ for m in policy.denoiser.modules()})
    if not names or not blocks_of(policy.denoiser, names):
        raise ConfigError(
            f"distributed.shard_blocks: {type(policy.denoiser).__name__} has no block class to shard or checkpoint "
            f"({list(names) or 'the adapter names none'}); set distributed.shard_blocks to the class names of its "
            f"repeated blocks (its module classes: {', '.join(present[:12])}{', …' if len(present) > 12 else ''})"
        )
    return names


def shard(model, names, *, reshard_after_forward: bool = True, cpu_offload: bool = False, mixed_precision=None):
    """FSDP2 on every block of ``names`` and on ``model`` (module docstring); in place, returns ``model``.

    mixed_precision: the parameters' compute dtype on the accelerator (e.g. torch.bfloat16; gradients are reduced
    in float32), or None for full precision."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kwargs = {"reshard_after_forward": reshard_after_forward}
    if mixed_precision is not None:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=mixed_precision, reduce_dtype=torch.float32)
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    for block in blocks_of(model, names):
        fully_shard(block, **kwargs)
    fully_shard(model, **kwargs)
    return model


def is_sharded(tensor) -> bool:
    """True for a DTensor (a parameter, gradient or state sharded by FSDP2)."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def local(tensor) -> torch.Tensor:
    """The process's own part of a sharded tensor (the tensor itself otherwise)."""
    return tensor.to_local() if is_sharded(tensor) else tensor


def full(tensor) -> torch.Tensor:
    """The whole of a sharded tensor, gathered from every process (a collective; the tensor itself otherwise)."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


@contextlib.contextmanager
def no_sync(model, acc):
    """Backward passes inside add to the step's gradient (gradient accumulation), holding the least memory each
    strategy allows; the step's last backward runs outside.

    DDP (accelerate's ``no_sync``): the all-reduce is skipped and each process adds to its own whole gradient (DDP
    holds a whole one anyway); the last backward all-reduces the sum, one all-reduce per optimizer step.
    FSDP2: nothing is skipped. Every backward reduce-scatters its gradients and each process adds the result to its
    1/P shard (``sharded_param.grad``), so a step of K backward passes holds 1/P of the trainable gradients, plus
    one unit's unsharded gradient while it is being reduced. FSDP2's ``set_requires_gradient_sync(False)`` would
    skip those reduce-scatters but keep every unit's whole unsharded float32 gradient until the synchronised
    backward: P times the memory, the full-size gradients sharding exists to avoid (measured in
    ``tests/test_fsdp_accumulation.py`` and docs/scaling.md). The cost is a reduce-scatter of the trainable
    gradients per backward pass instead of per step."""
    if hasattr(model, "set_requires_gradient_sync"):  # an FSDP2 module: reduce-scatter as usual
        yield
    else:
        with acc.no_sync(model):
            yield


def checkpoint_blocks(model: torch.nn.Module, names) -> int:
    """Recompute each block's activations in the backward pass (module docstring); returns how many blocks."""
    from torch.utils.checkpoint import checkpoint

    blocks = blocks_of(model, names)
    for block in blocks:
        forward = block.forward

        @functools.wraps(forward)
        def recomputed(*args, _forward=forward, **kwargs):
            if not torch.is_grad_enabled():  # sampling and evaluation keep nothing for a backward anyway
                return _forward(*args, **kwargs)
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        block.forward = recomputed
    return len(blocks)
