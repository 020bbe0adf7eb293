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
import weakref

import torch

from foundation.errors import ConfigError


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


def sharded_like(model: torch.nn.Module, state_dict: dict) -> dict:
    """``state_dict`` (whole tensors) with each entry that is a sharded tensor of ``model`` cut to this process's
    shard the same way (a ``DTensor``; no communication), so that ``model.load_state_dict`` takes it; the others
    (and entries of another shape) unchanged."""
    from torch.distributed.tensor import distribute_tensor

    own = model.state_dict()
    out = dict(state_dict)
    for key, value in state_dict.items():
        target = own.get(key)
        if is_sharded(target) and tuple(value.shape) == tuple(target.shape):
            value = value.to(device=target.device, dtype=target.dtype)
            out[key] = distribute_tensor(value, target.device_mesh, target.placements, src_data_rank=None)
    return out


@contextlib.contextmanager
def gathered(model: torch.nn.Module, *, reshard_after_forward: bool = True, plain: bool = False):
    """Inside, every FSDP unit of ``model`` (its blocks and the root) stays all-gathered instead of being freed after
    each forward: a whole sampling batch — all its denoising steps, or the batches of an epoch's sampling phase — costs
    one all-gather per unit, not one per unit per step, for the memory of the unsharded model during it. On leaving, the units are resharded (freed) and get
    back ``reshard_after_forward``, the value ``shard`` gave them (``distributed.reshard_after_forward``).

    ``plain``: the units are gathered at once (``unshard``) and run as plain modules, FSDP's forward hooks set aside
    until the end — on a small model those hooks, run at every unit's every forward, cost as much as the compute.
    Only where FSDP casts no inputs (no mixed-precision policy: its pre-forward hook would cast them); where this
    version of FSDP2 keeps its hooks elsewhere, the hooks stay. A model with nothing sharded is left alone, and so
    is a model already inside this context (an outer one holds it over several batches)."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if model in _GATHERED:
        yield
        return
    _GATHERED.add(model)
    try:
        with _held(units, reshard_after_forward=reshard_after_forward, plain=plain):
            yield
    finally:
        _GATHERED.discard(model)


#: the models inside ``gathered`` now
_GATHERED: weakref.WeakSet = weakref.WeakSet()


@contextlib.contextmanager
def _held(units, *, reshard_after_forward: bool, plain: bool):
    """``gathered``'s two ways of keeping ``units`` gathered (its docstring)."""
    if plain and units and all(_forward_hooks(u) is not None for u in units):
        for unit in units:
            unit.unshard()
        put_back = [_set_forward_hooks_aside(unit) for unit in units]
        try:
            yield
        finally:
            for restore in put_back:
                restore()
            for unit in units:
                unit.reshard()
        return
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.set_reshard_after_forward(reshard_after_forward, recurse=False)
            unit.reshard()


def _forward_hooks(unit):
    """(FSDP2's state of ``unit``, its pre- and post-forward hook handles), or None where FSDP2 keeps them otherwise
    (FSDP2's own attributes: the one place that reads them)."""
    state = getattr(unit, "_get_fsdp_state", lambda: None)()
    pre, post = getattr(state, "_pre_forward_hook_handle", None), getattr(state, "_post_forward_hook_handle", None)
    if pre is None or post is None or pre is post:  # (one handle for a group of modules sharded together)
        return None
    return state, pre, post


def _set_forward_hooks_aside(unit):
    """Remove FSDP2's forward hooks of ``unit``; returns the function that registers them again as ``fully_shard``
    did (the pre-forward hook first, the post-forward hook last)."""
    state, pre, post = _forward_hooks(unit)
    pre.remove()
    post.remove()

    def restore():
        state._pre_forward_hook_handle = unit.register_forward_pre_hook(
            state._pre_forward, prepend=True, with_kwargs=True
        )
        state._post_forward_hook_handle = unit.register_forward_hook(state._post_forward, prepend=False)

    return restore


def unsharded_bytes(model: torch.nn.Module, dtype: torch.dtype | None = None) -> int:
    """Bytes of ``model``'s parameters all-gathered (in ``dtype``, FSDP's compute dtype, when given)."""
    return sum(p.numel() * (dtype or p.dtype).itemsize for p in model.parameters())


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
