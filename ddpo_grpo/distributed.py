"""Process-group helpers: the one place where the library talks to the process group.

A run is P processes (``torchrun`` / ``accelerate launch``; GPUs with NCCL or CPU processes with gloo), each
holding an ``accelerate.Accelerator``. These helpers are the only cross-process arithmetic of the trainer, the
guard and the sharded checkpoint (``tests/test_collectives.py`` checks that no other module of the library calls a
``torch.distributed`` function; FSDP2 and ``torch.distributed.checkpoint`` run their own collectives inside):

    reduce(acc, value, "mean" | "sum" | "max")   a float, the same on every process (mean skips NaN)
    gather(acc, values)                          a numpy array [P·n], process-major (= the global sample order)
    broadcast(acc, obj)                          the main process's picklable object, on every process
    all_processes(flag)                          True when ``flag`` holds on every process (a bool or a tensor)
    any_process(flags)                           a bool tensor, True where any process's ``flags`` is True
    group_size()                                 processes of the process group (1 without one)
    barrier()                                    every process waits for the others
    host_group()                                 the group for host-side values (and DCP's planning)

With one process (or no process group) they return their input unchanged, without a collective.

Which group carries a collective. A process group maps each device type to one backend: NCCL, accelerate's
default on GPUs, maps only ``cuda`` ("cuda:nccl"), so a CPU tensor handed to it fails with "No backend type
associated with device type cpu". Every collective here therefore runs on a group that maps the device of its
tensor:

- values computed on the run's device (metrics, gathered rewards, the guard's finite-weight flag) stay there and
  go through the default group: no copy to the host and no extra synchronisation;
- host-side values (a flag computed from host values, barriers, pickled objects, the planning messages of
  ``torch.distributed.checkpoint``) go through the default group when it maps ``cpu`` too (gloo: "cpu:gloo,
  cuda:gloo"; or a launch that asked for "cpu:gloo,cuda:nccl"), and otherwise through one gloo group beside it,
  created once by ``setup()`` when the run starts (``dist.new_group(backend="gloo")``, the same side group that
  PyTorch's own ``dcp.async_save`` requires).

We keep accelerate's default process group as it is rather than asking for "cpu:gloo,cuda:nccl": the side group is
created by our code whatever launched us (``torchrun``, ``accelerate launch``, a user's own ``init_process_group``),
and the default group's device collectives stay NCCL's. A barrier on the side group is a host barrier: it waits
for the other processes, not for their queued device work (the checkpoint's barriers follow host-side file writes).
"""

from __future__ import annotations

import os

import numpy as np
import torch

_REDUCTIONS = {"mean": torch.nanmean, "sum": torch.sum, "max": torch.max}

#: (the default group it belongs to, the gloo group beside it); rebuilt when the default group changes
_side: tuple[object, object] | None = None


def world_size() -> int:
    """Processes of the launch (``WORLD_SIZE`` of torchrun / accelerate; 1 when launched plainly): the library's one
    reader of the process count (the run's wiring, the checkpoint, the recipes' per-process numbers in
    config/recipes.py). ValueError naming WORLD_SIZE when it is not an integer ≥ 1."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        p = int(raw)
    except ValueError:
        raise ValueError(f"WORLD_SIZE={raw!r} is not an integer process count") from None
    if p < 1:
        raise ValueError(f"WORLD_SIZE={raw!r} must be ≥ 1")
    return p


def rank() -> int:
    """The global rank of this process (``RANK``; 0 when launched plainly), known before any process group exists."""
    return int(os.environ.get("RANK", "0"))


def _dist():
    """``torch.distributed`` when a process group of more than one process exists, else None."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return dist
    return None


def _device_types(group=None) -> set[str]:
    """The device types a group maps to a backend: "cuda:nccl" -> {"cuda"}; "cpu:gloo,cuda:nccl" -> both."""
    import torch.distributed as dist

    return {entry.split(":")[0] for entry in dist.get_backend_config(group).split(",")}


def setup() -> None:
    """Create the host-side group now, while every process is at the same point of the set-up (module docstring).
    Called once by ``wiring.accelerator``; a no-op with one process or when the default group maps ``cpu``."""
    host_group()


def host_group():
    """The group for host-side (CPU) values: the default group when it maps ``cpu``, else the gloo group beside it
    (created on the first call, which every process makes at the same point: ``setup()``); None without a group."""
    global _side
    dist = _dist()
    if dist is None:
        return None
    world = dist.group.WORLD
    if "cpu" in _device_types(world):
        return world
    if _side is None or _side[0] is not world:
        _side = (world, dist.new_group(backend="gloo"))
    return _side[1]


def group_for(device) -> object:
    """The group whose backend carries tensors of ``device``: the default group when it maps the device's type,
    else (``cpu``) the host group."""
    dist = _dist()
    if dist is None:
        return None
    device = torch.device(device)
    if device.type in _device_types(dist.group.WORLD):
        return dist.group.WORLD
    if device.type == "cpu":
        return host_group()
    raise RuntimeError(
        f"the process group ({dist.get_backend_config()}) has no backend for {device.type} tensors; launch with a "
        f"backend that maps {device.type} (accelerate picks one per device)"
    )


def _all_gather(tensor: torch.Tensor) -> torch.Tensor:
    """Every process's ``tensor`` (the same shape everywhere), concatenated in process order along dim 0."""
    dist = _dist()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous(), group=group_for(tensor.device))
    return torch.cat(parts)


def reduce(acc, value: float, op: str = "mean") -> float:
    """``value`` of every process reduced by ``op`` ("mean" ignores NaN values, as a metric average should)."""
    if _dist() is None:
        return float(value)
    tensor = torch.tensor([value], dtype=torch.float32, device=acc.device)
    return float(_REDUCTIONS[op](_all_gather(tensor)))


def gather(acc, values) -> np.ndarray:
    """float32 ``values`` [n] of every process (the same n everywhere), concatenated in process order: [P·n]."""
    tensor = torch.as_tensor(values, dtype=torch.float32, device=acc.device)
    if _dist() is None:
        return tensor.cpu().numpy()
    return _all_gather(tensor.reshape(-1)).cpu().numpy()


def _all_reduce(value: torch.Tensor, op) -> torch.Tensor:
    """``value`` as int32 reduced by ``op`` over the processes, on the group that maps its device."""
    dist = _dist()
    value = value.detach().to(torch.int32, copy=True)  # (never the caller's tensor, reduced in place)
    dist.all_reduce(value, op=op, group=group_for(value.device))
    return value


def all_processes(flag) -> bool:
    """True when ``flag`` holds on every process. ``flag`` is a bool (reduced on the host group) or a one-element
    tensor (reduced where it lives, e.g. on the GPU the weights it was computed from are on)."""
    dist = _dist()
    if dist is None:
        return bool(flag)
    value = flag.reshape(1) if isinstance(flag, torch.Tensor) else torch.tensor([1 if flag else 0])
    return bool(_all_reduce(value, dist.ReduceOp.MIN).item())


def any_process(flags: torch.Tensor) -> torch.Tensor:
    """Element-wise OR of a bool tensor over the processes (a MAX all-reduce where the tensor lives), e.g. which
    of several sub-modules any process needs this call; ``flags`` itself without a process group."""
    dist = _dist()
    if dist is None:
        return flags
    return _all_reduce(flags, dist.ReduceOp.MAX).bool()


def group_size() -> int:
    """Processes of the process group that exists now (1 without one); ``world_size()`` reads the launch."""
    dist = _dist()
    return 1 if dist is None else dist.get_world_size()


def barrier() -> None:
    """Every process waits here for the others (on the host group: module docstring)."""
    dist = _dist()
    if dist is not None:
        dist.barrier(group=host_group())


def broadcast(acc, obj):
    """The main process's ``obj`` on every process (pickled, over the host group)."""
    dist = _dist()
    if dist is None:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=host_group())
    return box[0]


__all__ = [
    "all_processes",
    "any_process",
    "barrier",
    "broadcast",
    "gather",
    "group_for",
    "group_size",
    "host_group",
    "rank",
    "reduce",
    "setup",
    "world_size",
]
